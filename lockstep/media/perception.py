"""Perception on the CPU for producers without their own: ASR and OCR (optional extras).

- :class:`SpeechRecognizer`: pocketsphinx (extra ``asr``; its wheel ships an English
  model). A voice-activity endpointer cuts the 16 kHz mono PCM into utterances; each
  finished utterance gives its text and the recogniser's posterior probability as
  confidence. A JSGF grammar narrows the vocabulary (commands) and raises accuracy.
- :class:`TextReader`: rapidocr-onnxruntime (extra ``ocr``; ships its ONNX models) on
  sampled frames: boxes, text and confidence.

Nothing is fetched at run time: both packages carry their models.
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

from lockstep.errors import ConfigError, MediaError

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
        raise ConfigError(f"{package} is not installed: pip install 'lockstep-stream[{extra}]'"
                          ) from None


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
        self._endpointer = ps.Endpointer(sample_rate=self.SAMPLE_RATE)
        self._frame_bytes: int = self._endpointer.frame_bytes
        self._buffer = b""
        self._fed = 0  # bytes fed to the endpointer
        self._speech_start = 0.0

    def feed(self, pcm: bytes) -> list[Utterance]:
        """Add PCM; return the utterances that ended within it."""
        self._buffer += pcm
        done: list[Utterance] = []
        while len(self._buffer) >= self._frame_bytes:
            frame, self._buffer = (self._buffer[:self._frame_bytes],
                                   self._buffer[self._frame_bytes:])
            was_speaking = self._endpointer.in_speech
            speech = self._endpointer.process(frame)
            self._fed += len(frame)
            if speech is None:
                continue
            if not was_speaking:
                self._speech_start = float(self._endpointer.speech_start)
                self._decoder.start_utt()
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
        hyp = self._decoder.hyp()
        if hyp is None or not hyp.hypstr.strip():
            return []
        confidence = min(1.0, max(0.0, float(hyp.prob)))
        return [Utterance(hyp.hypstr.strip(), confidence, self._speech_start, end_s)]


@dataclass(frozen=True)
class TextBox:
    """Text read in a frame: box as (x, y, width, height) fractions of the frame."""

    text: str
    bbox: tuple[float, float, float, float]
    confidence: float


class TextReader:
    """OCR of RGB frames with rapidocr-onnxruntime."""

    def __init__(self, limit_side: int = 640) -> None:
        rapidocr = require("rapidocr_onnxruntime")
        self._engine = rapidocr.RapidOCR(det_limit_side_len=limit_side)

    def read(self, rgb: npt.NDArray[np.uint8]) -> list[TextBox]:
        """Every line of text found in an (height, width, 3) RGB frame."""
        height, width = rgb.shape[:2]
        # rapidocr takes OpenCV's BGR order
        found, _ = self._engine(np.ascontiguousarray(rgb[:, :, ::-1]), use_cls=False)
        boxes: list[TextBox] = []
        for points, text, score in found or []:
            xs = [float(p[0]) for p in points]
            ys = [float(p[1]) for p in points]
            x0, y0 = max(0.0, min(xs)), max(0.0, min(ys))
            x1, y1 = min(float(width), max(xs)), min(float(height), max(ys))
            boxes.append(TextBox(str(text)[:4096],
                                 (x0 / width, y0 / height, (x1 - x0) / width,
                                  (y1 - y0) / height),
                                 min(1.0, max(0.0, float(score)))))
        return boxes
