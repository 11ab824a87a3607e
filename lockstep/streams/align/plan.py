"""Planning of a stream's next window: its bounds and anchor (part of the ``align`` stage).

Pure. Windows tile a stream's corrected timeline from the end of the last one. With video
a window is anchored on a frame and runs halfway to the next anchor frame (a fitted video
clock predicts it before it arrives); while the expected frame has not come and video is
live, on the video clock with video missing; otherwise it is a fixed hop.

No window spans more than ``max_window_us``: a longer stretch before an anchor is first cut
into hop windows ending on a hop boundary, and a window past its anchor is cut short, so
every emitted window fits the schema (its audio is at most 10 s). A hop window always ends
at or after the end of its own hop, so hop keys (``HOP_BASE`` + index of the start's hop)
are never reused by a later window of the stream.
"""

from __future__ import annotations

from lockstep.streams.align.matching import Item
from lockstep.streams.align.state import Plan, Stream
from lockstep.topics.keys import HOP_BASE
from lockstep.topics.schemas import Modality


class Planner:
    """Plans the windows of one aligner.

    Args:
        hop_us: Hop length (windows without an anchor).
        idle_us: How long video stays live after its last frame.
        video_tolerance_us: How early a frame may land against the video clock.
        max_window_us: Longest window; longer than ``hop_us``.
    """

    def __init__(self, hop_us: int, idle_us: int, video_tolerance_us: int,
                 max_window_us: int) -> None:
        self.hop_us = hop_us
        self.idle_us = idle_us
        self.video_tolerance_us = video_tolerance_us
        self.max_window_us = max_window_us
        # An anchored window starts at most this far before its anchor, plus a hop (the
        # hop windows before it end on a hop boundary): the anchor stays inside it.
        self.max_lead_us = (max_window_us - hop_us) // 2

    def plan(self, st: Stream, now_us: int, stride: int) -> Plan:
        """The next window of a stream (which must hold a token), at most max_window long."""
        closed = st.closed_end
        # Tile from the last window's end; jump over a long stretch that holds no token.
        if closed is not None and st.starts_by(closed + self.hop_us):
            start = closed
        else:
            start = st.earliest_start()
            if closed is not None and start < closed:
                start = closed  # tokens left before a resumed end join the next window
        return self.bounded(self._plan(st, now_us, stride, start))

    def _plan(self, st: Stream, now_us: int, stride: int, start: int) -> Plan:
        video = st.buf[Modality.VIDEO]
        last = st.last_anchor_seq if st.last_anchor_seq is not None else -1
        # A frame anchors at most one window: frames at or below the last anchor's seq
        # (reordered stragglers) are only members.
        fresh = [i for i in video if i.t >= start and i.seq > last]
        clock = st.clocks.get(Modality.VIDEO)
        anchors = fresh if stride == 1 else [i for i in fresh if i.seq % stride == 0]
        if not anchors and fresh:
            due = clock.time_of(last + stride) if clock is not None and last >= 0 else None
            if due is None or fresh[-1].t > due + self.video_tolerance_us:
                anchors = fresh  # the stride frame was dropped, or no clock says when it is due
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
        video_live = now_us - st.last_seen.get(Modality.VIDEO, -(1 << 62)) <= self.idle_us
        if video_live and clock is not None and clock.ready and st.last_anchor_seq is not None:
            # The expected frame has not come: a window without video, on the video clock.
            seq = st.last_anchor_seq + stride
            expected = clock.time_of(seq)
            period = clock.period_us
            if expected is not None and period is not None and seq < HOP_BASE:
                anchor = int(expected) - st.offsets.get(Modality.VIDEO, 0)
                end = max(start + 1, int(anchor + stride * period / 2))
                return Plan(start, end, max(start, anchor), None, seq, certain=False,
                            stride=stride)
        return self.hop(start, stride)

    def hop(self, start: int, stride: int, until: int | None = None) -> Plan:
        """The hop window from ``start``; ``until`` (a hop boundary past it) caps its end."""
        hop = self.hop_us
        index = start // hop
        end = (index + 1) * hop
        if end - start < hop // 4:
            end += hop
        # Capped, it still ends at or past its own hop: max_window > hop, until on a boundary.
        end = min(end, start + self.max_window_us, until if until is not None else end)
        return Plan(start, end, (start + end) // 2, None, HOP_BASE + index, certain=False,
                    stride=stride)

    def bounded(self, plan: Plan) -> Plan:
        """``plan``, or what comes first when it would span more than ``max_window_us``.

        Hop plans are bounded already; an anchored one is cut short after its anchor, or
        preceded by hop windows when its anchor lies far after its start.
        """
        start = plan.start
        if plan.end - start <= self.max_window_us:
            return plan
        if plan.anchor - start > self.max_lead_us + self.hop_us:
            # A long stretch before the anchor (a gap in video): hop windows first.
            until = (plan.anchor - self.max_lead_us) // self.hop_us * self.hop_us
            return self.hop(start, plan.stride, until)
        return Plan(start, start + self.max_window_us, plan.anchor, plan.frame, plan.seq,
                    certain=plan.certain, stride=plan.stride, next_t=plan.next_t)


def with_frame(plan: Plan | None, frame: Item, max_window_us: int) -> Plan | None:
    """A waiting window's plan once ``frame`` has arrived; None: plan it again.

    Handles the usual case cheaply: every frame anchors (stride 1) and the new frame comes
    after the window's anchor, where it can only become the next anchor, which fixes the
    end halfway to it (as :meth:`Planner.plan` would).
    """
    if plan is None or plan.frame is None or plan.stride != 1:
        return None
    anchor = plan.frame
    if frame.seq <= anchor.seq or frame.t <= anchor.t:
        return None
    if plan.next_t is not None and frame.t >= plan.next_t:
        return plan  # the next anchor known already comes first
    end = (anchor.t + frame.t + 1) // 2
    if end - plan.start > max_window_us:
        return None
    return Plan(plan.start, end, plan.anchor, anchor, plan.seq, certain=True, stride=1,
                next_t=frame.t)
