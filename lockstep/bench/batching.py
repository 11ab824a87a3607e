"""``lockstep bench batching``: one bursty trace through three batching policies, one engine.

The engine is calibrated several times (:func:`~lockstep.bench.trace.calibrate`); the
trace (:func:`~lockstep.bench.trace.make_trace`) is sized from all calibrations together.
Each repetition builds the trace of its own seed and replays it in real time through
:class:`~lockstep.engines.batching.dispatcher.Dispatcher` — the code the worker runs — with (a)
Lockstep's deadline scheduler, (b) a FIFO batcher with a fixed max queue delay (Triton's
dynamic batcher), (c) batch size 1: interleaved (the order rotates between repetitions)
on the same started engine, each policy starting from the same latency model. A final
calibration after the last repetition shows whether the engine drifted meanwhile.

A request meets its SLO when it is answered (status ``ok``) before its deadline; a shed
request (``expired``) misses it. Every figure is reported as the median and spread over
the repetitions, each ratio computed within a repetition; a calibration that moved more
than ``stable_within`` of its median gives no verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lockstep.bench.machine import MachineWatch
from lockstep.bench.stats import divide, per_side, ratio_spread, spread, spread_json
from lockstep.bench.trace import Arrival, Calibration, TraceSpec, calibrate, loop_clock, make_trace
from lockstep.config.worker import WorkerSettings
from lockstep.engines.base import Engine, probe_request
from lockstep.engines.batching.dispatcher import Dispatcher, Outcome
from lockstep.engines.batching.latency import LatencyModel, LatencyPrior
from lockstep.engines.batching.policy import BatchPolicy, SchedulerConfig
from lockstep.engines.batching.scheduler import make_policy
from lockstep.topics.schemas import Request

POLICIES = ("lockstep", "fifo", "batch1")
METRICS = ("slo_attainment", "slo_attainment_high", "p50_ms", "p99_ms", "items_per_s",
           "items_per_capacity", "expired", "failed", "unanswered", "lateness_p99_ms",
           "lateness_max_ms")
#: The acceptance target of docs/bench.md: Lockstep at least this, FIFO below the other.
TARGET_LOCKSTEP = 0.99
TARGET_FIFO = 0.90
#: Replay lateness (P99, ms) above which the verdict notes that the machine held it up.
LATE_NOTE_MS = 5.0


@dataclass(frozen=True)
class BatchingOptions:
    """What the bench runs."""

    trace: TraceSpec = field(default_factory=TraceSpec)
    #: Repetitions, with seeds ``trace.seed``, ``trace.seed + 1`` …
    repeats: int = 3
    #: Calibrations before the first repetition (one more follows the last).
    calibrations: int = 3
    calibration_rounds: int = 6
    #: A calibration whose capacities spread more than this share of their median is
    #: unstable: the run reports its figures but no verdict.
    stable_within: float = 0.25
    #: How long a policy that fell behind is waited for after the trace ends.
    drain_s: float = 1.0
    policies: tuple[str, ...] = POLICIES


@dataclass
class Served:
    """What became of one arrival under one policy."""

    status: str = "pending"
    latency_us: int = 0
    met: bool = False


async def replay(engine: Engine, policy_name: str, config: SchedulerConfig,
                 latency: LatencyModel, trace: list[Arrival], template: Request,
                 drain_s: float = 1.0) -> dict[str, Any]:
    """Replay ``trace`` in real time (the loop's clock) through one policy; its scores.

    The requests are built before the replay starts, and the heap built so far is frozen
    out of the garbage collector's passes meanwhile: the replay loop should spend its
    time admitting requests on time, not collecting the bench's own objects. How late the
    loop admitted the arrivals (``lateness_p99_ms``, ``lateness_max_ms``) shows how much
    the machine held it up.
    """
    served = [Served() for _ in trace]
    arrived: dict[int, int] = {}
    clock = loop_clock()

    def clock_us() -> int:
        return int(clock() * 1e6)

    async def sink(outcomes: list[Outcome[int]]) -> None:
        now = clock_us()
        for o in outcomes:
            s = served[o.handle]
            s.status, s.latency_us = o.status, now - arrived[o.handle]
            s.met = o.status == "ok" and now <= o.request.deadline_us

    window = template.window
    prebuilt = [template.model_copy(update={
        "window": window.model_copy(update={"window_seq": i}), "priority": a.priority,
        "confidence": {"gate": a.confidence}}) for i, a in enumerate(trace)]
    late_us = np.zeros(len(trace), dtype=np.int64)
    policy: BatchPolicy[int] = make_policy(policy_name, config, copy.deepcopy(latency))
    dispatcher: Dispatcher[int] = Dispatcher(engine, policy, clock_us, sink)
    with frozen_heap():
        runner = asyncio.ensure_future(dispatcher.run())
        start = clock_us() + 20_000
        begin = clock()
        try:
            for i, a in enumerate(trace):
                due = start + a.at_us
                delay = (due - clock_us()) / 1e6
                if delay > 0:
                    await asyncio.sleep(delay)
                now = clock_us()
                arrived[i] = now
                late_us[i] = now - due
                if dispatcher.full:
                    await dispatcher.wait_space()
                dispatcher.admit(i, prebuilt[i].model_copy(
                    update={"deadline_us": now + a.deadline_us}))
            # A policy that fell far behind (batch size 1 under bursts) is not waited for:
            # what is unanswered by then has missed its deadline long ago.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(dispatcher.drain(), timeout=drain_s)
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        elapsed = clock() - begin
    result = score(served, trace, elapsed)
    result["lateness_p99_ms"] = float(np.percentile(late_us, 99)) / 1000 if len(trace) else None
    result["lateness_max_ms"] = float(late_us.max()) / 1000 if len(trace) else None
    return result


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what is allocated so far out of the garbage collector's passes, for a while."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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
        "items_per_s": len(ok) / elapsed_s if elapsed_s > 0 else 0.0,
        "expired": sum(s.status == "expired" for s in served),
        "failed": sum(s.status == "failed" for s in served),
        "unanswered": sum(s.status == "pending" for s in served),
    }


def rotation(policies: tuple[str, ...], repetition: int) -> list[str]:
    """The order policies run in, in one repetition (rotated, so drift hits all alike)."""
    k = repetition % len(policies)
    return list(policies[k:] + policies[:k])


async def run_batching_bench(engine: Engine, settings: WorkerSettings,
                             options: BatchingOptions) -> dict[str, Any]:
    """Calibrate, then replay each repetition's trace through every policy; the report."""
    with MachineWatch() as watch:
        watch.reference()
        async with engine:
            config = SchedulerConfig.from_settings(
                settings, min(settings.max_batch, engine.capabilities.max_batch))
            config = replace(config, max_queue=1_000_000)  # the trace is finite
            latency = LatencyModel(LatencyPrior(), token_fractions=config.token_fractions)
            calibrations = [await calibrate(engine, config, latency,
                                            options.calibration_rounds)
                            for _ in range(max(1, options.calibrations))]
            full_us = latency.expected_us(config.max_batch)
            used = Calibration(latency.expected_us(1), full_us, config.max_batch)
            template = probe_request()
            repetitions = []
            for r in range(max(1, options.repeats)):
                spec = replace(options.trace, seed=options.trace.seed + r)
                trace = make_trace(spec, used.capacity_per_s, full_us, config.max_batch)
                order = rotation(options.policies, r)
                results = {}
                for name in order:
                    result = await replay(engine, name, config, latency, trace, template,
                                          options.drain_s)
                    result["items_per_capacity"] = result["items_per_s"] / used.capacity_per_s
                    results[name] = result
                repetitions.append({"seed": spec.seed, "order": order,
                                    "requests": len(trace), "policies": results})
                watch.reference()
            calibrations.append(await calibrate(engine, config, LatencyModel(
                LatencyPrior(), token_fractions=config.token_fractions),
                options.calibration_rounds))
    return report(repetitions, calibrations, used, options, engine.name, config,
                  watch.report())


def report(repetitions: list[dict[str, Any]], calibrations: list[Calibration],
           used: Calibration, options: BatchingOptions, engine: str,
           config: SchedulerConfig, machine: dict[str, Any]) -> dict[str, Any]:
    """The bench's JSON: per metric and policy the spread over repetitions, ratios, verdict."""
    runs = [rep["policies"] for rep in repetitions]
    policies = list(options.policies)
    capacities = [c.capacity_per_s for c in calibrations]
    capacity = spread(capacities)
    stable = capacity is not None and capacity.relative <= options.stable_within
    out: dict[str, Any] = {m: per_side(runs, m, policies) for m in METRICS}
    out.update({
        "engine": engine, "policies": policies,
        "seeds": [rep["seed"] for rep in repetitions],
        "requests": spread_json(rep["requests"] for rep in repetitions),
        "seconds": options.trace.seconds, "load": options.trace.load,
        "trace": {"burst_every_s": options.trace.burst_every_s,
                  "burst_size": options.trace.burst_size,
                  "high_share": options.trace.high_share},
        "max_batch": config.max_batch, "max_queue_delay_ms": config.max_queue_delay_us / 1000,
        "calibration": {
            "capacity_items_per_s": spread_json(capacities),
            "full_batch_p95_ms": spread_json(c.full_us / 1000 for c in calibrations),
            "one_item_p95_ms": spread_json(c.one_us / 1000 for c in calibrations),
            "runs": len(calibrations), "stable": stable,
            "stable_within": options.stable_within,
            "capacity_used": used.capacity_per_s,
            "batch_latency_p95_ms": {"1": used.one_us / 1000,
                                     str(config.max_batch): used.full_us / 1000},
        },
        "ratios": _ratios(runs) if "fifo" in policies and "lockstep" in policies else {},
        "repetitions": repetitions,
        "machine": machine,
    })
    out["verdict"] = verdict(out)
    return out


def _ratios(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    def minus(metric: str) -> Any:
        return ratio_spread(runs, lambda r: r["lockstep"][metric] - r["fifo"][metric])

    return {
        "items_per_s_vs_fifo": ratio_spread(runs, lambda r: divide(
            r["lockstep"]["items_per_s"], r["fifo"]["items_per_s"])),
        "attainment_minus_fifo": minus("slo_attainment"),
        "attainment_high_minus_fifo": minus("slo_attainment_high"),
        "wins_vs_fifo": sum(r["lockstep"]["slo_attainment"] > r["fifo"]["slo_attainment"]
                            for r in runs),
        "repetitions": len(runs),
    }


def verdict(out: dict[str, Any]) -> dict[str, Any]:
    """What the run shows, in one sentence, and whether the target was met.

    ``ok`` is None when there is no verdict (an unstable calibration, a missing policy).
    """
    cal = out["calibration"]
    if not cal["stable"]:
        c = cal["capacity_items_per_s"]
        return {"ok": None, "text": (
            f"no verdict: the engine's calibration is unstable (capacity "
            f"{c['min']:,.0f}-{c['max']:,.0f} items/s over {cal['runs']} calibrations, more "
            f"than {cal['stable_within'] * 100:.0f} % apart); rerun on a quieter machine")}
    att = out["slo_attainment"]
    if att.get("lockstep") is None or att.get("fifo") is None:
        return {"ok": None, "text": "no verdict: lockstep and fifo must both run"}
    lock, fifo = att["lockstep"]["median"], att["fifo"]["median"]
    ratios = out["ratios"]
    diff = ratios["attainment_minus_fifo"]
    text = (f"lockstep meets {lock * 100:.1f} % of deadlines against fifo's {fifo * 100:.1f} % "
            f"(median of {ratios['repetitions']}; {diff['median'] * 100:+.1f} points, "
            f"{diff['min'] * 100:+.1f} to {diff['max'] * 100:+.1f}), ahead in "
            f"{ratios['wins_vs_fifo']} of {ratios['repetitions']} repetitions")
    missed = []
    if lock < TARGET_LOCKSTEP:
        missed.append(f"lockstep {_pct2(lock)} < {TARGET_LOCKSTEP * 100:.0f} %")
    if fifo >= TARGET_FIFO:
        missed.append(f"fifo {_pct2(fifo)} >= {TARGET_FIFO * 100:.0f} % (the trace is "
                      "not hard enough to separate them)")
    target = (f"target (lockstep >= {TARGET_LOCKSTEP * 100:.0f} %, fifo < "
              f"{TARGET_FIFO * 100:.0f} %, medians)")
    text += f"; {target} " + ("met" if not missed else "not met: " + "; ".join(missed))
    late = [s["median"] for s in out["lateness_p99_ms"].values() if s is not None]
    worst = [s["max"] for s in out["lateness_max_ms"].values() if s is not None]
    if late and max(late) > LATE_NOTE_MS:
        text += (f"; note: the machine held the replay up (arrivals admitted up to "
                 f"{max(worst):.0f} ms late, P99 {max(late):.0f} ms), which costs the urgent "
                 "requests first")
    return {"ok": not missed, "text": text}


def bench_engine(name: str, settings: WorkerSettings) -> Engine:
    """The engine the bench batches into: ``simulated``, ``cpu``, ``reference`` or ``auto``.

    ``auto`` is the cpu engine where the registry would pick it (a checkpoint configured),
    else the simulated one.
    """
    from lockstep.engines.registry import create_engine, resolve
    from lockstep.engines.simulated import SimulatedEngine

    if name == "auto":
        name = "cpu" if resolve("auto", settings) == "cpu" else "simulated"
    if name == "simulated":
        return SimulatedEngine(jitter=0.1, max_batch=settings.max_batch, pool="bench")
    # The bench measures scheduling, not timeouts: a slow batch must not abort it.
    return create_engine(settings.model_copy(
        update={"engine": name, "infer_timeout_ms": 60_000.0}))


def run_batching(engine_name: str, settings: WorkerSettings, options: BatchingOptions, *,
                 virtual_clock: bool = False) -> dict[str, Any]:
    """Build the engine and run the bench to completion (on a virtual clock if asked).

    Raises:
        ConfigError: A virtual clock was asked for another engine than the simulated one.
    """
    from lockstep.agents.app import run_async
    from lockstep.bench.vclock import run_virtual
    from lockstep.errors import ConfigError

    engine = bench_engine(engine_name, settings)
    if not virtual_clock:
        return run_async(run_batching_bench(engine, settings, options))
    if engine.name != "simulated":
        raise ConfigError("--virtual-clock needs --engine simulated (a real engine's time "
                          "cannot be simulated)")
    report = run_virtual(run_batching_bench(engine, settings, options))
    report["virtual_clock"] = True
    return report


def _pct2(value: float) -> str:
    """A share with two decimals (a median next to a threshold must not round onto it)."""
    return f"{value * 100:.2f} %"
