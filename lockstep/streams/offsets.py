"""Which consumed offsets may be committed (the delivery guarantee of every role).

Pure: no Kafka, no clock. A role reads records in offset order per partition and
acknowledges each one when everything produced from it has been acknowledged by the
broker, in whatever order that happens. Only the contiguous acknowledged prefix of a
partition may be committed: with 3701 unacknowledged and 3702 acknowledged, the commit
stays at 3701, so a crash replays 3701 (and 3702, which the sinks de-duplicate). Faust's
own tracking commits past such a gap (faust-streaming issue #606), which lost tokens after
a broker restart; this is what Lockstep uses instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


@dataclass
class _Partition:
    #: Offsets read and not yet committable, in read order.
    unsettled: deque[int] = field(default_factory=deque)
    #: Offsets among ``unsettled`` already acknowledged.
    acked: set[int] = field(default_factory=set)
    #: The offset to commit: one past the last offset of the acknowledged prefix.
    frontier: int | None = None
    #: The frontier last handed out by :meth:`OffsetLedger.committable`.
    committed: int | None = None


class OffsetLedger(Generic[P]):
    """Tracks read and acknowledged offsets per partition; yields what may be committed."""

    def __init__(self) -> None:
        self._parts: dict[P, _Partition] = {}

    def start(self, tp: P, position: int, *, committed: bool = True) -> None:
        """Begin tracking ``tp`` at ``position`` (the next offset to read).

        Args:
            tp: The partition.
            position: Where reading starts (the group's committed offset, or where the
                reset policy put a new group).
            committed: Whether ``position`` is already committed for the group. If not,
                :meth:`committable` hands it out first, so a group that never
                acknowledged anything still resumes here after a crash.
        """
        self._parts[tp] = _Partition(frontier=position, committed=position if committed
                                     else None)

    def read(self, tp: P, offset: int) -> None:
        """Note a record read from ``tp`` (offsets of a partition arrive in order)."""
        part = self._parts.get(tp)
        if part is None:
            part = self._parts[tp] = _Partition()
        if part.frontier is None:
            part.frontier = offset
        part.unsettled.append(offset)

    def ack(self, tp: P, offset: int) -> None:
        """Acknowledge one record; advance the frontier over the acknowledged prefix.

        Acknowledgements of partitions no longer tracked (revoked) are ignored.
        """
        part = self._parts.get(tp)
        if part is None:
            return
        unsettled = part.unsettled
        if unsettled and unsettled[0] == offset:
            unsettled.popleft()
            last = offset
            acked = part.acked
            while unsettled and unsettled[0] in acked:
                last = unsettled.popleft()
                acked.discard(last)
            part.frontier = last + 1
        else:
            part.acked.add(offset)

    def committable(self) -> dict[P, int]:
        """Offsets to commit now: each partition whose frontier moved since the last call."""
        out: dict[P, int] = {}
        for tp, part in self._parts.items():
            if part.frontier is not None and part.frontier != part.committed:
                out[tp] = part.committed = part.frontier
        return out

    def uncommit(self, offsets: dict[P, int]) -> None:
        """Hand ``offsets`` out again on the next :meth:`committable` (their commit failed)."""
        for tp in offsets:
            part = self._parts.get(tp)
            if part is not None:
                part.committed = None

    def revoke(self, tps: Iterable[P]) -> None:
        """Stop tracking partitions (another member owns them now)."""
        for tp in tps:
            self._parts.pop(tp, None)

    def unsettled(self, tp: P | None = None) -> int:
        """Records read and not yet committable, in ``tp`` or in all partitions."""
        if tp is not None:
            part = self._parts.get(tp)
            return len(part.unsettled) if part is not None else 0
        return sum(len(p.unsettled) for p in self._parts.values())

    def frontier(self, tp: P) -> int | None:
        """The offset a commit of ``tp`` would write now (None: nothing read or started)."""
        part = self._parts.get(tp)
        return part.frontier if part is not None else None

    def partitions(self) -> list[P]:
        """The partitions tracked."""
        return list(self._parts)
