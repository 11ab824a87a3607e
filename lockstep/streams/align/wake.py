"""When the aligner must look at each stream again (part of ``align``).

Pure. :class:`WakeSchedule` holds a (wake time, stream) heap: a poll visits only the streams
whose time has come, not all of them (a flood leaves tens of thousands), and its head is
when the align role must wake next if no record comes first. A stream keeps at most one
live entry, the earliest (``Stream.queued_us``); entries whose time no longer matches it
are stale and skipped, and the heap is rebuilt once they are most of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from lockstep.streams.align.state import NEVER, Stream


class WakeSchedule:
    """The streams' wake times, earliest first."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []

    @property
    def next_us(self) -> int | None:
        """The earliest wake time queued (None: none).

        It may be a stale entry's, which is earlier than any stream needs, never later.
        """
        return self._heap[0][0] if self._heap else None

    def schedule(self, stream_id: str, st: Stream) -> None:
        """Queue a visit of the stream at its ``wake_us`` (unless one is queued before)."""
        wake = st.wake_us
        if wake < st.queued_us:
            st.queued_us = wake
            heapq.heappush(self._heap, (wake, stream_id))

    def due(self, now_us: int, streams: Mapping[str, Stream]) -> list[tuple[str, Stream]]:
        """Take the live streams whose wake time is at or before ``now_us``."""
        heap = self._heap
        ready: list[tuple[str, Stream]] = []
        while heap and heap[0][0] <= now_us:
            wake, stream_id = heapq.heappop(heap)
            st = streams.get(stream_id)
            if st is not None and st.queued_us == wake:  # else stale (gone, or re-queued)
                st.queued_us = NEVER
                ready.append((stream_id, st))
        return ready

    def tidy(self, streams: Mapping[str, Stream]) -> None:
        """Rebuild the heap from the streams once stale entries are most of it."""
        if len(self._heap) > 4 * len(streams) + 1024:
            self._heap = [(st.queued_us, sid) for sid, st in streams.items()
                          if st.queued_us < NEVER]
            heapq.heapify(self._heap)
