"""The engine's latency model: P95 batch latency per batch size and degradation level.

Learned online from the engine's own timings. For each (level, size) it keeps the last
``window`` observations and answers their 95th percentile — the tail, not the mean, is what
breaks a deadline. Sizes never observed are interpolated between the nearest observed sizes
(extrapolated along the last observed slope, or the prior's per-item cost), and a
degradation level never observed is scaled from full service by its token fraction.
Estimates are kept monotone in the batch size.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyPrior:
    """What to assume before the engine has been timed: ``fixed + per_item * n``."""

    fixed_us: int = 20_000
    per_item_us: int = 2_000
    #: Share of a batch's latency that does not shrink with the output-token budget
    #: (prefill, vision encoder); used to scale levels that were never observed.
    fixed_share: float = 0.4


class LatencyModel:
    """P95 latency of a batch by (degradation level, batch size), learned online."""

    def __init__(self, prior: LatencyPrior | None = None, *,
                 token_fractions: tuple[float, ...] = (1.0,), window: int = 64,
                 min_samples: int = 3, quantile: float = 95.0) -> None:
        self.prior = prior or LatencyPrior()
        self.token_fractions = token_fractions
        self.window = window
        self.min_samples = min_samples
        self.quantile = quantile
        self._samples: dict[tuple[int, int], deque[int]] = {}
        self._p95: dict[tuple[int, int], int] = {}
        self._sizes: dict[int, list[int]] = {}

    def observe(self, size: int, latency_us: int, level: int = 0) -> None:
        """Record one batch's latency (microseconds)."""
        key = (level, size)
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = deque(maxlen=self.window)
        samples.append(latency_us)
        if len(samples) >= self.min_samples:
            self._p95[key] = int(np.percentile(np.fromiter(samples, dtype=np.int64),
                                               self.quantile))
            sizes = self._sizes.setdefault(level, [])
            if size not in sizes:
                bisect.insort(sizes, size)

    def samples(self, size: int, level: int = 0) -> int:
        """How many timings of this (level, size) the model holds."""
        return len(self._samples.get((level, size), ()))

    def expected_us(self, size: int, level: int = 0) -> int:
        """P95 latency of a batch of ``size`` at ``level`` (monotone in ``size``)."""
        size = max(1, size)
        estimate = self._learned(size, level)
        if estimate is None and level:
            full = self._learned(size, 0)
            if full is not None:
                estimate = int(full * self._scale(level))
        if estimate is None:
            estimate = int((self.prior.fixed_us + self.prior.per_item_us * size)
                           * self._scale(level))
        return estimate

    def _learned(self, size: int, level: int) -> int | None:
        sizes = self._sizes.get(level)
        if not sizes:
            return None
        p95 = self._p95
        i = bisect.bisect_left(sizes, size)
        if i < len(sizes) and sizes[i] == size:
            value = p95[(level, size)]
        elif i == 0:  # smaller than anything seen: the smallest seen bounds it from above
            value = p95[(level, sizes[0])]
        elif i == len(sizes):  # larger than anything seen: extend the last slope
            last = sizes[-1]
            slope = self._slope(level, sizes) if len(sizes) >= 2 else self.prior.per_item_us
            value = p95[(level, last)] + int(max(slope, 0) * (size - last))
        else:
            lo, hi = sizes[i - 1], sizes[i]
            frac = (size - lo) / (hi - lo)
            value = int(p95[(level, lo)] + frac * (p95[(level, hi)] - p95[(level, lo)]))
        # Monotone: a bigger batch is never predicted faster than a smaller seen one.
        below = [p95[(level, s)] for s in sizes[:i]]
        return max([value, *below])

    def _slope(self, level: int, sizes: list[int]) -> float:
        a, b = sizes[-2], sizes[-1]
        return (self._p95[(level, b)] - self._p95[(level, a)]) / (b - a)

    def _scale(self, level: int) -> float:
        if level <= 0 or level >= len(self.token_fractions):
            return 1.0 if level <= 0 else self._scale(len(self.token_fractions) - 1)
        share = self.prior.fixed_share
        return share + (1.0 - share) * self.token_fractions[level]
