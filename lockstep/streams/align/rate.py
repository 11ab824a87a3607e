"""Adaptive frame rate: sample windows down while the SLA is at risk (part of ``align``).

Pure. :class:`RateController` watches an SLA-risk ratio per emitted window (time already
spent against the share of the budget this stage may use) and doubles the anchor stride
after ``hold`` windows over budget, halving it back after ``hold`` windows well under it.
:func:`effective_fps` estimates a stream's real frame rate from its frames' capture times.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

FALLBACK_FPS = 24.0


def effective_fps(frame_times_us: Sequence[int], period_us: float | None = None) -> float:
    """A stream's frame rate: the recovered clock's, else the median inter-arrival.

    Args:
        frame_times_us: Recent capture times of the stream's frames, any order.
        period_us: The recovered capture period, when the clock is fitted.

    Returns:
        Frames per second; 24 when fewer than two frames are known.
    """
    if period_us is not None and period_us > 0:
        return 1e6 / period_us
    times = sorted(frame_times_us)
    gaps = [b - a for a, b in pairwise(times) if b > a]
    if not gaps:
        return FALLBACK_FPS
    return 1e6 / statistics.median(gaps)


@dataclass
class RateController:
    """Chooses the anchor stride (1 = every frame) from the SLA risk of recent windows.

    Attributes:
        max_stride: Largest stride (one window per ``max_stride`` frames).
        hold: Consecutive windows over (or well under) budget before changing the stride.
        high: Risk at or above which a window counts as over budget.
        low: Risk at or below which a window counts as recovered.
        enabled: False for SLO classes that must not drop frames.
        floor: Smallest stride to return (raised while the SLO class is in degraded mode).
    """

    max_stride: int = 4
    hold: int = 8
    high: float = 1.0
    low: float = 0.5
    enabled: bool = True
    floor: int = 1
    stride: int = 1
    _over: int = 0
    _under: int = 0

    def observe(self, risk: float) -> int:
        """Take the risk of one window (spent / budget share); return the stride to use."""
        if not self.enabled:
            return 1
        if risk >= self.high:
            self._over, self._under = self._over + 1, 0
        elif risk <= self.low:
            self._over, self._under = 0, self._under + 1
        else:
            self._over = self._under = 0
        if self._over >= self.hold and self.stride < self.max_stride:
            self.stride, self._over = min(self.max_stride, self.stride * 2), 0
        elif self._under >= self.hold and self.stride > 1:
            self.stride, self._under = max(1, self.stride // 2), 0
        return max(self.stride, min(self.floor, self.max_stride))
