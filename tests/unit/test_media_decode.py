"""Decoding generated media with PyAV into tokens: counts, timestamps, formats, bad media."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from lockstep.errors import ConfigError, MediaError
from lockstep.media.patternclip import GroundTruth, SynthSpec, write_media
from lockstep.media.source import MediaOptions, MediaSource
from lockstep.topics.payloads import pcm
from lockstep.topics.schemas import AudioToken, Token, VideoToken

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000_000  # the generator's default creation_time


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> GroundTruth:
    return write_media(tmp_path_factory.mktemp("media"), SynthSpec(seconds=1.0))


def _tokens(url: str, **options: object) -> list[Token]:
    source = MediaSource(url, MediaOptions(**{"anchor": "file", **options}))  # type: ignore[arg-type]
    try:
        return list(source.tokens("cam-1"))
    finally:
        source.close()


def _video(tokens: list[Token]) -> list[VideoToken]:
    return [t for t in tokens if isinstance(t, VideoToken)]


def _audio(tokens: list[Token]) -> list[AudioToken]:
    return [t for t in tokens if isinstance(t, AudioToken)]


def test_every_frame_and_chunk_arrives_at_its_pts(truth: GroundTruth) -> None:
    tokens = _tokens(str(truth.media))
    frames, chunks = _video(tokens), _audio(tokens)
    assert len(frames) == len(truth.frame_times_s) == 30
    assert len(chunks) == truth.audio_chunks() == 50
    period_us = 1_000_000 / truth.spec.fps
    for frame, pts in zip(frames, truth.frame_times_s, strict=True):
        assert abs(frame.t_us - (T0 + float(pts) * 1e6)) < period_us
    assert [f.seq for f in frames] == list(range(30))
    assert [c.seq for c in chunks] == list(range(50))
    assert [c.t_us - T0 for c in chunks] == [20_000 * i for i in range(50)]
    assert all(c.sample_rate == 16_000 and c.channels == 1 and c.duration_us == 20_000
               for c in chunks)


def test_audio_keeps_the_tone_that_was_written(truth: GroundTruth) -> None:
    samples = np.concatenate([pcm(c)[:, 0] for c in _audio(_tokens(str(truth.media)))])  # type: ignore[index]
    assert len(samples) == truth.audio_samples
    spectrum = np.abs(np.fft.rfft(samples[2000:14000]))
    peak_hz = np.argmax(spectrum) * 16_000 / 12_000
    assert abs(peak_hz - truth.spec.tone_hz) < 5


def test_frames_are_jpeg_that_decode_to_the_requested_size(truth: GroundTruth) -> None:
    frames = _video(_tokens(str(truth.media), width=160, fps=10, jpeg_quality=60))
    assert len(frames) == 10 and [f.seq for f in frames] == list(range(10))
    assert [f.t_us - T0 for f in frames] == [100_000 * i for i in range(10)]
    first = frames[0]
    assert (first.format, first.width, first.height) == ("jpeg", 160, 120)
    with av.open(io.BytesIO(first.data), "r") as image:
        decoded = next(image.decode(video=0))
    assert (decoded.width, decoded.height) == (160, 120)
    assert first.quality is not None and 0.3 < first.quality <= 1.0


@pytest.mark.parametrize(("fmt", "channels"), [("rgb24", 3), ("gray8", 1)])
def test_raw_frames_carry_exactly_their_pixels(truth: GroundTruth, fmt: str,
                                               channels: int) -> None:
    frame = _video(_tokens(str(truth.media), video_format=fmt, width=64, height=48,
                           audio=False))[0]
    assert len(frame.data) == 64 * 48 * channels


def test_forty_ms_chunks_and_audio_only(truth: GroundTruth) -> None:
    tokens = _tokens(str(truth.media), video=False, audio_chunk_ms=40.0)
    assert Counter(t.modality.value for t in tokens) == {"audio": 25}
    assert all(isinstance(t, AudioToken) and t.duration_us == 40_000 for t in tokens)


def test_max_seconds_stops_early_without_calling_it_truncated(truth: GroundTruth) -> None:
    tokens = _tokens(str(truth.media), max_seconds=0.5)
    assert len(_video(tokens)) == 15 and len(_audio(tokens)) == 25


def test_a_wall_anchor_puts_the_first_frame_at_now(truth: GroundTruth) -> None:
    source = MediaSource(str(truth.media), MediaOptions(), now_us=T0 + 123)
    first = next(source.tokens("s"))
    source.close()
    assert first.t_us == T0 + 123


@pytest.mark.parametrize("chunk_ms", [10.0, 50.0])
def test_chunks_outside_20_to_40_ms_are_refused(chunk_ms: float) -> None:
    with pytest.raises(ConfigError, match="20-40 ms"):
        MediaOptions(audio_chunk_ms=chunk_ms)


def test_a_truncated_file_stops_with_a_clear_error(truth: GroundTruth, tmp_path: Path) -> None:
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(truth.media.read_bytes()[:len(truth.media.read_bytes()) // 2])
    source = MediaSource(str(cut), MediaOptions(anchor="file"))
    seen: list[Token] = []
    with pytest.raises(MediaError, match=r"cut\.mp4: (decoding failed|media ends)"):
        seen.extend(source.tokens("s"))
    assert 0 < len(seen) < 80  # what was decoded before is known to the caller


def test_a_file_truncated_inside_its_index_is_refused_before_decoding(truth: GroundTruth,
                                                            tmp_path: Path) -> None:
    stub = tmp_path / "stub.mp4"
    stub.write_bytes(truth.media.read_bytes()[:200])
    with pytest.raises(MediaError, match=r"stub\.mp4.*(cannot open|no decodable)"):
        MediaSource(str(stub), MediaOptions())


def test_a_file_that_is_not_media_cannot_be_opened(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"this is not a video\n" * 50)
    with pytest.raises(MediaError, match=r"cannot open .*junk\.mp4: Invalid data"):
        MediaSource(str(junk), MediaOptions())


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="No such file"):
        MediaSource(str(tmp_path / "absent.mp4"), MediaOptions())


def test_a_file_without_audio_or_video_streams_names_what_it_has(tmp_path: Path) -> None:
    subs = tmp_path / "subs.srt"
    subs.write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    with pytest.raises(MediaError, match=r"no decodable video or audio stream .*subtitle"):
        MediaSource(str(subs), MediaOptions())


def test_audio_only_media_with_video_required_names_the_missing_stream(
        truth: GroundTruth, tmp_path: Path) -> None:
    wav = tmp_path / "tone.wav"
    with av.open(str(wav), "w") as out:
        stream = out.add_stream("pcm_s16le", rate=16_000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1600), np.int16), format="s16",
                                           layout="mono")
        frame.sample_rate = 16_000
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with pytest.raises(MediaError, match=r"no decodable video stream .*audio/pcm_s16le"):
        MediaSource(str(wav), MediaOptions(audio=False))
    tokens = _tokens(str(wav), anchor="wall")
    assert Counter(t.modality.value for t in tokens) == {"audio": 5}
