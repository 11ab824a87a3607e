"""A synthetic run for the report's tests: two roles scraped every few seconds.

An align process (tokens, dead letters) and a worker process (pools ``vl`` and ``text``,
routes, e2e, queue depth) are scraped together in rounds. In the middle rounds inference
slows to 150 ms, a third of the requests are shed (so the e2e P99 is beyond the last
bucket: "≥ 10 s"), a breach of ``infer`` and of ``e2e`` is raised and ``cabin`` runs
degraded.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from prometheus_client import generate_latest

from lockstep.config.settings import SloSettings
from lockstep.observe.timeseries import HEADER, TimedScrape
from lockstep.telemetry.metrics import Telemetry
from lockstep.telemetry.slo import SloMonitor

START = 1_717_000_000.0
EVERY_S = 5.0
ROUNDS = 13
SLOW = range(5, 9)  # the rounds whose interval is slow


def _watched() -> Telemetry:
    t = Telemetry()
    slo = SloSettings()
    t.watch(SloMonitor(slo), {c: slo.budget_tree(c) for c in slo.classes})
    return t


def _advance(align: Telemetry, worker: Telemetry, n: int, rng: np.random.Generator) -> None:
    slow = n in SLOW
    for _ in range(120):
        align.token("video", "window")
        align.token("audio", "window", 2)
        align.stage("align", float(rng.uniform(0.0004, 0.003)), slo_class="cabin")
    align.token("audio", "late", 3)
    align.token("video", "deadletter", n % 3)
    for _ in range(n % 3):
        align.dead_letter("align", "SchemaError")
    if n == 7:
        align.dead_letter("align", "DecodeError")
    for i in range(60):
        pool, route = ("vl", "full") if i % 3 else ("text", "text_only")
        infer_s = float(rng.uniform(0.13, 0.16) if slow and pool == "vl"
                        else rng.uniform(0.01, 0.04))
        worker.windows.labels(route).inc()
        worker.stage("route", float(rng.uniform(0.0005, 0.002)), route=route, pool=pool,
                     slo_class="cabin")
        worker.stage("queue", float(rng.uniform(0.001, 0.008)), route=route, pool=pool,
                     slo_class="cabin")
        worker.stage("infer", infer_s, route=route, pool=pool, slo_class="cabin")
        if slow and i % 3 == 1:
            worker.expired(slo_class="cabin")
            worker.requests.labels(pool, "expired").inc()
            continue
        worker.e2e(infer_s + 0.03, route=route, slo_class="cabin", budget_s=0.12)
        worker.requests.labels(pool, "ok").inc()
        worker.batch_size.labels(pool).observe(4 if pool == "vl" else 8)
    worker.queue_depth.labels("vl").set(40 if slow else 3)
    worker.queue_depth.labels("text").set(1)
    worker.set_queue_capacity("vl", 256)
    worker.set_queue_capacity("text", 256)
    if n == min(SLOW) + 1:
        worker.slo_breaches.labels("infer", "cabin").inc()
        worker.slo_breaches.labels("e2e", "cabin").inc()
    worker.slo_degraded.labels("cabin").set(1 if n in range(min(SLOW) + 1, max(SLOW) + 2)
                                            else 0)
    worker.consumer_lag.labels("requests.vl", "lockstep-worker-vl").set(12 if slow else 0)


def scrapes(rounds: int = ROUNDS) -> list[TimedScrape]:
    """The run's scrapes: both roles in every round, ``EVERY_S`` apart."""
    return list(_scrapes(rounds))


@functools.cache
def _scrapes(rounds: int) -> tuple[TimedScrape, ...]:
    # Built once per session: parsing two dozen expositions takes a few seconds.
    align, worker = _watched(), _watched()
    rng = np.random.default_rng(11)
    out = []
    for n in range(rounds):
        if n:
            _advance(align, worker, n, rng)
        at = START + n * EVERY_S
        for source, t in (("align", align), ("worker", worker)):
            out.append(TimedScrape.of_text(generate_latest(t.registry).decode(), at=at + 0.01,
                                           source=source))
    return tuple(out)


def write_files(folder: Path, rounds: int = ROUNDS) -> list[Path]:
    """The run's scrapes as saved Prometheus texts, each with its time on its first line."""
    paths = []
    for s in scrapes(rounds):
        path = folder / f"{s.source}-{s.at:.2f}.prom"
        path.write_text(f"{HEADER} at={s.at} source={s.source}\n{s.text}", encoding="utf-8")
        paths.append(path)
    return paths
