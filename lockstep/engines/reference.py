"""The reference engine: deterministic, CPU-only, no weights to download.

It reads every modality of a window and describes it — where the brightest region of the
frame is and how much it moved, the dominant audio frequency and level, the OCR text and
the sensor readings — so that tests can check a response against the input that made it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from lockstep.engines.base import Capabilities, Engine, InferenceResult, ItemResult, WorkItem
from lockstep.topics.payloads import pcm, pixels
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
        # The work is a few FFTs and means per window, a fraction of a millisecond each, and
        # holds the GIL throughout: in a thread it would take turns with the event loop
        # (every role's reads and produces) at each switch interval, slowing both. On the
        # loop, a few windows at a time, the other tasks run between the chunks. Demo at 30
        # streams, two interleaved runs each: 91.0 and 66.8 % within budget in a thread,
        # 95.5 and 96.7 % on the loop.
        results: list[ItemResult] = []
        for start in range(0, len(batch), _CHUNK):
            if start:
                await asyncio.sleep(0)
            results += [describe(i.request.window) for i in batch[start:start + _CHUNK]]
        return results


#: Windows described between two turns of the event loop (about 2 ms of work).
_CHUNK = 8


def describe(window: Window) -> InferenceResult:
    """Describe one window; pure and deterministic."""
    scores: dict[str, float] = {}
    parts: list[str] = []
    if window.video is not None:
        frame = _frame(window.video)
        if frame is not None:
            brightest, mean, (height, width) = frame
            y, x = divmod(brightest, width)
            scores["luma_mean"] = round(mean / 255.0, 4)
            scores["bright_x"] = round(float(x) / width, 4)
            scores["bright_y"] = round(float(y) / height, 4)
            parts.append(f"bright spot at ({scores['bright_x']:.2f},{scores['bright_y']:.2f})")
    pcm = _pcm(window.audio)
    if pcm is not None and len(pcm) >= _MIN_SAMPLES:  # a sliver of a window has no spectrum
        rate = window.audio[0].sample_rate
        taper = _hanning(len(pcm)) if len(pcm) <= _CACHED_TAPER else np.hanning(len(pcm))
        spectrum = np.abs(np.fft.rfft(pcm * taper))
        peak_hz = float(np.argmax(spectrum[1:]) + 1) * rate / len(pcm)
        power = np.float32(float(np.add.reduce(pcm**2)) / len(pcm))  # numpy's float32 mean
        scores["audio_rms"] = round(float(np.sqrt(power)), 4)
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
_CACHED_TAPER = 1 << 14  # longer windows' tapers are computed each time (memory)


def _frame(video: VideoToken) -> tuple[int, float, tuple[int, int]] | None:
    """Flat index of the brightest pixel, mean brightness and shape of a raw frame.

    Brightness is the mean of the channels (float64). Integer channel sums find the same
    brightest pixel (dividing by 3 keeps their order); a gray8 frame's mean is its exact
    integer sum over the count, as numpy's float64 mean of integers is.
    """
    raw = pixels(video)  # compressed formats are decoded by the media engines, not here
    if raw is None:
        return None
    shape = (raw.shape[0], raw.shape[1])
    if raw.ndim == 2:
        total = int(np.add.reduce(raw, axis=None, dtype=np.uint64))
        return int(np.argmax(raw)), total / raw.size, shape
    summed = raw[..., 0].astype(np.uint16)
    summed += raw[..., 1]
    summed += raw[..., 2]
    bright = np.divide(summed, np.float64(3.0))  # each pixel exactly as raw.mean(axis=2)
    return int(np.argmax(summed)), float(np.add.reduce(bright, axis=None)) / bright.size, shape


def _pcm(chunks: Sequence[AudioToken]) -> np.ndarray | None:
    # One channel is its own mean (float32 x / 1 is x); more are averaged as before.
    pieces = [data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)
              for c in chunks if (data := pcm(c)) is not None]
    if not pieces:
        return None
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


@functools.lru_cache(maxsize=32)
def _hanning(n: int) -> npt.NDArray[np.float64]:
    """``np.hanning(n)``, computed once per length; read-only."""
    window = np.hanning(n)
    window.flags.writeable = False
    return window
