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
