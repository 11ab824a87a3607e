"""The capacity search: which stream count to try next, and what the capacity is.

Pure. A step runs ``streams`` streams for a while and is *held* when its SLO attainment
(shed requests counted as misses) reaches the target and the pipeline answered what it
was sent (see :func:`held`). The search doubles the stream count from ``start`` until a
step fails, then bisects between the largest held count below the smallest failed one and
that failed one, down to a resolution of one stream (or an eighth of the count, for large
counts). Capacity is that largest held count below the smallest failure (0 when even the
first step failed at one stream).

A count tried several times is held when most of its runs held (:func:`aggregate`);
:func:`plan_next` runs the capacity found and the first count above it that failed
``confirm`` times each (and breaks ties) before the capacity is final, so one lucky or
unlucky step on a noisy machine does not set it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """The outcome of one step."""

    streams: int
    held: bool
    #: Why the step was not held ("" when held).
    why: str = ""


def held(attainment: float | None, coverage: float | None, target: float,
         min_coverage: float, producer_ok: bool = True) -> tuple[bool, str]:
    """Whether a step held, and what was not met.

    Args:
        attainment: SLO attainment of the step (None: nothing answered).
        coverage: Windows answered per video frame published (None: unknown).
        target: The attainment a step must reach.
        min_coverage: The coverage a step must reach (windows silently lost are misses too).
        producer_ok: The producers published every token (a slow producer is no capacity).
    """
    missed = []
    if attainment is None:
        missed.append("nothing was answered")
    elif attainment < target:
        missed.append(f"SLO attainment {attainment * 100:.2f} % < {target * 100:g} %")
    if coverage is not None and coverage < min_coverage:
        missed.append(f"answered {coverage * 100:.1f} % of the frames' windows "
                      f"< {min_coverage * 100:g} %")
    if not producer_ok:
        missed.append("the producers did not deliver every token")
    return not missed, "; ".join(missed)


def capacity(history: Sequence[Step]) -> int:
    """The largest held stream count below the smallest failed one (0 if none held)."""
    failed = [s.streams for s in history if not s.held]
    ceiling = min(failed) if failed else None
    below = [s.streams for s in history if s.held and (ceiling is None or s.streams < ceiling)]
    return max(below, default=0)


def next_streams(history: Sequence[Step], start: int = 1, limit: int = 256) -> int | None:
    """The stream count to try next, or None when the capacity is known."""
    if not history:
        return max(1, min(start, limit))
    tried = {s.streams for s in history}
    failed = [s.streams for s in history if not s.held]
    lo = capacity(history)
    if not failed:
        nxt = min(limit, max(lo * 2, lo + 1))
        return None if nxt in tried else nxt
    hi = min(failed)
    if lo == 0:  # even the smallest count tried failed: go down towards one stream
        nxt = hi // 2
        return None if nxt < 1 or nxt in tried else nxt
    if hi - lo <= max(1, lo // 8):
        return None
    nxt = (lo + hi) // 2
    return None if nxt in tried else nxt


def aggregate(history: Sequence[Step]) -> list[Step]:
    """One step per stream count, held when more than half of its runs held."""
    runs: dict[int, list[Step]] = {}
    for step in history:
        runs.setdefault(step.streams, []).append(step)
    return [Step(n, sum(s.held for s in group) * 2 > len(group),
                 "; ".join(dict.fromkeys(s.why for s in group if s.why)))
            for n, group in sorted(runs.items())]


def plan_next(history: Sequence[Step], start: int = 1, limit: int = 256,
              confirm: int = 1) -> int | None:
    """The stream count to run next, with repeated runs at the boundary; None when known.

    A count whose runs are tied is run again (up to ``confirm`` runs); once the search
    has converged, the capacity it found and the smallest failed count above it run until
    each has ``confirm`` runs. Their repeats may overturn either (an unlucky failure, a
    lucky hold), and the search then resumes from the new boundary.
    """
    runs = Counter(s.streams for s in history)
    held_runs = Counter(s.streams for s in history if s.held)
    for n in sorted(runs):
        if held_runs[n] * 2 == runs[n] and runs[n] < confirm:
            return n
    summary = aggregate(history)
    nxt = next_streams(summary, start, limit)
    if nxt is not None:
        return nxt
    found = capacity(summary)
    if found and runs[found] < confirm:
        return found
    above = min((s.streams for s in summary if not s.held and s.streams > found), default=None)
    return above if above is not None and runs[above] < confirm else None


def recovery_seconds(timeline: Sequence[tuple[float, float | None, float]], overload_end: float,
                     target: float, hold: int = 3) -> float | None:
    """Seconds from the end of an overload until attainment is back at ``target``.

    Args:
        timeline: Per interval, in order: (end time, attainment, requests answered or shed).
        overload_end: When the overload stopped (same clock as the end times).
        target: The attainment that counts as recovered.
        hold: Consecutive intervals (with answers) that must meet ``target``.

    Returns:
        The start of the first run of ``hold`` intervals at target (fewer at the end of the
        timeline, at least one), less ``overload_end``; 0 when it never fell below; None
        when it never recovered.
    """
    after: list[tuple[float, bool]] = []
    start = None
    for t_end, attainment, answered in timeline:
        if t_end > overload_end and answered > 0:
            after.append((start if start is not None else t_end,
                          attainment is not None and attainment >= target))
        start = t_end
    for i, (t_start, _) in enumerate(after):
        run = after[i:i + hold]
        if all(ok for _, ok in run):
            return round(max(0.0, t_start - overload_end), 1)
    return None


#: RSS growth over a soak (last quarter against the first, after a warm-up tenth) that
#: still counts as flat.
RSS_FLAT = 0.10


def rss_growth(values: Sequence[float]) -> float | None:
    """Relative growth of a memory series: median of the last quarter over the first.

    The first tenth of the samples (allocations that settle after start) is left out.
    None with fewer than 8 samples.
    """
    if len(values) < 8:
        return None
    rest = list(values[len(values) // 10:])
    quarter = max(1, len(rest) // 4)
    first = sorted(rest[:quarter])[quarter // 2]
    last = sorted(rest[-quarter:])[quarter // 2]
    return (last - first) / first if first else None
