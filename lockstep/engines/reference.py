"""The reference engine: deterministic, CPU-only, no weights to download.

It reads every modality of a window and describes it — where the brightest region of the
frame is and how much it moved, the dominant audio frequency and level, the OCR text and
the sensor readings — so that tests can check a response against the input that made it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from lockstep.engines.base import Capabilities, Engine, InferenceResult, ItemResult, WorkItem
from lockstep.topics.media import pcm, pixels
from lockstep.topics.schemas import AudioToken, VideoToken, Window


class ReferenceEngine(Engine):
    """Describes windows with numpy; same input, same output."""

    name = "reference"

    def __init__(self, *, max_batch: int = 64, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._max_batch = max_batch

    @property
    def capabilities(self) -> Capabilities:
        """Any batch size up to ``max_batch``; no generation, so nothing to degrade."""
        return Capabilities(max_batch=self._max_batch)

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        # The work is a few FFTs and means per window; a thread keeps the loop responsive.
        return await asyncio.to_thread(lambda: [describe(i.request.window) for i in batch])


def describe(window: Window) -> InferenceResult:
    """Describe one window; pure and deterministic."""
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
    if pcm is not None and len(pcm) >= _MIN_SAMPLES:  # a sliver of a window has no spectrum
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


_MIN_SAMPLES = 16


def _frame(video: VideoToken) -> np.ndarray | None:
    raw = pixels(video)  # compressed formats are decoded by the media engines, not here
    if raw is None or raw.ndim == 2:
        return raw
    return np.asarray(raw.mean(axis=2))


def _pcm(chunks: Sequence[AudioToken]) -> np.ndarray | None:
    pieces = [data.mean(axis=1) for c in chunks if (data := pcm(c)) is not None]
    return np.concatenate(pieces) if pieces else None
