"""The aligner's table of per-stream state, bounded (part of the ``align`` stage).

Pure. At most ``max_streams`` streams have live state; they are kept in order of their last
token, so the least recently active one is found at once when room is needed. A stream
leaves the table by eviction (the aligner emits its buffered tokens first) or because the
task no longer owns it. What an evicted stream's windows covered is remembered, for at
most ``max_evicted`` streams (the oldest forgotten first): a straggler then goes late and
window keys are never reused. A resume seeds the same memory from windows a previous owner
of the partition emitted.
"""

from __future__ import annotations

from collections import OrderedDict

from lockstep.streams.align.marks import Closed, EvictedMarks
from lockstep.streams.align.state import Stream

__all__ = ["Closed", "StreamTable"]


class StreamTable:
    """Live per-stream state, least recently active first, and what evicted streams left.

    Args:
        max_streams: Live streams at most (the caller makes room before :meth:`open`).
        max_evicted: Evicted (or resumed, not yet live) streams remembered at most.
    """

    def __init__(self, max_streams: int, max_evicted: int) -> None:
        self.max_streams = max_streams
        self.max_evicted = max_evicted
        #: The live streams, least recently active first.
        self.live: OrderedDict[str, Stream] = OrderedDict()
        self._closed = EvictedMarks(max_evicted)

    @property
    def remembered(self) -> int:
        """Evicted streams whose windows' end is remembered."""
        return len(self._closed)

    @property
    def full(self) -> bool:
        """Whether a new stream needs room first."""
        return len(self.live) >= self.max_streams

    def open(self, stream_id: str) -> Stream:
        """Start the state of a stream, from what is remembered of it."""
        closed = self._closed.pop(stream_id)
        st = Stream() if closed is None else Stream(
            closed_end=closed.end_us, last_anchor_seq=closed.anchor_seq)
        self.live[stream_id] = st
        return st

    def oldest(self) -> str:
        """The least recently active live stream (the table must not be empty)."""
        return next(iter(self.live))

    def evict(self, stream_id: str) -> None:
        """Drop a live stream's state, remembering how far its windows went."""
        st = self.live.pop(stream_id)
        if st.closed_end is not None:
            self._remember(stream_id, Closed(st.closed_end, st.last_anchor_seq))

    def resume(self, stream_id: str, closed_end_us: int, last_window_seq: int | None) -> None:
        """Mark windows up to ``closed_end_us`` (frame keys up to the seq) as emitted."""
        st = self.live.get(stream_id)
        if st is None:
            closed = self._closed.get(stream_id)
            self._remember(stream_id, Closed(closed_end_us, last_window_seq) if closed is None
                           else closed.merge(closed_end_us, last_window_seq))
            return
        mark = Closed(closed_end_us, last_window_seq)
        if st.closed_end is not None:
            mark = mark.merge(st.closed_end, st.last_anchor_seq)
        elif st.last_anchor_seq is not None:
            mark = mark.merge(closed_end_us, st.last_anchor_seq)
        st.closed_end, st.last_anchor_seq = mark.end_us, mark.anchor_seq
        st.pending, st.plan, st.wake_us = None, None, 0  # re-plan from the new end

    def forget(self, stream_id: str) -> None:
        """Drop everything about a stream (its partition went to another task)."""
        self.live.pop(stream_id, None)
        self._closed.pop(stream_id)

    def compact(self) -> None:
        """Keep the remembered marks in arrays only (see :mod:`lockstep.streams.align.marks`).

        The live streams' table is rebuilt too: a dict never shrinks when entries are
        deleted, so after a flood the few streams left would keep a table sized for
        ``max_streams``. (Callers that hold :attr:`live` must read it again.)
        """
        self._closed.compact()
        self.live = OrderedDict(self.live)

    def _remember(self, stream_id: str, closed: Closed) -> None:
        self._closed.put(stream_id, closed)
