"""When a stream's waiting window may close: what it waits for, what has passed its end.

Pure, and stateless but for the task's backlog state: the rules the aligner
(:mod:`lockstep.streams.align.aligner`) applies to a stream's state
(:class:`~lockstep.streams.align.state.Stream`) before it emits a window.

* A window waits for the required modalities (unless seen and then gone idle) and for
  every dense modality the stream is sending; a modality that went idle is named missing,
  never waited for (:meth:`Readiness.expected`).
* A modality has passed a window's end when its watermark is past the end by
  ``align.grace_ms``, when its cadence says its next capture lands after the end (early by
  ``align.early_ms`` at most once it is settled and in order, by the pairing tolerance
  before), or when its ``final`` token came (:meth:`Readiness.passed`).
* A backlog (the task catching up, or a replayed stream) closes windows on watermarks
  only: a modality may not have been read yet, so none counts as idle and the modalities
  whose topics still hold unread records are waited for even before their first token.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockstep.config.settings import AlignSettings
from lockstep.streams.align.state import DENSE, Stream
from lockstep.topics.schemas import Modality


@dataclass
class Readiness:
    """The aligner's rules for closing a window; one per align task."""

    #: Modalities every window waits for (``align.required``).
    required: frozenset[Modality]
    #: Pairing tolerance per modality (µs).
    tolerance_us: dict[Modality, int]
    #: How early a settled, in-order modality's next capture may land (µs, see passed).
    early_us: dict[Modality, int]
    grace_us: int
    idle_us: int
    max_wait_us: int
    #: Clock fit points before a modality's pairing with video is trusted.
    settle_points: int
    #: The task is reading a backlog (set by the agent from consumer lag).
    catching_up: bool = False
    #: While catching up: modalities whose topics still hold unread records.
    backlogged: frozenset[Modality] = frozenset()

    @classmethod
    def of(cls, s: AlignSettings) -> Readiness:
        """The rules configured by ``align.*``."""
        tolerance_us = {m: int(s.tolerances_ms.get(m.value, s.tolerance_ms) * 1000)
                        for m in Modality}
        return cls(required=frozenset(Modality(m) for m in s.required),
                   tolerance_us=tolerance_us,
                   early_us={m: min(tol, int(s.early_ms * 1000))
                             for m, tol in tolerance_us.items()},
                   grace_us=int(s.grace_ms * 1000), idle_us=int(s.idle_ms * 1000),
                   max_wait_us=int(s.max_wait_ms * 1000), settle_points=s.settle_points)

    def backlog(self, st: Stream) -> bool:
        """Whether ``st`` is read as a backlog (the task catching up, or a replayed stream)."""
        return self.catching_up or st.replay

    def deadline(self, st: Stream, end: int) -> int:
        """When a window ending at ``end`` goes out whatever it still waits for."""
        return end + st.lag_us + self.max_wait_us

    def settled(self, st: Stream, m: Modality) -> bool:
        """Whether a modality's pairing with video can be trusted yet."""
        if Modality.VIDEO not in st.last_seen:
            return True  # no video to pair against: hop windows on the stream's own clocks
        if m not in st.offset_known:
            return False
        for clock in (st.clocks.get(m), st.clocks.get(Modality.VIDEO)):
            if clock is not None and clock.ready and clock.points < self.settle_points:
                return False
        return True

    def early(self, st: Stream, m: Modality) -> int:
        """How early the next capture of ``m`` may land against its cadence (µs).

        ``early_ms`` once the modality is settled and its tokens come in ``seq`` order.
        Before it is settled its clock fit and offset estimate still move by more than
        that; and a watermark over tokens that overtake each other says less about what is
        still to come. Both get the wider pairing tolerance.
        """
        if m in st.reordered or not self.settled(st, m):
            return self.tolerance_us[m]
        return self.early_us[m]

    def expected(self, st: Stream, now_us: int) -> tuple[frozenset[Modality], frozenset[Modality]]:
        """Modalities to wait for, and modalities a window is partial without.

        Wait for the required ones (unless seen and then gone idle) and for every dense
        modality the stream is sending; a dead modality is named missing, never waited for.
        """
        seen = st.last_seen
        backlog = self.backlog(st)
        if backlog:
            # In a backlog a modality's records may simply not be fetched yet: none is idle.
            live = frozenset([m for m in seen if m in DENSE])
        elif now_us <= st.expect_until:
            return st.expect
        else:
            idle_before = now_us - self.idle_us
            live = frozenset([m for m, at in seen.items() if at >= idle_before and m in DENSE])
        check = self.required | live
        wait = check if len(live) == len(seen) else (self.required - (seen.keys() - live)) | live
        if backlog:
            return wait | (self.backlogged & DENSE), check
        # This holds until a live modality goes idle, or a token of another one arrives.
        st.live, st.expect = live, (wait, check)
        st.expect_until = min(seen[m] for m in live) + self.idle_us if live else 1 << 62
        return wait, check

    def passed(self, st: Stream, m: Modality, end: int) -> bool:
        """Whether no more of ``m`` can land before ``end`` (see the module docstring)."""
        if m in st.final:
            return True  # its last token came: none will land in this window
        mark = st.watermark.get(m)
        if mark is None:
            return False
        if mark >= end + self.grace_us:
            return True
        # The next capture is due one period after the last; if even early by ``early_ms``
        # it lands past the end, this window gets no more of this modality.
        period = st.clocks[m].ready_period
        return period is not None and mark + period - self.early(st, m) >= end

    def blocked(self, st: Stream, wait: frozenset[Modality], end: int) -> frozenset[Modality]:
        """The modalities of ``wait`` but video that have not passed ``end`` (see passed)."""
        marks, limit = st.watermark, end + self.grace_us
        blocked = []
        for m in wait:
            if m is Modality.VIDEO or m in st.final:
                continue
            mark = marks.get(m)
            if mark is None:
                blocked.append(m)
            elif mark < limit:
                period = st.clocks[m].ready_period
                if period is None or mark + period - self.early(st, m) < end:
                    blocked.append(m)
        return frozenset(blocked)

    @staticmethod
    def ended(st: Stream) -> bool:
        """Whether every dense modality the stream sent has had its ``final`` token."""
        final = st.final
        return bool(final) and all(m in final for m in st.last_seen if m in DENSE)

    @staticmethod
    def note_final(st: Stream, m: Modality, seq: int, *, final: bool) -> None:
        """Note a modality's last token, or a later token that resumes it."""
        if final:
            st.final[m] = max(seq, st.final.get(m, seq))
        elif seq > st.final[m]:
            del st.final[m]  # the stream sends this modality again
        else:
            return
        st.pending, st.plan, st.wake_us, st.expect_until = None, None, 0, 0
