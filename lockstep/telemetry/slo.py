"""Breach detection and degraded mode (SLO accounting).

Pure: time is passed in. :class:`SloMonitor` keeps a sliding window of latency samples per
(stage, SLO class) and, every ``evaluate_ms``, compares the window's P99 with the stage's
budget (:meth:`~lockstep.config.settings.SloSettings.stage_budget_ms`). ``breach_after``
consecutive evaluations over budget raise a breach, and so does one whose latest samples
(those since the evaluation before) have their median over ``breach_at_once_ratio`` x
budget: most of what runs now misses, which a tail of slow samples never shows. It
clears after ``recover_after`` consecutive evaluations under ``recover_ratio`` x
budget (hysteresis: between the two, nothing changes), and not before it has lasted its
hold: ``hold_ms``, doubled (up to ``hold_max_ms``) each time a breach comes back within the
hold that ended the last one, so a load that fits only in degraded mode stays there instead
of flapping. While a breach lasts it is announced again every ``ttl_ms / 3``, so that
:class:`Degradation`, which turns breach and recovery events into the degraded mode of each
class, can forget a breach whose process died without announcing its recovery.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import numpy.typing as npt

from lockstep.config.settings import SloSettings

BREACH = "breach"
RECOVERED = "recovered"
#: Samples kept per (stage, class) whatever the window's length.
_MAX_SAMPLES = 8192
_Values = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Transition:
    """A breach raised (or re-announced) or cleared by one evaluation."""

    kind: str
    stage: str
    slo_class: str
    p99_ms: float
    budget_ms: float
    samples: int
    consecutive: int
    degrade: bool
    #: A breach announced again while it lasts (not a new one).
    renewed: bool = False


class Samples:
    """The latest latency samples of one track: a ring of (taken at, seconds) in two arrays.

    New samples wait in two lists (an append is cheap on the hot path) and go into the
    ring in one array copy when read or when ``capacity`` are waiting. An evaluation then
    selects its window's samples with a comparison over an array, not a walk over Python
    tuples: at 30 streams a busy stage holds thousands of samples, evaluated four times a
    second on the event loop of every role. The oldest sample is overwritten once
    ``capacity`` are held; the order of the samples does not matter (a percentile, a
    median).
    """

    __slots__ = ("_held", "_new_at", "_new_seconds", "_next", "at_us", "seconds")

    def __init__(self, capacity: int = _MAX_SAMPLES) -> None:
        self.at_us = np.zeros(capacity, dtype=np.int64)
        self.seconds = np.zeros(capacity, dtype=np.float64)
        self._held = 0
        self._next = 0
        self._new_at: list[int] = []
        self._new_seconds: list[float] = []

    def __len__(self) -> int:
        return min(self._held + len(self._new_seconds), len(self.seconds))

    def append(self, at_us: int, seconds: float) -> None:
        """Add one sample (over the oldest when full)."""
        self._new_at.append(at_us)
        self._new_seconds.append(seconds)
        if len(self._new_seconds) >= len(self.seconds):
            self._flush()

    def extend(self, at_us: int, seconds: Iterable[float]) -> None:
        """Add samples all taken at ``at_us``, in order."""
        before = len(self._new_seconds)
        self._new_seconds.extend(seconds)
        self._new_at.extend(repeat(at_us, len(self._new_seconds) - before))
        if len(self._new_seconds) >= len(self.seconds):
            self._flush()

    def after(self, at_us: int) -> npt.NDArray[np.float64]:
        """The samples taken after ``at_us`` (a copy)."""
        self._flush()
        n = self._held
        return self.seconds[:n][self.at_us[:n] > at_us]

    def values(self) -> list[float]:
        """Every sample held, oldest first."""
        self._flush()
        n, i = self._held, self._next
        ring = self.seconds[:n]
        return [float(v) for v in (np.concatenate([ring[i:], ring[:i]]) if i < n else ring)]

    def _flush(self) -> None:
        if not self._new_seconds:
            return
        capacity = len(self.seconds)
        at = np.asarray(self._new_at[-capacity:], dtype=np.int64)
        values = np.asarray(self._new_seconds[-capacity:], dtype=np.float64)
        self._new_at.clear()
        self._new_seconds.clear()
        while len(values):
            i = self._next
            n = min(len(values), capacity - i)
            self.at_us[i:i + n] = at[:n]
            self.seconds[i:i + n] = values[:n]
            self._next = (i + n) % capacity
            self._held = min(self._held + n, capacity)
            at, values = at[n:], values[n:]


@dataclass
class _Track:
    samples: Samples = field(default_factory=Samples)
    over: int = 0
    under: int = 0
    breached: bool = False
    announced_us: int = 0
    raised_us: int = 0
    recovered_us: int | None = None
    hold_us: int = 0


class SloMonitor:
    """Sliding-window P99 per stage and SLO class against the budget tree.

    Observations without a class count against the default class.
    """

    def __init__(self, slo: SloSettings) -> None:
        self._slo = slo
        self._b = slo.breach
        self._tracks: dict[tuple[str, str], _Track] = {}
        self._evaluated_us: int | None = None
        self._lock = threading.Lock()  # observations may come from engine threads

    def observe(self, stage: str, slo_class: str, seconds: float, now_us: int) -> None:
        """Add one latency sample taken at ``now_us``."""
        key = (stage, slo_class or self._slo.default_class)
        with self._lock:
            track = self._tracks.get(key)
            if track is None:
                track = self._tracks[key] = _Track()
            track.samples.append(now_us, seconds)

    def observe_many(self, stage: str, slo_class: str, seconds: Iterable[float],
                     now_us: int) -> None:
        """Add latency samples all taken at ``now_us``."""
        key = (stage, slo_class or self._slo.default_class)
        with self._lock:
            track = self._tracks.get(key)
            if track is None:
                track = self._tracks[key] = _Track()
            track.samples.extend(now_us, seconds)

    def due(self, now_us: int) -> bool:
        """Whether an evaluation is due at ``now_us``."""
        return (self._evaluated_us is None
                or now_us - self._evaluated_us >= self._b.evaluate_ms * 1000)

    def evaluate(self, now_us: int) -> list[Transition]:
        """Evaluate every (stage, class) if due; return the breaches raised or cleared."""
        if not self.due(now_us):
            return []
        horizon = now_us - int(self._b.window_ms * 1000)
        since = self._evaluated_us
        self._evaluated_us = now_us
        out = []
        with self._lock:
            snapshot = []
            for key, track in self._tracks.items():
                values = track.samples.after(horizon - 1)
                latest = values if since is None else track.samples.after(since)
                snapshot.append((key, track, values, latest))
        for (stage, slo_class), track, values, latest in snapshot:
            transition = self._judge(stage, slo_class, track, values, latest, now_us)
            if transition is not None:
                out.append(transition)
        return out

    def withdraw(self, now_us: int) -> list[Transition]:
        """Clear every breach this monitor holds: its process is stopping.

        Other processes forget a breach that is not re-announced only after
        ``breach.ttl_ms`` (for a process that died); one that stops in an orderly way says
        so at once, or a role scaled down during a breach would keep every class it named
        in degraded mode for that long. The transitions carry no P99 (no evidence).
        """
        out = []
        with self._lock:
            for (stage, slo_class), track in self._tracks.items():
                if not track.breached:
                    continue
                track.breached, track.recovered_us = False, now_us
                track.over = track.under = 0
                out.append(Transition(RECOVERED, stage, slo_class, 0.0,
                                      self._slo.stage_budget_ms(stage, slo_class), 0, 0,
                                      stage in self._b.degrade_on))
        return out

    def breached(self) -> set[tuple[str, str]]:
        """The (stage, class) pairs in breach now."""
        return {key for key, track in self._tracks.items() if track.breached}

    def _judge(self, stage: str, slo_class: str, track: _Track, values: _Values,
               latest: _Values, now_us: int) -> Transition | None:
        b = self._b
        budget_ms = self._slo.stage_budget_ms(stage, slo_class)
        # An empty window counts as under budget (nothing ran, nothing was slow).
        p99_ms = float(np.percentile(values, 99)) * 1e3 if len(values) else 0.0
        if 0 < len(values) < b.min_samples:
            return self._reannounce(stage, slo_class, track, budget_ms, p99_ms, len(values),
                                    now_us)
        if p99_ms > budget_ms:
            track.over, track.under = track.over + 1, 0
        elif p99_ms <= budget_ms * b.recover_ratio:
            track.over, track.under = 0, track.under + 1
        else:
            track.over = track.under = 0
        degrade = stage in b.degrade_on
        if not track.breached and (track.over >= b.breach_after
                                   or self._most_miss(latest, budget_ms)):
            self._hold(track, now_us)
            track.breached, track.announced_us, track.raised_us = True, now_us, now_us
            return Transition(BREACH, stage, slo_class, p99_ms, budget_ms, len(values),
                              track.over, degrade)
        if (track.breached and track.under >= b.recover_after
                and now_us - track.raised_us >= track.hold_us):
            track.breached, track.recovered_us = False, now_us
            return Transition(RECOVERED, stage, slo_class, p99_ms, budget_ms, len(values),
                              track.under, degrade)
        return self._reannounce(stage, slo_class, track, budget_ms, p99_ms, len(values),
                                now_us)

    def _most_miss(self, latest: _Values, budget_ms: float) -> bool:
        """Whether the latest samples are enough and their median is over the ratio."""
        return (len(latest) >= self._b.min_samples and _median_ms(latest)
                > budget_ms * self._b.breach_at_once_ratio)

    def _hold(self, track: _Track, now_us: int) -> None:
        """Set how long the breach being raised lasts at least (longer when it flaps)."""
        base, most = int(self._b.hold_ms * 1000), int(self._b.hold_max_ms * 1000)
        came_back = (track.recovered_us is not None
                     and now_us - track.recovered_us < max(track.hold_us, base))
        track.hold_us = min(max(most, base), 2 * track.hold_us) if came_back else base

    def _reannounce(self, stage: str, slo_class: str, track: _Track, budget_ms: float,
                    p99_ms: float, samples: int, now_us: int) -> Transition | None:
        if not track.breached or now_us - track.announced_us < self._b.ttl_ms * 1000 / 3:
            return None
        track.announced_us = now_us
        return Transition(BREACH, stage, slo_class, p99_ms, budget_ms, samples, track.over,
                          stage in self._b.degrade_on, renewed=True)


def _median_ms(values: _Values) -> float:
    """The median of latency samples in seconds, in milliseconds."""
    return float(np.median(values)) * 1e3


class Degradation:
    """Which SLO classes are in degraded mode, from the breach events of every process.

    A class is degraded while any process reports a degrading stage of it in breach; a
    breach not re-announced within ``ttl_ms`` is forgotten.
    """

    def __init__(self, ttl_ms: float) -> None:
        self._ttl_us = int(ttl_ms * 1000)
        self._breaches: dict[tuple[str, str, str], int] = {}

    def apply(self, kind: str, source: str, stage: str, slo_class: str, degrade: bool,
              now_us: int) -> None:
        """Take one breach or recovery event received at ``now_us``."""
        if not degrade:
            return
        key = (source, stage, slo_class)
        if kind == BREACH:
            self._breaches[key] = now_us
        else:
            self._breaches.pop(key, None)

    def degraded(self, slo_class: str, now_us: int) -> bool:
        """Whether ``slo_class`` is in degraded mode at ``now_us``."""
        return slo_class in self.classes(now_us)

    def classes(self, now_us: int) -> set[str]:
        """Every class in degraded mode at ``now_us``."""
        for key in [k for k, at in self._breaches.items() if now_us - at > self._ttl_us]:
            del self._breaches[key]
        return {slo_class for _, _, slo_class in self._breaches}
