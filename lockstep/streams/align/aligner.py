"""Event-time alignment of one task's media tokens into windows (the ``align`` stage).

Pure: no Kafka, no clock reads; every call takes ``now_us`` (wall clock, µs) and returns
what to produce. Every token ends in exactly one outcome — a window's ``members``, a late
record, the duplicate counter, or a rejection (dead letter) — so the ledger is countable.

Per stream:

* Each modality's capture clock is recovered from (``seq``, ``t_us``)
  (:mod:`lockstep.streams.align.clock`) and shifted by its clock offset against video (configured,
  or estimated from transport lag floors), giving every token a corrected capture time ``t``.
* Windows tile the corrected timeline without gaps or overlaps. With video they are anchored
  on frames: a window runs from the end of the previous one to halfway to the next anchor
  frame (every ``stride``-th frame when the rate is sampled down). Without video they follow
  a fixed hop. Other modalities are paired with the anchor (:mod:`lockstep.streams.align.matching`)
  and the window assembled (:mod:`lockstep.streams.align.assemble`).
* A window is emitted as soon as every expected modality has passed its end (its watermark,
  its cadence says its next token falls later, or its ``final`` token came:
  :mod:`lockstep.streams.align.readiness`), or when its deadline expires — then it is partial
  and names what is missing. It never waits past the deadline. A stream whose every dense
  modality has sent its ``final`` token is flushed.
* ``window_seq`` is the anchor frame's ``seq`` (or ``HOP_BASE`` + hop index without video),
  so a replay after a restart rebuilds the same idempotency keys; :meth:`Aligner.resume`
  continues after the windows a previous owner of the partition emitted.
* No window spans more than ``align.max_window_ms`` (:mod:`lockstep.streams.align.plan`); a
  token far off its modality's fitted clock is rejected (:mod:`lockstep.streams.align.clockguard`);
  the per-stream state is bounded (:mod:`lockstep.streams.align.streamtable`); a poll visits only
  the streams whose wake time has come (:mod:`lockstep.streams.align.wake`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lockstep.config.settings import AlignSettings
from lockstep.errors import ReasonCode
from lockstep.streams.align.assemble import WindowAssembler
from lockstep.streams.align.clockguard import ClockGuard
from lockstep.streams.align.matching import Item
from lockstep.streams.align.plan import Planner, with_frame
from lockstep.streams.align.readiness import Readiness
from lockstep.streams.align.state import AlignOutput, Plan, Rejected, Stream
from lockstep.streams.align.streamtable import StreamTable
from lockstep.streams.align.timebase import Timebase
from lockstep.streams.align.wake import WakeSchedule
from lockstep.topics.keys import HOP_BASE, TokenKey
from lockstep.topics.schemas import LateToken, Modality, Token, Window

__all__ = ["HOP_BASE", "AlignOutput", "Aligner", "Rejected", "TokenKey"]

#: Modalities paired with the anchor whose pairing needs settled clocks (OCR holds a while).
_PAIRED = (Modality.AUDIO, Modality.SENSOR)


@dataclass
class Aligner:
    """Aligns the tokens of many streams; one instance per align task."""

    settings: AlignSettings
    #: The SLO class of every stream, or a function of the stream id (``slo.class_of``).
    slo_class: str | Callable[[str], str]
    stride: int = 1
    _table: StreamTable = field(init=False)
    _streams: OrderedDict[str, Stream] = field(init=False)
    #: When each stream must be visited again: a poll visits only those whose time came.
    _wakes: WakeSchedule = field(init=False, default_factory=WakeSchedule)

    def __post_init__(self) -> None:
        s = self.settings
        self.hop_us = int(s.hop_ms * 1000)
        self.max_wait_us = int(s.max_wait_ms * 1000)
        self.max_future_us = int(s.max_future_ms * 1000)
        self.idle_us = int(s.idle_ms * 1000)
        self.ocr_ttl_us = int(s.ocr_ttl_ms * 1000)
        #: Text is on the video clock unless configured (its lag is recognition, not clock).
        self.text_offset_us = int(s.clock_offsets_ms.get("ocr", 0.0) * 1000)
        self.ttl_us = int(s.stream_ttl_ms * 1000)
        self._ready = Readiness.of(s)
        tolerance_us = self._ready.tolerance_us
        self._timebase = Timebase(s)
        fixed = self.slo_class
        class_of = (lambda _: fixed) if isinstance(fixed, str) else fixed
        self._assembler = WindowAssembler(tolerance_us, self.ocr_ttl_us, class_of,
                                          s.max_streams)
        self._planner = Planner(self.hop_us, self.idle_us, tolerance_us[Modality.VIDEO],
                                int(s.max_window_ms * 1000))
        self._guard = ClockGuard(s.max_clock_error_ms * 1000, s.max_seq_jump, s.rebase_after)
        self._table = StreamTable(s.max_streams, s.max_evicted_streams)
        self._streams = self._table.live
        self.max_buffered = s.max_buffered_tokens
        self._downsample = s.allow_downsampling

    # -- public ------------------------------------------------------------------------

    @property
    def catching_up(self) -> bool:
        """Whether the task is reading a backlog (set by the agent from consumer lag).

        Deadlines bound the wait for live data. A backlog arrives topic by topic, so one
        modality's tokens can be seconds ahead of another's; closing windows by deadline
        then would send everything behind to ``late``. While catching up, windows close on
        watermarks only (and the memory bound).
        """
        return self._ready.catching_up

    @catching_up.setter
    def catching_up(self, value: bool) -> None:
        if value != self._ready.catching_up:
            self._ready.catching_up = value
            for stream_id, st in self._streams.items():
                if st.buffered:  # deadlines apply again (or no longer): re-plan on next poll
                    st.wake_us = 0
                    self._schedule(stream_id, st)

    @property
    def backlogged(self) -> frozenset[Modality]:
        """While catching up: modalities whose topics still hold unread records.

        Set by the agent. Streams wait for them even before their first token of that
        modality.
        """
        return self._ready.backlogged

    @backlogged.setter
    def backlogged(self, value: frozenset[Modality]) -> None:
        self._ready.backlogged = value

    @property
    def open_windows(self) -> int:
        """Tokens buffered and not yet settled, over all streams."""
        return sum(st.buffered for st in self._streams.values())

    @property
    def next_wake_us(self) -> int | None:
        """When :meth:`poll` may next emit or evict something (None: no stream is held).

        Never later than the earliest window deadline, idle check or eviction; it may be
        earlier (a stream re-planned since), and a poll then simply finds nothing due.
        """
        return self._wakes.next_us

    def streams(self) -> dict[str, Stream]:
        """The live per-stream state (read-only use: clock reports, offsets, rates)."""
        return self._streams

    @property
    def stream_count(self) -> int:
        """Streams with live state (at most ``align.max_streams``)."""
        return len(self._streams)

    @property
    def evicted_count(self) -> int:
        """Evicted streams still remembered (at most ``align.max_evicted_streams``)."""
        return self._table.remembered

    def resume(self, stream_id: str, closed_end_us: int, last_window_seq: int | None) -> None:
        """Continue a stream after the windows a previous owner of its partition emitted.

        Afterwards tokens owned before ``closed_end_us`` go late, no frame window keyed at
        or below ``last_window_seq`` and no hop window before ``closed_end_us`` is emitted.
        Marks already further on are kept.

        Args:
            stream_id: The stream.
            closed_end_us: The end of the last window emitted (``t_end_us``).
            last_window_seq: The highest frame-window key emitted (below ``HOP_BASE``), or
                None if there was none.
        """
        self._table.resume(stream_id, closed_end_us, last_window_seq)
        st = self._streams.get(stream_id)
        if st is not None:
            self._schedule(stream_id, st)

    def compact(self) -> None:
        """Give back what a burst of streams left behind (before a heap trim).

        What evicted streams left is held in arrays, not objects: the marks of the newest
        evicted streams are objects made among a flood's short-lived ones, and a few
        thousand of them keep most of the allocator's pools from being freed (see
        :mod:`lockstep.streams.align.marks`). The tables a flood grew (a dict never shrinks on
        its own) are rebuilt at their present size.
        """
        self._table.compact()
        self._streams = self._table.live
        self._assembler.compact()

    def add(self, token: Token, now_us: int, raw: bytes | None = None) -> AlignOutput:
        """Take one token; return what it settles.

        Args:
            token: A validated media token.
            now_us: Wall-clock time of arrival.
            raw: The record bytes, kept in a late record so nothing is lost.
        """
        out = AlignOutput()
        stream_id, m, seq, t_us = token.stream_id, token.modality, token.seq, token.t_us
        if t_us > now_us + self.max_future_us:
            out.rejected.append(Rejected(
                TokenKey(stream_id, m, seq),
                f"t_us {t_us} is more than {self.max_future_us} µs in the future",
                ReasonCode.FUTURE_T_US))
            return out
        st = self._stream(stream_id, now_us, out)
        if token.replay != st.replay:
            st.replay = token.replay
            st.pending, st.plan, st.wake_us, st.expect_until = None, None, 0, 0
            self._schedule(stream_id, st)
        if st.seen_before(m, seq):
            out.duplicates.append(TokenKey(stream_id, m, seq))
            if token.final and m not in st.final:
                # The last token sent again, marked: the producer learnt of the end after
                # the fact. The copy is not aligned again, but the modality has ended.
                self._end(stream_id, st, token, now_us, out)
            return out
        if token.final or m in st.final:
            self._ready.note_final(st, m, seq, final=token.final)
        if m is Modality.OCR:  # text is an event, not a capture at a cadence: no clock fit
            item = Item.of(t_us - self.text_offset_us, token, now_us)
        else:
            reason = self._guard.check(st.clocks[m], st.offclock, m, seq, t_us)
            if reason is not None:
                out.rejected.append(Rejected(TokenKey(stream_id, m, seq), reason,
                                             self._guard.code))
                return out
            last = st.clocks[m].last_seq
            if last is not None and seq < last and m not in st.reordered:
                st.reordered = st.reordered | {m}
            learn_lag = not self._ready.backlog(st)
            item = Item.of(self._timebase.correct(st, token, now_us, learn_lag=learn_lag),
                           token, now_us)
        closed = st.closed_end
        # Text known after its window went out (recognised late, or overtaken in transport)
        # is still valid from then on: it joins the next window (docs/alignment.md).
        if closed is not None and item.own < closed and not (
                m is Modality.OCR and closed - item.own <= self.ocr_ttl_us):
            out.late.append(LateToken(
                stream_id=stream_id, modality=m, seq=seq, t_us=t_us, watermark_us=closed,
                reason="window already emitted", at_us=now_us, value=raw,
                code=ReasonCode.WINDOW_EMITTED))
            # It still trained its clock, which can change the next window's plan.
            st.pending, st.plan, st.wake_us = None, None, 0
            self._schedule(stream_id, st)
            return out
        st.insert(item, m, now_us)
        if self._may_complete(st, item, m):
            out.windows += self._close_ready(stream_id, st, now_us, flush=False)
        self._schedule(stream_id, st)
        return out

    def _schedule(self, stream_id: str, st: Stream) -> None:
        """Queue a poll of the stream at its ``wake_us`` (unless one is queued before)."""
        self._wakes.schedule(stream_id, st)

    def settled_before(self, token: Token, now_us: int) -> AlignOutput:
        """Note a token settled outside the aligner (sent late as stale before ``add``).

        Returns an output whose ``duplicates`` holds the token if a copy of it was already
        taken (aligned, or settled here): the input topic can hold a token twice (a
        producer's retry), and each copy must not be settled again with other bytes. Like
        :meth:`add`, it may evict the least recently active stream to make room, and a
        ``final`` token ends its modality (windows it no longer waits for are returned).
        """
        out = AlignOutput()
        m, seq = token.modality, token.seq
        st = self._stream(token.stream_id, now_us, out)
        if st.seen_before(m, seq):
            out.duplicates.append(TokenKey(token.stream_id, m, seq))
            if not (token.final and m not in st.final):
                return out
        if token.final or m in st.final:
            # Settled or not, a final token says no more of its modality will come (and a
            # later one that it comes again): the stream's last window need not wait.
            self._end(token.stream_id, st, token, now_us, out)
        return out

    def _end(self, stream_id: str, st: Stream, token: Token, now_us: int,
             out: AlignOutput) -> None:
        """Note a ``final`` token (or a later one resuming its modality) that is not aligned."""
        self._ready.note_final(st, token.modality, token.seq, final=token.final)
        if st.buffered:
            out.windows += self._close_ready(stream_id, st, now_us, flush=False)
        self._schedule(stream_id, st)

    def _stream(self, stream_id: str, now_us: int, out: AlignOutput) -> Stream:
        """The live state of a stream, opened (making room) if needed; marked active."""
        st = self._streams.get(stream_id)
        if st is None:
            while self._table.full:  # the least recently active stream makes room
                oldest = self._table.oldest()
                self._evict(oldest, self._streams[oldest], now_us, out)
            st = self._table.open(stream_id)
            self._schedule(stream_id, st)  # whatever becomes of its token: evicted by TTL
        else:
            self._streams.move_to_end(stream_id)
        st.last_arrival = now_us  # active, whatever the token's outcome
        return st

    def _may_complete(self, st: Stream, item: Item, m: Modality) -> bool:
        """Whether a new token of ``m`` can change the waiting window (else skip re-planning)."""
        pending = st.pending
        if pending is None or item.t < pending[0] or st.buffered > self.max_buffered:
            st.plan = None  # the waiting window itself may change
            return True
        if m is Modality.VIDEO:
            st.plan = with_frame(st.plan, item, self._planner.max_window_us)
            return True
        start, end, blocked = pending
        if m in blocked and self._ready.passed(st, m, end):
            blocked = blocked - {m}
            if not blocked:
                return True
            st.pending = (start, end, blocked)
        # Still waiting; the deadline may move with the stream's lag.
        deadline = end + st.lag_us + self.max_wait_us
        if deadline < st.wake_us:
            st.wake_us = deadline
        return False

    def poll(self, now_us: int) -> AlignOutput:
        """Emit windows whose deadline has passed; evict streams idle past the TTL."""
        out = AlignOutput()
        wake = self._wakes.next_us
        if wake is None or wake > now_us:
            return out  # the usual case: nothing of any stream is due yet
        streams = self._streams
        for stream_id, st in self._wakes.due(now_us, streams):
            if now_us >= st.wake_us:  # else nothing of this stream can be due before then
                out.windows += self._close_ready(stream_id, st, now_us, flush=False)
                if now_us - st.last_arrival > self.ttl_us:
                    self._evict(stream_id, st, now_us, out)
                    continue
            self._schedule(stream_id, st)
        self._wakes.tidy(streams)
        return out

    def _evict(self, stream_id: str, st: Stream, now_us: int, out: AlignOutput) -> None:
        """Drop a stream's state, emitting what it still buffers first."""
        if st.buffered:
            out.windows += self._close_ready(stream_id, st, now_us, flush=True)
        self._table.evict(stream_id)
        self._assembler.forget(stream_id)

    def flush(self, now_us: int) -> AlignOutput:
        """Emit every buffered token now (shutdown, end of input)."""
        out = AlignOutput()
        for stream_id, st in self._streams.items():
            out.windows += self._close_ready(stream_id, st, now_us, flush=True)
            st.wake_us = 0  # re-plan every stream on the next poll
            self._schedule(stream_id, st)
        return out

    def overdue(self, now_us: int) -> list[tuple[str, int]]:
        """Windows (stream, window_seq) whose deadline is at or before ``now_us``.

        Empty right after :meth:`poll` with the same time: no window waits past it.
        """
        late = []
        for stream_id, st in self._streams.items():
            backlog = self._ready.backlog(st)
            plan = self._plan(st, now_us) if st.buffered and not backlog else None
            if plan is not None and now_us >= self._ready.deadline(st, plan.end):
                late.append((stream_id, plan.seq))
        return late

    def forget(self, stream_ids: Iterable[str]) -> None:
        """Drop the state of streams this task no longer owns (partitions revoked).

        Their tokens are not committed, so the new owner replays and rebuilds them.
        """
        for stream_id in stream_ids:
            self._table.forget(stream_id)
            self._assembler.forget(stream_id)

    def _stride(self) -> int:
        return self.stride if self._downsample else 1

    # -- planning and emission ---------------------------------------------------------

    def _plan(self, st: Stream, now_us: int) -> Plan:
        return self._planner.plan(st, now_us, self._stride())

    def _close_ready(self, stream_id: str, st: Stream, now_us: int, *,
                     flush: bool) -> list[Window]:
        windows: list[Window] = []
        st.wake_us = now_us + self.ttl_us  # eviction check when nothing is buffered
        st.pending = None
        # The waiting window's plan holds until a frame, or a token before it, arrives.
        stride = self.stride if self._downsample else 1
        plan = st.plan if st.plan is not None and st.plan.stride == stride else None
        st.plan = None
        rules = self._ready
        while st.buffered:
            if plan is None:
                plan = self._planner.plan(st, now_us, stride)
            wait, check = rules.expected(st, now_us)
            end = plan.end
            # Only a token of these (or a frame, or an earlier token) can make the window
            # ready before its deadline.
            blocked = rules.blocked(st, wait, end)
            if Modality.VIDEO in wait:
                # Without its frame a frame may still come for this slot; with it, the end
                # must be known (the next anchor came, or the clock predicts it). A hop
                # window is done with video once a later frame has come.
                # A window of several frames (stride > 1) also waits for the frames between
                # its anchor and its end: in a backlog they may not be read yet.
                ready = not blocked and (
                    plan.certain and (plan.stride == 1
                                      or rules.passed(st, Modality.VIDEO, end))
                    if plan.frame is not None else (
                        plan.seq >= HOP_BASE and rules.passed(st, Modality.VIDEO, end)))
            else:
                ready = not blocked
            deadline = end + st.lag_us + self.max_wait_us
            backlog = rules.backlog(st)  # watermarks only, no deadline
            # A stream that has ended goes out whole; not in a backlog, where a modality it
            # sends may not have been read yet.
            ended = bool(st.final) and not backlog and rules.ended(st)
            if not (ready or flush or ended or st.buffered > self.max_buffered
                    or (now_us >= deadline and not backlog)):
                # Until a token arrives (add re-plans), only the deadline or a modality
                # going idle can change this.
                wake = now_us + self.idle_us
                if not backlog and deadline < wake:
                    wake = deadline
                ttl_end = st.last_arrival + self.ttl_us + 1  # evicted then, tokens emitted
                st.wake_us = wake if wake < ttl_end else ttl_end
                st.pending = (plan.start, end, blocked)
                if plan.frame is not None:  # (without one it depends on the time)
                    st.plan = plan
                break
            window = self._emit(stream_id, st, plan, check, now_us)
            if window is not None:
                windows.append(window)
            plan = None
        return windows

    def _emit(self, stream_id: str, st: Stream, plan: Plan, expected: frozenset[Modality],
              now_us: int) -> Window | None:
        owned = st.take_until(plan.end)
        st.closed_end = plan.end
        if not owned:
            return None  # nothing captured in this stretch: no window to infer on
        if plan.frame is not None or plan.seq < HOP_BASE:
            st.last_anchor_seq = plan.seq
        untrusted = frozenset([m for m in _PAIRED if not self._ready.settled(st, m)])
        return self._assembler.assemble(stream_id, st, plan, owned, expected, untrusted,
                                        now_us)
