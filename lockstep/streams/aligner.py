"""Event-time alignment of one task's media tokens into windows (the ``align`` stage).

Pure: no Kafka, no clock reads; every call takes ``now_us`` (wall clock, µs) and returns
what to produce. Every token ends in exactly one outcome — a window's ``members``, a late
record, the duplicate counter, or a rejection (dead letter) — so the ledger is countable.

Per stream:

* Each modality's capture clock is recovered from (``seq``, ``t_us``) (:mod:`lockstep.streams.clock`)
  and shifted by its clock offset against video (configured, or estimated from transport
  lag floors), giving every token a corrected capture time ``t``.
* Windows tile the corrected timeline without gaps or overlaps. With video they are anchored
  on frames: a window runs from the end of the previous one to halfway to the next anchor
  frame (every ``stride``-th frame when the rate is sampled down). Without video they follow
  a fixed hop. Other modalities are paired with the anchor (:mod:`lockstep.streams.matching`) and
  the window assembled (:mod:`lockstep.streams.assemble`).
* A window is emitted as soon as every expected modality has passed its end (its watermark,
  or its cadence says its next token falls later), or when its deadline expires — then it
  is partial and names what is missing. It never waits past the deadline.
* ``window_seq`` is the anchor frame's ``seq`` (or ``HOP_BASE`` + hop index without video),
  so a replay after a restart rebuilds the same idempotency keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lockstep.streams.alignstate import DENSE, AlignOutput, Plan, Rejected, Stream, TokenKey
from lockstep.streams.assemble import WindowAssembler
from lockstep.streams.matching import Item
from lockstep.streams.settings import AlignSettings
from lockstep.streams.timebase import Timebase
from lockstep.topics.schemas import LateToken, Modality, Token, Window

__all__ = ["HOP_BASE", "AlignOutput", "Aligner", "Rejected", "TokenKey"]

#: ``window_seq`` of hop windows (streams without video) starts here, above any frame seq.
HOP_BASE = 1 << 62
#: Modalities paired with the anchor whose pairing needs settled clocks (OCR holds a while).
_PAIRED = (Modality.AUDIO, Modality.SENSOR)
_EVICTED_MEMORY = 100_000


@dataclass
class Aligner:
    """Aligns the tokens of many streams; one instance per align task."""

    settings: AlignSettings
    #: The SLO class of every stream, or a function of the stream id (``slo.class_of``).
    slo_class: str | Callable[[str], str]
    stride: int = 1
    _streams: dict[str, Stream] = field(default_factory=dict)
    _catching_up: bool = False
    #: While catching up: modalities whose topics still hold unread records (set by the
    #: agent). Streams wait for them even before their first token of that modality.
    backlogged: frozenset[Modality] = frozenset()
    _evicted: dict[str, int] = field(default_factory=dict)
    #: Before this wall time no stream has anything due (the minimum of their ``wake_us``).
    _wake_us: int = 0

    def __post_init__(self) -> None:
        s = self.settings
        self.hop_us = int(s.hop_ms * 1000)
        self.max_wait_us = int(s.max_wait_ms * 1000)
        self.grace_us = int(s.grace_ms * 1000)
        self.max_future_us = int(s.max_future_ms * 1000)
        self.idle_us = int(s.idle_ms * 1000)
        self.ocr_ttl_us = int(s.ocr_ttl_ms * 1000)
        self.required = frozenset(Modality(m) for m in s.required)
        self.tolerance_us = {m: int(s.tolerances_ms.get(m.value, s.tolerance_ms) * 1000)
                             for m in Modality}
        self._timebase = Timebase(s)
        fixed = self.slo_class
        class_of = (lambda _: fixed) if isinstance(fixed, str) else fixed
        self._assembler = WindowAssembler(self.tolerance_us, self.ocr_ttl_us, class_of)
        self.settle_points = s.settle_points
        self.max_buffered = s.max_buffered_tokens

    # -- public ------------------------------------------------------------------------

    @property
    def catching_up(self) -> bool:
        """Whether the task is reading a backlog (set by the agent from consumer lag).

        Deadlines bound the wait for live data. A backlog arrives topic by topic, so one
        modality's tokens can be seconds ahead of another's; closing windows by deadline
        then would send everything behind to ``late``. While catching up, windows close on
        watermarks only (and the memory bound).
        """
        return self._catching_up

    @catching_up.setter
    def catching_up(self, value: bool) -> None:
        if value != self._catching_up:
            self._catching_up = value
            for st in self._streams.values():
                st.wake_us = 0  # deadlines apply again (or no longer): re-plan on next poll
            self._wake_us = 0

    @property
    def open_windows(self) -> int:
        """Tokens buffered and not yet settled, over all streams."""
        return sum(st.buffered for st in self._streams.values())

    def streams(self) -> dict[str, Stream]:
        """The live per-stream state (read-only use: clock reports, offsets, rates)."""
        return self._streams

    def add(self, token: Token, now_us: int, raw: bytes | None = None) -> AlignOutput:
        """Take one token; return what it settles.

        Args:
            token: A validated media token.
            now_us: Wall-clock time of arrival.
            raw: The record bytes, kept in a late record so nothing is lost.
        """
        out = AlignOutput()
        if token.t_us > now_us + self.max_future_us:
            out.rejected.append(Rejected(
                TokenKey(token.stream_id, token.modality, token.seq),
                f"t_us {token.t_us} is more than {self.max_future_us} µs in the future"))
            return out
        stream_id = token.stream_id
        st = self._streams.get(stream_id)
        if st is None:
            st = self._streams[stream_id] = Stream(
                closed_end=self._evicted.pop(stream_id, None))
        if st.seen_before(token.modality, token.seq):
            out.duplicates.append(TokenKey(stream_id, token.modality, token.seq))
            return out
        item = Item.of(self._timebase.correct(st, token, now_us,
                                              learn_lag=not self._catching_up), token, now_us)
        closed = st.closed_end
        if closed is not None and item.own < closed:
            out.late.append(LateToken(
                stream_id=stream_id, modality=token.modality, seq=token.seq,
                t_us=token.t_us, watermark_us=closed, reason="window already emitted",
                at_us=now_us, value=raw))
            # It still trained its clock, which can change the next window's plan.
            st.pending, st.plan, st.wake_us, self._wake_us = None, None, 0, 0
            if token.modality is Modality.OCR:
                st.remember([], [item])  # late for its own window, but the caption from now on
            return out
        st.insert(item, now_us)
        if self._may_complete(st, item):
            out.windows += self._close_ready(stream_id, st, now_us, flush=False)
        if st.wake_us < self._wake_us:
            self._wake_us = st.wake_us
        return out

    def _may_complete(self, st: Stream, item: Item) -> bool:
        """Whether a new token can change the waiting window (else skip re-planning)."""
        pending = st.pending
        m = item.token.modality
        if pending is None or item.t < pending[0] or st.buffered > self.max_buffered:
            st.plan = None  # the waiting window itself may change
            return True
        if m is Modality.VIDEO:
            st.plan = _with_frame(st.plan, item)
            return True
        start, end, blocked = pending
        if m in blocked and self._passed(st, m, end):
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
        """Emit windows whose deadline has passed; evict idle, empty streams."""
        out = AlignOutput()
        if now_us < self._wake_us:
            return out  # the usual case: nothing of any stream is due yet
        wake = 1 << 62
        for stream_id, st in list(self._streams.items()):
            if now_us >= st.wake_us:  # else nothing of this stream can be due before then
                out.windows += self._close_ready(stream_id, st, now_us, flush=False)
                if not st.buffered and now_us - st.last_arrival > 60 * self.idle_us:
                    del self._streams[stream_id]
                    if st.closed_end is not None:
                        self._evicted[stream_id] = st.closed_end
                        if len(self._evicted) > _EVICTED_MEMORY:
                            del self._evicted[next(iter(self._evicted))]
                    continue
            wake = min(wake, st.wake_us)
        self._wake_us = wake
        return out

    def flush(self, now_us: int) -> AlignOutput:
        """Emit every buffered token now (shutdown, end of input)."""
        out = AlignOutput()
        for stream_id, st in self._streams.items():
            out.windows += self._close_ready(stream_id, st, now_us, flush=True)
        self._wake_us = 0  # re-plan every stream on the next poll
        return out

    def overdue(self, now_us: int) -> list[tuple[str, int]]:
        """Windows (stream, window_seq) whose deadline is at or before ``now_us``.

        Empty right after :meth:`poll` with the same time: no window waits past it.
        """
        late = []
        for stream_id, st in self._streams.items():
            plan = self._plan(st, now_us) if st.buffered and not self._catching_up else None
            if plan is not None and now_us >= self._deadline(st, plan.end):
                late.append((stream_id, plan.seq))
        return late

    def forget(self, stream_ids: Iterable[str]) -> None:
        """Drop the state of streams this task no longer owns (partitions revoked).

        Their tokens are not committed, so the new owner replays and rebuilds them.
        """
        for stream_id in stream_ids:
            self._streams.pop(stream_id, None)
            self._evicted.pop(stream_id, None)

    def _settled(self, st: Stream, m: Modality) -> bool:
        """Whether a modality's pairing with video can be trusted yet."""
        if Modality.VIDEO not in st.last_seen:
            return True  # no video to pair against: hop windows on the stream's own clocks
        if m not in st.offset_known:
            return False
        for clock in (st.clocks.get(m), st.clocks.get(Modality.VIDEO)):
            if clock is not None and clock.ready and clock.points < self.settle_points:
                return False
        return True

    def _stride(self) -> int:
        return self.stride if self.settings.allow_downsampling else 1

    def _deadline(self, st: Stream, end: int) -> int:
        return end + st.lag_us + self.max_wait_us

    # -- planning and emission ---------------------------------------------------------

    def _plan(self, st: Stream, now_us: int) -> Plan | None:
        """The next window of a stream: its bounds and anchor, from what is buffered."""
        closed = st.closed_end
        # Tile from the last window's end; jump over a long stretch that holds no token.
        if closed is not None and st.starts_by(closed + self.hop_us):
            start = closed
        else:
            start = st.earliest_start()
        video = st.buf[Modality.VIDEO]
        stride = self._stride()
        last = st.last_anchor_seq if st.last_anchor_seq is not None else -1
        # A frame anchors at most one window: frames at or below the last anchor's seq
        # (reordered stragglers) are only members.
        fresh = [i for i in video if i.t >= start and i.seq > last]
        clock = st.clocks.get(Modality.VIDEO)
        anchors = fresh if stride == 1 else [i for i in fresh if i.seq % stride == 0]
        if not anchors and fresh:
            due = clock.time_of(last + stride) if clock is not None and last >= 0 else None
            if due is None or fresh[-1].t > due + self.tolerance_us[Modality.VIDEO]:
                anchors = fresh  # the stride frame was dropped, or no clock says when it is due
        video_live = now_us - st.last_seen.get(Modality.VIDEO, -(1 << 62)) <= self.idle_us
        if anchors:
            frame = anchors[0]
            following = [i for i in anchors[1:] if i.seq > frame.seq]
            if following:
                return Plan(start, (frame.t + following[0].t + 1) // 2, frame.t, frame,
                            frame.seq, certain=True, stride=stride, next_t=following[0].t)
            # No successor yet: a fitted clock predicts it, so the end is known all the same
            # (a frame only lands before it by more jitter than the fit has seen).
            ready_clock = clock is not None and clock.ready
            cadence = (clock.period_us if clock is not None else None) or 1e6 / 24
            nxt = frame.t + stride * cadence
            return Plan(start, max(frame.t + 1, int((frame.t + nxt) // 2)), frame.t, frame,
                        frame.seq, certain=ready_clock, stride=stride)
        if video_live and clock is not None and clock.ready and st.last_anchor_seq is not None:
            # The expected frame has not come: a window without video, on the video clock.
            seq = st.last_anchor_seq + stride
            expected = clock.time_of(seq)
            period = clock.period_us
            if expected is not None and period is not None:
                anchor = int(expected) - st.offsets.get(Modality.VIDEO, 0)
                end = max(start + 1, int(anchor + stride * period / 2))
                return Plan(start, end, max(start, anchor), None, seq, certain=False,
                            stride=stride)
        index = start // self.hop_us
        end = (index + 1) * self.hop_us
        if end - start < self.hop_us // 4:
            end += self.hop_us
        return Plan(start, end, (start + end) // 2, None, HOP_BASE + index, certain=False,
                    stride=stride)

    def _expected(self, st: Stream, now_us: int) -> tuple[frozenset[Modality], frozenset[Modality]]:
        """Modalities to wait for, and modalities a window is partial without.

        Wait for the required ones (unless seen and then gone idle) and for every dense
        modality the stream is sending; a dead modality is named missing, never waited for.
        """
        seen = st.last_seen
        if self._catching_up:
            # In a backlog a modality's records may simply not be fetched yet: none is idle.
            live = frozenset([m for m in seen if m in DENSE])
        elif now_us <= st.expect_until:
            return st.expect
        else:
            idle_before = now_us - self.idle_us
            live = frozenset([m for m, at in seen.items() if at >= idle_before and m in DENSE])
        check = self.required | live
        wait = check if len(live) == len(seen) else (self.required - (seen.keys() - live)) | live
        if self._catching_up:
            return wait | (self.backlogged & DENSE), check
        # This holds until a live modality goes idle, or a token of another one arrives.
        st.live, st.expect = live, (wait, check)
        st.expect_until = min(seen[m] for m in live) + self.idle_us if live else 1 << 62
        return wait, check

    def _passed(self, st: Stream, m: Modality, end: int) -> bool:
        mark = st.watermark.get(m)
        if mark is None:
            return False
        if mark >= end + self.grace_us:
            return True
        # The next capture is due one period after the last; if even early by the tolerance
        # it lands past the end, this window gets no more of this modality.
        period = st.clocks[m].ready_period
        return period is not None and mark + period - self.tolerance_us[m] >= end

    def _close_ready(self, stream_id: str, st: Stream, now_us: int, *,
                     flush: bool) -> list[Window]:
        windows: list[Window] = []
        st.wake_us = now_us + 60 * self.idle_us  # idle check when nothing is buffered
        st.pending = None
        # The waiting window's plan holds until a frame, or a token before it, arrives.
        plan = st.plan if st.plan is not None and st.plan.stride == self._stride() else None
        st.plan = None
        while st.buffered:
            if plan is None:
                plan = self._plan(st, now_us)
                if plan is None:
                    break
            wait, check = self._expected(st, now_us)
            end = plan.end
            # Only a token of these (or a frame, or an earlier token) can make the window
            # ready before its deadline.
            blocked = frozenset([m for m in wait if m is not Modality.VIDEO
                                 and not self._passed(st, m, end)])
            if Modality.VIDEO in wait:
                # Without its frame a frame may still come for this slot; with it, the end
                # must be known (the next anchor came, or the clock predicts it).
                ready = plan.frame is not None and plan.certain and not blocked
            else:
                ready = not blocked
            deadline = end + st.lag_us + self.max_wait_us
            if not (ready or flush or st.buffered > self.max_buffered
                    or (now_us >= deadline and not self._catching_up)):
                # Until a token arrives (add re-plans), only the deadline or a modality
                # going idle can change this.
                st.wake_us = now_us + self.idle_us if self._catching_up else min(
                    deadline, now_us + self.idle_us)
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
        untrusted = frozenset([m for m in _PAIRED if not self._settled(st, m)])
        return self._assembler.assemble(stream_id, st, plan, owned, expected, untrusted,
                                        now_us)


def _with_frame(plan: Plan | None, frame: Item) -> Plan | None:
    """A waiting window's plan once ``frame`` has arrived; None: plan it again.

    Handles the usual case cheaply: every frame anchors (stride 1) and the new frame comes
    after the window's anchor, where it can only become the next anchor, which fixes the
    end halfway to it (as :meth:`Aligner._plan` would).
    """
    if plan is None or plan.frame is None or plan.stride != 1:
        return None
    anchor = plan.frame
    if frame.seq <= anchor.seq or frame.t <= anchor.t:
        return None
    if plan.next_t is not None and frame.t >= plan.next_t:
        return plan  # the next anchor known already comes first
    return Plan(plan.start, (anchor.t + frame.t + 1) // 2, plan.anchor, anchor, plan.seq,
                certain=True, stride=1, next_t=frame.t)
