"""One span of load on a running cluster: producers started, the pipeline measured.

:func:`run_load` starts producer processes for some streams, samples the roles' CPU (and
RSS, and the metrics every second when asked) until the producers exit, waits for the
pipeline to drain, and returns the span's figures: SLO attainment, per-stage quantiles,
CPU milliseconds per token of each role, what the producers published.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep.agents.children import Child, rss_bytes
from lockstep.bench.pipeline.cluster import Cluster, publish_summary
from lockstep.bench.pipeline.metrics import SpanFigures, diff, e2e_count, figures, scrape
from lockstep.observe.metrics import Scrape

#: Tokens per second of one synthetic stream (30 fps video, 20 ms audio, 50 Hz sensor, OCR).
TOKENS_PER_STREAM_S = 132


@dataclass(frozen=True)
class Load:
    """Streams to publish for a while, in producer processes of at most ``per_producer``."""

    streams: int
    seconds: float
    tag: str
    per_producer: int = 16
    #: Seconds into the span at which these producers start (0: at once).
    delay_s: float = 0.0


@dataclass
class Sampled:
    """What was sampled while the producers ran."""

    #: (seconds since start, {role: scrape}) every ``scrape_every_s`` (when asked).
    scrapes: list[tuple[float, Mapping[str, Scrape]]] = field(default_factory=list)
    #: (seconds since start, {role: RSS bytes}) every ``rss_every_s`` (when asked).
    rss: list[tuple[float, dict[str, int | None]]] = field(default_factory=list)
    #: Last CPU seconds seen of each producer (they exit before the span ends).
    producer_cpu: dict[str, float] = field(default_factory=dict)
    #: Seconds since start at which each load's producers had all exited.
    ended: dict[str, float] = field(default_factory=dict)
    #: The scrape taken ``steady_after_s`` into the span (when asked).
    steady: Mapping[str, Scrape] | None = None


def split(streams: int, per_producer: int) -> list[int]:
    """Stream counts of the producer processes: as even as possible, none over the bound."""
    n = max(1, math.ceil(streams / max(1, per_producer)))
    return [streams // n + (1 if i < streams % n else 0) for i in range(n)]


async def run_load(cluster: Cluster, loads: list[Load], *, drain_s: float = 15.0,
                   scrape_every_s: float | None = None, rss_every_s: float | None = None,
                   steady_after_s: float | None = None) -> tuple[dict[str, Any], Sampled]:
    """Run ``loads`` on the cluster; the span's figures (from start to drained) and samples.

    With ``steady_after_s`` the report also has ``steady``: the figures from that many
    seconds into the span to its end, once every stream has started (a stream's first
    windows wait while its clocks are unknown; in a short span of new streams they are
    about 1 % of the windows, enough to set a P99).

    Raises:
        ProcessError: A role exited meanwhile.
    """
    slo = cluster.settings.slo
    before = await scrape(cluster.urls)
    cpu0 = cluster.cpu()
    t0 = time.monotonic()
    producers: dict[str, list[Child]] = {}
    sampled = Sampled(scrapes=[(0.0, before)] if scrape_every_s else [])

    async def launch(load: Load) -> None:
        if load.delay_s:
            await asyncio.sleep(load.delay_s)
        children = [cluster.producer(f"producer {load.tag}-{i}", n, load.seconds,
                                     f"{cluster.run_id}-{load.tag}-p{i}-")
                    for i, n in enumerate(split(load.streams, load.per_producer))]
        producers[load.tag] = children
        for child in children:
            child.start()
        for child in children:
            await child.wait(load.seconds + 120.0)
        sampled.ended[load.tag] = time.monotonic() - t0

    tasks = [asyncio.ensure_future(launch(load)) for load in loads]
    sampler = asyncio.ensure_future(_sample(cluster, producers, sampled, t0, scrape_every_s,
                                            rss_every_s, steady_after_s))
    try:
        await asyncio.gather(*tasks)
        await _drained(cluster, drain_s)
        cluster.check_alive()
    finally:
        sampler.cancel()
        for task in tasks:
            task.cancel()
        for children in producers.values():
            for child in children:
                await child.stop()
    after = await scrape(cluster.urls)
    cpu1 = cluster.cpu()
    seconds = time.monotonic() - t0
    if scrape_every_s:
        sampled.scrapes.append((seconds, after))
    span = figures(diff(after, before), slo)
    children = [c for cs in producers.values() for c in cs]
    summaries = {c.name: publish_summary(c) for c in children}
    report = _span_report(loads, span, summaries, cpu0, cpu1, sampled, seconds)
    failed = [f"{c.name}: exit {c.returncode}: {c.last_lines(3)}"
              for c in children if not summaries[c.name].get("ok")]
    if failed:
        report["producer_errors"] = failed
    if sampled.steady is not None:
        report["steady"] = {"after_s": steady_after_s,
                            "span": figures(diff(after, sampled.steady), slo).as_json()}
    return report, sampled


def _span_report(loads: list[Load], span: SpanFigures, summaries: dict[str, dict[str, Any]],
                 cpu0: dict[str, float | None], cpu1: dict[str, float | None],
                 sampled: Sampled, seconds: float) -> dict[str, Any]:
    published = sum(int(s.get("tokens_published", 0)) for s in summaries.values())
    frames = sum(int(s.get("tokens_by_modality", {}).get("video", 0))
                 for s in summaries.values())
    producer_ok = len(summaries) == sum(len(split(ld.streams, ld.per_producer))
                                        for ld in loads) and all(
        s.get("ok") for s in summaries.values())
    cpu = {role: (cpu1[role] or 0.0) - (cpu0[role] or 0.0) for role in cpu1
           if cpu1[role] is not None and cpu0.get(role) is not None}
    cpu["producers"] = sum(sampled.producer_cpu.values())
    return {
        "streams": sum(ld.streams for ld in loads),
        "seconds": round(seconds, 2),
        "load_seconds": max(ld.seconds + ld.delay_s for ld in loads),
        "tokens_published": published,
        "frames_published": frames,
        "tokens_per_s": published / max(ld.seconds for ld in loads) if loads else 0.0,
        "producer_ok": producer_ok,
        "publish_p99_ms": max((s.get("publish_p99_ms") or 0.0 for s in summaries.values()),
                              default=None),
        "coverage": (span.answered + span.expired) / frames if frames else None,
        "cpu_seconds": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_token": {k: round(v * 1000 / published, 4) if published else None
                             for k, v in cpu.items()},
        "span": span.as_json(),
        "ended": dict(sampled.ended),
    }


async def _sample(cluster: Cluster, producers: Mapping[str, list[Child]], sampled: Sampled,
                  t0: float, scrape_every_s: float | None, rss_every_s: float | None,
                  steady_after_s: float | None) -> None:
    next_scrape = next_rss = 0.0
    while True:
        await asyncio.sleep(0.25)
        now = time.monotonic() - t0
        for children in producers.values():
            for child in children:
                if (used := child.cpu_seconds()) is not None:
                    sampled.producer_cpu[child.name] = used
        if steady_after_s is not None and sampled.steady is None and now >= steady_after_s:
            sampled.steady = await scrape(cluster.urls)
        if scrape_every_s and now >= next_scrape:
            sampled.scrapes.append((now, await scrape(cluster.urls)))
            next_scrape = now + scrape_every_s
        if rss_every_s and now >= next_rss:
            sampled.rss.append((now, {r: rss_bytes(p) for r, p in cluster.pids().items()}))
            next_rss = now + rss_every_s


async def _drained(cluster: Cluster, timeout_s: float, quiet_s: float = 1.5) -> None:
    """Wait until no request has been answered or shed for ``quiet_s`` (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        count = e2e_count(await scrape(cluster.urls))
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        await asyncio.sleep(0.25)
