"""The reference engine's ``describe`` as it was before its CPU work was cut.

A verbatim copy, the reference for the equivalence tests of
:func:`lockstep.engines.reference.describe`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lockstep.engines.base import InferenceResult
from lockstep.topics.payloads import pcm, pixels
from lockstep.topics.schemas import AudioToken, VideoToken, Window

_MIN_SAMPLES = 16


def describe(window: Window) -> InferenceResult:
    scores: dict[str, float] = {}
    parts: list[str] = []
    if window.video is not None:
        frame = _frame(window.video)
        if frame is not None:
            y, x = np.unravel_index(int(np.argmax(frame)), frame.shape)
            scores["luma_mean"] = round(float(frame.mean()) / 255.0, 4)
            scores["bright_x"] = round(float(x) / frame.shape[1], 4)
            scores["bright_y"] = round(float(y) / frame.shape[0], 4)
            parts.append(f"bright spot at ({scores['bright_x']:.2f},{scores['bright_y']:.2f})")
    pcm = _pcm(window.audio)
    if pcm is not None and len(pcm) >= _MIN_SAMPLES:
        rate = window.audio[0].sample_rate
        spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
        peak_hz = float(np.argmax(spectrum[1:]) + 1) * rate / len(pcm)
        scores["audio_rms"] = round(float(np.sqrt(np.mean(pcm**2))), 4)
        scores["audio_peak_hz"] = round(peak_hz, 1)
        parts.append(f"tone {peak_hz:.0f} Hz")
    texts = [o.text for o in window.ocr if o.text]
    if texts:
        parts.append("text " + " | ".join(dict.fromkeys(texts)))
    for s in window.sensor:
        scores[f"sensor_{s.name}_0"] = round(float(s.values[0]), 4)
        parts.append(f"{s.name}={s.values[0]:.2f}{s.unit.split(',')[0]}")
    if window.missing:
        parts.append("missing " + ",".join(m.value for m in window.missing))
    return InferenceResult(output="; ".join(parts) or "empty window", scores=scores)


def _frame(video: VideoToken) -> np.ndarray | None:
    raw = pixels(video)
    if raw is None or raw.ndim == 2:
        return raw
    return np.asarray(raw.mean(axis=2))


def _pcm(chunks: Sequence[AudioToken]) -> np.ndarray | None:
    pieces = [data.mean(axis=1) for c in chunks if (data := pcm(c)) is not None]
    return np.concatenate(pieces) if pieces else None
