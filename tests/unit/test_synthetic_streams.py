"""Synthetic streams: the capture grid that continues seq across runs, frame sizes, encodings."""

from __future__ import annotations

import pytest

from lockstep.config.settings import AlignSettings
from lockstep.errors import ConfigError
from lockstep.producer.synthetic import (
    SyntheticConfig,
    SyntheticStream,
    synthetic_config,
    synthetic_ids,
)
from lockstep.streams.align.aligner import Aligner
from lockstep.topics.codec import decode, encode
from lockstep.topics.payloads import check_encoded, decode_encoded, pixels
from lockstep.topics.schemas import Modality, Token, VideoToken

pytestmark = pytest.mark.unit

T0 = 1_780_000_000_123_457  # off every grid
PERIOD_US = {Modality.VIDEO: 1e6 / 30, Modality.AUDIO: 20_000.0, Modality.OCR: 500_000.0,
             Modality.SENSOR: 20_000.0}


def _run(start_us: int, seconds: float, epoch_us: int | None = 0
         ) -> dict[Modality, list[Token]]:
    stream = SyntheticStream("cam", start_us, SyntheticConfig(), epoch_us)
    by: dict[Modality, list[Token]] = {m: [] for m in Modality}
    for token in stream.due(start_us + round(seconds * 1e6)):
        by[token.modality].append(token)
    return by


def test_a_rerun_under_the_same_id_continues_every_seq_where_the_clock_says() -> None:
    first = _run(T0, 1.0)
    again = _run(T0 + 7_000_000, 1.0)  # the same id published again 7 s later
    for m in Modality:
        assert first[m] and again[m], m
        assert again[m][0].seq > first[m][-1].seq, m
        gap = again[m][0].seq - first[m][-1].seq
        assert gap == pytest.approx(6e6 / PERIOD_US[m], abs=2), m  # the captures between
        for token in first[m] + again[m]:
            assert token.seq == round(token.t_us / PERIOD_US[m]), (m, token.seq, token.t_us)
            assert token.t_us >= T0 - 1
        seqs = [t.seq for t in first[m] + again[m]]
        assert seqs == sorted(set(seqs))


def test_without_an_epoch_seq_starts_at_0_at_the_stream_start() -> None:
    by = _run(T0, 0.1, epoch_us=None)
    assert [t.seq for t in by[Modality.VIDEO]] == [0, 1, 2, 3]
    assert by[Modality.VIDEO][0].t_us == T0 and by[Modality.AUDIO][0].seq == 0


@pytest.mark.parametrize("fmt", ["gray8", "rgb24", "jpeg", "png"])
def test_frames_have_the_configured_size_and_encoding(fmt: str) -> None:
    config = SyntheticConfig(width=160, height=90, video_format=fmt)  # type: ignore[arg-type]
    frames = [t for t in SyntheticStream("cam", T0, config).due(T0 + 100_000)
              if isinstance(t, VideoToken)]
    assert len(frames) == 4
    for frame in frames:
        assert (frame.format, frame.width, frame.height) == (fmt, 160, 90)
        assert decode(encode(frame)) == frame
        if fmt in ("gray8", "rgb24"):
            image = pixels(frame)
            assert image is not None and image.shape[:2] == (90, 160)
            assert image.max() == 255 and image.min() < 100  # the square on the gradient
        else:
            assert check_encoded(frame) is None and decode_encoded(frame) is None
    assert len({f.data for f in frames}) == len(frames)  # the square moves


@pytest.mark.parametrize(("width", "height"), [(2, 40), (40, 2), (2, 2), (3, 17)])
def test_frames_of_any_allowed_size_render(width: int, height: int) -> None:
    config = SyntheticConfig(width=width, height=height)
    frames = [t for t in SyntheticStream("cam", T0, config).due(T0 + 1_000_000)
              if isinstance(t, VideoToken)]
    assert frames and all(len(f.data) == width * height for f in frames)


def test_stream_ids_are_given_numbered_or_from_the_prefix() -> None:
    assert synthetic_ids([], 2, "p-") == ["p-cam0", "p-cam1"]
    assert synthetic_ids(["cab"], 3, "p-") == ["cab-0", "cab-1", "cab-2"]
    assert synthetic_ids(["a", "b"], 1, "p-") == ["a", "b"]
    with pytest.raises(ConfigError, match="2 stream ids for 3 streams"):
        synthetic_ids(["a", "b"], 3, "p-")
    with pytest.raises(ConfigError, match="must differ"):
        synthetic_ids(["a", "a"], 2, "p-")


@pytest.mark.parametrize("bad", ["cab 1", "", "x" * 129, "cam#1", "kamera-ü"])
def test_a_stream_id_the_wire_refuses_is_a_config_error_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError, match="is not valid: use 1-128 ASCII") as info:
        synthetic_ids([bad], 1, "p-")
    assert repr(bad) in str(info.value)
    with pytest.raises(ConfigError, match="is not valid"):
        synthetic_ids([], 1, "my prefix ")


def _config(**options: object) -> SyntheticConfig:
    values: dict[str, object] = dict(fps=None, width=None, height=None, video_format="gray8",
                                     jpeg_quality=80, chunk_ms=20.0, video=True, audio=True,
                                     max_record_bytes=8 * 1024 * 1024)
    return synthetic_config(**{**values, **options})  # type: ignore[arg-type]


def test_the_options_set_the_frame_size_rate_encoding_and_modalities() -> None:
    config = _config(width=640, fps=15.0, video_format="jpeg", chunk_ms=40.0, audio=False)
    assert (config.width, config.height, config.fps) == (640, 480, 15.0)  # 4:3 kept
    assert (config.video_format, config.audio_chunk_ms) == ("jpeg", 40.0)
    assert config.withheld == frozenset({Modality.AUDIO})
    assert (_config(height=120).width, _config().width, _config().height) == (160, 64, 48)


def test_a_raw_frame_larger_than_a_record_is_refused_with_the_way_out() -> None:
    with pytest.raises(ConfigError, match=r"3840x2160 rgb24 frame is 24,883,200 bytes.*"
                                          r"--format jpeg"):
        _config(width=3840, height=2160, video_format="rgb24")
    assert _config(width=3840, height=2160, video_format="jpeg").width == 3840
    assert _config(width=3840, height=2160, video_format="rgb24", video=False).width == 3840


@pytest.mark.parametrize(("whole", "offset_ms"), [(True, 0.0), (False, 20.0)])
def test_audio_sent_once_captured_whole_leaves_no_clock_offset_to_estimate(
        whole: bool, offset_ms: float) -> None:
    stream = SyntheticStream("cam", T0, SyntheticConfig())
    aligner = Aligner(AlignSettings(), "cabin")
    for now in range(T0, T0 + 3_000_000, 1_000):  # polled every ms, delivered 1 ms later
        for token in stream.due(now, whole=whole):
            assert not whole or token.modality is not Modality.AUDIO or (
                token.t_us + token.duration_us <= now)  # type: ignore[attr-defined]
            aligner.add(token, now + 1_000)
    # The estimator measures audio's lag from a chunk's end: a chunk sent when it starts
    # looks like an audio clock a chunk ahead of video, and its pairing is moved by that.
    estimated = aligner.streams()["cam"].offsets[Modality.AUDIO] / 1000
    assert estimated == pytest.approx(offset_ms, abs=1.5)


def test_tokens_per_second_counts_what_a_stream_publishes() -> None:
    assert SyntheticConfig().tokens_per_second == 132.0  # 30 frames, 50 chunks, 2 OCR, 50 sensor
    start = 1_780_000_000_000_000  # on every grid: one second holds exactly a second's tokens
    stream = SyntheticStream("s", start, SyntheticConfig(withheld=frozenset({Modality.VIDEO})))
    assert len(stream.due(start + 999_999)) == stream.config.tokens_per_second == 102.0


def test_the_demo_warns_before_it_fills_the_embedded_broker_past_its_slowdown() -> None:
    from lockstep.cli.demo import embedded_broker_note
    from lockstep.kafka.embedded import SLOW_AFTER_RECORDS

    assert embedded_broker_note(30, 10) is None  # 39,600 tokens
    note = embedded_broker_note(8, 600)  # 633,600 tokens
    assert note is not None and "633,600 tokens" in note and f"{SLOW_AFTER_RECORDS:,}" in note
