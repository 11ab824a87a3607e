"""Confidence-gated routing of aligned windows to engine pools (the ``route`` stage).

Pure: :meth:`Router.route` takes a window, the wall-clock time and the live downstream P99,
and returns a :class:`Routed`: the request to produce, or the reason to drop the window.

Each modality gets a confidence from its signal (:mod:`lockstep.streams.confidence`); below
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

While the window's SLO class is in degraded mode (:mod:`lockstep.streams.slo`), a window that would
go ``full`` takes ``slo.breach.degraded_route`` (``text_only``) with reason ``slo_degraded``.

Each route maps to a pool (``route.pools``); priority is ``a·S + (1 - a)·R``
(:mod:`lockstep.streams.priority`) and the deadline is capture time plus the class's budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep.streams.confidence import (
    audio_confidence,
    ocr_confidence,
    sensor_confidence,
    video_confidence,
)
from lockstep.streams.gate import GateCalibrator, alignment_gate
from lockstep.streams.priority import has_intent, priority, semantic_importance, sla_risk
from lockstep.streams.settings import RouteSettings, SloSettings
from lockstep.streams.tokendrop import patch_mask
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
    """Gates, routes and prioritises windows; keeps per-stream gate calibration."""

    def __init__(self, route: RouteSettings, slo: SloSettings) -> None:
        self._route = route
        self._slo = slo
        self._calibrator = GateCalibrator(
            alpha=route.audio_weight, threshold_us=int(route.recalibrate_error_ms * 1000))

    def confidences(self, window: Window, now_us: int) -> dict[str, float]:
        """Confidence per modality, the text channel, and the alignment gate."""
        r = self._route
        video = window.video if self._usable(window, Modality.VIDEO) else None
        vision = video_confidence(video, now_us - video.t_us if video is not None else 0)
        # A modality the aligner names missing has confidence 0, whatever it carries.
        audio = audio_confidence(window.audio) if self._usable(window, Modality.AUDIO) else 0.0
        ocr = ocr_confidence(window.ocr)
        sensor = (sensor_confidence(window.sensor, window.anchor_t_us, r.sensor_ranges)
                  if self._usable(window, Modality.SENSOR) else 0.0)
        asr = max((a.asr_confidence for a in window.audio
                   if a.asr_text and a.asr_confidence is not None), default=0.0)
        text = max(asr, ocr)
        skews = [s.skew_us for s in window.modalities.values()
                 if s.present and s.skew_us is not None]
        alpha = self._calibrator.observe(window.stream_id, max(skews, default=0))
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
            degraded: The window's SLO class is in degraded mode (:mod:`lockstep.streams.slo`): a
                window that would take the full route takes ``slo.breach.degraded_route``.
        """
        r = self._route
        conf = self.confidences(window, now_us)
        ok = {k: v >= r.min_confidence for k, v in conf.items()}
        texts = [a.asr_text for a in window.audio if a.asr_text] + [o.text for o in window.ocr]
        asr_texts = [a.asr_text for a in window.audio if a.asr_text]
        if conf["asr"] > r.early_exit_asr and has_intent(asr_texts, r.domains):
            route, reason = EARLY_EXIT, "asr_confident_intent"
        elif ok["video"]:
            if not (ok["text"] or ok["audio"]):
                route, reason = VISION_ONLY, "no_trusted_text"
            elif conf["gate"] < r.gate_threshold:
                route, reason = VISION_ONLY, "gate_closed"
            elif degraded:
                route, reason = self._slo.breach.degraded_route, "slo_degraded"
            else:
                route, reason = FULL, "all_trusted"
        elif ok["text"] or ok["audio"] or ok["sensor"]:
            missing = window.video is None or Modality.VIDEO in window.missing
            route, reason = TEXT_ONLY, "video_missing" if missing else "video_untrusted"
        else:
            return Routed(DROP, "nothing_usable", None, conf)
        budget_us = int(self._slo.budget_ms(window.slo_class) * 1000)
        deadline = window.timeline.capture_us + budget_us
        importance = semantic_importance(texts, r.domains)
        risk = sla_risk(deadline - now_us, downstream_p99_us)
        timeline = window.timeline.model_copy(update={"routed_us": now_us})
        drop = None
        if route in (FULL, VISION_ONLY) and window.video is not None and r.patch_size:
            mask = patch_mask(window.video, r.patch_size, r.patch_min_std)
            if mask is not None:
                drop = TokenDrop(patch=mask.patch, rows=mask.rows, cols=mask.cols,
                                 keep=mask.keep, dropped=round(mask.dropped, 4))
        request = Request(
            window=window.model_copy(update={"timeline": timeline}),
            route=route, pool=r.pools[route],  # type: ignore[index]
            priority=priority(importance, risk, r.priority_weight),
            deadline_us=deadline, reason=reason,
            confidence={k: round(v, 4) for k, v in conf.items()}, token_drop=drop,
        )
        return Routed(route, reason, request, conf)

    @staticmethod
    def _usable(window: Window, m: Modality) -> bool:
        return m not in window.missing

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
