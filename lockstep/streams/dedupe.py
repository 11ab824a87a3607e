"""Second copies of a window or request, dropped where they would be answered twice.

A key (``stream_id``, ``window_seq``) is written once by align (a takeover resumes after
the windows its predecessor wrote). A copy arrives all the same when a producer retries a
produce whose answer was lost: a broker of a cluster dies after the write reached the
replicas, and the retry writes the record again. Route would route the copy, and a worker
answer it again; the second response differs from the first (its times), a key with two
responses. :class:`RecentKeys` remembers the keys seen lately, so the stage acknowledges a
copy without acting on it.

Pure and bounded: two generations of at most ``capacity`` keys each (the older dropped
when the newer fills), kept as 64-bit hashes, not key objects. A retry's copy follows its
original within seconds; a copy later than two generations is not recognised.
"""

from __future__ import annotations

#: Keys per generation: two generations span 32k to 64k windows, ~35 s at 1,000 a second.
CAPACITY = 32_768


class RecentKeys:
    """The window keys a stage has acted on lately."""

    __slots__ = ("_before", "_now", "capacity")

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._now: set[int] = set()
        self._before: set[int] = set()

    def __len__(self) -> int:
        return len(self._now) + len(self._before)

    def seen(self, stream_id: str, window_seq: int) -> bool:
        """Whether this key came lately; remembers it otherwise."""
        key = hash((stream_id, window_seq))
        if key in self._now or key in self._before:
            return True
        self._now.add(key)
        if len(self._now) >= self.capacity:
            self._before, self._now = self._now, set()
        return False

    def forget(self, stream_id: str, window_seq: int) -> None:
        """Forget a key: it was given back unanswered, and may come again to be acted on."""
        key = hash((stream_id, window_seq))
        self._now.discard(key)
        self._before.discard(key)
