"""The route stage as it was before its CPU work was cut: the reference for equivalence tests.

Verbatim copies of the old measures (luma, frame quality, audio level, patch mask, semantic
importance, gate calibration and the router's decision) so that the fast versions in
:mod:`lockstep.streams` can be checked against them on any input. Functions the speed work
left alone are imported rather than copied.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lockstep.config.settings import Domain, RouteSettings, SloSettings
from lockstep.streams.route.confidence import VideoQuality, ocr_confidence, sensor_confidence
from lockstep.streams.route.gate import alignment_gate
from lockstep.streams.route.priority import priority, sla_risk
from lockstep.streams.route.router import DROP, EARLY_EXIT, FULL, TEXT_ONLY, VISION_ONLY, Routed
from lockstep.streams.route.tokendrop import PatchMask
from lockstep.topics.payloads import pcm, pixels
from lockstep.topics.schemas import AudioToken, Modality, Request, TokenDrop, VideoToken, Window


def luma(frame: VideoToken) -> np.ndarray | None:
    raw = pixels(frame)
    if raw is None:
        return None
    if raw.ndim == 2:
        return raw.astype(np.float32)
    return np.asarray(raw @ np.array([0.299, 0.587, 0.114], np.float32))


def video_quality(frame: VideoToken, age_us: int, *, focus_scale: float = 100.0,
                  max_age_us: int = 200_000) -> VideoQuality | None:
    y = luma(frame)
    if y is None:
        return None
    if y.shape[0] >= 3 and y.shape[1] >= 3:
        lap = (y[1:-1, :-2] + y[1:-1, 2:] + y[:-2, 1:-1] + y[2:, 1:-1] - 4 * y[1:-1, 1:-1])
        focus = 1.0 - math.exp(-float(lap.var()) / focus_scale)
    else:
        focus = 0.0
    hist = np.bincount(y.astype(np.uint8).ravel(), minlength=256).astype(np.float64)
    p = hist[hist > 0] / hist.sum()
    detail = float(-(p * np.log2(p)).sum()) / 8.0
    usable = float(((y > 8) & (y < 247)).mean())
    mean = float(y.mean())
    level = 1.0 - max(0.0, abs(mean - 128.0) - 64.0) / 64.0
    exposure = max(0.0, min(1.0, usable * level))
    freshness = math.exp(-max(0, age_us) / max_age_us)
    return VideoQuality(focus, min(1.0, detail), exposure, freshness)


def video_confidence(frame: VideoToken | None, age_us: int) -> float:
    if frame is None:
        return 0.0
    quality = video_quality(frame, age_us)
    if quality is not None:
        score = quality.score
        return score if frame.quality is None else min(score, frame.quality)
    return frame.quality if frame.quality is not None else 0.5


def audio_confidence(chunks: Sequence[AudioToken], *, silence_db: float = -60.0,
                     speech_db: float = -20.0) -> float:
    if not chunks:
        return 0.0
    asr = [c.asr_confidence for c in chunks if c.asr_confidence is not None]
    if asr:
        return max(asr)
    levels = []
    for chunk in chunks:
        samples = pcm(chunk, np.float64)
        if samples is not None and samples.size:
            levels.append(float(np.sqrt(np.mean(samples * samples))))
    if not levels:
        return 0.5
    db = 20.0 * math.log10(max(max(levels), 1e-9))
    return max(0.0, min(1.0, (db - silence_db) / (speech_db - silence_db)))


def patch_mask(frame: VideoToken, patch: int = 8, min_std: float = 2.0) -> PatchMask | None:
    y = luma(frame)
    if y is None:
        return None
    rows, cols = -(-y.shape[0] // patch), -(-y.shape[1] // patch)
    grid = np.full((rows * patch, cols * patch), np.nan, dtype=np.float32)
    grid[: y.shape[0], : y.shape[1]] = y
    blocks = grid.reshape(rows, patch, cols, patch)
    keep = np.nanstd(blocks, axis=(1, 3)) >= min_std
    return PatchMask(patch, rows, cols, np.packbits(keep.ravel()).tobytes())


_WORD = re.compile(r"[a-z0-9']+")


def words(texts: Iterable[str]) -> list[str]:
    return [w for text in texts for w in _WORD.findall(text.lower())]


def semantic_importance(texts: Iterable[str], domains: Mapping[str, Domain]) -> float:
    found = words(texts)
    total = sum(d.weight * sum(1 for w in found if w in d.keywords) for d in domains.values())
    return 1.0 - math.exp(-total / 3.0)


def has_intent(texts: Iterable[str], domains: Mapping[str, Domain]) -> bool:
    keywords = {k for d in domains.values() for k in d.keywords}
    return any(w in keywords for w in words(texts))


@dataclass
class GateCalibrator:
    alpha: float = 0.3
    threshold_us: int = 80_000
    run: int = 3
    _state: dict[str, tuple[bool, int, int]] = field(default_factory=dict)

    def observe(self, stream_id: str, error_us: int) -> float:
        recalibrated, over, under = self._state.get(stream_id, (False, 0, 0))
        if error_us > self.threshold_us:
            over, under = over + 1, 0
        else:
            over, under = 0, under + 1
        if not recalibrated and over >= self.run:
            recalibrated, over = True, 0
        elif recalibrated and under >= self.run:
            recalibrated, under = False, 0
        self._state[stream_id] = (recalibrated, over, under)
        return self.alpha / 2.0 if recalibrated else self.alpha


class LegacyRouter:
    """The old :class:`lockstep.streams.route.router.Router` (route and confidences only)."""

    def __init__(self, route: RouteSettings, slo: SloSettings) -> None:
        self._route = route
        self._slo = slo
        self._calibrator = GateCalibrator(
            alpha=route.audio_weight, threshold_us=int(route.recalibrate_error_ms * 1000))

    def confidences(self, window: Window, now_us: int) -> dict[str, float]:
        r = self._route
        video = window.video if self._usable(window, Modality.VIDEO) else None
        vision = video_confidence(video, now_us - video.t_us if video is not None else 0)
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
