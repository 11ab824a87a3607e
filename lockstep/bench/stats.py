"""Repetition statistics of the benchmarks: median and spread of a figure, stability.

Every figure a bench reports comes from several repetitions. :func:`spread` turns the
repetitions' values into a :class:`Spread` (median, min-max, interquartile range); the JSON
form is ``{"median", "min", "max", "iqr": [q1, q3], "n", "values"}``. :func:`stable` says
whether a repeated measurement (a calibration, a reference workload) moved less than a
given share of its median between repetitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Spread:
    """The repetitions of one figure."""

    median: float
    low: float
    high: float
    q1: float
    q3: float
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        """Repetitions."""
        return len(self.values)

    @property
    def relative(self) -> float:
        """``(max - min) / |median|``: 0 for identical repetitions (inf around a zero median)."""
        width = self.high - self.low
        if width == 0:
            return 0.0
        return width / abs(self.median) if self.median else float("inf")

    def as_json(self) -> dict[str, Any]:
        """The JSON form (rounded to 6 significant digits)."""
        return {"median": _round(self.median), "min": _round(self.low),
                "max": _round(self.high), "iqr": [_round(self.q1), _round(self.q3)],
                "n": self.n, "values": [_round(v) for v in self.values]}


def spread(values: Iterable[float | None]) -> Spread | None:
    """Median and spread of the values that are not None (None when there are none)."""
    kept = tuple(float(v) for v in values if v is not None)
    if not kept:
        return None
    q1, median, q3 = (float(x) for x in np.percentile(kept, [25, 50, 75]))
    return Spread(median, min(kept), max(kept), q1, q3, kept)


def spread_json(values: Iterable[float | None]) -> dict[str, Any] | None:
    """:func:`spread` in its JSON form."""
    s = spread(values)
    return None if s is None else s.as_json()


def per_side(runs: Sequence[Mapping[str, Mapping[str, Any]]], metric: str,
             sides: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """``{side: spread of runs[i][side][metric]}`` over the repetitions ``runs``."""
    return {side: spread_json(run[side][metric] for run in runs) for side in sides}


def ratio_spread(runs: Sequence[Mapping[str, Mapping[str, Any]]],
                 fn: Callable[[Mapping[str, Mapping[str, Any]]], float | None]
                 ) -> dict[str, Any] | None:
    """The spread of a ratio computed within each repetition (never a ratio of medians)."""
    return spread_json(fn(run) for run in runs)


def divide(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def stable(values: Sequence[float], tolerance: float) -> bool:
    """Whether the repetitions stay within ``tolerance`` x their median of each other."""
    s = spread(values)
    return s is not None and s.relative <= tolerance


def median_of(summary: Mapping[str, Any] | None) -> float | None:
    """The median of a JSON spread (None for a missing figure)."""
    if summary is None:
        return None
    value = summary.get("median")
    return None if value is None else float(value)


def _round(value: float) -> float:
    if value == 0 or not np.isfinite(value):
        return value
    return float(f"{value:.6g}")
