"""``lockstep bench batching``: one bursty trace through three batching policies, one engine.

The trace is Poisson arrivals at a share of the engine's measured capacity plus bursts,
with two priority classes whose deadlines are set in multiples of the engine's own
full-batch latency (so the same trace is equally hard on a fast or a slow machine). It is
replayed in real time through :class:`~lockstep.engines.dispatcher.Dispatcher` — the code the worker
runs — with (a) Lockstep's deadline scheduler, (b) a FIFO batcher with a fixed max queue
delay (Triton's dynamic batcher), (c) batch size 1, on the same started engine, one after
the other in the same run. A request meets its SLO when it is answered (status ``ok``)
before its deadline; a shed request (``expired``) misses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lockstep.engines.base import Engine, probe_request
from lockstep.engines.dispatcher import Dispatcher, Outcome, warm_up
from lockstep.engines.latency import LatencyModel, LatencyPrior
from lockstep.engines.scheduler import BatchPolicy, SchedulerConfig, make_policy
from lockstep.streams.worker_settings import WorkerSettings
from lockstep.topics.schemas import Request

POLICIES = ("lockstep", "fifo", "batch1")


@dataclass(frozen=True)
class TraceSpec:
    """The arrival trace, relative to the engine's capacity and latency."""

    seconds: float = 10.0
    #: Mean Poisson arrival rate as a share of the engine's full-batch throughput.
    load: float = 0.7
    #: A burst every this many seconds on average (Poisson), each of ``burst_size`` requests
    #: (in multiples of ``max_batch``) spread over ``burst_ms``.
    burst_every_s: float = 1.5
    burst_size: float = 4.0
    burst_ms: float = 20.0
    high_share: float = 0.25
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
    t = rng.exponential(spec.burst_every_s * 1e6)
    while t < span_us:
        n = round(spec.burst_size * max_batch)
        times.extend(t + rng.uniform(0, spec.burst_ms * 1000, n))
        t += rng.exponential(spec.burst_every_s * 1e6)
    arrivals = []
    for at in sorted(x for x in times if x < span_us):
        high = rng.random() < spec.high_share
        lo, hi = spec.high_deadline if high else spec.low_deadline
        arrivals.append(Arrival(
            at_us=int(at), priority=0.9 if high else 0.3,
            deadline_us=int(rng.uniform(lo, hi) * batch_latency_us),
            confidence=float(rng.uniform(0.3, 1.0))))
    return arrivals


@dataclass
class Served:
    """What became of one arrival under one policy."""

    status: str = "pending"
    latency_us: int = 0
    met: bool = False


async def replay(engine: Engine, policy_name: str, config: SchedulerConfig,
                 latency: LatencyModel, trace: list[Arrival], template: Request,
                 drain_s: float = 3.0) -> dict[str, Any]:
    """Replay ``trace`` in real time through one policy; its scores."""
    served = [Served() for _ in trace]
    arrived: dict[int, int] = {}

    def clock_us() -> int:
        return time.time_ns() // 1000

    async def sink(outcomes: list[Outcome[int]]) -> None:
        now = clock_us()
        for o in outcomes:
            s = served[o.handle]
            s.status, s.latency_us = o.status, now - arrived[o.handle]
            s.met = o.status == "ok" and now <= o.request.deadline_us

    policy: BatchPolicy[int] = make_policy(policy_name, config, copy.deepcopy(latency))
    dispatcher: Dispatcher[int] = Dispatcher(engine, policy, clock_us, sink)
    runner = asyncio.ensure_future(dispatcher.run())
    window = template.window
    start = clock_us() + 20_000
    begin = time.perf_counter()
    try:
        for i, a in enumerate(trace):
            delay = (start + a.at_us - clock_us()) / 1e6
            if delay > 0:
                await asyncio.sleep(delay)
            now = clock_us()
            arrived[i] = now
            request = template.model_copy(update={
                "window": window.model_copy(update={"window_seq": i}),
                "priority": a.priority, "deadline_us": now + a.deadline_us,
                "confidence": {"gate": a.confidence}})
            if dispatcher.full:
                await dispatcher.wait_space()
            dispatcher.admit(i, request)
        # A policy that fell far behind (batch size 1 under bursts) is not waited for: what
        # is unanswered by then has missed its deadline long ago.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(dispatcher.drain(), timeout=drain_s)
    finally:
        runner.cancel()
    elapsed = time.perf_counter() - begin
    return score(served, trace, elapsed)


def score(served: list[Served], trace: list[Arrival], elapsed_s: float) -> dict[str, Any]:
    """SLO attainment (all, high priority), P50/P99 latency of answers, items/s, shed."""
    ok = [s for s in served if s.status == "ok"]
    high = [s for s, a in zip(served, trace, strict=True) if a.priority >= 0.5]
    lat = np.array([s.latency_us for s in ok], dtype=np.float64) / 1000.0
    return {
        "requests": len(served),
        "slo_attainment": sum(s.met for s in served) / max(len(served), 1),
        "slo_attainment_high": sum(s.met for s in high) / max(len(high), 1),
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
        "items_per_s": len(ok) / elapsed_s,
        "expired": sum(s.status == "expired" for s in served),
        "failed": sum(s.status == "failed" for s in served),
        "unanswered": sum(s.status == "pending" for s in served),
    }


async def run_batching_bench(engine: Engine, settings: WorkerSettings,
                             spec: TraceSpec) -> dict[str, Any]:
    """Warm the engine up, build the trace from its timings, replay it through each policy."""
    async with engine:
        config = SchedulerConfig.from_settings(
            settings, min(settings.max_batch, engine.capabilities.max_batch))
        config = replace(config, max_queue=1_000_000)  # the trace is finite
        latency = LatencyModel(LatencyPrior(), token_fractions=config.token_fractions)
        await warm_up(engine, latency, config, rounds=5)
        full_us = latency.expected_us(config.max_batch)
        capacity = config.max_batch / (full_us / 1e6)
        trace = make_trace(spec, capacity, full_us, config.max_batch)
        template = probe_request()
        results = {name: await replay(engine, name, config, latency, trace, template)
                   for name in POLICIES}
    return report(results, engine.name, config, spec, capacity, latency)


def report(results: dict[str, dict[str, Any]], engine: str, config: SchedulerConfig,
           spec: TraceSpec, capacity: float, latency: LatencyModel) -> dict[str, Any]:
    """The bench's JSON: per-metric dicts keyed by policy, plus the ratios that matter."""
    metrics = ("slo_attainment", "slo_attainment_high", "p50_ms", "p99_ms", "items_per_s",
               "expired", "failed", "unanswered")
    out: dict[str, Any] = {m: {p: results[p][m] for p in POLICIES} for m in metrics}
    fifo = results["fifo"]["items_per_s"]
    out.update({
        "engine": engine, "requests": results["lockstep"]["requests"],
        "seconds": spec.seconds, "load": spec.load, "seed": spec.seed,
        "max_batch": config.max_batch, "max_queue_delay_ms": config.max_queue_delay_us / 1000,
        "capacity_items_per_s": capacity,
        "batch_latency_p95_ms": {n: latency.expected_us(n) / 1000
                                 for n in (1, config.max_batch)},
        "ratios": {
            "items_per_s_vs_fifo": results["lockstep"]["items_per_s"] / fifo if fifo else None,
            "attainment_minus_fifo": results["lockstep"]["slo_attainment"]
            - results["fifo"]["slo_attainment"],
        },
    })
    return out
