"""SLA observability on real brokers.

/metrics of running roles, breach-driven degraded mode and its recovery, consumer lag from
the admin API.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from lockstep.agents.app import ROLES
from lockstep.agents.runner import RoleSet, prepare_topics, start_roles
from lockstep.agents.slo import SloListener
from lockstep.config.settings import Settings, load_settings
from lockstep.kafka.admin import admin_client
from lockstep.kafka.lag import LagExporter, lag_by_topic, partition_lags
from lockstep.observe.metrics import fetch, parse, summarize
from lockstep.observe.observer import Observer, drain
from lockstep.producer.realtime import publish_synthetic
from lockstep.telemetry.metrics import Telemetry
from tests.integration.slowengine import SlowEngine, until, use_slow_engine

pytestmark = pytest.mark.integration


@dataclass
class Running:
    settings: Settings
    prefix: str
    observer: Observer
    telemetry: Telemetry
    roles: RoleSet
    metrics_url: str


def _settings(bootstrap: str, **slo: Any) -> Settings:
    return load_settings(
        # The session's broker holds other tests' media: a new group starts at the log end.
        kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
               "fetch_max_wait_ms": 10, "new_group_offset": "latest"},
        # FIFO batching without shedding: every request reaches the (slow) engine.
        worker={"engine": "reference", "policy": "fifo", "shed": False, "degrade": False,
                "warmup": False, "infer_timeout_ms": 10_000},
        slo=slo, app_id=f"lockstep-obs-{secrets.token_hex(2)}", metrics={"enabled": False})


@asynccontextmanager
async def _running(bootstrap: str, monkeypatch: pytest.MonkeyPatch, delay_s: float,
                   **slo: Any) -> AsyncIterator[Running]:
    use_slow_engine(monkeypatch, delay_s)
    settings = _settings(bootstrap, **slo)
    await prepare_topics(settings, create=True)
    prefix = f"obs-{secrets.token_hex(3)}-"
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(prefix))
    await observer.start()
    telemetry = Telemetry(settings.slo.stage_p99_ms / 1000.0)
    port = telemetry.serve("127.0.0.1", 0)
    roles = await start_roles(settings, ROLES, telemetry, worker_pools=["vl", "text"])
    try:
        assert await roles.wait_assigned()
        yield Running(settings, prefix, observer, telemetry, roles,
                      f"http://127.0.0.1:{port}/metrics")
    finally:
        await roles.stop()
        await observer.stop()


@pytest.mark.timing
async def test_a_running_role_serves_the_design_metrics_with_an_injected_delay_in_infer(
        tansu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    delay_ms = 40.0
    async with _running(tansu, monkeypatch, delay_ms / 1000) as run:
        published = await publish_synthetic(run.settings.kafka, [f"{run.prefix}a"], 2.0,
                                            run.telemetry)
        assert await drain(run.observer, published, timeout_s=30.0), "ledger did not close"
        text = await asyncio.to_thread(fetch, run.metrics_url)

    scrape = parse(text)
    for name in ("lockstep_stage_latency_seconds", "lockstep_e2e_latency_seconds",
                 "lockstep_batch_size"):
        assert scrape.histograms.get(name), name
    for name in ("lockstep_windows_total", "lockstep_tokens_total"):
        assert scrape.counters.get(name), name
    assert scrape.gauges.get("lockstep_slo_budget_seconds")
    infer_labels = {dict(labels)["pool"]: dict(labels) for labels in
                    scrape.histograms["lockstep_stage_latency_seconds"]
                    if dict(labels)["stage"] == "infer"}
    assert infer_labels["vl"] == {"stage": "infer", "route": "full", "pool": "vl",
                                  "slo_class": "cabin"}
    rows = {r.stage: r for r in summarize(scrape, run.settings.slo).stages}
    assert {"transport", "align", "route", "queue", "infer", "respond", "e2e"} <= set(rows)
    infer, route = rows["infer"], rows["route"]
    assert infer.p50_ms is not None and infer.p99_ms is not None
    assert delay_ms <= infer.p50_ms <= infer.p99_ms < delay_ms + 60, infer
    assert route.p99_ms is not None and route.p99_ms < delay_ms / 2, route
    windows = scrape.values("lockstep_tokens_total", ("outcome",))[("window",)]
    late = scrape.values("lockstep_tokens_total", ("outcome",)).get(("late",), 0)
    assert windows + late == len(published.keys)


@pytest.mark.timing
async def test_engine_delay_raises_a_breach_degrades_the_class_and_it_then_recovers(
        tansu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A hold of 1 s that does not grow: on a loaded machine the infer stage can breach again
    # right after recovering, and a doubling hold would then outlast the wait below (the
    # hold itself is tests/unit/test_slo.py's). Infer's budget is 100 ms, not cabin's 60: its
    # samples are batch wall times in a process that runs every role, and on a loaded CI
    # machine the event loop's lag alone kept them over the 48 ms that clear a 60-ms breach.
    breach = {"window_ms": 1000, "evaluate_ms": 250, "min_samples": 5,
              "degrade_on": ["infer"], "degraded_stride": 2, "hold_ms": 1000,
              "hold_max_ms": 1000}
    async with _running(tansu, monkeypatch, 0.15, breach=breach,
                        stages_ms={"infer": 100.0}) as run:
        listener, aligner = run.roles.listener, run.roles.aligners[0]
        assert listener is not None
        publishing = asyncio.create_task(publish_synthetic(
            run.settings.kafka, [f"{run.prefix}a", f"{run.prefix}b"], 20.0, run.telemetry))
        try:
            assert await until(lambda: listener.degraded("cabin"), 10.0), listener.events
            assert await until(lambda: aligner.aligner.stride >= 2, 3.0)
            assert run.telemetry.registry.get_sample_value(
                "lockstep_slo_degraded", {"slo_class": "cabin"}) == 1
            monkeypatch.setattr(SlowEngine, "delay_s", 0.0)  # the engine recovers
            # Up to 15 s: on a CI machine whose speed moved from run to run, the class stayed
            # degraded through a 10-s wait once (CI at dd77b8d; the events were cut short in
            # the report, so why is not known: they are printed in full now). Publishing
            # lasts 20 s so that windows still come after the recovery.
            assert await until(lambda: not listener.degraded("cabin"), 15.0), "\n".join(
                map(str, listener.events))
            recovered_us = time.time_ns() // 1000
            published = await publishing
        finally:
            publishing.cancel()
        assert await drain(run.observer, published, timeout_s=30.0), "ledger did not close"
        assert aligner.rate.floor == 1

    kinds = [(e.kind, e.stage, e.degrade) for e in listener.events if e.stage == "infer"]
    assert kinds[0] == ("breach", "infer", True) and kinds[-1] == ("recovered", "infer", True)
    first = next(e for e in listener.events if e.stage == "infer")
    assert first.p99_ms > first.budget_ms == 100.0
    assert first.consecutive == 1  # every latest sample over budget: raised at once
    assert run.telemetry.registry.get_sample_value(
        "lockstep_slo_breaches_total", {"stage": "infer", "slo_class": "cabin"}) >= 1
    assert run.telemetry.registry.get_sample_value(
        "lockstep_slo_degraded", {"slo_class": "cabin"}) == 0
    responses = list(run.observer.ledger.responses.values())
    reasons = Counter((r.route, r.reason) for r in responses)
    assert reasons[("text_only", "slo_degraded")] > 0, reasons  # partial routes while degraded
    # after recovery, full windows take the full route again
    assert any(r.reason == "all_trusted" and r.timeline.routed_us > recovered_us
               for r in responses)


async def test_roles_that_stop_withdraw_their_breaches_from_the_other_processes(
        tansu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the withdrawal another process keeps the class degraded for breach.ttl_ms
    # (30 s) after the roles that raised the breach are gone: a role scaled down during a
    # breach, or (in CI) the roles of the test before.
    breach = {"window_ms": 1000, "evaluate_ms": 250, "min_samples": 5,
              "degrade_on": ["infer"], "hold_ms": 1000, "hold_max_ms": 1000}
    async with _running(tansu, monkeypatch, 0.15, breach=breach,
                        stages_ms={"infer": 100.0}) as run:
        other = SloListener(run.settings, Telemetry())
        await other.start()
        publishing = asyncio.create_task(publish_synthetic(
            run.settings.kafka, [f"{run.prefix}a"], 6.0, run.telemetry))
        assert await until(lambda: other.degraded("cabin"), 10.0), other.events
    try:
        # the roles have stopped; the class clears long before the 30-s ttl
        assert await until(lambda: not other.degraded("cabin"), 5.0), "\n".join(
            map(str, other.events))
        assert any(e.kind == "recovered" and e.p99_ms == 0.0 for e in other.events)
    finally:
        await other.stop()
        await publishing


def test_consumer_lag_is_the_committed_offsets_behind_the_log_end(apache_kafka: str) -> None:
    topic, group = f"lag-{secrets.token_hex(3)}", f"lag-group-{secrets.token_hex(3)}"
    config = {"bootstrap.servers": apache_kafka}
    admin = admin_client(config)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=15)
    producer = Producer(config)
    for partition, n in ((0, 20), (1, 10)):
        for i in range(n):
            producer.produce(topic, value=b"x", key=str(i).encode(), partition=partition)
    assert producer.flush(15) == 0
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    finally:
        consumer.close()
    lags = {lag.partition: lag for lag in partition_lags(admin, group, [topic, "no-such-topic"])}
    assert (lags[0].committed, lags[0].end, lags[0].lag) == (7, 20, 13)
    assert (lags[1].committed, lags[1].end, lags[1].lag) == (None, 10, 10)  # from log start
    assert lag_by_topic(lags.values()) == {topic: 23}
    fresh = partition_lags(admin, "a-group-that-never-ran", [topic])
    assert lag_by_topic(fresh) == {topic: 30}

    telemetry = Telemetry()
    settings = load_settings(kafka={"bootstrap_servers": apache_kafka})

    async def export() -> dict[str, dict[str, int]]:
        exporter = LagExporter(settings.kafka, telemetry, {group: [topic]})
        try:
            return await exporter.export()
        finally:
            await exporter.stop()

    assert asyncio.run(export()) == {group: {topic: 23}}
    assert telemetry.registry.get_sample_value(
        "lockstep_consumer_lag", {"topic": topic, "group": group}) == 23
