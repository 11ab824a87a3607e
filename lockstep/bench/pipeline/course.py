"""The pipeline bench's course: ramp to capacity, half capacity, overload, soak, the limit.

1. The cluster starts (:mod:`.cluster`); the roles' idle CPU is measured for a few
   seconds; one stream warms the pipeline up until its first responses arrive.
2. The raw pass-through (:mod:`.passthrough`), the first of ``passthrough_repeats``;
   ``start_streams`` for ``warmup_seconds``, not measured (a broker's JIT, the roles'
   caches and the producers' connections warm up at load, not with one stream); then
   steps of ``step_seconds`` at stream counts chosen by :mod:`.ramp` until the capacity
   is known (the most streams held at the SLO target, confirmed ``confirm`` times), and
   the second pass-through.
3. A step at half capacity: the per-stage P50/P99 and the CPU per token the docs quote,
   over the whole step and, apart, from :data:`STEADY_AFTER_S` into it (every stream
   running).
4. ``--overload``: twice the capacity for ``overload_seconds`` (half of it keeps going for
   ``recover_seconds`` more), the metrics scraped every second: attainment during the
   overload and the seconds until it is back at the target.
5. ``--soak``: half capacity for that long, every role's RSS sampled over time.
6. The remaining pass-throughs, on the same broker, the roles idle as during the first:
   the ratio of the pipeline to the limit is taken once per pass-through. Each
   pass-through runs on both clients, librdkafka (the limit) and aiokafka (continuity).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lockstep.bench.machine import MachineWatch
from lockstep.bench.pipeline import ramp
from lockstep.bench.pipeline.cluster import Cluster
from lockstep.bench.pipeline.metrics import degraded, e2e_count, per_second, scrape
from lockstep.bench.pipeline.passthrough import measure_passthrough
from lockstep.bench.pipeline.steps import TOKENS_PER_STREAM_S, Load, Sampled, run_load
from lockstep.bench.stats import divide, spread_json
from lockstep.config.settings import Settings
from lockstep.errors import BrokerError
from lockstep.kafka.probes import PassthroughClient

log = logging.getLogger(__name__)
#: Seconds into the half-capacity step after which its figures are taken again, apart
#: (at most half the step): the streams of a step are new, and a stream's first windows
#: wait while its clocks are unknown.
STEADY_AFTER_S = 3.0


@dataclass(frozen=True)
class PipelineOptions:
    """What the pipeline bench runs."""

    step_seconds: float = 30.0
    start_streams: int = 1
    max_streams: int = 64
    target: float = 0.99
    min_coverage: float = 0.95
    overload: bool = False
    overload_seconds: float = 20.0
    recover_seconds: float = 20.0
    soak_seconds: float = 0.0
    #: Runs of the capacity step (and of a tied count) before the capacity is final.
    confirm: int = 3
    passthrough_records: int = 50_000
    #: Raw pass-through repetitions, interleaved with the pipeline's phases.
    passthrough_repeats: int = 3
    streams_per_producer: int = 16
    drain_s: float = 15.0
    warmup_timeout_s: float = 90.0
    #: ``start_streams`` run this long before the ramp, unmeasured (0: no such warm-up).
    warmup_seconds: float = 15.0
    idle_seconds: float = 3.0


async def run_pipeline_bench(settings: Settings, options: PipelineOptions,
                             config: Path | None = None) -> dict[str, Any]:
    """Run the whole course on a fresh cluster; the report (JSON-ready)."""
    cluster = Cluster(settings, config)
    out: dict[str, Any] = {"options": asdict(options), "run_id": cluster.run_id}
    with MachineWatch() as watch:
        watch.reference()
        try:
            await cluster.start()
            out["broker"] = "embedded tansu" if cluster.embedded else "kafka"
            out["roles"] = list(cluster.roles)
            out["idle_cpu_ms_per_s"] = await _idle_cpu(cluster, options.idle_seconds)
            out["warmup_s"] = await _warm_up(cluster, options)
            raw = [await _passthrough(cluster, options, 0)]
            out["warmup_load"] = await _warm_load(cluster, options)
            steps = await _ramp(cluster, options)
            capacity = ramp.capacity(ramp.aggregate([s for s, _ in steps]))
            out["steps"] = [r for _, r in steps]
            out["capacity_streams"] = capacity
            out["capacity_runs"] = _capacity_runs(out["steps"], capacity)
            if options.passthrough_repeats > 1:
                raw.append(await _passthrough(cluster, options, 1))
            half = max(1, capacity // 2)
            await settle(cluster, options)
            half_report, _ = await run_load(
                cluster, [_load(options, half, options.step_seconds, "half")],
                drain_s=options.drain_s,
                steady_after_s=min(STEADY_AFTER_S, options.step_seconds / 2))
            out["half_capacity"] = half_report
            if options.overload:
                await settle(cluster, options)
                out["overload"] = await _overload(cluster, options, capacity)
            if options.soak_seconds > 0:
                await settle(cluster, options)
                out["soak"] = await _soak(cluster, options, half)
            watch.reference()
            for i in range(2, options.passthrough_repeats):
                raw.append(await _passthrough(cluster, options, i))
            out["passthrough"] = _raw_summary([r["aiokafka"] for r in raw])
            out["passthrough_librdkafka"] = _raw_summary([r["librdkafka"] for r in raw])
            watch.reference()
        finally:
            await cluster.stop()
    out["machine"] = watch.report()
    out["ratios"] = _ratios(out, capacity)
    return out


def _load(options: PipelineOptions, streams: int, seconds: float, tag: str,
          delay_s: float = 0.0) -> Load:
    return Load(streams, seconds, tag, options.streams_per_producer, delay_s)


async def _passthrough(cluster: Cluster, options: PipelineOptions, index: int
                       ) -> dict[str, dict[str, Any]]:
    """One raw pass-through per client on the cluster's broker (the roles idle meanwhile)."""
    settings = cluster.settings
    clients: tuple[PassthroughClient, ...] = ("librdkafka", "aiokafka")
    return {client: await measure_passthrough(
        settings.kafka, f"{cluster.run_id}-{index}", settings.topics.media_partitions,
        options.passthrough_records, client=client, idempotent=not cluster.embedded)
        for client in clients}


def _raw_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    return {"hops": first["hops"], "records": first["records"],
            "partitions": first["partitions"], "repetitions": len(runs),
            "arrived": min(r["arrived"] for r in runs),
            "records_per_s": spread_json(r["records_per_s"] for r in runs),
            "hop_cpu_ms_per_record": spread_json(r["hop_cpu_ms_per_record"] for r in runs),
            "runs": runs}


def _capacity_runs(steps: list[dict[str, Any]], capacity: int) -> dict[str, Any] | None:
    at = [s for s in steps if s["streams"] == capacity]
    if not at:
        return None
    return {"runs": len(at), "held": sum(s["held"] for s in at),
            "attainment": spread_json(s["span"]["attainment"] for s in at),
            "tokens_per_s": spread_json(s["tokens_per_s"] for s in at),
            "e2e_p99_ms": spread_json(s["span"]["e2e_p99_ms"] for s in at)}


async def _idle_cpu(cluster: Cluster, seconds: float) -> dict[str, float | None]:
    before = cluster.cpu()
    await asyncio.sleep(seconds)
    after = cluster.cpu()
    return {role: None if after[role] is None or before.get(role) is None
            else round((after[role] - before[role]) * 1000 / seconds, 2)  # type: ignore[operator]
            for role in after}


async def _warm_up(cluster: Cluster, options: PipelineOptions) -> float:
    """Publish one stream at a time until the pipeline answers (the groups have joined).

    Raises:
        BrokerError: Nothing was answered within ``warmup_timeout_s``.
    """
    loop = asyncio.get_running_loop()
    begin = loop.time()
    round_no = 0
    while loop.time() - begin < options.warmup_timeout_s:
        await run_load(cluster, [_load(options, 1, 5.0, f"warm{round_no}")], drain_s=3.0)
        round_no += 1
        if e2e_count(await scrape(cluster.urls)) > 0:
            return round(loop.time() - begin, 1)
    raise BrokerError(f"the pipeline answered nothing within {options.warmup_timeout_s:.0f} s "
                      "of warm-up (did the roles' consumer groups get partitions?)")


async def _warm_load(cluster: Cluster, options: PipelineOptions) -> dict[str, Any] | None:
    """``start_streams`` for ``warmup_seconds`` before the first measured step.

    One stream answering shows the groups have joined, not that the path is warm: on
    Apache Kafka the first step at load, straight after, failed now and then while the
    broker's JVM was still compiling its hot paths, and set the capacity below a count
    that held in every later run. The step's outcome is reported, never counted.
    """
    if options.warmup_seconds <= 0:
        return None
    report, _ = await run_load(cluster, [_load(options, options.start_streams,
                                               options.warmup_seconds, "warmload")],
                               drain_s=options.drain_s)
    span = report["span"]
    return {"streams": options.start_streams, "seconds": options.warmup_seconds,
            "attainment": span["attainment"], "e2e_p99_ms": span["e2e_p99_ms"]}


async def _ramp(cluster: Cluster, options: PipelineOptions
                ) -> list[tuple[ramp.Step, dict[str, Any]]]:
    steps: list[tuple[ramp.Step, dict[str, Any]]] = []
    while (n := ramp.plan_next([s for s, _ in steps], options.start_streams,
                               options.max_streams, options.confirm)) is not None:
        settled = await settle(cluster, options)
        report, _ = await run_load(cluster, [_load(options, n, options.step_seconds,
                                                   f"s{len(steps)}n{n}")],
                                   drain_s=options.drain_s)
        ok, why = ramp.held(report["span"]["attainment"], report["coverage"], options.target,
                            options.min_coverage, report["producer_ok"])
        report["held"], report["why"], report["settle_s"] = ok, why, settled
        steps.append((ramp.Step(n, ok, why), report))
        log.info("step %d streams: %s", n, "held" if ok else why)
    return steps


async def settle(cluster: Cluster, options: PipelineOptions, timeout_s: float = 90.0
                 ) -> float:
    """Wait until no class runs degraded (a breach of the last step), with one stream.

    A breach clears only on evidence (latencies back under budget), so a light load runs
    until the roles leave degraded mode; the next step then starts from full service.
    Returns the seconds it took (0 when nothing was degraded).
    """
    loop = asyncio.get_running_loop()
    begin = loop.time()
    rounds = 0
    while degraded(await scrape(cluster.urls)) and loop.time() - begin < timeout_s:
        await run_load(cluster, [_load(options, 1, 5.0, f"settle{rounds}")], drain_s=3.0)
        rounds += 1
    left = degraded(await scrape(cluster.urls))
    if left:
        log.warning("classes %s still degraded after %.0f s; the next step starts degraded",
                    ", ".join(left), timeout_s)
    return round(loop.time() - begin, 1) if rounds else 0.0


async def _overload(cluster: Cluster, options: PipelineOptions, capacity: int
                    ) -> dict[str, Any]:
    half = max(1, capacity // 2)
    extra = max(1, 2 * max(capacity, 1) - half)
    base = _load(options, half, options.overload_seconds + options.recover_seconds, "ovh")
    burst = _load(options, extra, options.overload_seconds, "ovx")
    report, sampled = await run_load(cluster, [base, burst], drain_s=options.drain_s,
                                     scrape_every_s=1.0)
    over_end = sampled.ended.get("ovx", options.overload_seconds)
    series = per_second(sampled.scrapes, cluster.settings.slo)
    during = [(t, f) for t, f in series if t <= over_end]
    answered = sum(f.answered + f.expired for _, f in during)
    met = sum((f.attainment or 0.0) * (f.answered + f.expired) for _, f in during)
    timeline = [(round(t, 2), f.attainment, f.answered + f.expired) for t, f in series]
    return {
        "streams": half + extra, "then_streams": half, "overload_end_s": round(over_end, 2),
        "attainment_during": met / answered if answered else None,
        "answered_during": answered,
        "late_tokens_during": sum(f.tokens.get("late", 0.0) for _, f in during),
        "expired_during": sum(f.expired for _, f in during),
        "recovery_s": ramp.recovery_seconds(timeline, over_end, options.target),
        "per_second": [{"t": t, "attainment": a, "answered": n} for t, a, n in timeline],
        "span": report["span"],
    }


async def _soak(cluster: Cluster, options: PipelineOptions, streams: int) -> dict[str, Any]:
    seconds = options.soak_seconds
    report, sampled = await run_load(cluster, [_load(options, streams, seconds, "soak")],
                                     drain_s=options.drain_s,
                                     rss_every_s=max(1.0, seconds / 30))
    return {"streams": streams, "seconds": seconds, "span": report["span"],
            "cpu_ms_per_token": report["cpu_ms_per_token"], **_rss(sampled)}


def _rss(sampled: Sampled) -> dict[str, Any]:
    roles = sorted({r for _, sample in sampled.rss for r in sample})
    series = {r: [(round(t, 1), round(v / 2**20, 1)) for t, sample in sampled.rss
                  if (v := sample.get(r)) is not None] for r in roles}
    growth = {r: ramp.rss_growth([mb for _, mb in s]) for r, s in series.items()}
    return {"rss_mb": series, "rss_growth": growth,
            "rss_flat": {r: g is not None and g <= ramp.RSS_FLAT for r, g in growth.items()}}


def _ratios(out: dict[str, Any], capacity: int) -> dict[str, Any]:
    runs = out.get("capacity_runs")
    tokens_per_s = (runs["tokens_per_s"]["median"] if runs and runs["tokens_per_s"]
                    else capacity * TOKENS_PER_STREAM_S)
    ref = (out["machine"].get("reference_units_per_cpu_s") or {}).get("median")
    half = out.get("half_capacity", {}).get("cpu_ms_per_token", {})
    roles = [v for k, v in half.items() if v is not None and k not in ("producers", "broker")]
    raw = [r["records_per_s"] for r in (out.get("passthrough") or {}).get("runs", [])]
    rd = [r["records_per_s"]
          for r in (out.get("passthrough_librdkafka") or {}).get("runs", [])]
    every = [v for v in half.values() if v is not None]
    return {
        "tokens_per_s_at_capacity": tokens_per_s,
        # One ratio per raw repetition, against the capacity's median tokens/s.
        "pipeline_vs_passthrough": spread_json(
            divide(tokens_per_s, r) if capacity else None for r in raw),
        "pipeline_vs_librdkafka": spread_json(
            divide(tokens_per_s, r) if capacity else None for r in rd),
        # Roles, producers and broker together, at half capacity.
        "tokens_per_cpu_s_at_half": round(1000 / sum(every), 1) if every else None,
        "capacity_tokens_per_reference_unit": tokens_per_s / ref if ref else None,
        "cpu_ms_per_token_roles_at_half": round(sum(roles), 4) if roles else None,
    }
