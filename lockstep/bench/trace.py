"""The batching bench's arrival trace and the engine calibration it is sized from.

:func:`calibrate` times the engine on batches of 1, 2, 4 … ``max_batch`` at each
degradation level (the worker's warm-up, on the event loop's clock) into a
:class:`~lockstep.engines.batching.latency.LatencyModel`. The bench calibrates several times and
sizes the trace from all of them together, so one lucky or unlucky calibration does not
set the load.

:func:`make_trace` builds the arrivals in multiples of the engine's own capacity and
latency, so the trace is equally hard on a fast or a slow machine: Poisson background
arrivals at ``load`` x capacity, and bursts of ``burst_size`` x ``max_batch`` requests
within ``burst_ms``, one about every ``burst_every_s`` (jittered by ±``burst_jitter``, not
Poisson: Poisson bursts sometimes pile up into an overload no policy can serve, and then
the bench measures the seed instead of the scheduler). 30 % of the requests are
urgent (high priority, deadlines of 1.5-2.5 x the full-batch latency): arrival order serves
them too late behind a burst, deadline order does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lockstep.engines.base import Engine, WorkItem, probe_request
from lockstep.engines.batching.latency import LatencyModel, LatencyPrior
from lockstep.engines.batching.policy import SchedulerConfig


@dataclass(frozen=True)
class TraceSpec:
    """The arrival trace, relative to the engine's capacity and latency."""

    seconds: float = 10.0
    #: Mean Poisson arrival rate as a share of the engine's full-batch throughput.
    load: float = 0.6
    #: A burst about every this many seconds (± ``burst_jitter`` of it), each of
    #: ``burst_size`` x ``max_batch`` requests spread over ``burst_ms``.
    burst_every_s: float = 1.0
    burst_jitter: float = 0.25
    burst_size: float = 5.0
    burst_ms: float = 20.0
    high_share: float = 0.3
    #: Deadlines in multiples of the engine's P95 full-batch latency.
    high_deadline: tuple[float, float] = (1.5, 2.5)
    low_deadline: tuple[float, float] = (4.0, 10.0)
    seed: int = 11


@dataclass(frozen=True)
class Arrival:
    """One request of the trace."""

    at_us: int
    priority: float
    deadline_us: int  # relative to ``at_us``
    confidence: float


def make_trace(spec: TraceSpec, capacity_per_s: float, batch_latency_us: int,
               max_batch: int) -> list[Arrival]:
    """Seeded arrivals: Poisson at ``load * capacity`` plus bursts, sorted by time."""
    rng = np.random.default_rng(spec.seed)
    span_us = int(spec.seconds * 1e6)
    rate = spec.load * capacity_per_s
    times = list(np.cumsum(rng.exponential(1e6 / rate, int(rate * spec.seconds * 1.5) + 10)))
    every_us = spec.burst_every_s * 1e6
    t = every_us * rng.uniform(0.5, 1.0)
    while t < span_us:
        n = round(spec.burst_size * max_batch)
        times.extend(t + rng.uniform(0, spec.burst_ms * 1000, n))
        t += every_us * rng.uniform(1.0 - spec.burst_jitter, 1.0 + spec.burst_jitter)
    arrivals = []
    for at in sorted(x for x in times if x < span_us):
        high = rng.random() < spec.high_share
        lo, hi = spec.high_deadline if high else spec.low_deadline
        arrivals.append(Arrival(
            at_us=int(at), priority=0.9 if high else 0.3,
            deadline_us=int(rng.uniform(lo, hi) * batch_latency_us),
            confidence=float(rng.uniform(0.3, 1.0))))
    return arrivals


@dataclass(frozen=True)
class Calibration:
    """One timing of the engine: P95 latency at one item and at a full batch, capacity."""

    one_us: int
    full_us: int
    max_batch: int

    @property
    def capacity_per_s(self) -> float:
        """Items per second in full batches at the P95 latency."""
        return self.max_batch / (self.full_us / 1e6)


def loop_clock() -> Callable[[], float]:
    """Seconds on the running event loop's clock (virtual on a virtual-clock loop)."""
    loop = asyncio.get_running_loop()
    return loop.time


async def calibrate(engine: Engine, config: SchedulerConfig, latency: LatencyModel,
                    rounds: int = 6) -> Calibration:
    """Time ``engine`` on every batch size (powers of two) and level into ``latency``.

    Each shape runs once untimed (the first call of a shape allocates), then ``rounds``
    times. The timings go to ``latency`` (the caller may feed several calibrations into
    one model); the returned :class:`Calibration` is this timing alone.
    """
    clock = loop_clock()
    own = LatencyModel(LatencyPrior(), token_fractions=config.token_fractions)
    sizes = sorted({min(2**k, config.max_batch) for k in range(13)
                    if 2**k <= 2 * config.max_batch})
    request = probe_request()
    # Timings only: kept out of the engine's metrics, and a slow batch must not abort it.
    telemetry, engine.telemetry = engine.telemetry, None
    timeout_s, engine.timeout_s = engine.timeout_s, max(engine.timeout_s, 60.0)
    try:
        for level in config.levels:
            tokens = config.tokens_at(level)
            for size in sizes:
                items = [WorkItem(request, max_new_tokens=tokens, reduce_vision=level > 0,
                                  level=level)] * size
                await engine.infer(items)
                for _ in range(rounds):
                    begin = clock()
                    await engine.infer(items)
                    elapsed_us = int((clock() - begin) * 1e6)
                    own.observe(size, elapsed_us, level)
                    latency.observe(size, elapsed_us, level)
    finally:
        engine.telemetry, engine.timeout_s = telemetry, timeout_s
    return Calibration(own.expected_us(1), own.expected_us(config.max_batch), config.max_batch)
