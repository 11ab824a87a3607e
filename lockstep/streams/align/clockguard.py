"""Tokens far off their modality's recovered capture clock (part of the ``align`` stage).

Pure. Once a :class:`~lockstep.streams.align.clock.CaptureClock` is fitted it predicts the time of
any ``seq``, so one token with a spoofed or corrupt ``seq`` or ``t_us`` shows, and is kept
out before it can move the stream's anchors, watermarks or windows. A producer that really
re-based (its counter or clock jumped) shows as a run of tokens that agree with each other
but not with the old fit, and the clock restarts from them.
"""

from __future__ import annotations

from lockstep.errors import ReasonCode
from lockstep.streams.align.clock import CaptureClock
from lockstep.topics.schemas import Modality


class ClockGuard:
    """Tells a token far off its modality's capture clock from a producer that re-based.

    A ready clock predicts the time of any ``seq``. A token whose ``t_us`` is further from
    that than ``max_error_us``, plus what the fitted period may be off over the captures
    extrapolated, is off the clock: its ``seq`` or ``t_us`` is spoofed or corrupt. Before
    the clock is ready (or in an event-driven modality, whose clock never is), a ``seq``
    further than ``max_seq_jump`` from the last one fitted is off. ``rebase_after``
    consecutive tokens off the clock that agree with each other mean the producer really
    re-based (its clock or counter jumped): the clock restarts from them.

    Args:
        max_error_us: Error tolerated near the fit (µs).
        max_seq_jump: Largest ``seq`` distance accepted while the clock is not ready.
        rebase_after: Consecutive agreeing tokens off the clock that re-base it.
    """

    #: Share of the period the fit may be off per capture extrapolated (drift, cadence
    #: changes), on top of 8 standard errors of the fitted period; at most half a period.
    SLOPE_SHARE = 0.05

    def __init__(self, max_error_us: float, max_seq_jump: int, rebase_after: int) -> None:
        self.max_error_us = max_error_us
        self.max_seq_jump = max_seq_jump
        self.rebase_after = rebase_after
        #: The code of the last reason :meth:`check` returned (``seq_jump`` or ``off_clock``).
        self.code = ReasonCode.OFF_CLOCK

    def check(self, clock: CaptureClock, runs: dict[Modality, list[tuple[int, int]]],
              modality: Modality, seq: int, t_us: int) -> str | None:
        """None when a token fits its modality's clock; else why it does not.

        Args:
            clock: The modality's clock (changed here only when it re-bases).
            runs: Per modality, the (seq, t_us) of the consecutive tokens off the clock
                just before this one; updated. When this token completes a run of
                ``rebase_after`` that agree, the clock restarts from the others and this
                one is accepted.
            modality: The token's modality (its clock's name in the reason).
            seq: The token's ``seq``.
            t_us: The token's ``t_us``.
        """
        if not runs:  # the usual case: close to a fitted clock, or a small step in seq
            expected = clock.time_of(seq)
            if expected is not None:
                if -self.max_error_us <= t_us - expected <= self.max_error_us:
                    return None
            else:
                last = clock.last_seq
                if last is None or -self.max_seq_jump <= seq - last <= self.max_seq_jump:
                    return None
        reason = self._misfit(clock, seq, t_us, modality)
        run = runs.get(modality)
        if reason is None:
            if run:
                del runs[modality]
            return None
        if run is None:
            run = runs[modality] = []
        elif not self._agree(clock, run[-1], seq, t_us):
            run.clear()
        run.append((seq, t_us))
        if len(run) < self.rebase_after:
            return reason
        clock.restart(run[:-1])
        del runs[modality]
        return None

    def _tolerance(self, clock: CaptureClock, period: float, captures: int) -> float:
        per_capture = min(period / 2, self.SLOPE_SHARE * period + 8 * clock.slope_sigma)
        return self.max_error_us + per_capture * captures

    def _misfit(self, clock: CaptureClock, seq: int, t_us: int, what: Modality) -> str | None:
        last = clock.last_seq
        line = clock.line()
        if line is None:
            if last is None or abs(seq - last) <= self.max_seq_jump:
                return None
            self.code = ReasonCode.SEQ_JUMP
            return (f"seq {seq} is {abs(seq - last)} captures from the stream's last {what} "
                    f"seq {last} (over align.max_seq_jump {self.max_seq_jump})")
        x0, y0, a, b = line
        expected = y0 + a + b * (seq - x0)
        captures = abs(seq - last) if last is not None else 0
        if abs(t_us - expected) <= self._tolerance(clock, b, captures):
            return None
        self.code = ReasonCode.OFF_CLOCK
        return (f"seq {seq} at t_us {t_us} is far off the stream's {what} clock (expected "
                f"seq ≈ {round(x0 + (t_us - y0 - a) / b)} at that t_us)")

    def _agree(self, clock: CaptureClock, prev: tuple[int, int], seq: int, t_us: int) -> bool:
        """Whether two tokens off the clock lie on one capture clock of their own."""
        captures = abs(seq - prev[0])
        if captures == 0:
            return False
        period = clock.ready_period
        if period is None:  # no cadence to hold them to (yet): their counters must agree
            return captures <= self.max_seq_jump
        spread = abs(t_us - prev[1] - period * (seq - prev[0]))
        return spread <= self.max_error_us + period * captures / 4
