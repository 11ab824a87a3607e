"""Synthetic media streams with known timestamps, for the demo, tests and benchmarks.

Pure: :meth:`SyntheticStream.due` returns the tokens captured up to a given time.
Video is a bright square moving over a gradient (gray8 by default; rgb24, or encoded as
JPEG or PNG with PyAV), audio a sine tone (pcm_s16le), OCR a caption that changes every
``ocr_every_ms``, sensor a speed/heading pair.

Capture times lie on each modality's grid of periods. By default the grid starts at the
stream's ``start_us`` and ``seq`` at 0. With ``epoch_us`` the grid is anchored there
instead (the CLI uses the Unix epoch): ``seq = round((t_us - epoch_us) / period)``, so a
stream published again later under the same id continues its ``seq`` where the clock
says, with no state kept between runs, and the captures in between show as a gap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lockstep.errors import ConfigError
from lockstep.producer.checks import check_stream_ids
from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, Token, VideoToken

FrameFormat = Literal["gray8", "rgb24", "jpeg", "png"]


@dataclass(frozen=True)
class SyntheticConfig:
    """Rates and sizes of one synthetic stream."""

    fps: float = 30.0
    width: int = 64
    height: int = 48
    #: How frames are sent: raw (``gray8``, ``rgb24``) or encoded (``jpeg``, ``png``).
    video_format: FrameFormat = "gray8"
    jpeg_quality: int = 80
    sample_rate: int = 16_000
    audio_chunk_ms: float = 20.0
    tone_hz: float = 440.0
    ocr_every_ms: float = 500.0
    sensor_hz: float = 50.0
    #: Modalities the stream does not send (a camera that is off, no microphone...).
    withheld: frozenset[Modality] = frozenset()
    #: Speech recognised in the audio, and the recogniser's confidence.
    asr_text: str | None = None
    asr_confidence: float | None = None

    @property
    def tokens_per_second(self) -> float:
        """Tokens the stream publishes a second (132 by default), withheld modalities left out."""
        rates = {Modality.VIDEO: self.fps, Modality.AUDIO: 1000.0 / self.audio_chunk_ms,
                 Modality.OCR: 1000.0 / self.ocr_every_ms, Modality.SENSOR: self.sensor_hz}
        return sum(r for m, r in rates.items() if m not in self.withheld)


@dataclass
class SyntheticStream:
    """One stream's token generator, starting at ``start_us`` (capture clock).

    ``epoch_us`` anchors the capture grid (and ``seq`` 0) there rather than at
    ``start_us``; the first token of each modality is then the first grid point at or
    after ``start_us``. With ``until_us`` the last token of each modality due by then is
    marked ``final``.
    """

    stream_id: str
    start_us: int
    config: SyntheticConfig = field(default_factory=SyntheticConfig)
    epoch_us: int | None = None
    #: When the stream stops (capture clock): each modality's last token before then is
    #: sent ``final`` (None: the stream does not say it ends).
    until_us: int | None = None
    _next_index: dict[Modality, int] = field(default_factory=dict)
    _encoder: _FrameEncoder | None = field(default=None, repr=False)

    def _period_us(self, modality: Modality) -> float:
        c = self.config
        return {
            Modality.VIDEO: 1e6 / c.fps,
            Modality.AUDIO: c.audio_chunk_ms * 1000.0,
            Modality.OCR: c.ocr_every_ms * 1000.0,
            Modality.SENSOR: 1e6 / c.sensor_hz,
        }[modality]

    def first_seq(self, modality: Modality) -> int:
        """The ``seq`` of the stream's first token of ``modality``."""
        if self.epoch_us is None:
            return 0
        return max(0, math.ceil((self.start_us - self.epoch_us) / self._period_us(modality)))

    def due(self, now_us: int, *, whole: bool = False) -> list[Token]:
        """Every token whose capture time is at or before ``now_us`` and not yet returned.

        ``whole``: an audio chunk only once it has been captured whole (``t_us`` +
        ``duration_us``), as a live microphone can send it; otherwise when it starts.
        """
        tokens: list[Token] = []
        origin = self.start_us if self.epoch_us is None else self.epoch_us
        for modality in Modality:
            if modality in self.config.withheld:
                continue
            period = self._period_us(modality)
            i = self._next_index.get(modality)
            if i is None:
                i = self.first_seq(modality)
            lead = int(period) if whole and modality is Modality.AUDIO else 0
            until = self.until_us
            while origin + int(i * period) + lead <= now_us:
                token = self._make(modality, i, origin + int(i * period))
                if until is not None and origin + int((i + 1) * period) + lead > until:
                    token = token.model_copy(update={"final": True})
                tokens.append(token)
                i += 1
            self._next_index[modality] = i
        tokens.sort(key=lambda t: t.t_us)
        return tokens

    def _make(self, modality: Modality, i: int, t_us: int) -> Token:
        c = self.config
        if modality is Modality.VIDEO:
            return VideoToken(stream_id=self.stream_id, seq=i, t_us=t_us, format=c.video_format,
                              width=c.width, height=c.height, data=self._frame(i), quality=0.9)
        if modality is Modality.AUDIO:
            samples = round(c.sample_rate * c.audio_chunk_ms / 1000.0)
            n = np.arange(i * samples, (i + 1) * samples)
            wave = 0.3 * np.sin(2 * math.pi * c.tone_hz * n / c.sample_rate)
            pcm = (wave * 32767).astype("<i2").tobytes()
            return AudioToken(stream_id=self.stream_id, seq=i, t_us=t_us, encoding="pcm_s16le",
                              sample_rate=c.sample_rate, channels=1,
                              duration_us=round(samples * 1e6 / c.sample_rate), data=pcm,
                              asr_text=c.asr_text, asr_confidence=c.asr_confidence)
        if modality is Modality.OCR:
            return OcrToken(stream_id=self.stream_id, seq=i, t_us=t_us,
                            text=f"SIGN {i % 10}", bbox=(0.1, 0.1, 0.3, 0.1), confidence=0.95)
        angle = 2 * math.pi * i / (c.sensor_hz * 10)
        return SensorToken(stream_id=self.stream_id, seq=i, t_us=t_us, name="imu",
                           values=[round(10 + 2 * math.sin(angle), 4), round(angle % 6.283, 4)],
                           unit="m/s,rad", confidence=0.99)

    def _frame(self, i: int) -> bytes:
        c = self.config
        gray = _pattern(c.width, c.height, i)
        if c.video_format == "gray8":
            return bytes(gray.tobytes())
        rgb = np.repeat(gray[:, :, None], 3, axis=2)
        rgb[:, :, 2] = np.maximum(gray, 128)  # a bluish background, the square stays white
        if c.video_format == "rgb24":
            return bytes(rgb.tobytes())
        if self._encoder is None:
            self._encoder = _FrameEncoder(c.video_format, c.width, c.height, c.jpeg_quality)
        return self._encoder.encode(rgb)


def _pattern(width: int, height: int, i: int) -> npt.NDArray[np.uint8]:
    """Frame ``i``: a bright square moving over a horizontal gradient, (height, width)."""
    gradient = np.linspace(0, 96, width, dtype=np.float32)
    frame = np.tile(gradient, (height, 1))
    side = max(1, min(max(2, height // 4), width - 1, height))
    x = int((i * 2) % (width - side))
    y = int((height - side) / 2 * (1 + math.sin(i / 15)))
    frame[y:y + side, x:x + side] = 255
    return frame.astype(np.uint8)


class _FrameEncoder:
    """Encodes RGB frames of one size as JPEG (FFmpeg's mjpeg) or PNG, with PyAV."""

    def __init__(self, fmt: FrameFormat, width: int, height: int, jpeg_quality: int) -> None:
        import av  # only streams that send encoded frames need it

        jpeg = fmt == "jpeg"
        self._av: Any = av
        self._codec: Any = av.CodecContext.create("mjpeg" if jpeg else "png", "w")
        self._codec.width, self._codec.height = width, height
        self._codec.pix_fmt = "yuvj420p" if jpeg else "rgb24"
        self._codec.time_base = Fraction(1, 1000)
        if jpeg:  # FFmpeg's qscale: 2 (best) .. 31 (worst)
            q = round(2 + (100 - jpeg_quality) * 29 / 99)
            self._codec.options = {"qmin": str(q), "qmax": str(q)}
        self._pts = 0

    def encode(self, rgb: npt.NDArray[np.uint8]) -> bytes:
        frame = self._av.VideoFrame.from_ndarray(rgb, format="rgb24")
        frame = frame.reformat(format=self._codec.pix_fmt)
        frame.pts, frame.time_base = self._pts, self._codec.time_base
        self._pts += 1  # the encoder wants increasing timestamps
        return bytes(self._codec.encode(frame)[0])


_CHANNELS = {"gray8": 1, "rgb24": 3}


#: Room in a record for everything but the frame's bytes.
_RECORD_OVERHEAD = 4096


def synthetic_ids(stream_ids: Sequence[str], streams: int, prefix: str) -> list[str]:
    """The stream ids: ``--stream`` (one per stream, or one numbered), else PREFIXcam<i>.

    Raises:
        ConfigError: The ids do not fit the streams, repeat, or break the wire contract.
    """
    if not stream_ids:
        ids = [f"{prefix}cam{i}" for i in range(streams)]
    elif len(stream_ids) == 1 and streams > 1:
        ids = [f"{stream_ids[0]}-{i}" for i in range(streams)]
    elif streams in (1, len(stream_ids)):
        ids = list(stream_ids)
    else:
        raise ConfigError(f"{len(stream_ids)} stream ids for {streams} streams: give one id "
                          "(numbered ID-0, ID-1...) or one per stream")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"stream ids must differ: {ids}")
    check_stream_ids(ids)
    return ids


def synthetic_config(*, fps: float | None, width: int | None, height: int | None,
                     video_format: FrameFormat, jpeg_quality: int, chunk_ms: float,
                     video: bool, audio: bool, max_record_bytes: int) -> SyntheticConfig:
    """The streams' rates, frame size and encoding from the ``publish`` options.

    One of ``width`` and ``height`` alone keeps the default 4:3 aspect ratio.

    Raises:
        ConfigError: A raw frame of that size does not fit in a record.
    """
    default = SyntheticConfig()
    if width and not height:
        height = max(2, round(width * default.height / default.width))
    elif height and not width:
        width = max(2, round(height * default.width / default.height))
    w, h = width or default.width, height or default.height
    channels = _CHANNELS.get(video_format)
    if video and channels and w * h * channels > max_record_bytes - _RECORD_OVERHEAD:
        raise ConfigError(f"a {w}x{h} {video_format} frame is {w * h * channels:,} bytes, "
                          f"more than a record holds ({max_record_bytes:,} bytes, "
                          "kafka.max_record_bytes): use --format jpeg or a smaller size")
    withheld = frozenset(m for m, on in ((Modality.VIDEO, video), (Modality.AUDIO, audio))
                         if not on)
    return SyntheticConfig(fps=fps or default.fps, width=w, height=h, video_format=video_format,
                           jpeg_quality=jpeg_quality, audio_chunk_ms=chunk_ms,
                           withheld=withheld)

