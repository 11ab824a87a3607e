from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from lockstep.bench.faults import BENCH_MEDIA, ChaosFeed, Clock, FaultSpec, generate
from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, VideoToken

pytestmark = pytest.mark.unit

NONE = FaultSpec.none()
_TYPES = {Modality.VIDEO: VideoToken, Modality.AUDIO: AudioToken, Modality.OCR: OcrToken,
          Modality.SENSOR: SensorToken}


def _offsets_ms(feed: ChaosFeed, modality: Modality) -> np.ndarray:
    """Reported t_us - true capture time, per delivered token of a modality (ms)."""
    return np.array([(t.t_us - feed.truth[(t.stream_id, t.modality, t.seq)].true_us) / 1000
                     for _, t in feed.feed if t.modality is modality])


def _seqs(feed: ChaosFeed, stream: str, modality: Modality) -> list[int]:
    return [t.seq for _, t in feed.feed if t.stream_id == stream and t.modality is modality]


def test_same_seed_gives_the_same_feed_and_truth() -> None:
    first, again = generate(FaultSpec(), 2, 3, seed=11), generate(FaultSpec(), 2, 3, seed=11)
    assert first.truth == again.truth
    assert [(a, t.model_dump()) for a, t in first.feed] == \
        [(a, t.model_dump()) for a, t in again.feed]


def test_another_seed_gives_another_feed() -> None:
    one, other = generate(FaultSpec(), 1, 3, seed=1), generate(FaultSpec(), 1, 3, seed=2)
    assert [t.t_us for _, t in one.feed] != [t.t_us for _, t in other.feed]


def test_a_streams_faults_do_not_depend_on_how_many_streams_there_are() -> None:
    alone, with_others = generate(FaultSpec(), 1, 3, seed=5), generate(FaultSpec(), 3, 3, seed=5)
    assert {k: c for k, c in with_others.truth.items() if k[0] == "cam-0"} == alone.truth


def test_video_drop_rate_is_within_tolerance() -> None:
    truth = generate(replace(NONE, drop_rate=0.15), 4, 60, seed=3).truth
    video = [c for k, c in truth.items() if k[1] is Modality.VIDEO]
    dropped = sum(not c.delivered for c in video) / len(video)
    assert len(video) == 4 * 60 * 30
    assert dropped == pytest.approx(0.15, abs=0.015)


def test_bursty_drops_keep_the_rate_and_come_in_runs() -> None:
    feed = generate(replace(NONE, drop_rate=0.2, drop_burst_frames=4.0), 4, 60, seed=3)
    runs: list[int] = []
    for stream in ("cam-0", "cam-1", "cam-2", "cam-3"):
        flags = [not feed.truth[(stream, Modality.VIDEO, seq)].delivered
                 for seq in range(60 * 30)]
        length = 0
        for dropped in [*flags, False]:
            if dropped:
                length += 1
            elif length:
                runs.append(length)
                length = 0
    assert sum(runs) / (4 * 60 * 30) == pytest.approx(0.2, abs=0.03)
    assert np.mean(runs) == pytest.approx(4.0, rel=0.15)


def test_timestamp_jitter_has_the_configured_sigma() -> None:
    feed = generate(replace(NONE, jitter_ms=8.0), 2, 20, seed=4)
    for modality in (Modality.VIDEO, Modality.AUDIO, Modality.SENSOR):
        offsets = _offsets_ms(feed, modality)
        assert abs(offsets.mean()) < 0.5
        assert offsets.std() == pytest.approx(8.0, rel=0.06)


def test_clock_offset_and_drift_shift_reported_times() -> None:
    spec = replace(NONE, audio_clock=Clock(offset_ms=25.0, drift_ppm=500.0),
                   sensor_clock=Clock(offset_ms=-10.0))
    feed = generate(spec, 1, 10, seed=4)
    audio = _offsets_ms(feed, Modality.AUDIO)
    assert audio[0] == pytest.approx(25.0, abs=0.02)  # the audio clock starts <= 20 ms late
    assert audio[-1] == pytest.approx(25.0 + 500e-6 * 10_000, abs=0.05)  # 5 ms in 10 s
    assert set(np.round(_offsets_ms(feed, Modality.SENSOR), 3)) == {-10.0}
    assert set(_offsets_ms(feed, Modality.VIDEO)) == {0.0}


def test_seq_counts_captures_and_leaves_gaps_where_frames_were_dropped() -> None:
    feed = generate(replace(NONE, drop_rate=0.25), 1, 5, seed=8)
    delivered = _seqs(feed, "cam-0", Modality.VIDEO)
    dropped = [k[2] for k, c in feed.truth.items() if k[1] is Modality.VIDEO and not c.delivered]
    assert dropped and sorted(delivered + dropped) == list(range(5 * 30))
    true_times = [feed.truth[("cam-0", Modality.VIDEO, s)].true_us for s in range(5 * 30)]
    assert true_times == sorted(true_times)  # the counter follows capture order
    assert np.diff(true_times).max() <= 33_334


def test_audio_gaps_drop_runs_of_chunks_of_at_least_120_ms() -> None:
    spec = replace(NONE, audio_gaps_per_s=0.5, audio_gap_ms=(120.0, 480.0))
    feed = generate(spec, 2, 30, seed=9)
    chunk_ms = BENCH_MEDIA.audio_chunk_ms
    for stream in ("cam-0", "cam-1"):
        lost = sorted(k[2] for k, c in feed.truth.items()
                      if k[0] == stream and k[1] is Modality.AUDIO and not c.delivered)
        runs = np.split(np.array(lost), np.where(np.diff(lost) > 1)[0] + 1)
        assert len(runs) >= 5
        assert min(len(r) for r in runs) * chunk_ms >= 120.0
        assert sorted(_seqs(feed, stream, Modality.AUDIO) + lost) == list(range(30 * 50))


def test_ground_truth_covers_every_token_in_the_feed() -> None:
    feed = generate(replace(FaultSpec(), duplicate_rate=0.05), 2, 3, seed=6)
    for _, token in feed.feed:
        capture = feed.truth[(token.stream_id, token.modality, token.seq)]
        assert capture.delivered
        assert (capture.duration_us > 0) == (token.modality is Modality.AUDIO)
    delivered = {k for k, c in feed.truth.items() if c.delivered}
    assert delivered == {(t.stream_id, t.modality, t.seq) for _, t in feed.feed}


def test_feed_is_in_arrival_order_after_capture_and_transport_floor() -> None:
    spec = replace(NONE, delay_min_ms=2.0, delay_tail_ms=3.0)
    feed = generate(spec, 2, 3, seed=6)
    arrivals = [a for a, _ in feed.feed]
    assert arrivals == sorted(arrivals)
    for arrival, token in feed.feed:
        capture = feed.truth[(token.stream_id, token.modality, token.seq)]
        assert arrival >= capture.true_us + capture.duration_us + 2_000


def test_without_reorder_each_stream_and_modality_arrives_in_capture_order() -> None:
    spec = replace(NONE, delay_min_ms=1.0, delay_tail_ms=30.0)
    feed = generate(spec, 2, 5, seed=6)
    for stream in ("cam-0", "cam-1"):
        for modality in Modality:
            seqs = _seqs(feed, stream, modality)
            assert seqs == sorted(seqs)


def test_reorder_lets_tokens_of_a_modality_overtake_each_other() -> None:
    spec = replace(NONE, delay_min_ms=1.0, delay_tail_ms=30.0, reorder=True)
    seqs = _seqs(generate(spec, 1, 5, seed=6), "cam-0", Modality.SENSOR)
    assert seqs != sorted(seqs) and sorted(seqs) == list(range(5 * 100))


def test_duplicates_are_redelivered_later_with_the_same_seq() -> None:
    spec = replace(NONE, duplicate_rate=0.1, delay_min_ms=1.0, delay_tail_ms=3.0)
    feed = generate(spec, 2, 10, seed=6)
    seen = Counter((t.stream_id, t.modality, t.seq) for _, t in feed.feed)
    twice = [k for k, n in seen.items() if n == 2]
    assert max(seen.values()) == 2
    assert len(twice) / len(seen) == pytest.approx(0.1, abs=0.02)
    first_arrival: dict[tuple[str, Modality, int], int] = {}
    for arrival, t in feed.feed:
        key = (t.stream_id, t.modality, t.seq)
        if key in first_arrival:
            assert arrival >= first_arrival[key]
        first_arrival.setdefault(key, arrival)


def test_every_token_is_a_valid_record_with_bench_media_shapes() -> None:
    feed = generate(FaultSpec(), 1, 2, seed=1)
    by_modality = Counter(t.modality for _, t in feed.feed)
    assert set(by_modality) == set(Modality)
    for _, token in feed.feed:
        again = _TYPES[token.modality].model_validate(token.model_dump())
        assert again == token and type(token.t_us) is int
        if isinstance(token, VideoToken):
            assert (token.width, token.height, token.format) == (16, 12, "gray8")
        if isinstance(token, AudioToken):
            assert token.duration_us == 20_000 and len(token.data) == 2 * 320
        if isinstance(token, SensorToken):
            assert token.name == "imu"


def test_fault_spec_rejects_impossible_values() -> None:
    with pytest.raises(ValueError, match="drop_rate"):
        FaultSpec(drop_rate=0.95)
    with pytest.raises(ValueError, match="audio_gap_ms"):
        FaultSpec(audio_gap_ms=(480.0, 120.0))
    with pytest.raises(ValueError, match="drop_burst_frames"):
        FaultSpec(drop_rate=0.2, drop_burst_frames=0.5)
