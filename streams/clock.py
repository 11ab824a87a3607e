"""Recovery of capture clocks from jittery device timestamps.

Pure and O(1) per token. A device stamps each capture with ``t_us`` and counts captures
with ``seq`` (including captures dropped before publishing). Capture happens at a steady
cadence, so ``t ≈ a + b·seq``: :class:`CaptureClock` fits that line by exponentially
forgotten least squares, which follows slow drift while averaging out timestamp jitter,
and answers the recovered time of any ``seq``. :class:`OffsetEstimator` estimates how far
one modality's clock runs ahead of another's from the floor of their transport lags.
"""

from __future__ import annotations

import heapq
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
    """

    def __init__(self, forget: float = 0.995, min_points: int = 8, outlier_sigmas: float = 6.0,
                 min_outlier_us: float = 20_000.0, reset_after: int = 4) -> None:
        self.forget = forget
        self.min_points = min_points
        self.outlier_sigmas = outlier_sigmas
        self.min_outlier_us = min_outlier_us
        self.reset_after = reset_after
        self.resets = 0
        self.outliers = 0
        self._clear()

    def _clear(self) -> None:
        self._x0: int | None = None
        self._y0 = 0
        self._n = 0
        self._s0 = self._sx = self._sy = self._sxx = self._sxy = self._syy = 0.0
        self._var = 0.0  # weighted residual variance of the fit
        self._a = self._b = 0.0
        self._run = 0
        self._ready = False
        self._last_seq: int | None = None

    @property
    def ready(self) -> bool:
        """True once enough points are fitted and the cadence is regular."""
        return self._ready

    def _update_ready(self) -> None:
        # The fit is against the capture counter, so it holds even when timestamps jitter
        # by more than a period; residuals far beyond the period mean the captures are not
        # periodic at all (event-driven), and such a stream keeps its raw times.
        self._ready = (self._n >= self.min_points and self._b > 0
                       and self._var < 2.25 * self._b * self._b)

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

    def update(self, seq: int, t_us: int) -> int:
        """Fit one (seq, t) point and return the token's recovered capture time."""
        last = self._last_seq
        if last is not None and seq < last - 10_000:
            self._restart()  # the counter wrapped or the device restarted
            last = None
        if self._x0 is None:
            self._x0, self._y0 = seq, t_us
        if seq - self._x0 > 100_000:
            self._rebase(seq - self._x0)
        x, y = float(seq - self._x0), float(t_us - self._y0)
        n = self._n
        if n >= self.min_points:
            residual = y - (self._a + self._b * x)
            limit = self.outlier_sigmas * math.sqrt(self._var)
            if limit < self.min_outlier_us:
                limit = self.min_outlier_us
            if residual > limit or -residual > limit:
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
        n = self._n = n + 1
        if last is None or seq > last:
            self._last_seq = seq
        det = s0 * sxx - sx * sx
        if n >= 2 and det > 1e-9:
            b = self._b = (s0 * sxy - sx * sy) / det
            a = self._a = (sy - b * sx) / s0
            dof = s0 - 2.0 if s0 > 3.0 else 1.0
            var = (syy - a * sy - b * sxy) / dof
            self._var = var if var > 0.0 else 0.0
        self._update_ready()
        if not self._ready:
            return t_us
        return round(self._y0 + self._a + self._b * x)

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


class _SlidingMin:
    """Minimum of the last ``size`` values, O(1) amortised (monotonic deque)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._count = 0
        self._q: deque[tuple[int, int]] = deque()

    def push(self, value: int) -> int:
        while self._q and self._q[-1][1] >= value:
            self._q.pop()
        self._q.append((self._count, value))
        if self._q[0][0] <= self._count - self._size:
            self._q.popleft()
        self._count += 1
        return self._q[0][1]

    @property
    def count(self) -> int:
        return self._count


class LagFloor:
    """The floor of ``arrival - capture`` over recent tokens: transport lag plus clock offset.

    ``value``, the minimum over a sliding window, bounds how early tokens can arrive (used
    for deadlines). ``low``, a low quantile of the same window, is the steadier statistic
    for comparing two modalities of one stream: their difference estimates the clock offset,
    provided they travel alike.
    """

    def __init__(self, size: int = 256, quantile: float | None = 0.1, every: int = 16) -> None:
        self._min = _SlidingMin(size)
        self._ring: list[int] = []
        self._ring_size = min(size, 128)
        self._quantile = quantile
        self._every = every
        self.value: int | None = None
        self.low: int | None = None

    def push(self, arrival_us: int, capture_us: int) -> int:
        """Add one observation; return the current floor."""
        lag = arrival_us - capture_us
        n = self._min.count
        self.value = self._min.push(lag)
        if self._quantile is not None:
            ring = self._ring
            if len(ring) < self._ring_size:
                ring.append(lag)
            else:
                ring[n % self._ring_size] = lag
            if n < 16 or (n + 1) % self._every == 0:
                k = int(self._quantile * (len(ring) - 1))
                self.low = heapq.nsmallest(k + 1, ring)[-1]
        return self.value

    @property
    def samples(self) -> int:
        """Observations seen."""
        return self._min.count
