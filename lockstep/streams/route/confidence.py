"""Per-modality confidence from real signals (part of the ``route`` stage).

Pure functions over a window's tokens, each returning a confidence in [0, 1]; a missing
modality has confidence 0. They feed the gate (:mod:`lockstep.streams.route.gate`) that chooses a
route.

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
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lockstep.topics.payloads import pcm, pixels
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


class Luma:
    """A raw frame decoded once, for every measure the route stage takes of it.

    The float32 luma (:attr:`y`) is the definition each measure is exact against. A gray8
    frame's pixels are that luma as integers (:attr:`gray`), which integer arithmetic
    measures exactly and faster; :attr:`wide` holds it in float64 (exact too).
    """

    __slots__ = ("_wide", "_y", "flat", "pixels")

    def __init__(self, flat: npt.NDArray[np.uint8], pixels: npt.NDArray[np.uint8]) -> None:
        self.flat = flat
        self.pixels = pixels
        self._y: npt.NDArray[np.float32] | None = None
        self._wide: npt.NDArray[np.float64] | None = None

    @classmethod
    def of(cls, frame: VideoToken) -> Luma | None:
        """The frame's luma, or None for formats decoded elsewhere (compressed ones)."""
        if frame.format == "gray8":
            flat = np.frombuffer(frame.data, np.uint8)
            return cls(flat, flat.reshape(frame.height, frame.width))
        raw = pixels(frame)
        return None if raw is None else cls(raw.reshape(-1), raw)

    @property
    def shape(self) -> tuple[int, int]:
        """Height and width."""
        return self.pixels.shape[0], self.pixels.shape[1]

    @property
    def gray(self) -> npt.NDArray[np.uint8] | None:
        """The pixels of a gray8 frame (its luma, as integers); None for rgb24."""
        return self.pixels if self.pixels.ndim == 2 else None

    @property
    def y(self) -> npt.NDArray[np.float32]:
        """The luma as float32 (rgb24 weighted 0.299, 0.587, 0.114), computed once."""
        if self._y is None:
            raw = self.pixels
            self._y = (raw.astype(np.float32) if raw.ndim == 2
                       else np.asarray(raw @ _LUMA_WEIGHTS))
        return self._y

    @property
    def wide(self) -> npt.NDArray[np.float64]:
        """The luma as float64 (exact: float32 values widen without rounding), computed once."""
        if self._wide is None:
            self._wide = (self.pixels if self.pixels.ndim == 2 else self.y).astype(np.float64)
        return self._wide


_FOCUS_SCALE = 100.0
_MAX_AGE_US = 200_000
_LUMA_WEIGHTS = np.array([0.299, 0.587, 0.114], np.float32)
# Per level: whether the float luma is in (8, 247), and the level itself.
_LEVEL_SUMS = np.stack([(np.arange(256) > 8) & (np.arange(256) < 247), np.arange(256)],
                       axis=1).astype(np.int64)
# Integers below this are exact in float32, and so is any sum of non-negative ones below it.
_F32_EXACT = 1 << 24
# PCM samples whose sum of squares stays exact in float64 (s16: each square at most 2**30).
_S16_EXACT_SAMPLES = 1 << 23
_FLOAT32 = struct.Struct("f")


def _f32(value: float) -> float:
    """``value`` rounded to float32 (to nearest, as numpy casts), as a Python float.

    For the frame measures' means and variances, far inside float32's range.
    """
    rounded: float = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    return rounded


def luma(frame: VideoToken) -> np.ndarray | None:
    """The frame as a float luma image, or None for formats decoded elsewhere."""
    decoded = Luma.of(frame)
    return None if decoded is None else decoded.y


def video_quality(frame: VideoToken, age_us: int, *, focus_scale: float = _FOCUS_SCALE,
                  max_age_us: int = _MAX_AGE_US, decoded: Luma | None = None
                  ) -> VideoQuality | None:
    """Measure a raw frame; None for compressed frames (use the producer's hint then).

    Each part equals numpy's float32 reductions over :attr:`Luma.y` (``var``, ``mean``)
    exactly; integer sums stand in for them where they are provably the same number.

    Args:
        frame: The anchor frame.
        age_us: How old the frame is when routed (routing time minus capture time).
        focus_scale: Laplacian variance at which focus reaches 1 - 1/e.
        max_age_us: Age at which freshness falls to 1/e.
        decoded: The frame already decoded (shared with the token drop).
    """
    lum = decoded if decoded is not None else Luma.of(frame)
    if lum is None:
        return None
    return VideoQuality(*_quality(lum, age_us, focus_scale, max_age_us))


def _quality(lum: Luma, age_us: int, focus_scale: float, max_age_us: int
             ) -> tuple[float, float, float, float]:
    """Focus, detail, exposure and freshness of a decoded frame."""
    height, width = lum.shape
    n = height * width
    if height >= 3 and width >= 3:
        focus = 1.0 - math.exp(-_var32(_laplacian(lum)) / focus_scale)
    else:
        focus = 0.0
    gray = lum.gray
    counts = np.bincount(lum.flat if gray is not None else lum.y.astype(np.uint8).ravel(),
                         minlength=256)
    p = counts[counts > 0] / float(n)  # the float64 share of each level present
    detail = float(-np.add.reduce(p * np.log2(p))) / 8.0
    if gray is not None:
        inside, total = (counts @ _LEVEL_SUMS).tolist()
        usable = inside / n  # pixels in 9..246: the float luma in (8, 247)
        mean = _f32(total / n) if total < _F32_EXACT else _mean32(lum.y)
    else:
        y = lum.y
        usable = int(np.count_nonzero((y > 8) & (y < 247))) / n
        mean = _mean32(y)
    level = 1.0 - max(0.0, abs(mean - 128.0) - 64.0) / 64.0
    exposure = max(0.0, min(1.0, usable * level))
    freshness = math.exp(-max(0, age_us) / max_age_us)
    return focus, min(1.0, detail), exposure, freshness


def _laplacian(lum: Luma) -> npt.NDArray[np.float32]:
    """The 4-neighbour Laplacian of the float32 luma over the frame's interior, contiguous.

    Taken on the flattened frame (long contiguous adds; the wrapped first and last columns
    are cut off after). Rgb24 luma goes through the defining float32 operations in their
    order, ((a + b) + c) + d - 4e; gray8 integers are exact in int16, in any order.
    """
    height, width = lum.shape
    start, stop = width, height * width - width  # rows 1 .. height - 2
    gray = lum.gray
    if gray is None:
        flat: np.ndarray = lum.y.reshape(-1)
        lap = flat[start - 1:stop - 1] + flat[start + 1:stop + 1]
        lap += flat[start - width:stop - width]
        lap += flat[start + width:stop + width]
        lap -= 4 * flat[start:stop]
    else:
        flat = gray.reshape(-1).astype(np.int16)
        lap = flat[start:stop] * np.int16(-4)
        for shift in (-1, 1, -width, width):
            lap += flat[start + shift:stop + shift]
    interior: npt.NDArray[np.float32] = lap.reshape(height - 2, width)[:, 1:-1].astype(np.float32)
    return interior


def _mean32(y: npt.NDArray[np.float32]) -> float:
    """``float(y.mean())``: numpy's float32 sum, then its division by the count."""
    return _f32(float(np.add.reduce(y, axis=None)) / y.size)


def _var32(x: npt.NDArray[np.float32]) -> float:
    """``float(x.var())`` step by step, as numpy takes it (``x`` is overwritten)."""
    n = x.size
    mean = _f32(float(np.add.reduce(x, axis=None)) / n)  # a float32: subtracted in float32
    np.subtract(x, mean, out=x)
    np.square(x, out=x)
    return _f32(float(np.add.reduce(x, axis=None)) / n)


def video_confidence(frame: VideoToken | None, age_us: int, *,
                     decoded: Luma | None = None) -> float:
    """Confidence in the anchor frame: measured, else the producer's hint, else 0.5."""
    if frame is None:
        return 0.0
    lum = decoded if decoded is not None else Luma.of(frame)
    if lum is not None:
        parts = _quality(lum, age_us, _FOCUS_SCALE, _MAX_AGE_US)
        score = float(math.prod(parts) ** (1 / len(parts)))  # as VideoQuality.score
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
    levels = [level for chunk in chunks if (level := _rms(chunk)) is not None]
    if not levels:
        return 0.5  # compressed audio without ASR: present, nothing more known
    db = 20.0 * math.log10(max(max(levels), 1e-9))
    return max(0.0, min(1.0, (db - silence_db) / (speech_db - silence_db)))


def _rms(chunk: AudioToken) -> float | None:
    """Root mean square of a PCM chunk's float64 samples; None for compressed or empty ones."""
    if chunk.encoding == "pcm_s16le":
        s16 = np.frombuffer(chunk.data, "<i2")
        if 0 < s16.size < _S16_EXACT_SAMPLES:
            # Each float sample is s / 2**15, its square s*s / 2**30: every partial sum of
            # those is exact in float64, so the integer sum is numpy's sum to the last bit.
            wide = s16.astype(np.int64)
            return math.sqrt(int(np.dot(wide, wide)) / (1 << 30) / s16.size)
    samples = pcm(chunk, np.float64)
    if samples is None or not samples.size:
        return None
    return float(np.sqrt(np.mean(samples * samples)))


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
