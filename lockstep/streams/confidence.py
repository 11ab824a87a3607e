"""Per-modality confidence from real signals (part of the ``route`` stage).

Pure functions over a window's tokens, each returning a confidence in [0, 1]; a missing
modality has confidence 0. They feed the gate (:mod:`lockstep.streams.gate`) that chooses a route.

- Video: focus (variance of the Laplacian), detail (histogram entropy), exposure (share of
  pixels neither crushed nor clipped, mean not extreme) and age; a producer's ``quality``
  hint is used as given for frames this module cannot decode (compressed formats).
- Audio: the ASR confidence when the producer sent one; else speech-like activity from the
  signal level (-60 dBFS → 0, -20 dBFS → 1).
- OCR: the mean token confidence, scaled by how plausible the boxes are.
- Sensor: readings that are finite, inside their configured range and fresh.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lockstep.topics.media import pcm, pixels
from lockstep.topics.schemas import AudioToken, OcrToken, SensorToken, VideoToken


@dataclass(frozen=True)
class VideoQuality:
    """The parts of a frame's confidence, each in [0, 1]."""

    focus: float
    detail: float
    exposure: float
    freshness: float

    @property
    def score(self) -> float:
        """Their geometric mean: one bad part (a black frame, a blur) sinks the frame."""
        parts = (self.focus, self.detail, self.exposure, self.freshness)
        return float(math.prod(parts) ** (1 / len(parts)))


def luma(frame: VideoToken) -> np.ndarray | None:
    """The frame as a float luma image, or None for formats decoded elsewhere."""
    raw = pixels(frame)
    if raw is None:
        return None
    if raw.ndim == 2:
        return raw.astype(np.float32)
    return np.asarray(raw @ np.array([0.299, 0.587, 0.114], np.float32))


def video_quality(frame: VideoToken, age_us: int, *, focus_scale: float = 100.0,
                  max_age_us: int = 200_000) -> VideoQuality | None:
    """Measure a raw frame; None for compressed frames (use the producer's hint then).

    Args:
        frame: The anchor frame.
        age_us: How old the frame is when routed (routing time minus capture time).
        focus_scale: Laplacian variance at which focus reaches 1 - 1/e.
        max_age_us: Age at which freshness falls to 1/e.
    """
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
    """Confidence in the anchor frame: measured, else the producer's hint, else 0.5."""
    if frame is None:
        return 0.0
    quality = video_quality(frame, age_us)
    if quality is not None:
        score = quality.score
        return score if frame.quality is None else min(score, frame.quality)
    return frame.quality if frame.quality is not None else 0.5


def audio_confidence(chunks: Sequence[AudioToken], *, silence_db: float = -60.0,
                     speech_db: float = -20.0) -> float:
    """ASR confidence when given; else speech-like activity from the level of the PCM."""
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
        return 0.5  # compressed audio without ASR: present, nothing more known
    db = 20.0 * math.log10(max(max(levels), 1e-9))
    return max(0.0, min(1.0, (db - silence_db) / (speech_db - silence_db)))


def box_plausibility(bbox: tuple[float, float, float, float]) -> float:
    """1 for a box inside the frame with a sensible size; less as it leaves or degenerates."""
    x, y, w, h = bbox
    if w <= 0 or h <= 0:
        return 0.0
    inside = all(0.0 <= v <= 1.0 for v in (x, y, x + w, y + h))
    area = w * h
    size = 1.0 if 1e-4 <= area <= 0.9 else 0.3
    return size * (1.0 if inside else 0.5)


def ocr_confidence(tokens: Sequence[OcrToken]) -> float:
    """Mean of the tokens' confidences, each scaled by the plausibility of its box."""
    scored = [t.confidence * box_plausibility(t.bbox) for t in tokens if t.text.strip()]
    return sum(scored) / len(scored) if scored else 0.0


def sensor_confidence(readings: Sequence[SensorToken], anchor_us: int,
                      ranges: Mapping[str, tuple[float, float]] | None = None, *,
                      max_age_us: int = 100_000) -> float:
    """The worst reading's confidence: out of its range → 0, stale → decays, hints kept."""
    if not readings:
        return 0.0
    scores = []
    for r in readings:
        score = r.confidence if r.confidence is not None else 1.0
        bounds = (ranges or {}).get(r.name)
        if bounds is not None and not all(bounds[0] <= v <= bounds[1] for v in r.values):
            score = 0.0
        score *= math.exp(-abs(anchor_us - r.t_us) / max_age_us)
        scores.append(score)
    return min(scores)
