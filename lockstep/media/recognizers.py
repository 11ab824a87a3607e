"""Perception on the CPU for producers without their own: ASR and OCR (optional extras).

- :class:`SpeechRecognizer`: pocketsphinx (extra ``asr``; its wheel ships an English
  model). A voice-activity endpointer cuts the 16 kHz mono PCM into utterances; each
  finished utterance gives its text and, as confidence, the posterior probability of its
  words. A JSGF grammar narrows the vocabulary (commands) and raises accuracy.
- :class:`TextReader`: rapidocr-onnxruntime (extra ``ocr``; ships its ONNX models) on
  frames: one line of text per caption, words spaced as the pixels show them, in reading
  order (:mod:`lockstep.media.reading`).

Nothing is fetched at run time: both packages carry their models. Both are slow next to
a frame period, so :mod:`lockstep.media.perception` runs them in processes of their own,
beside the media rather than in front of it.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from lockstep.errors import ConfigError, MediaError, install_hint
from lockstep.media.reading import Line, reading_order, spaced_line

log = logging.getLogger(__name__)

#: Extra, and the package it installs, for each perception module.
EXTRAS = {"pocketsphinx": ("asr", "pocketsphinx"),
          "rapidocr_onnxruntime": ("ocr", "rapidocr-onnxruntime")}


def require(module: str) -> ModuleType:
    """Import a perception backend or raise a :class:`ConfigError` with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError:
        extra, package = EXTRAS[module]
        raise ConfigError(f"{package} is not installed: {install_hint(extra)}") from None


@dataclass(frozen=True)
class Utterance:
    """Speech recognised between two pauses; times are seconds from the first sample fed."""

    text: str
    confidence: float
    start_s: float
    end_s: float


class SpeechRecognizer:
    """Streaming ASR on 16 kHz mono int16 PCM with pocketsphinx."""

    SAMPLE_RATE = 16_000

    def __init__(self, grammar: Path | None = None) -> None:
        ps = require("pocketsphinx")
        config: dict[str, Any] = {"samprate": self.SAMPLE_RATE}
        if grammar is not None:
            if not grammar.is_file():
                raise MediaError(f"ASR grammar {grammar} does not exist")
            config["jsgf"] = str(grammar)
        try:
            self._decoder = ps.Decoder(**config)
        except (RuntimeError, ValueError) as exc:
            raise MediaError(f"pocketsphinx cannot start: {exc}") from None
        self._ps = ps
        self._in_utterance = False
        self.reset()

    def reset(self) -> None:
        """Drop the utterance in progress and count time from the next sample fed."""
        if self._in_utterance:
            self._decoder.end_utt()
            self._in_utterance = False
        self._endpointer = self._ps.Endpointer(sample_rate=self.SAMPLE_RATE)
        self._frame_bytes: int = self._endpointer.frame_bytes
        self._buffer = b""
        self._speech_start = 0.0

    @property
    def in_speech(self) -> bool:
        """Whether an utterance has started and not ended yet."""
        return self._in_utterance

    def feed(self, pcm: bytes) -> list[Utterance]:
        """Add PCM; return the utterances that ended within it."""
        self._buffer += pcm
        done: list[Utterance] = []
        while len(self._buffer) >= self._frame_bytes:
            frame, self._buffer = (self._buffer[:self._frame_bytes],
                                   self._buffer[self._frame_bytes:])
            was_speaking = self._endpointer.in_speech
            speech = self._endpointer.process(frame)
            if speech is None:
                continue
            if not was_speaking:
                self._speech_start = float(self._endpointer.speech_start)
                self._decoder.start_utt()
                self._in_utterance = True
            self._decoder.process_raw(speech, False, False)
            if not self._endpointer.in_speech:
                done.extend(self._end(float(self._endpointer.speech_end)))
        return done

    def finish(self) -> list[Utterance]:
        """End of stream: close an utterance still open."""
        if not self._endpointer.in_speech:
            return []
        speech = self._endpointer.end_stream(self._buffer)
        self._buffer = b""
        if speech:
            self._decoder.process_raw(speech, False, False)
        return self._end(float(self._endpointer.speech_end))

    def _end(self, end_s: float) -> list[Utterance]:
        self._decoder.end_utt()
        self._in_utterance = False
        hyp = self._decoder.hyp()
        if hyp is None or not hyp.hypstr.strip():
            return []
        return [Utterance(hyp.hypstr.strip(), self._confidence(float(hyp.prob)),
                          self._speech_start, end_s)]

    def _confidence(self, sentence: float) -> float:
        """The posterior probability of the recognised words (the product of theirs).

        The sentence's own posterior also splits over paths that differ only in silence
        or filler segments (with or without a trailing pause), which halves it for a
        certain command; those segments do not change the text.
        """
        words = [seg.prob for seg in self._decoder.seg() if not _filler(seg.word)]
        confidence = float(np.prod(words)) if words else sentence
        return min(1.0, max(0.0, confidence))


def _filler(word: str) -> bool:
    """Silence, sentence marks and noise (``<sil>``, ``</s>``, ``[NOISE]``, ``++UH++``)."""
    return word.startswith(("<", "[", "+"))


@dataclass(frozen=True)
class TextBox:
    """Text read in a frame: box as (x, y, width, height) fractions of the frame."""

    text: str
    bbox: tuple[float, float, float, float]
    confidence: float


class TextReader:
    """OCR of RGB frames with rapidocr-onnxruntime, on one CPU thread.

    Args:
        limit_side: Frames with a longer side are scaled down to it for text detection.
    """

    def __init__(self, limit_side: int = 960) -> None:
        rapidocr = require("rapidocr_onnxruntime")
        self._engine = rapidocr.RapidOCR(det_limit_side_len=limit_side, det_limit_type="max",
                                         intra_op_num_threads=1, inter_op_num_threads=1)

    def read(self, rgb: npt.NDArray[np.uint8]) -> list[TextBox]:
        """Every line of text in an (height, width, 3) RGB frame, in reading order."""
        height, width = rgb.shape[:2]
        # rapidocr takes OpenCV's BGR order; word boxes place the characters for spacing
        found, _ = self._engine(np.ascontiguousarray(rgb[:, :, ::-1]), use_cls=False,
                                return_word_box=True)
        gray = np.asarray(rgb @ np.array([0.299, 0.587, 0.114]), np.uint8)
        lines: list[Line] = []
        for item in found or []:
            points, text, score = item[0], str(item[1]), float(item[2])
            xs = [float(p[0]) for p in points]
            ys = [float(p[1]) for p in points]
            box = (max(0.0, min(xs)), max(0.0, min(ys)), min(float(width), max(xs)),
                   min(float(height), max(ys)))
            chars = item[3] if len(item) > 3 and item[3] else []
            centres = [sum(float(p[0]) for p in c) / len(c) for c in chars]
            lines.append(Line(spaced_line(gray, text, box, centres),
                              min(1.0, max(0.0, score)), box))
        return [TextBox(line.text[:4096],
                        (line.box[0] / width, line.box[1] / height,
                         (line.box[2] - line.box[0]) / width, line.height / height),
                        line.confidence)
                for line in reading_order(lines)]
