"""What a previous owner settled is not settled again on replay."""

from __future__ import annotations

import pytest

from lockstep.streams.replay import ReplayGuard, Resume
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import Modality

pytestmark = pytest.mark.unit
HOP_BASE = 1 << 62
TP = ("media.video", 2)


def test_only_records_below_the_takeover_end_are_guarded() -> None:
    guard: ReplayGuard[tuple[str, int]] = ReplayGuard(until={TP: 100})
    assert guard.guards(TP, 99)
    assert not guard.guards(TP, 100)
    assert not guard.guards(("media.video", 3), 5)


def test_the_guard_forgets_everything_once_every_partition_is_past_its_end() -> None:
    other = ("media.audio", 2)
    guard: ReplayGuard[tuple[str, int]] = ReplayGuard(until={TP: 10, other: 20})
    guard.keys.add(("s", 1))
    guard.passed(TP, 10)
    assert guard.keys, "another partition still replays"
    guard.passed(other, 20)
    assert not guard.until and not guard.keys


def test_a_window_read_back_settles_its_members_and_sets_where_its_stream_resumes() -> None:
    guard: ReplayGuard[tuple[str, int]] = ReplayGuard()
    guard.add_window("s", 41, 1_000, {"video": [41], "audio": [80, 81]}, HOP_BASE)
    guard.add_window("s", 40, 900, {"video": [40]}, HOP_BASE)
    guard.add_window("s", HOP_BASE + 7, 1_200, {"sensor": [5]}, HOP_BASE)
    assert TokenKey("s", Modality.AUDIO, 81) in guard.tokens
    assert TokenKey("s", Modality.SENSOR, 5) in guard.tokens
    # the latest end, and the highest frame-anchored key (a hop key is not a frame's)
    assert guard.resume["s"] == Resume(closed_end_us=1_200, last_window_seq=41)


def test_a_stream_with_only_hop_windows_resumes_without_a_frame_key() -> None:
    guard: ReplayGuard[tuple[str, int]] = ReplayGuard()
    guard.add_window("h", HOP_BASE + 3, 500, {"audio": [1]}, HOP_BASE)
    assert guard.resume["h"] == Resume(closed_end_us=500, last_window_seq=None)


def test_dropping_a_revoked_partition_stops_guarding_it() -> None:
    guard: ReplayGuard[tuple[str, int]] = ReplayGuard(until={TP: 10})
    guard.drop([TP])
    assert not guard.guards(TP, 1)
