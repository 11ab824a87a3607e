"""After a flood of streams is evicted, the heap is trimmed, once per interval."""

from __future__ import annotations

import pytest

from lockstep.agents.memory import MemoryTrimmer

pytestmark = pytest.mark.unit


def test_a_trim_follows_a_drop_of_many_streams_and_waits_its_interval() -> None:
    trimmer = MemoryTrimmer(threshold=1000, min_interval_s=10.0)
    assert not trimmer.observe(50_000, now_s=100.0)
    assert not trimmer.observe(49_500, now_s=101.0)  # a few hundred gone: not worth it
    assert trimmer.observe(200, now_s=102.0)
    assert trimmer.trims == 1
    assert not trimmer.observe(5_000, now_s=103.0)
    assert not trimmer.observe(10, now_s=104.0)  # too soon after the last trim
    assert trimmer.observe(10, now_s=113.0)


def test_the_tail_of_an_eviction_wave_is_trimmed_once_the_count_stops_falling() -> None:
    compacted: list[float] = []
    trimmer = MemoryTrimmer(threshold=1000, min_interval_s=2.0,
                            compact=lambda: compacted.append(0.0), follow_ups=0)
    trimmer.observe(10_000, now_s=0.0)
    assert trimmer.observe(8_000, now_s=1.0)  # the wave: trimmed at once
    assert not trimmer.observe(7_500, now_s=3.0)  # 500 more, still falling
    assert not trimmer.observe(7_400, now_s=4.0)
    assert trimmer.observe(7_400, now_s=6.0)  # stopped falling: the tail is trimmed too
    assert len(compacted) == 2  # compacted before each trim
    assert not trimmer.observe(7_350, now_s=7.0)
    assert not trimmer.observe(7_350, now_s=20.0)  # 50 streams: churn, not worth a trim
    assert trimmer.trims == 2


def test_an_eviction_trim_is_followed_by_a_few_more_an_interval_apart() -> None:
    trimmer = MemoryTrimmer(threshold=1000, min_interval_s=2.0, follow_ups=2)
    trimmer.observe(50_000, now_s=0.0)
    assert trimmer.observe(10, now_s=1.0)  # the flood evicted
    assert not trimmer.observe(10, now_s=2.0)  # within the interval
    assert trimmer.observe(10, now_s=3.0)  # what the burst left in flight, freed since
    assert trimmer.observe(10, now_s=5.0)
    assert not trimmer.observe(10, now_s=7.0)  # follow-ups spent; nothing else went
    assert not trimmer.observe(12, now_s=60.0)
    assert trimmer.trims == 3
