"""A clip made the way a camera and a caption generator would make it: for perception tests.

:func:`write_captioned` writes an mp4 (H.264 video, AAC audio) whose frames show captions
rendered with a real font (Pillow's bundled one, through FreeType) for given stretches of
time, over a gradient with a moving square, and whose audio is quiet noise with speech
(16 kHz mono PCM, e.g. a committed espeak-ng recording) mixed in at given times.
:class:`CaptionedClip` says what is on screen and what is said when, in media seconds.
Needs Pillow (the ``cpu`` and ``dev`` extras bring it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Caption:
    """Text on screen from ``start_s`` until ``end_s`` (media seconds)."""

    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Speech:
    """Mono int16 PCM at 16 kHz, said from ``start_s`` (media seconds)."""

    pcm: bytes
    start_s: float

    @property
    def end_s(self) -> float:
        """When it has been said."""
        return self.start_s + len(self.pcm) / 2 / 16_000


@dataclass(frozen=True)
class CaptionedClip:
    """What :func:`write_captioned` wrote."""

    path: Path
    seconds: float
    fps: int
    captions: tuple[Caption, ...]
    speech: tuple[Speech, ...]

    def caption_at(self, media_s: float) -> str | None:
        """The caption on screen at a media time, if any."""
        for c in self.captions:
            if c.start_s <= media_s < c.end_s:
                return c.text
        return None


def write_captioned(path: Path, captions: Sequence[Caption], speech: Sequence[Speech] = (),
                    *, seconds: float = 7.0, fps: int = 25, width: int = 640, height: int = 360,
                    font_px: int = 30, start: str = "2027-01-15T08:00:00Z") -> CaptionedClip:
    """Write the clip; ``start`` is its ``creation_time`` tag (the first frame's capture)."""
    from PIL import Image, ImageDraw, ImageFont  # the cpu/dev extras; only tests need it

    font = ImageFont.load_default(size=font_px)
    rate = 16_000
    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:
        out.metadata["creation_time"] = start
        video: Any = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.time_base = Fraction(1, fps)
        video.codec_context.options = {"preset": "ultrafast", "tune": "zerolatency"}
        audio: Any = out.add_stream("aac", rate=rate, layout="mono")
        for i in range(round(seconds * fps)):
            image = Image.fromarray(_background(i, width, height))
            t = i / fps
            for c in captions:
                if c.start_s <= t < c.end_s:
                    draw = ImageDraw.Draw(image)
                    top = int(height * 0.72)
                    draw.rectangle((0, top - 8, width, top + font_px + 12), fill=(12, 12, 12))
                    draw.text((24, top), c.text, font=font, fill=(245, 245, 245))
            frame = av.VideoFrame.from_ndarray(np.asarray(image), format="rgb24")
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        pcm = _audio(speech, round(seconds * rate), rate)
        for first in range(0, len(pcm), 1024):
            chunk = av.AudioFrame.from_ndarray(pcm[first:first + 1024].reshape(1, -1),
                                               format="s16", layout="mono")
            chunk.sample_rate, chunk.pts = rate, first
            out.mux(audio.encode(chunk))
        out.mux(audio.encode(None))
    return CaptionedClip(path, seconds, fps, tuple(captions), tuple(speech))


def _background(i: int, width: int, height: int) -> npt.NDArray[np.uint8]:
    image = np.empty((height, width, 3), np.uint8)
    image[:] = np.linspace(40, 110, width, dtype=np.uint8)[None, :, None]
    side = height // 8
    x = (i * 3) % (width - side)
    image[height // 8:height // 8 + side, x:x + side] = (220, 190, 60)
    return image


def _audio(speech: Sequence[Speech], samples: int, rate: int) -> npt.NDArray[np.int16]:
    noise = np.random.default_rng(7).normal(0.0, 30.0, samples)  # a quiet room
    for s in speech:
        words = np.frombuffer(s.pcm, "<i2").astype(np.float64)
        at = round(s.start_s * rate)
        end = min(samples, at + len(words))
        noise[at:end] += words[:end - at]
    return np.asarray(np.clip(noise, -32768, 32767), np.int16)
