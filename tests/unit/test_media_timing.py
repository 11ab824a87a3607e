"""PTS → capture time, anchors, frame sampling, audio chunking and pacing."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from lockstep.errors import MediaError
from lockstep.media.timing import AudioChunker, CaptureClock, FrameSampler, Pacer, parse_anchor

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000_000  # 2027-01-15T08:00:00Z


def test_capture_clock_maps_media_time_from_the_origin_to_the_anchor() -> None:
    clock = CaptureClock(T0, origin_s=Fraction(3, 2))
    assert clock.t_us(Fraction(3, 2)) == T0
    assert clock.t_us(Fraction(3, 2) + Fraction(1, 30)) == T0 + 33_333
    assert clock.media_s(T0 + 500_000) == Fraction(2)


@pytest.mark.parametrize(("value", "expected"), [
    ("2027-01-15T08:00:00Z", T0),
    ("2027-01-15T09:00:00+01:00", T0),
    ("2027-01-15T08:00:00.000250", T0 + 250),
    (str(T0), T0),
])
def test_anchor_accepts_iso_instants_and_microseconds(value: str, expected: int) -> None:
    assert parse_anchor(value, now_us=1, creation_time=None) == expected


def test_anchor_wall_is_now_and_file_is_the_creation_time_tag() -> None:
    assert parse_anchor("wall", now_us=T0 + 7, creation_time=None) == T0 + 7
    assert parse_anchor("file", now_us=1, creation_time="2027-01-15T08:00:00.000000Z") == T0


def test_anchor_file_without_a_tag_says_what_to_do() -> None:
    with pytest.raises(MediaError, match=r"no creation_time tag.*--anchor wall"):
        parse_anchor("file", now_us=T0, creation_time=None)


@pytest.mark.parametrize("value", ["yesterday", "1999-12-31T23:59:59Z", "5"])
def test_anchor_rejects_unparseable_or_out_of_range_values(value: str) -> None:
    with pytest.raises(MediaError):
        parse_anchor(value, now_us=T0, creation_time=None)


def test_sampler_keeps_every_frame_without_a_target_rate() -> None:
    sampler = FrameSampler(None)
    assert [sampler.take(i / 30) for i in range(4)] == [0, 1, 2, 3]


def test_sampler_takes_one_frame_per_slot_and_numbers_it_by_slot() -> None:
    sampler = FrameSampler(10.0)
    taken = [(i, sampler.take(i / 30)) for i in range(12)]
    assert [(i, seq) for i, seq in taken if seq is not None] == [(0, 0), (3, 1), (6, 2), (9, 3)]


def test_sampler_leaves_a_seq_gap_where_the_source_dropped_frames() -> None:
    sampler = FrameSampler(30.0)
    assert [sampler.take(t / 30) for t in (0, 1, 4, 5)] == [0, 1, 4, 5]


def test_chunker_cuts_whole_chunks_across_pushes_and_flushes_the_rest() -> None:
    chunker = AudioChunker(320)
    first = chunker.push(np.arange(500, dtype=np.int16))
    second = chunker.push(np.arange(500, 1000, dtype=np.int16))
    assert [start for start, _ in first] == [0]
    assert [start for start, _ in second] == [320, 640]
    tail = chunker.flush()
    assert [(start, len(pcm)) for start, pcm in tail] == [(960, 80)]
    joined = b"".join(pcm for _, pcm in first + second + tail)
    assert np.array_equal(np.frombuffer(joined, np.int16), np.arange(1000, dtype=np.int16))
    assert chunker.flush() == []


def test_pacer_sleeps_until_each_capture_time_is_due() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = Pacer(True, clock=lambda: now[0], sleep=sleep)
    pacer.wait(T0)
    now[0] += 0.010
    pacer.wait(T0 + 40_000)
    pacer.wait(T0 + 30_000)  # already due: no sleep
    assert slept == [pytest.approx(0.030)]


def test_pacer_does_not_sleep_when_publishing_as_fast_as_possible() -> None:
    pacer = Pacer(False, sleep=lambda s: pytest.fail("slept"))
    assert pacer.wait(T0) == 0.0 and pacer.wait(T0 + 10_000_000) == 0.0
