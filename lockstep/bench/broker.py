"""``lockstep bench broker``: does a hop slow down as the log the broker holds grows?

Each repetition uses a topic of its own (on the embedded broker, a broker of its own too)
and measures one hop twice at the same steady rate: first on the empty topic, then after
``held`` records were written to it as fast as the client allows (and never read). A
producer sends ``rate`` records a second (the pipeline's encoded tokens, cycled over 16
keys) with their send time as the record timestamp; a consumer at the log end measures
each record's hop (receive time minus that timestamp). On the embedded broker its CPU
share over each phase comes from ``/proc``. The ratios (held over empty) are taken within
each repetition: the broker and the machine are the same on both sides of one.

It answers an operator's question the pipeline bench cannot separate from the pipeline's
own work: whether a broker that has served a long run (or an overload) costs more per
record than a fresh one. tansu's memory storage does; Apache Kafka's segments should not.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import numpy as np

from lockstep.agents.children import cpu_seconds
from lockstep.bench.machine import MachineWatch
from lockstep.bench.pipeline.passthrough import payloads
from lockstep.bench.stats import spread_json
from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError
from lockstep.kafka.admin import admin_client, delete_topics, ensure_topics
from lockstep.kafka.embedded import EmbeddedBroker
from lockstep.kafka.probes import HopProbe
from lockstep.topics.catalog import TopicSpec

log = logging.getLogger(__name__)
PHASES = ("empty", "held")
KEYS = 16


@dataclass(frozen=True)
class BrokerBenchOptions:
    """What ``lockstep bench broker`` runs."""

    rate: int = 800
    seconds: float = 10.0
    held: int = 500_000
    partitions: int = 4
    repeats: int = 3


async def run_broker_bench(kafka: KafkaSettings, options: BrokerBenchOptions) -> dict[str, Any]:
    """Every repetition, then the report (figures as medians and spreads)."""
    embedded = not kafka.bootstrap_servers
    reps: list[dict[str, Any]] = []
    with MachineWatch() as watch:
        for i in range(options.repeats):
            async with AsyncExitStack() as stack:
                broker_pid, kafka_i = None, kafka
                if embedded:
                    broker = await asyncio.to_thread(EmbeddedBroker().start)
                    stack.callback(broker.stop)
                    broker_pid, kafka_i = broker.pid, broker.client_settings(kafka)
                rep = await _repetition(kafka_i, options, f"bench.broker.{uuid.uuid4().hex[:8]}",
                                        broker_pid)
            log.info("repetition %d: %s", i + 1, rep)
            reps.append(rep)
    return _report(reps, options, embedded, watch.report())


async def _repetition(kafka: KafkaSettings, options: BrokerBenchOptions, topic: str,
                      broker_pid: int | None) -> dict[str, Any]:
    admin = admin_client(kafka.confluent_config())
    await asyncio.to_thread(ensure_topics, admin, [TopicSpec(topic, options.partitions, 1)])
    out: dict[str, Any] = {"topic": topic}
    try:
        async with HopProbe(kafka, topic) as probe:
            out["empty"] = await _phase(probe, options, broker_pid)
            began = time.monotonic()
            await probe.fill(itertools.islice(_records(), options.held))
            out["write_held_s"] = round(time.monotonic() - began, 2)
            out["held"] = await _phase(probe, options, broker_pid)
    finally:
        try:
            await asyncio.to_thread(delete_topics, kafka, [topic])
        except BrokerError as exc:  # the figures stand either way
            log.warning("could not delete the bench topic %s: %s", topic, exc)
    return out


async def _phase(probe: HopProbe, options: BrokerBenchOptions,
                 broker_pid: int | None) -> dict[str, Any]:
    """Send at the steady rate for the phase's seconds; the hop of every record read."""
    cpu0 = cpu_seconds(broker_pid) if broker_pid else None
    times = await probe.steady(_records(), options.rate, options.seconds)
    cpu1 = cpu_seconds(broker_pid) if broker_pid else None
    sent, hops_ms = times.sent, times.hops_ms
    p50, p99 = (float(x) for x in np.percentile(hops_ms, [50, 99])) if hops_ms else (None, None)
    return {"sent": sent, "read": len(hops_ms),
            "read_share": round(len(hops_ms) / sent, 4) if sent else None,
            "hop_p50_ms": None if p50 is None else round(p50, 2),
            "hop_p99_ms": None if p99 is None else round(p99, 2),
            "broker_cpu_share": None if cpu0 is None or cpu1 is None
            else round((cpu1 - cpu0) / times.wall_s, 3)}


def _records() -> Iterator[tuple[bytes, bytes]]:
    """(key, value) without end: the pipeline's encoded tokens, cycled over 16 keys."""
    return zip(itertools.cycle([f"bench-{k}".encode() for k in range(KEYS)]),
               itertools.cycle(payloads()), strict=False)


def _report(reps: list[dict[str, Any]], options: BrokerBenchOptions, embedded: bool,
            machine: dict[str, Any]) -> dict[str, Any]:
    def figure(phase: str, name: str) -> dict[str, Any] | None:
        return spread_json(r[phase][name] for r in reps)

    def ratio(name: str) -> dict[str, Any] | None:
        return spread_json(r["held"][name] / r["empty"][name] for r in reps
                           if r["held"][name] is not None and r["empty"][name])

    return {
        "broker": "embedded tansu" if embedded else "kafka",
        "options": {"rate": options.rate, "seconds": options.seconds, "held": options.held,
                    "partitions": options.partitions, "repeats": options.repeats},
        "phases": {phase: {name: figure(phase, name) for name in
                           ("read_share", "hop_p50_ms", "hop_p99_ms", "broker_cpu_share")}
                   for phase in PHASES},
        # Sent in a phase and not read within 5 s of its end (the hop's figures omit them).
        "unread": sum(r[p]["sent"] - r[p]["read"] for r in reps for p in PHASES),
        "ratios": {"hop_p50_held_over_empty": ratio("hop_p50_ms"),
                   "hop_p99_held_over_empty": ratio("hop_p99_ms"),
                   "broker_cpu_held_over_empty": ratio("broker_cpu_share")},
        "repetitions": reps,
        "machine": machine,
    }


def render_broker(report: dict[str, Any]) -> str:
    """The report as text: one row a phase, then the ratios."""
    from lockstep.bench.cells import spread_cell, table
    from lockstep.bench.machine import machine_line

    o = report["options"]
    lines = [f"bench broker on {report['broker']}: {o['rate']} records/s for {o['seconds']:g} s "
             f"on an empty topic, then again after {o['held']:,} records held in it "
             f"({o['partitions']} partitions, {o['repeats']} repetitions)",
             machine_line(report["machine"]), ""]
    rows = [[phase, *(spread_cell(f[name], kind) for name, kind in (
        ("read_share", "pct"), ("hop_p50_ms", "ms"), ("hop_p99_ms", "ms"),
        ("broker_cpu_share", "pct")))]
            for phase, f in report["phases"].items()]
    lines += table(["log", "read in time", "hop P50", "hop P99", "broker CPU"], rows)
    r = report["ratios"]
    lines += ["", "held over empty (within each repetition): hop P50 "
              f"{spread_cell(r['hop_p50_held_over_empty'], 'x')}, hop P99 "
              f"{spread_cell(r['hop_p99_held_over_empty'], 'x')}, broker CPU "
              f"{spread_cell(r['broker_cpu_held_over_empty'], 'x')}"]
    if report["unread"]:
        lines.append(f"{report['unread']:,} records sent were not read within 5 s of their "
                     "phase's end (hop figures are of those read)")
    return "\n".join(lines)
