"""Synthetic media with ground truth: an mp4 (video + audio, PyAV encode) plus sidecars.

The video is a gradient with a moving square and a caption drawn in a built-in 5x7
bitmap font (so OCR has something to read without any font files); the audio is a tone,
optionally with speech mixed in at a given time. The OCR sidecar lists each caption as it
appears, the sensor sidecar an IMU-like pair of readings. :class:`GroundTruth` says
exactly what was written, for tests and benchmarks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt

_GLYPHS = {
    "A": "01110 10001 10001 11111 10001 10001 10001",
    "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110",
    "D": "11110 10001 10001 10001 10001 10001 11110",
    "E": "11111 10000 10000 11110 10000 10000 11111",
    "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111",
    "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110",
    "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001",
    "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 11001 11001 10101 10011 10011 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110",
    "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101",
    "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110",
    "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110",
    "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010",
    "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 01010 00100 00100 00100 00100",
    "Z": "11111 00001 00010 00100 01000 10000 11111",
    "0": "01110 10001 10011 10101 11001 10001 01110",
    "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111",
    "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010",
    "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110",
    "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110",
    "9": "01110 10001 10001 01111 00001 00010 01100",
    " ": "00000 00000 00000 00000 00000 00000 00000",
}
_FONT = {ch: np.array([[bit == "1" for bit in row] for row in rows.split()], bool)
         for ch, rows in _GLYPHS.items()}


def draw_text(image: npt.NDArray[np.uint8], text: str, x: int, y: int, scale: int,
              value: int = 255) -> tuple[int, int, int, int]:
    """Draw upper-case letters, digits and spaces; return the box (x, y, width, height)."""
    cursor = x
    for ch in text.upper():
        glyph = _FONT.get(ch)
        if glyph is None:
            raise ValueError(f"the built-in font has no {ch!r} (A-Z, 0-9 and space only)")
        block = np.kron(glyph, np.ones((scale, scale), bool))
        region = image[y:y + block.shape[0], cursor:cursor + block.shape[1]]
        region[block[:region.shape[0], :region.shape[1]]] = value
        cursor += 6 * scale
    return x, y, max(0, cursor - x - scale), 7 * scale


@dataclass(frozen=True)
class SynthSpec:
    """What to generate."""

    seconds: float = 2.0
    fps: int = 30
    width: int = 320
    height: int = 240
    sample_rate: int = 16_000
    tone_hz: float = 440.0
    captions: tuple[str, ...] = ("EXIT 12", "STOP", "LANE 3")
    caption_every_s: float = 0.5
    sensor_hz: float = 50.0
    #: Mono int16 PCM at ``sample_rate`` mixed in at ``speech_at_s`` (e.g. from a TTS).
    speech: bytes | None = None
    speech_at_s: float = 0.3
    #: The file's creation_time tag: the capture time of its first frame.
    start: str = "2027-01-15T08:00:00Z"
    video_codec: str = "libx264"


@dataclass(frozen=True)
class GroundTruth:
    """What :func:`write_media` wrote."""

    media: Path
    ocr: Path
    sensor: Path
    spec: SynthSpec
    #: Media time of every frame, in seconds.
    frame_times_s: tuple[Fraction, ...]
    audio_samples: int
    #: (media seconds, caption) of each OCR sidecar line.
    captions: tuple[tuple[float, str], ...]
    sensor_lines: int
    caption_boxes: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)

    def audio_chunks(self, chunk_ms: float = 20.0) -> int:
        """Chunks the audio makes once resampled to 16 kHz."""
        samples = round(self.audio_samples * 16_000 / self.spec.sample_rate)
        return math.ceil(samples / round(16 * chunk_ms))


def write_media(directory: Path, spec: SynthSpec | None = None,
                name: str = "synthetic") -> GroundTruth:
    """Write ``NAME.mp4``, ``NAME.ocr.jsonl`` and ``NAME.sensor.jsonl`` into ``directory``."""
    spec = spec or SynthSpec()
    directory.mkdir(parents=True, exist_ok=True)
    media = directory / f"{name}.mp4"
    frames = round(spec.seconds * spec.fps)
    samples = round(spec.seconds * spec.sample_rate)
    scale = max(2, spec.height // 40)
    captions: list[tuple[float, str]] = []
    boxes: dict[str, tuple[float, float, float, float]] = {}
    with av.open(str(media), "w", options={"movflags": "faststart"}) as out:
        out.metadata["creation_time"] = spec.start
        video: Any = out.add_stream(spec.video_codec, rate=spec.fps)
        video.width, video.height, video.pix_fmt = spec.width, spec.height, "yuv420p"
        video.codec_context.time_base = Fraction(1, spec.fps)
        if spec.video_codec == "libx264":
            video.codec_context.options = {"preset": "ultrafast", "tune": "zerolatency"}
        audio: Any = out.add_stream("aac", rate=spec.sample_rate, layout="mono")
        for i in range(frames):
            caption = spec.captions[int(i / spec.fps / spec.caption_every_s) % len(spec.captions)]
            image, box = _frame(spec, i, caption, scale)
            if not captions or captions[-1][1] != caption:
                captions.append((i / spec.fps, caption))
                boxes[caption] = (box[0] / spec.width, box[1] / spec.height,
                                  box[2] / spec.width, box[3] / spec.height)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        pcm = _audio(spec, samples)
        for start in range(0, samples, 1024):
            block = pcm[start:start + 1024]
            chunk = av.AudioFrame.from_ndarray(block.reshape(1, -1), format="s16", layout="mono")
            chunk.sample_rate, chunk.pts = spec.sample_rate, start
            out.mux(audio.encode(chunk))
        out.mux(audio.encode(None))
    ocr = directory / f"{name}.ocr.jsonl"
    ocr.write_text("".join(json.dumps({"t_s": t, "text": text, "bbox": list(boxes[text]),
                                       "confidence": 0.99}) + "\n" for t, text in captions))
    sensor = directory / f"{name}.sensor.jsonl"
    readings = math.floor(spec.seconds * spec.sensor_hz - 1e-9) + 1
    sensor.write_text("".join(
        json.dumps({"t_s": k / spec.sensor_hz, "name": "imu",
                    "values": [round(10 + math.sin(k / 10), 4), round(k % 360 / 1.0, 1)],
                    "unit": "m/s,deg"}) + "\n" for k in range(readings)))
    return GroundTruth(media, ocr, sensor, spec,
                       tuple(Fraction(i, spec.fps) for i in range(frames)), samples,
                       tuple(captions), readings, boxes)


def _frame(spec: SynthSpec, i: int, caption: str, scale: int
           ) -> tuple[npt.NDArray[np.uint8], tuple[int, int, int, int]]:
    h, w = spec.height, spec.width
    image = np.empty((h, w, 3), np.uint8)
    image[:] = np.linspace(30, 120, w, dtype=np.uint8)[None, :, None]
    side = max(4, h // 8)
    x = (i * 4) % max(1, w - side)
    image[h // 10:h // 10 + side, x:x + side] = (230, 200, 40)
    band = int(h * 0.55)
    image[band:band + 11 * scale, :] = 20
    box = draw_text(image, caption, 2 * scale, band + 2 * scale, scale)
    return image, box


def _audio(spec: SynthSpec, samples: int) -> npt.NDArray[np.int16]:
    t = np.arange(samples) / spec.sample_rate
    signal = 0.05 * np.sin(2 * np.pi * spec.tone_hz * t)
    if spec.speech:
        speech = np.frombuffer(spec.speech, "<i2").astype(np.float64) / 32768.0
        at = round(spec.speech_at_s * spec.sample_rate)
        end = min(samples, at + len(speech))
        signal[at:end] = 0.01 * signal[at:end] + speech[:end - at]
    return np.asarray(np.clip(signal * 32767, -32768, 32767), np.int16)
