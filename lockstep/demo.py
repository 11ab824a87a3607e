"""``lockstep demo``: every role in one process, synthetic streams, an SLA report.

Starts the embedded broker unless a bootstrap server is given, creates the topics, runs
align, route and worker, publishes synthetic streams in real time, then waits until every
published token is accounted for (a window, a late record or a dead letter) and every
window has a response, or until the drain timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from lockstep.htmlreport import write_report
from lockstep.observer import Observer
from lockstep.publisher import PublishReport, publish_synthetic
from lockstep.runner import prepare_topics, routed_pools, start_roles
from lockstep.streams.app import ROLES
from lockstep.streams.broker import EmbeddedBroker
from lockstep.streams.settings import Settings
from lockstep.streams.synthetic import SyntheticConfig
from lockstep.streams.telemetry import Telemetry
from lockstep.topics.schemas import Modality


@dataclass(frozen=True)
class DemoOptions:
    """What the demo runs."""

    streams: int = 2
    seconds: float = 5.0
    inject_bad: int = 0
    drain_s: float = 20.0
    #: ``normal``; ``partial``: the first stream withholds its video and the second speaks
    #: a confident, clear request (ASR 0.97), to exercise the partial and early-exit routes.
    scenario: str = "normal"
    #: Where to write the HTML SLA report (lockstep.htmlreport), if anywhere.
    html_report: Path | None = None


def scenario_configs(scenario: str, stream_ids: list[str]) -> dict[str, SyntheticConfig]:
    """Per-stream synthetic configurations of a demo scenario."""
    if scenario == "normal" or not stream_ids:
        return {}
    configs = {stream_ids[0]: SyntheticConfig(withheld=frozenset({Modality.VIDEO}))}
    if len(stream_ids) > 1:
        configs[stream_ids[1]] = SyntheticConfig(asr_text="please call the doctor",
                                                 asr_confidence=0.97)
    return configs


async def run_demo(settings: Settings, options: DemoOptions) -> dict[str, Any]:
    """Run the demo and return its report (see :func:`lockstep.report.render_demo`)."""
    broker: EmbeddedBroker | None = None
    if not settings.kafka.bootstrap_servers:
        broker = await asyncio.to_thread(EmbeddedBroker().start)
        kafka = settings.kafka.model_copy(update={
            "bootstrap_servers": broker.bootstrap,
            "fetch_max_wait_ms": min(settings.kafka.fetch_max_wait_ms, 5)})
        settings = settings.model_copy(update={"kafka": kafka})
    try:
        return await _run(settings, options, embedded=broker is not None)
    finally:
        if broker is not None:
            await asyncio.to_thread(broker.stop)


async def _run(settings: Settings, options: DemoOptions, *, embedded: bool) -> dict[str, Any]:
    telemetry = Telemetry(settings.slo.stage_p99_ms / 1000.0)
    metrics_port = (telemetry.serve(settings.metrics.host, settings.metrics.port)
                    if settings.metrics.enabled else None)
    await prepare_topics(settings, create=True)
    run_id = secrets.token_hex(3)
    prefix = f"demo-{run_id}-"
    stream_ids = [f"{prefix}cam{i}" for i in range(options.streams)]
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(prefix))
    await observer.start()
    roles = await start_roles(settings, ROLES, telemetry, worker_pools=routed_pools(settings))
    try:
        await roles.wait_assigned(timeout_s=30.0)
        published = await publish_synthetic(
            settings.kafka, stream_ids, options.seconds, telemetry,
            configs=scenario_configs(options.scenario, stream_ids),
            inject_bad=options.inject_bad)
        drained = await drain(observer, published, options.drain_s)
    finally:
        await roles.stop()
        await observer.stop()
    report = _report(settings, options, telemetry, observer, published, drained,
                     embedded=embedded, metrics_port=metrics_port)
    if options.html_report is not None:
        write_report(options.html_report, [generate_latest(telemetry.registry).decode()],
                     settings.slo, title="Lockstep demo: SLA report",
                     meta={"broker": report["broker"], "streams": str(options.streams),
                           "seconds": str(report["seconds"]), "scenario": options.scenario})
        report["html_report"] = str(options.html_report)
    return report


async def drain(observer: Observer, published: PublishReport, timeout_s: float) -> bool:
    """Wait until the ledger closes: every token settled, every window answered."""
    deadline = time.monotonic() + timeout_s
    ledger = observer.ledger
    while time.monotonic() < deadline:
        if (not ledger.unaccounted(published.keys) and not ledger.unanswered()
                and len(ledger.dead_letters) >= published.bad_records):
            return True
        observer.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(observer.changed.wait(), timeout=0.25)
    return False


def _report(settings: Settings, options: DemoOptions, telemetry: Telemetry, observer: Observer,
            published: PublishReport, drained: bool, *, embedded: bool,
            metrics_port: int | None) -> dict[str, Any]:
    ledger = observer.ledger
    routes = Counter(r.route for r in ledger.responses.values())
    per_stream = Counter(sid for sid, _ in ledger.responses)
    slo_class = settings.slo.default_class
    budget_ms = settings.slo.budget_ms(slo_class)
    unaccounted = ledger.unaccounted(published.keys)
    return {
        "ok": drained,
        "broker": "embedded tansu" if embedded else "kafka",
        "bootstrap": settings.kafka.bootstrap_servers,
        "streams": options.streams,
        "seconds": round(published.seconds, 2),
        "tokens_published": len(published.keys),
        "tokens_by_modality": dict(sorted(published.by_modality.items())),
        "bad_records_published": published.bad_records,
        "ledger": {
            "in_windows": len(ledger.in_windows & published.keys),
            "late": len(ledger.late & published.keys),
            "dead_letters": len(ledger.dead_letters),
            "unaccounted": len(unaccounted),
        },
        "windows": len(ledger.windows),
        "windows_partial": sum(1 for w in ledger.windows.values() if w.missing),
        "scenario": options.scenario,
        "routes": dict(sorted(routes.items())),
        "reasons": dict(sorted(Counter(f"{r.route}:{r.reason}" for r in ledger.responses.values()
                                       ).items())),
        "responses": len(ledger.responses),
        "responses_by_status": dict(sorted(Counter(
            r.status for r in ledger.responses.values()).items())),
        "engine": next(iter(ledger.responses.values())).engine if ledger.responses else None,
        "windows_without_response": len(ledger.unanswered()),
        "responses_per_stream": {sid: per_stream.get(sid, 0) for sid in sorted(
            {sid for sid, _ in ledger.windows} | set(per_stream))},
        "duplicates": dict(ledger.duplicates),
        "stages": {stage: {"p50_ms": round(s.p50_ms, 3), "p99_ms": round(s.p99_ms, 3),
                           "count": s.count}
                   for stage, s in telemetry.stage_stats().items()},
        "slo": {
            "class": slo_class,
            "e2e_budget_ms": budget_ms,
            "attainment": _round(telemetry.slo_attainment()),
            "stage_budget_ms": settings.slo.stage_p99_ms,
        },
        "sample_output": next((r.output for r in ledger.responses.values()
                               if r.status == "ok"), None),
        "metrics_url": f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
