"""Confidence-gated routing of aligned windows to engine pools (the ``route`` stage).

Pure: :meth:`Router.route` takes a window, the wall-clock time and the live downstream P99,
and returns a :class:`Routed`: the request to produce, or the reason to drop the window.

Each modality gets a confidence from its signal (:mod:`lockstep.streams.route.confidence`); below
``route.min_confidence`` it is untrustworthy. The text channel is the ASR text (at the ASR
confidence) or the OCR text (at its confidence), whichever is better. Then, in order:

====================  ==============================================  =====================
route                 when                                            reason
====================  ==============================================  =====================
``early_exit``        ASR confidence > ``early_exit_asr`` (0.95) and  ``asr_confident_intent``
                      the words name an intent: vision is skipped
``full``              vision and text (or audio) trusted, gate open   ``all_trusted``
``vision_only``       vision trusted, no text or audio trusted        ``no_trusted_text``
                      (or the alignment gate is closed)               (``gate_closed``)
``text_only``         vision missing or untrusted, text, audio or     ``video_missing`` /
                      sensors trusted                                 ``video_untrusted``
drop                  nothing trusted                                 ``nothing_usable``
====================  ==============================================  =====================

While the window's SLO class is in degraded mode (:mod:`lockstep.telemetry.slo`), a window that
would go ``full`` takes ``slo.breach.degraded_route`` (``text_only``) with reason ``slo_degraded``.

Each route maps to a pool (``route.pools``); priority is ``a·S + (1 - a)·R``
(:mod:`lockstep.streams.route.priority`) and the deadline is capture time plus the class's budget
(for a replay, the time align received it: :attr:`~lockstep.topics.schemas.Window.budget_start_us`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from lockstep.config.settings import RouteSettings, SloSettings
from lockstep.streams.route.confidence import (
    Luma,
    audio_confidence,
    ocr_confidence,
    sensor_confidence,
    video_confidence,
)
from lockstep.streams.route.gate import IDLE_TTL_US, MAX_STREAMS, GateCalibrator, alignment_gate
from lockstep.streams.route.priority import Lexicon, priority, sla_risk
from lockstep.streams.route.tokendrop import patch_mask
from lockstep.topics.schemas import Modality, Request, TokenDrop, Window

FULL = "full"
VISION_ONLY = "vision_only"
TEXT_ONLY = "text_only"
EARLY_EXIT = "early_exit"
DROP = "drop"


@dataclass(frozen=True)
class Routed:
    """The outcome of routing one window: a request, or a drop with its reason."""

    route: str
    reason: str
    request: Request | None
    confidence: dict[str, float]


class Router:
    """Gates, routes and prioritises windows; keeps per-stream gate calibration (bounded)."""

    def __init__(self, route: RouteSettings, slo: SloSettings, *,
                 max_streams: int = MAX_STREAMS, idle_ttl_us: int = IDLE_TTL_US) -> None:
        """Build a router.

        Args:
            route: Routing settings.
            slo: SLO settings (budgets, degraded route).
            max_streams: Streams whose gate calibration is kept (least recently seen first out).
            idle_ttl_us: A stream unseen this long, on the ``now_us`` passed in, starts afresh.
        """
        self._route = route
        self._slo = slo
        self._lexicon = Lexicon.of(route.domains)
        self._calibrator = GateCalibrator(
            alpha=route.audio_weight, threshold_us=int(route.recalibrate_error_ms * 1000),
            max_streams=max_streams, idle_ttl_us=idle_ttl_us)

    @property
    def tracked_streams(self) -> int:
        """Streams whose gate calibration is held now."""
        return len(self._calibrator)

    def confidences(self, window: Window, now_us: int) -> dict[str, float]:
        """Confidence per modality, the text channel, and the alignment gate."""
        return self._confidences(window, now_us, None)

    def _confidences(self, window: Window, now_us: int, decoded: Luma | None
                     ) -> dict[str, float]:
        r = self._route
        missing = window.missing
        video = window.video if Modality.VIDEO not in missing else None
        # A replay's frame is as old as it would be live: counted from when align received it.
        shift = window.budget_start_us - window.timeline.capture_us
        vision = video_confidence(video, now_us - shift - video.t_us if video is not None else 0,
                                  decoded=decoded)
        # A modality the aligner names missing has confidence 0, whatever it carries.
        audio = audio_confidence(window.audio) if Modality.AUDIO not in missing else 0.0
        ocr = ocr_confidence(window.ocr)
        sensor = (sensor_confidence(window.sensor, window.anchor_t_us, r.sensor_ranges)
                  if Modality.SENSOR not in missing else 0.0)
        asr = max((a.asr_confidence for a in window.audio
                   if a.asr_text and a.asr_confidence is not None), default=0.0)
        text = max(asr, ocr)
        skews = [s.skew_us for s in window.modalities.values()
                 if s.present and s.skew_us is not None]
        alpha = self._calibrator.observe(window.stream_id, max(skews, default=0), now_us)
        gate = alignment_gate(audio, vision, text, alpha=alpha, steepness=r.gate_steepness)
        return {"video": vision, "audio": audio, "ocr": ocr, "sensor": sensor,
                "asr": asr, "text": text, "gate": gate}

    def route(self, window: Window, now_us: int, downstream_p99_us: float = 0.0, *,
              degraded: bool = False) -> Routed:
        """Route one window.

        Args:
            window: An aligned window.
            now_us: Wall-clock time of routing.
            downstream_p99_us: Live P99 of what follows routing (queue plus inference).
            degraded: The window's SLO class is in degraded mode (:mod:`lockstep.telemetry.slo`): a
                window that would take the full route takes ``slo.breach.degraded_route``.
        """
        r = self._route
        frame = window.video
        decoded = Luma.of(frame) if frame is not None else None  # decoded once, measured twice
        conf = self._confidences(window, now_us, decoded)
        least = r.min_confidence
        asr_texts = [a.asr_text for a in window.audio if a.asr_text]
        if conf["asr"] > r.early_exit_asr and self._lexicon.has_intent(asr_texts):
            route, reason = EARLY_EXIT, "asr_confident_intent"
        elif conf["video"] >= least:
            if not (conf["text"] >= least or conf["audio"] >= least):
                route, reason = VISION_ONLY, "no_trusted_text"
            elif conf["gate"] < r.gate_threshold:
                route, reason = VISION_ONLY, "gate_closed"
            elif degraded:
                route, reason = self._slo.breach.degraded_route, "slo_degraded"
            else:
                route, reason = FULL, "all_trusted"
        elif conf["text"] >= least or conf["audio"] >= least or conf["sensor"] >= least:
            missing = frame is None or Modality.VIDEO in window.missing
            route, reason = TEXT_ONLY, "video_missing" if missing else "video_untrusted"
        else:
            return Routed(DROP, "nothing_usable", None, conf)
        budget_us = int(self._slo.budget_ms(window.slo_class) * 1000)
        deadline = window.budget_start_us + budget_us
        importance = self._lexicon.importance(asr_texts + [o.text for o in window.ocr])
        risk = sla_risk(deadline - now_us, downstream_p99_us)
        timeline = _replace(window.timeline, "routed_us", now_us)
        drop = None
        if route in (FULL, VISION_ONLY) and frame is not None and r.patch_size:
            mask = patch_mask(frame, r.patch_size, r.patch_min_std, decoded=decoded)
            if mask is not None:
                drop = TokenDrop(patch=mask.patch, rows=mask.rows, cols=mask.cols,
                                 keep=mask.keep, dropped=_round4(mask.dropped))
        request = Request(
            window=_replace(window, "timeline", timeline),
            route=route, pool=r.pools[route],  # type: ignore[index]
            priority=priority(importance, risk, r.priority_weight),
            deadline_us=deadline, reason=reason,
            confidence={k: _round4(v) for k, v in conf.items()}, token_drop=drop,
        )
        return Routed(route, reason, request, conf)

    @staticmethod
    def contradiction(window: Window) -> str | None:
        """Why a window contradicts itself (dead-letter it), or None."""
        states = window.modalities
        if Modality.VIDEO in states and states[Modality.VIDEO].present and window.video is None:
            return "video marked present without a frame"
        both = {m for m in window.missing if m in states and states[m].present}
        if both:
            return f"{', '.join(sorted(both))} marked both present and missing"
        if window.t_end_us <= window.t_start_us:
            return "window ends before it starts"
        return None

    def forget(self, stream_id: str) -> None:
        """Drop a stream's gate calibration."""
        self._calibrator.forget(stream_id)


_R = TypeVar("_R", bound=BaseModel)


def _replace(record: _R, name: str, value: object) -> _R:
    """``record.model_copy(update={name: value})``, without its general machinery.

    The same copy: the fields with one replaced (not validated), the set fields with that
    one added, extra and private state carried over.
    """
    copy = record.__class__.__new__(record.__class__)
    fields = record.__dict__.copy()
    fields[name] = value
    object.__setattr__(copy, "__dict__", fields)
    object.__setattr__(copy, "__pydantic_fields_set__", record.__pydantic_fields_set__ | {name})
    object.__setattr__(copy, "__pydantic_extra__", record.__pydantic_extra__)
    object.__setattr__(copy, "__pydantic_private__", record.__pydantic_private__)
    return copy


def _round4(x: float) -> float:
    """``round(x, 4)``, the same float, without its decimal string for x in (0, 1].

    ``x * 10**4`` is within 1e-11 of the exact product, so where its fraction is not within
    1e-6 of one half it rounds to the same integer k as the exact value (no tie to break),
    and ``k / 10**4`` is the float nearest k·10⁻⁴, which ``round`` returns too.
    """
    if 0.0 < x <= 1.0:
        scaled = x * 10_000.0
        if abs(scaled - math.floor(scaled) - 0.5) > 1e-6:
            return math.floor(scaled + 0.5) / 10_000.0
    return round(x, 4)
