"""A media source read with PyAV: video and audio tokens from a file, URL or device.

Video frames are sampled to a target rate, resized and encoded (JPEG by default); audio is
resampled to 16 kHz mono ``pcm_s16le`` and cut into chunks of 20-40 ms. Capture times come
from the container's PTS through a :class:`~lockstep.media.timing.CaptureClock`. Decoding
does nothing else: perception (:mod:`lockstep.media.perception`) reads the published tokens
beside the stream, never in front of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import av
import numpy as np

from lockstep.errors import ConfigError, MediaError
from lockstep.media.timing import AudioChunker, CaptureClock, FrameSampler, parse_anchor
from lockstep.streams.route.confidence import video_quality
from lockstep.topics.schemas import AudioToken, Token, VideoToken

VideoFormat = Literal["jpeg", "png", "rgb24", "gray8"]
SAMPLE_RATE = 16_000
#: Decoded media may end this much before the container's declared duration.
_TRUNCATION_SLACK_S = 0.25


@dataclass(frozen=True)
class MediaOptions:
    """How a source becomes tokens."""

    #: Target video rate (None: every decoded frame).
    fps: float | None = None
    #: Output size; one of them alone keeps the aspect ratio; neither keeps the source's.
    width: int | None = None
    height: int | None = None
    video_format: VideoFormat = "jpeg"
    jpeg_quality: int = 80
    audio_chunk_ms: float = 20.0
    video: bool = True
    audio: bool = True
    #: Send each encoded frame's measured quality (focus, detail, exposure) as its hint.
    quality_hint: bool = True
    #: ``wall``, ``file``, ISO 8601 or µs (see :func:`~lockstep.media.timing.parse_anchor`).
    anchor: str = "wall"
    #: Stop after this much media time (live sources run until stopped otherwise).
    max_seconds: float | None = None
    #: FFmpeg input format (``v4l2``, ``lavfi``...) for devices; None: probe.
    input_format: str | None = None

    def __post_init__(self) -> None:
        if not 20.0 <= self.audio_chunk_ms <= 40.0:
            raise ConfigError(f"audio chunks must be 20-40 ms, not {self.audio_chunk_ms}")
        if self.fps is not None and not 0 < self.fps <= 1000:
            raise ConfigError(f"fps must be in (0, 1000], not {self.fps}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ConfigError(f"JPEG quality must be 1-100, not {self.jpeg_quality}")
        for side in (self.width, self.height):
            if side is not None and not 2 <= side <= 16384:
                raise ConfigError(f"frame sides must be 2-16384 pixels, not {side}")
        if not (self.video or self.audio):
            raise ConfigError("nothing to publish: both video and audio are off")


class MediaSource:
    """An opened source; :meth:`tokens` decodes it once."""

    def __init__(self, url: str, options: MediaOptions, *, now_us: int | None = None) -> None:
        """Open and probe the source.

        Raises:
            MediaError: It cannot be opened, has no usable stream, or the anchor is invalid.
        """
        self.url = url
        self.options = options
        try:
            self._container: Any = av.open(url, format=options.input_format, timeout=10.0)
        except (av.error.FFmpegError, OSError) as exc:
            raise MediaError(f"cannot open {url}: {_reason(exc)}") from None
        try:
            self._video = self._pick("video") if options.video else None
            self._audio = self._pick("audio") if options.audio else None
            if self._video is None and self._audio is None:
                kinds = ", ".join(f"{s.type}/{s.codec_context.name if s.codec_context else '?'}"
                                  for s in self._container.streams) or "none"
                wanted = " or ".join(k for k, on in (("video", options.video),
                                                      ("audio", options.audio)) if on)
                raise MediaError(f"{url} has no decodable {wanted} stream (streams: {kinds})")
            start = self._container.start_time
            self.origin_s = Fraction(start, 1_000_000) if start is not None else Fraction(0)
            anchor = parse_anchor(options.anchor, now_us=now_us or time.time_ns() // 1000,
                                  creation_time=self._container.metadata.get("creation_time"))
            self.clock = CaptureClock(anchor, self.origin_s)
        except BaseException:
            self._container.close()
            raise
        duration = self._container.duration
        #: Media seconds the container declares (None for live sources).
        self.declared_s = duration / 1_000_000 if duration else None
        self.decoded_s = 0.0

    def _pick(self, kind: str) -> Any:
        streams = [s for s in self._container.streams if s.type == kind]
        if not streams:
            return None
        stream = streams[0]
        name = stream.codec_context.name if stream.codec_context is not None else "unknown"
        try:
            av.Codec(name, "r")
        except (av.error.FFmpegError, ValueError):
            raise MediaError(f"{self.url}: {kind} stream {stream.index} uses a codec this "
                             f"FFmpeg build cannot decode ({name})") from None
        return stream

    def close(self) -> None:
        """Release the container."""
        self._container.close()

    def tokens(self, stream_id: str) -> Iterator[Token]:
        """Decode the source into tokens, in demux order (close to capture order).

        Raises:
            MediaError: Decoding failed, or the media ends before its declared duration.
        """
        video = _VideoState(self, stream_id) if self._video else None
        audio = _AudioState(self, stream_id) if self._audio else None
        streams = [s for s in (self._video, self._audio) if s is not None]
        try:
            for frame, rel in self._frames(streams):
                if isinstance(frame, av.VideoFrame) and video is not None:
                    yield from video.frame(frame, rel)
                elif isinstance(frame, av.AudioFrame) and audio is not None:
                    yield from audio.frame(frame, rel)
            if audio is not None:
                yield from audio.finish()
        except av.error.FFmpegError as exc:
            raise MediaError(f"{self.url}: decoding failed after {self.decoded_s:.3f} s of "
                             f"media: {_reason(exc)}") from None
        declared = self.declared_s
        if self.options.max_seconds is None and declared is not None and (
                self.decoded_s + _TRUNCATION_SLACK_S + _frame_s(self._video) < declared):
            raise MediaError(f"{self.url}: media ends at {self.decoded_s:.3f} s but the "
                             f"container declares {declared:.3f} s: the file is truncated")


    def _frames(self, streams: list[Any]) -> Iterator[tuple[Any, Fraction]]:
        """Decoded frames and their media time since the origin, up to ``max_seconds``."""
        limit = self.options.max_seconds
        for packet in self._container.demux(*streams):
            for frame in packet.decode():
                rel = _time(frame, packet.stream) - self.origin_s
                if limit is not None and rel >= limit:
                    return
                self.decoded_s = max(self.decoded_s, float(rel))
                yield frame, rel


class _VideoState:
    def __init__(self, source: MediaSource, stream_id: str) -> None:
        self.source, self.stream_id = source, stream_id
        self.options = source.options
        self.sampler = FrameSampler(self.options.fps)
        self.encoders: dict[tuple[int, int], Any] = {}
        self.encoded = 0

    def frame(self, frame: av.VideoFrame, rel: Fraction) -> Iterator[VideoToken]:
        seq = self.sampler.take(float(rel))
        if seq is None:
            return
        width, height = _size(frame.width, frame.height, self.options)
        t_us = self.source.clock.t_us(self.source.origin_s + rel)
        fmt = self.options.video_format
        if fmt in ("rgb24", "gray8"):
            pixels = frame.reformat(width, height, "rgb24" if fmt == "rgb24" else "gray")
            data = pixels.to_ndarray().tobytes()
        else:
            data = self._encode(frame, width, height)
        quality = self._quality(frame, width, height) if self.options.quality_hint else None
        yield VideoToken(stream_id=self.stream_id, seq=seq, t_us=t_us, format=fmt, width=width,
                         height=height, data=data, quality=quality)

    def _encode(self, frame: av.VideoFrame, width: int, height: int) -> bytes:
        encoder = self.encoders.get((width, height))
        if encoder is None:
            jpeg = self.options.video_format == "jpeg"
            encoder = av.CodecContext.create("mjpeg" if jpeg else "png", "w")
            encoder.width, encoder.height = width, height
            encoder.pix_fmt = "yuvj420p" if jpeg else "rgb24"
            encoder.time_base = Fraction(1, 1000)
            if jpeg:  # FFmpeg's qscale: 2 (best) .. 31 (worst)
                q = round(2 + (100 - self.options.jpeg_quality) * 29 / 99)
                encoder.options = {"qmin": str(q), "qmax": str(q)}
            self.encoders[(width, height)] = encoder
        converted = frame.reformat(width, height, encoder.pix_fmt)
        converted.pts = self.encoded  # the encoder wants increasing timestamps
        converted.time_base = encoder.time_base
        self.encoded += 1
        packets = encoder.encode(converted)
        if not packets:
            raise MediaError(f"{self.source.url}: the {self.options.video_format} encoder "
                             "returned no image")
        return bytes(packets[0])

    @staticmethod
    def _quality(frame: av.VideoFrame, width: int, height: int) -> float:
        gray = frame.reformat(width, height, "gray").to_ndarray()
        probe = VideoToken(stream_id="q", seq=0, t_us=1_000_000_000_000_000, format="gray8",
                           width=width, height=height, data=gray.tobytes())
        measured = video_quality(probe, 0)
        return round(measured.score, 4) if measured is not None else 0.5


class _AudioState:
    def __init__(self, source: MediaSource, stream_id: str) -> None:
        self.source, self.stream_id = source, stream_id
        self.resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        self.chunker = AudioChunker(round(SAMPLE_RATE * source.options.audio_chunk_ms / 1000))
        self.first_s: Fraction | None = None
        self.max_samples: int | None = None
        self.samples = 0

    def frame(self, frame: av.AudioFrame, rel: Fraction) -> Iterator[AudioToken]:
        if self.first_s is None:
            self.first_s = self.source.origin_s + rel
            self.max_samples = self._declared_samples(self.first_s)
        for out in self.resampler.resample(frame):
            yield from self._push(out)

    def finish(self) -> Iterator[AudioToken]:
        if self.first_s is None:
            return
        for out in self.resampler.resample(None):
            yield from self._push(out)
        for start, pcm in self.chunker.flush():
            yield self._token(start, pcm)

    def _push(self, out: av.AudioFrame) -> Iterator[AudioToken]:
        samples = out.to_ndarray().reshape(-1).astype(np.int16, copy=False)
        if self.max_samples is not None:  # drop the encoder's padding past the declared end
            samples = samples[:max(0, self.max_samples - self.samples)]
        self.samples += len(samples)
        for start, pcm in self.chunker.push(samples):
            yield self._token(start, pcm)

    def _token(self, start: int, pcm: bytes) -> AudioToken:
        assert self.first_s is not None
        t_us = self.source.clock.t_us(self.first_s + Fraction(start, SAMPLE_RATE))
        n = len(pcm) // 2
        return AudioToken(stream_id=self.stream_id, seq=start // self.chunker.size, t_us=t_us,
                          encoding="pcm_s16le", sample_rate=SAMPLE_RATE, channels=1,
                          duration_us=max(1, round(n * 1_000_000 / SAMPLE_RATE)), data=pcm)

    def _declared_samples(self, first_s: Fraction) -> int | None:
        """Samples up to the declared end of the stream or ``max_seconds``, if either is known."""
        ends: list[Fraction] = []
        stream = self.source._audio
        if stream is not None and stream.duration and stream.time_base is not None:
            ends.append((Fraction(stream.start_time or 0) + stream.duration)
                        * Fraction(stream.time_base))
        if self.source.options.max_seconds is not None:
            ends.append(self.source.origin_s + Fraction(self.source.options.max_seconds))
        if not ends:
            return None
        samples: int = round((min(ends) - first_s) * SAMPLE_RATE)
        return max(0, samples)


def _time(frame: Any, stream: Any) -> Fraction:
    if frame.pts is None:
        raise MediaError(f"a {stream.type} frame has no timestamp (PTS)")
    base = Fraction(frame.time_base or stream.time_base)
    return Fraction(frame.pts) * base


def _frame_s(stream: Any) -> float:
    rate = stream.average_rate if stream is not None else None
    return float(1 / rate) if rate else 0.0


def _size(width: int, height: int, options: MediaOptions) -> tuple[int, int]:
    w, h = options.width, options.height
    if w and h:
        return w, h
    if w:
        return w, max(2, round(height * w / width / 2) * 2)
    if h:
        return max(2, round(width * h / height / 2) * 2), h
    return width, height


def _reason(exc: BaseException) -> str:
    strerror = getattr(exc, "strerror", None)
    return str(strerror) if strerror else str(exc)
