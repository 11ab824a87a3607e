"""How far evicted streams' windows went, kept in a few arrays (part of the ``align`` stage).

Pure. A stream evicted from the aligner's table leaves a mark (:class:`Closed`): the end
of its last window and its last frame-window key, so a straggler goes late and no window
key is used twice. A flood of new stream ids leaves one mark per id. Kept as Python
objects (a str key, a mark and two ints each), 50,000 marks are allocated among the
flood's short-lived objects and pin nearly every pool of CPython's allocator: the process
stayed at 230 MB after evicting every stream, against 84 MB without marks (from 59 MB).
Here only the newest marks are objects; the rest live in numpy arrays, keyed by a 64-bit
hash of the stream id and kept in the order they were made, so the oldest is dropped
first. Two ids of one hash (about one chance in 10^9 at 100,000 marks) would share a mark.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: ``anchor_seq`` None in the arrays (keys are seqs, never negative).
_NO_ANCHOR = -1


@dataclass(frozen=True, slots=True)
class Closed:
    """How far a stream's windows were emitted: the last end, the last frame-window key."""

    end_us: int
    anchor_seq: int | None

    def merge(self, end_us: int, anchor_seq: int | None) -> Closed:
        """The later of this and another mark."""
        seqs = [s for s in (self.anchor_seq, anchor_seq) if s is not None]
        return Closed(max(self.end_us, end_us), max(seqs) if seqs else None)


def _ints(values: list[int]) -> npt.NDArray[np.int64]:
    return np.array(values, dtype=np.int64)


class EvictedMarks:
    """At most ``capacity`` marks by stream id, the oldest forgotten first.

    Args:
        capacity: Marks kept at most.
        batch: Marks kept as objects before they move into the arrays together.
    """

    def __init__(self, capacity: int, batch: int = 4096) -> None:
        self.capacity = capacity
        self.batch = max(1, min(batch, capacity))
        self._recent: OrderedDict[str, Closed] = OrderedDict()
        # Oldest first; ``_alive`` is False where a mark was taken or dropped.
        self._hash = _ints([])
        self._end = _ints([])
        self._anchor = _ints([])
        self._alive = np.zeros(0, dtype=bool)
        self._count = 0  # marks alive in the arrays
        self._head = 0  # no mark alive before this index
        # For lookups: the hashes sorted, and where each one is in the arrays.
        self._sorted = _ints([])
        self._where = np.zeros(0, dtype=np.intp)

    def __len__(self) -> int:
        return self._count + len(self._recent)

    def get(self, stream_id: str) -> Closed | None:
        """The mark of a stream, if remembered."""
        closed = self._recent.get(stream_id)
        if closed is not None:
            return closed
        i = self._find(stream_id)
        return None if i < 0 else self._mark(i)

    def pop(self, stream_id: str) -> Closed | None:
        """Remove and return the mark of a stream, if remembered."""
        closed = self._recent.pop(stream_id, None)
        if closed is not None:
            return closed  # (never also in the arrays: put takes it out of them)
        i = self._find(stream_id)
        if i < 0:
            return None
        self._drop(i)
        return self._mark(i)

    def put(self, stream_id: str, closed: Closed) -> None:
        """Remember (or replace) a stream's mark as the newest one."""
        i = self._find(stream_id)
        if i >= 0:
            self._drop(i)
        self._recent[stream_id] = closed
        self._recent.move_to_end(stream_id)
        while len(self) > self.capacity:
            self._drop_oldest()
        if len(self._recent) >= self.batch:
            self._merge()

    def compact(self) -> None:
        """Move every mark into the arrays (the objects of the newest ones are freed)."""
        if self._recent:
            self._merge()

    # -- arrays ------------------------------------------------------------------------

    def _find(self, stream_id: str) -> int:
        if not self._count:
            return -1
        h = hash(stream_id)
        j = int(np.searchsorted(self._sorted, h))
        if j == len(self._sorted) or self._sorted[j] != h:
            return -1
        i = int(self._where[j])
        return i if self._alive[i] else -1

    def _mark(self, i: int) -> Closed:
        anchor = int(self._anchor[i])
        return Closed(int(self._end[i]), None if anchor == _NO_ANCHOR else anchor)

    def _drop(self, i: int) -> None:
        self._alive[i] = False
        self._count -= 1

    def _drop_oldest(self) -> None:
        if not self._count:
            self._recent.popitem(last=False)
            return
        alive = self._alive
        while not alive[self._head]:
            self._head += 1
        self._drop(self._head)

    def _merge(self) -> None:
        """Move the marks kept as objects into the arrays (and compact those)."""
        keep = self._alive[self._head:]
        recent = self._recent
        self._hash = np.concatenate(
            [self._hash[self._head:][keep], _ints([hash(k) for k in recent])])
        self._end = np.concatenate(
            [self._end[self._head:][keep], _ints([c.end_us for c in recent.values()])])
        self._anchor = np.concatenate([self._anchor[self._head:][keep], _ints(
            [_NO_ANCHOR if c.anchor_seq is None else c.anchor_seq for c in recent.values()])])
        self._alive = np.ones(len(self._hash), dtype=bool)
        self._count, self._head = len(self._hash), 0
        self._where = np.argsort(self._hash, kind="stable")
        self._sorted = self._hash[self._where]
        self._recent = OrderedDict()  # a new one: clear() would keep the grown table
