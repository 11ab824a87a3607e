"""The commit frontier: only the contiguous acknowledged prefix of a partition is committed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.streams.offsets import OffsetLedger

pytestmark = pytest.mark.unit
TP = ("media.video", 0)


def test_commit_stays_below_an_unacknowledged_offset_when_a_later_one_is_acked() -> None:
    # faust-streaming #606: with 3701 unacked and 3702 acked, Faust commits 3703.
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    ledger.start(TP, 3700)
    for offset in (3700, 3701, 3702):
        ledger.read(TP, offset)
    ledger.ack(TP, 3700)
    ledger.ack(TP, 3702)
    assert ledger.committable() == {TP: 3701}
    ledger.ack(TP, 3701)
    assert ledger.committable() == {TP: 3703}


def test_a_group_with_no_commit_yet_commits_its_start_before_anything_is_acked() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    ledger.start(TP, 120, committed=False)
    ledger.read(TP, 120)
    ledger.read(TP, 121)
    ledger.ack(TP, 121)
    # Not past 120: a crash now must replay 120.
    assert ledger.committable() == {TP: 120}
    assert ledger.committable() == {}


def test_a_partition_read_but_never_acknowledged_commits_only_its_first_offset() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    ledger.read(TP, 5)
    ledger.read(TP, 6)
    ledger.ack(TP, 6)
    assert ledger.committable() == {TP: 5}
    assert ledger.frontier(TP) == 5


def test_acks_of_a_revoked_partition_are_ignored() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    ledger.start(TP, 0)
    ledger.read(TP, 0)
    ledger.revoke([TP])
    ledger.ack(TP, 0)
    assert ledger.committable() == {}
    assert ledger.unsettled() == 0


def test_a_failed_commit_is_handed_out_again() -> None:
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    ledger.start(TP, 0)
    ledger.read(TP, 0)
    ledger.ack(TP, 0)
    offsets = ledger.committable()
    assert offsets == {TP: 1}
    ledger.uncommit(offsets)
    assert ledger.committable() == {TP: 1}


@given(st.data())
def test_committed_offset_never_passes_an_unacknowledged_record(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, 1000))
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=60))
    offsets = []
    offset = start
    for gap in gaps:  # compacted topics and transaction markers leave holes in offsets
        offsets.append(offset)
        offset += gap
    order = data.draw(st.permutations(offsets))
    acked_count = data.draw(st.integers(0, len(order)))
    ledger: OffsetLedger[tuple[str, int]] = OffsetLedger()
    ledger.start(TP, start)
    for o in offsets:
        ledger.read(TP, o)
    acked = set(order[:acked_count])
    highest = start
    for o in order[:acked_count]:
        ledger.ack(TP, o)
        highest = max(highest, ledger.committable().get(TP, highest))
        # Every offset below the commit is acknowledged.
        assert all(x in acked for x in offsets if x < highest)
    first = next((i for i, o in enumerate(offsets) if o not in acked), len(offsets))
    # One past the acknowledged prefix (a hole in the offsets is skipped on reading anyway).
    expected = offsets[first - 1] + 1 if first else start
    assert ledger.frontier(TP) == expected
    assert ledger.unsettled(TP) == len(offsets) - first

