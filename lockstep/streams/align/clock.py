"""Recovery of capture clocks from jittery device timestamps.

Pure and O(1) per token. A device stamps each capture with ``t_us`` and counts captures
with ``seq`` (including captures dropped before publishing). Capture happens at a steady
cadence, so ``t ≈ a + b·seq``: :class:`CaptureClock` fits that line by exponentially
forgotten least squares, which follows slow drift while averaging out timestamp jitter,
and answers the recovered time of any ``seq``. :class:`ClockLag` measures a modality's
transport lag against its fit, whose differences between modalities estimate how far one
clock runs ahead of another; :class:`LagFloor` bounds how early a stream's tokens arrive.
:mod:`lockstep.streams.align.clockguard` keeps tokens far off a fitted clock out.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockReport:
    """The state of one recovered clock, for metrics and windows."""

    ready: bool
    period_us: float | None
    jitter_us: float | None
    resets: int
    outliers: int


class CaptureClock:
    """Fits ``t_us = a + b·seq`` online for one (stream, modality).

    Args:
        forget: Weight kept by old points per new point (0.99 ≈ the last 100 captures).
        min_points: Points needed before recovered times are used.
        outlier_sigmas: A point further than this many residual sigma from the line is an
            outlier; it is not fitted and its raw time is kept.
        min_outlier_us: Floor of the outlier threshold (tiny residuals on clean clocks).
        reset_after: Consecutive outliers that mean the clock jumped: the fit restarts.

    Attributes:
        ready: True once enough points are fitted and the cadence is regular.
        ready_period: The fitted period once the clock is ready, else None.
    """

    __slots__ = ("_a", "_b", "_last_seq", "_limit2", "_min2", "_n", "_run", "_s0", "_sigmas2",
                 "_sx", "_sxx", "_sxy", "_sy", "_syy", "_var", "_x0", "_y0", "forget",
                 "min_outlier_us", "min_points", "outlier_sigmas", "outliers", "ready",
                 "ready_period", "reset_after", "resets")

    def __init__(self, forget: float = 0.995, min_points: int = 8, outlier_sigmas: float = 6.0,
                 min_outlier_us: float = 20_000.0, reset_after: int = 4) -> None:
        self.forget = forget
        self.min_points = min_points
        self.outlier_sigmas = outlier_sigmas
        self.min_outlier_us = min_outlier_us
        self.reset_after = reset_after
        self.resets = 0
        self.outliers = 0
        self._sigmas2 = outlier_sigmas * outlier_sigmas
        self._min2 = min_outlier_us * min_outlier_us
        self._clear()

    def _clear(self) -> None:
        self._x0: int | None = None
        self._y0 = 0
        self._n = 0
        self._s0 = self._sx = self._sy = self._sxx = self._sxy = self._syy = 0.0
        self._var = 0.0  # weighted residual variance of the fit
        self._limit2 = self._min2  # squared outlier threshold
        self._a = self._b = 0.0
        self._run = 0
        # Plain attributes, not properties: they are read several times per token.
        self.ready = False
        self.ready_period: float | None = None
        self._last_seq: int | None = None

    @property
    def points(self) -> int:
        """Captures fitted since the last (re)start."""
        return self._n

    @property
    def period_us(self) -> float | None:
        """The fitted time between consecutive captures."""
        return self._b if self._n >= 2 and self._b > 0 else None

    def report(self) -> ClockReport:
        """Current fit quality."""
        return ClockReport(self.ready, self.period_us,
                           math.sqrt(self._var) if self._n >= 2 else None,
                           self.resets, self.outliers)

    def time_of(self, seq: int) -> float | None:
        """Recovered capture time of ``seq`` (µs), or None while not ready."""
        if not self.ready or self._x0 is None:
            return None
        return self._y0 + self._a + self._b * (seq - self._x0)

    def line(self) -> tuple[int, int, float, float] | None:
        """The fit as ``(x0, y0, a, b)``: ``t = y0 + a + b·(seq - x0)``; None while not ready."""
        if not self.ready or self._x0 is None:
            return None
        return self._x0, self._y0, self._a, self._b

    def time_at(self, seq: int) -> float:
        """The fit's time of ``seq``, ready or not (see :meth:`time_of`)."""
        return self._y0 + self._a + self._b * (seq - (self._x0 or 0))

    @property
    def last_seq(self) -> int | None:
        """The highest ``seq`` fitted since the last (re)start."""
        return self._last_seq

    @property
    def slope_sigma(self) -> float:
        """The standard error of the fitted period (µs per capture; 0 before 3 points)."""
        det = self._s0 * self._sxx - self._sx * self._sx
        if self._n < 3 or det <= 1e-9:
            return 0.0
        return math.sqrt(self._var * self._s0 / det)

    def restart(self, points: list[tuple[int, int]]) -> None:
        """Drop the fit and start again from ``points`` (seq, t_us)."""
        self._restart()
        for seq, t_us in points:
            self.update(seq, t_us)

    def update(self, seq: int, t_us: int) -> int:
        """Fit one (seq, t) point and return the token's recovered capture time."""
        last = self._last_seq
        if last is not None and seq < last - 10_000:
            self._restart()  # the counter wrapped or the device restarted
            last = None
        x0 = self._x0
        if x0 is None:
            self._x0 = x0 = seq
            self._y0 = t_us
        elif seq - x0 > 100_000:
            self._rebase(seq - x0)
            x0 = seq  # the new origin
        x, y = float(seq - x0), float(t_us - self._y0)
        a, b = self._a, self._b
        n = self._n
        if n >= self.min_points:
            residual = y - a - b * x
            if residual * residual > self._limit2:
                self.outliers += 1
                self._run += 1
                if self._run >= self.reset_after:
                    self._restart()
                    return self.update(seq, t_us)
                return t_us
        self._run = 0
        f = self.forget
        s0 = self._s0 = f * self._s0 + 1.0
        sx = self._sx = f * self._sx + x
        sy = self._sy = f * self._sy + y
        sxx = self._sxx = f * self._sxx + x * x
        sxy = self._sxy = f * self._sxy + x * y
        syy = self._syy = f * self._syy + y * y
        self._n = n = n + 1
        if last is None or seq > last:
            self._last_seq = seq
        det = s0 * sxx - sx * sx
        if n >= 2 and det > 1e-9:
            self._b = b = (s0 * sxy - sx * sy) / det
            self._a = a = (sy - b * sx) / s0
            var = (syy - a * sy - b * sxy) / (s0 - 2.0 if s0 > 3.0 else 1.0)
            self._var = var = var if var > 0.0 else 0.0
            # Outliers lie beyond outlier_sigmas sigma and beyond min_outlier_us (squared).
            limit2 = self._sigmas2 * var
            self._limit2 = limit2 if limit2 > self._min2 else self._min2
            # The fit is against the capture counter, so it holds even when timestamps
            # jitter by more than a period; residuals far beyond the period mean the
            # captures are not periodic at all (event-driven): those keep their raw times.
            self.ready = ready = n >= self.min_points and b > 0 and var < 2.25 * b * b
            self.ready_period = b if ready else None
        if not self.ready:
            return t_us
        return round(self._y0 + a + b * x)

    def _rebase(self, dx: int) -> None:
        """Move the origin ``dx`` captures later, keeping the fit (bounds float error)."""
        shift = round(self._a + self._b * dx)
        s0, sx, sy = self._s0, self._sx, self._sy
        self._sxx += -2 * dx * sx + dx * dx * s0
        self._sxy += -dx * sy - shift * sx + dx * shift * s0
        self._syy += -2 * shift * sy + shift * shift * s0
        self._sx = sx - dx * s0
        self._sy = sy - shift * s0
        self._a += self._b * dx - shift
        if self._x0 is not None:
            self._x0 += dx
        self._y0 += shift

    def _restart(self) -> None:
        self.resets += 1
        self._clear()


class LagFloor:
    """The floor of ``arrival - capture`` over the last ``size`` tokens (sliding minimum).

    It bounds how early a stream's tokens can arrive: transport lag plus clock offset.
    O(1) amortised: a deque of (index, lag) whose lags increase from the front.
    """

    __slots__ = ("_count", "_q", "_size", "value")

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._count = 0
        self._q: deque[tuple[int, int]] = deque()
        self.value: int | None = None

    def push(self, arrival_us: int, capture_us: int) -> int:
        """Add one observation; return the current floor."""
        lag = arrival_us - capture_us
        q = self._q
        while q and q[-1][1] >= lag:
            q.pop()
        count = self._count
        q.append((count, lag))
        if q[0][0] <= count - self._size:
            q.popleft()
        self._count = count + 1
        self.value = value = q[0][1]
        return value

    @property
    def samples(self) -> int:
        """Observations seen."""
        return self._count


class ClockLag:
    """A low quantile of ``arrival - recovered capture`` over a modality's recent tokens.

    Each token's ``seq`` and arrival are kept, and the lags are measured against the
    clock's *current* fit, not the fit the token met on arrival. The difference of two
    modalities' figures estimates their clock offset (provided they travel alike); because
    both are measured on the fits in use, the estimate also cancels what is left of the
    fits' intercept error, which is what pairing across modalities needs.

    Args:
        size: Tokens kept (a ring).
        quantile: The quantile taken; low, since transport delay only adds.
        every: Tokens between recomputations while the fit is young (its slope still
            moves); the first 16 recompute each time.
        every_later: Tokens between recomputations once ``young`` tokens have come since
            the clock's last restart.
    """

    __slots__ = ("_arrivals", "_count", "_every", "_every_later", "_quantile", "_ref", "_resets",
                 "_seqs", "_size", "_young", "low", "samples")

    def __init__(self, size: int = 16, quantile: float = 0.1, every: int = 4,
                 every_later: int = 32, young: int = 256) -> None:
        self._seqs: list[int] = []
        self._arrivals: list[int] = []
        self._size = size
        self._quantile = quantile
        self._every = every
        self._every_later = every_later
        self._young = young
        self._count = 0
        self._resets = 0
        #: (seq, fitted time of seq, low lag) at the last recomputation.
        self._ref: tuple[int, float, float] | None = None
        #: The low lag as last computed (None while the clock is not ready).
        self.low: int | None = None
        #: Tokens kept (the clock's restarts clear them).
        self.samples = 0

    def push(self, seq: int, arrival_us: int, clock: CaptureClock) -> int | None:
        """Add one token (``arrival_us``: when it could leave, after its capture's end).

        Returns:
            The current low lag (µs) against the clock's fit; None while it is not ready.
        """
        if clock.resets != self._resets:  # the old seqs mean nothing to the new fit
            self._resets = clock.resets
            self._seqs.clear()
            self._arrivals.clear()
            self._ref = None
            self._count = self.samples = 0
        seqs = self._seqs
        count = self._count
        if len(seqs) < self._size:
            seqs.append(seq)
            self._arrivals.append(arrival_us)
            self.samples += 1
        else:
            slot = count % self._size
            seqs[slot] = seq
            self._arrivals[slot] = arrival_us
        self._count = count = count + 1
        every = self._every if count < self._young else self._every_later
        if count <= 16 or count % every == 0 or self._ref is None:
            self._measure(clock)
        return self.current(clock)

    def current(self, clock: CaptureClock) -> int | None:
        """The low lag against the fit as it is now (None while the clock is not ready).

        Between recomputations, the fit's move at the seq measured last is applied: the
        fit shifts a little with every token, and a stale figure would undo its correction.
        """
        ref = self._ref
        if ref is None or not clock.ready:
            self.low = None
        else:
            seq, then, low = ref
            self.low = round(low + then - clock.time_at(seq))
        return self.low

    def _measure(self, clock: CaptureClock) -> None:
        line = clock.line()
        if line is None:
            self._ref = None
            return
        x0, y0, a, b = line
        # Lags less the fit's constant part (y0 + a), which shifts them all alike.
        lags = sorted([arr - b * (seq - x0) for seq, arr in zip(
            self._seqs, self._arrivals, strict=True)])
        low = lags[int(self._quantile * (len(lags) - 1))] - y0 - a
        last = self._seqs[(self._count - 1) % self._size]
        self._ref = (last, y0 + a + b * (last - x0), low)
