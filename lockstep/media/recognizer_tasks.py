"""The recognisers' side of perception: what runs in the child processes.

:class:`ReadText` looks at every frame it is handed (decoding it is cheap) and reads the
text of one (slow) when ``every_us`` of media has passed since the last frame read, or when
the picture has changed since then (a share of its 16x16-pixel cells moved by more than a
few grey levels). :class:`HearSpeech` feeds every audio chunk to the recogniser and reports
each utterance with the capture times it spans; after a gap (a dropped backlog) it drops the
utterance in progress and starts afresh.

Jobs carry the monotonic time their media was published, so the parent can measure how far
perception runs behind the media (the perception lag).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt

from lockstep.media.recognizers import SpeechRecognizer, TextBox, TextReader

_CELL = 16
#: Grey levels a cell must move by to count as changed.
_CELL_DELTA = 12.0


@dataclass(frozen=True)
class FrameJob:
    """A published frame: its capture time, encoding and when it was published."""

    t_us: int
    format: str
    width: int
    height: int
    data: bytes
    offered_at: float


@dataclass(frozen=True)
class ChunkJob:
    """A published chunk of 16 kHz mono ``pcm_s16le`` audio."""

    t_us: int
    pcm: bytes
    offered_at: float


@dataclass(frozen=True)
class Reading:
    """The text read in one frame (no boxes: the frame shows no text)."""

    t_us: int
    boxes: tuple[TextBox, ...]
    offered_at: float
    seconds: float


@dataclass(frozen=True)
class Heard:
    """One utterance: its capture times, text and confidence."""

    since_us: int
    until_us: int
    text: str
    confidence: float
    offered_at: float


@dataclass(frozen=True)
class Skipped:
    """Work dropped in the child (an utterance cut by a gap)."""

    what: str


@dataclass(frozen=True)
class Failed:
    """A job the child could not do (an undecodable frame)."""

    reason: str


@dataclass(frozen=True)
class OcrConfig:
    """How :class:`ReadText` samples frames."""

    every_us: int = 1_000_000
    change: float = 0.05
    limit_side: int = 960


class ReadText:
    """Reads text in frames that are due or changed (a :class:`~lockstep.media.workers.Task`)."""

    def __init__(self, config: OcrConfig) -> None:
        self.config = config
        self.reader = TextReader(config.limit_side)
        self._decoders: dict[str, Any] = {}
        self._last_t: int | None = None
        self._last_cells: npt.NDArray[np.float32] | None = None

    def handle(self, job: FrameJob) -> list[Any]:
        """Read the frame if it is due or changed."""
        try:
            frame = self._decode(job)
        except (av.error.FFmpegError, ValueError) as exc:
            return [Failed(f"frame at {job.t_us}: {exc}")]
        cells = _cells(_gray(frame))
        last = self._last_cells
        due = self._last_t is None or job.t_us - self._last_t >= self.config.every_us
        changed = (self.config.change > 0 and last is not None and last.shape == cells.shape
                   and float(np.mean(np.abs(cells - last) > _CELL_DELTA)) >= self.config.change)
        if not (due or changed):
            return []
        began = time.monotonic()
        boxes = tuple(self.reader.read(_rgb(frame)))
        self._last_t, self._last_cells = job.t_us, cells
        return [Reading(job.t_us, boxes, job.offered_at, time.monotonic() - began)]

    def gap(self) -> list[Any]:
        """Frames are independent: nothing to drop."""
        return []

    def finish(self) -> list[Any]:
        """Nothing is held back."""
        return []

    def _decode(self, job: FrameJob) -> Any:
        """Raw pixels as an array, or a decoded PyAV frame (converted only as needed)."""
        if job.format in ("rgb24", "gray8"):
            channels = 3 if job.format == "rgb24" else 1
            pixels = np.frombuffer(job.data, np.uint8).reshape(job.height, job.width, channels)
            return pixels if channels == 3 else np.repeat(pixels, 3, axis=2)
        if job.format not in ("jpeg", "png"):
            raise ValueError(f"cannot read {job.format} frames one by one")
        decoder: Any = self._decoders.get(job.format)
        if decoder is None:
            codec = "mjpeg" if job.format == "jpeg" else "png"
            decoder = self._decoders[job.format] = av.CodecContext.create(codec, "r")
        frames = decoder.decode(av.Packet(job.data))
        if not frames:
            raise ValueError("the decoder returned no picture")
        return frames[0]


def _gray(frame: Any) -> npt.NDArray[np.uint8]:
    """The luma of a frame: a JPEG's own Y plane, without converting to RGB."""
    if isinstance(frame, np.ndarray):
        return np.asarray(frame.mean(axis=2), np.uint8)
    return np.asarray(frame.to_ndarray(format="gray"), np.uint8)


def _rgb(frame: Any) -> npt.NDArray[np.uint8]:
    if isinstance(frame, np.ndarray):
        return np.asarray(frame, np.uint8)
    return np.asarray(frame.to_ndarray(format="rgb24"), np.uint8)


def _cells(gray: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """Mean grey of each 16x16-pixel cell (the whole frame when it is smaller)."""
    rows, cols = max(1, gray.shape[0] // _CELL), max(1, gray.shape[1] // _CELL)
    h, w = gray.shape[0] // rows * rows, gray.shape[1] // cols * cols
    blocks = gray[:h, :w].reshape(rows, h // rows, cols, w // cols)
    return np.asarray(blocks.mean(axis=(1, 3), dtype=np.float32), np.float32)


@dataclass(frozen=True)
class AsrConfig:
    """How :class:`HearSpeech` recognises."""

    grammar: Path | None = None


class HearSpeech:
    """Recognises utterances in a chunk stream (a :class:`~lockstep.media.workers.Task`)."""

    def __init__(self, config: AsrConfig) -> None:
        self.recogniser = SpeechRecognizer(config.grammar)
        self._base_us: int | None = None
        self._samples = 0
        #: (sample after the chunk, when it was published) of the recent chunks.
        self._chunks: deque[tuple[int, float]] = deque(maxlen=3000)

    def handle(self, job: ChunkJob) -> list[Any]:
        """Feed one chunk; report the utterances it ended."""
        if self._base_us is None:
            self._base_us, self._samples = job.t_us, 0
        self._samples += len(job.pcm) // 2
        self._chunks.append((self._samples, job.offered_at))
        return [self._heard(u) for u in self.recogniser.feed(job.pcm)]

    def gap(self) -> list[Any]:
        """Audio was dropped: the utterance in progress is lost; count time afresh."""
        lost = self.recogniser.in_speech
        self.recogniser.reset()
        self._base_us = None
        self._chunks.clear()
        return [Skipped("utterance")] if lost else []

    def finish(self) -> list[Any]:
        """End of the audio: the utterance still open."""
        return [self._heard(u) for u in self.recogniser.finish()]

    def _heard(self, utterance: Any) -> Heard:
        base = self._base_us or 0
        rate = SpeechRecognizer.SAMPLE_RATE
        end_sample = round(utterance.end_s * rate)
        offered = next((at for after, at in self._chunks if after >= end_sample),
                       self._chunks[-1][1] if self._chunks else time.monotonic())
        return Heard(base + round(utterance.start_s * 1e6), base + round(utterance.end_s * 1e6),
                     utterance.text, utterance.confidence, offered)
