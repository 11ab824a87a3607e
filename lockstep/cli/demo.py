"""``lockstep demo``: every role in one process, synthetic streams, an SLA report.

The command (:func:`demo`) and the run it drives (:func:`run_demo`).

Starts the embedded broker unless a bootstrap server is given, creates the topics, runs
align, route and worker, publishes synthetic streams in real time, then waits until every
published token is accounted for (a window, a late record or a dead letter) and every
window has a response, or until the drain timeout. The publisher and the ledger's reader
(:mod:`lockstep.observe.watch`) run in child processes: the roles' process does only their work.
"""

from __future__ import annotations

import array
import asyncio
import json
import multiprocessing as mp
import os
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from prometheus_client import generate_latest

from lockstep.agents.app import ROLES, install_uvloop, run_async
from lockstep.agents.memory import freeze_startup_heap
from lockstep.agents.runner import prepare_topics, routed_pools, start_roles
from lockstep.cli.base import bootstrap_option, check_cluster, kafka_overrides, settings_for
from lockstep.config.settings import KafkaSettings, Settings
from lockstep.errors import BrokerError
from lockstep.kafka.embedded import SLOW_AFTER_RECORDS, EmbeddedBroker
from lockstep.kafka.logfilter import summarised_warnings
from lockstep.observe.htmlreport import RunDetail, write_report
from lockstep.observe.ledger import Ledger
from lockstep.observe.timeseries import TimedScrape
from lockstep.observe.verdict import MachineLoad, sla_verdict
from lockstep.observe.watch import WatchProcess
from lockstep.producer.delivery import PublishReport
from lockstep.producer.realtime import publish_synthetic
from lockstep.producer.synthetic import SyntheticConfig
from lockstep.telemetry.metrics import Telemetry
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
    #: Where to write the HTML SLA report (lockstep.observe.htmlreport), if anywhere.
    html_report: Path | None = None
    #: Told what the demo is doing, step by step (the CLI prints it on stderr).
    progress: Callable[[str], None] = lambda step: None


def scenario_configs(scenario: str, stream_ids: list[str]) -> dict[str, SyntheticConfig]:
    """Per-stream synthetic configurations of a demo scenario."""
    if scenario == "normal" or not stream_ids:
        return {}
    configs = {stream_ids[0]: SyntheticConfig(withheld=frozenset({Modality.VIDEO}))}
    if len(stream_ids) > 1:
        configs[stream_ids[1]] = SyntheticConfig(asr_text="please call the doctor",
                                                 asr_confidence=0.97)
    return configs


def embedded_broker_note(streams: int, seconds: float) -> str | None:
    """A warning for a run that will fill the embedded broker past where it slows down."""
    tokens = streams * seconds * SyntheticConfig().tokens_per_second
    if tokens <= SLOW_AFTER_RECORDS:
        return None
    return (f"note: about {tokens:,.0f} tokens; the embedded broker slows as its log grows "
            f"past ~{SLOW_AFTER_RECORDS:,} records (docs/bench.md, `lockstep bench broker`): "
            "for long runs, use Apache Kafka (--bootstrap)")


async def run_demo(settings: Settings, options: DemoOptions) -> dict[str, Any]:
    """Run the demo and return its report (see :func:`lockstep.cli.output.render_demo`)."""
    broker: EmbeddedBroker | None = None
    if not settings.kafka.bootstrap_servers:
        options.progress("starting the embedded broker")
        broker = await asyncio.to_thread(EmbeddedBroker().start)
        if (note := embedded_broker_note(options.streams, options.seconds)) is not None:
            options.progress(note)
        kafka = broker.client_settings(settings.kafka)
        # One process reads every partition, so more than one per topic buys nothing, and
        # the embedded broker's work grows with the partitions in each fetch: 16 streams
        # held 56.8 % of windows within budget on 4 partitions a topic, 93.8 % on one.
        topics = settings.topics.model_copy(update={"media_partitions": 1,
                                                    "pipeline_partitions": 1})
        settings = settings.model_copy(update={"kafka": kafka, "topics": topics})
    try:
        return await _run(settings, options, embedded=broker is not None)
    finally:
        if broker is not None:
            await asyncio.to_thread(broker.stop)


async def _run(settings: Settings, options: DemoOptions, *, embedded: bool) -> dict[str, Any]:
    progress = options.progress
    telemetry = Telemetry(settings.slo.stage_p99_ms / 1000.0)
    metrics_port = (telemetry.serve(settings.metrics.host, settings.metrics.port or 0)
                    if settings.metrics.enabled else None)
    if metrics_port is not None:
        progress(f"metrics on http://{settings.metrics.host}:{metrics_port}/metrics "
                 f"while the demo runs")
    progress("creating topics")
    await prepare_topics(settings, create=True)
    run_id = secrets.token_hex(3)
    prefix = f"demo-{run_id}-"
    # Groups of this run only, starting at the log end: on a shared cluster the demo
    # neither joins a deployment's groups nor works through earlier runs' records.
    settings = settings.model_copy(update={
        "app_id": f"{settings.app_id}-demo-{run_id}",
        "kafka": settings.kafka.model_copy(update={"new_group_offset": "latest"})})
    stream_ids = [f"{prefix}cam{i}" for i in range(options.streams)]
    scrapes: list[TimedScrape] = []
    # The ledger is kept in a process of its own: the demo's bookkeeping off the loop that
    # every role shares. It starts while the roles do.
    watch = WatchProcess(settings.kafka, prefix)
    watch.start()
    try:
        progress(f"starting align, route and worker (engine {settings.worker.engine}; a "
                 "model engine loads and warms up first)")
        roles = await start_roles(settings, ROLES, telemetry,
                                  worker_pools=routed_pools(settings), connect_timeout_s=30.0)
        try:
            progress("joining the consumer groups")
            if not await roles.wait_assigned(timeout_s=60.0):
                raise BrokerError("the roles' consumer groups got no partitions within 60 s")
            await watch.ready()
            progress(f"publishing {options.streams} streams for {options.seconds:g} s")
            load_before = os.getloadavg()[0]
            sampling = (asyncio.create_task(_sample(telemetry, scrapes))
                        if options.html_report is not None else None)
            # The streams' producer runs in a process of its own, as cameras and
            # microphones would: its work and its pauses are not the pipeline's.
            published, publish_latencies = await publish_elsewhere(
                settings.kafka, stream_ids, options.seconds, telemetry,
                configs=scenario_configs(options.scenario, stream_ids),
                inject_bad=options.inject_bad)
            progress("waiting for the last windows and responses")
            ledger, drained = await watch.drain(published, options.drain_s)
            telemetry.stages("publish", publish_latencies)
            if sampling is not None:
                sampling.cancel()
                await asyncio.gather(sampling, return_exceptions=True)
            _scrape(telemetry, scrapes)
            events = list(roles.listener.events) if roles.listener is not None else []
        finally:
            await roles.stop()
    finally:
        await watch.stop()
    report = _report(settings, options, telemetry, ledger, published, drained,
                     embedded=embedded, metrics_port=metrics_port,
                     machine=MachineLoad.now(before=load_before))
    if options.html_report is not None:
        write_report(options.html_report, [], settings.slo, scrapes=scrapes,
                     detail=RunDetail.of_ledger(ledger, settings.slo, events),
                     title="Lockstep demo: SLA report",
                     meta={"broker": report["broker"], "streams": str(options.streams),
                           "seconds": str(report["seconds"]), "scenario": options.scenario})
        report["html_report"] = str(options.html_report)
    return report


async def _sample(telemetry: Telemetry, scrapes: list[TimedScrape],
                  every_s: float = 1.0) -> None:
    """Snapshot the metrics every ``every_s`` (the HTML report's time axis)."""
    while True:
        _scrape(telemetry, scrapes)
        await asyncio.sleep(every_s)


def _scrape(telemetry: Telemetry, scrapes: list[TimedScrape]) -> None:
    scrapes.append(TimedScrape.of_text(generate_latest(telemetry.registry).decode(),
                                       at=time.time(), source="demo"))


async def publish_elsewhere(kafka: KafkaSettings, stream_ids: list[str], seconds: float,
                            telemetry: Telemetry, *,
                            configs: Mapping[str, SyntheticConfig] | None = None,
                            inject_bad: int = 0) -> tuple[PublishReport, Sequence[float]]:
    """:func:`publish_synthetic` in a child process: its report and ``publish`` latencies.

    The latencies (one per token) are the caller's to record (``telemetry.stages``) once
    the roles are done: recording tens of thousands of them holds the event loop the roles
    share. For the same reason the child is joined in a thread: joining it on the loop held
    every role still for the ~0.3 s its interpreter takes to exit, while the run's last
    windows were being made (their responses came late or were shed as stale). The report
    comes back packed (:meth:`PublishReport.__reduce__`) and the latencies as an array, so
    that unpickling them does not hold the interpreter either.
    """
    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
    try:
        report, samples = await asyncio.get_running_loop().run_in_executor(
            pool, _publish_child, kafka, stream_ids, seconds, dict(configs or {}), inject_bad)
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True)
    for modality, count in report.by_modality.items():
        telemetry.token(modality, "published", count)
    return report, samples


class _Recorder(Telemetry):
    """Telemetry of the child publisher: keeps the ``publish`` latencies to send back."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[float] = []

    def stage(self, stage: str, seconds: float, *, route: str = "", pool: str = "",
              slo_class: str = "") -> None:
        if stage == "publish":
            self.samples.append(seconds)


def _publish_child(kafka: KafkaSettings, stream_ids: list[str], seconds: float,
                   configs: dict[str, SyntheticConfig],
                   inject_bad: int) -> tuple[PublishReport, array.array[float]]:
    install_uvloop()
    # The child's imports are most of its heap: frozen, the collector's full passes do not
    # walk them (unfrozen, each held every send ~45 ms at 30 streams, a burst downstream).
    freeze_startup_heap()
    recorder = _Recorder()
    report = asyncio.run(publish_synthetic(kafka, stream_ids, seconds, recorder,
                                           configs=configs, inject_bad=inject_bad))
    return report, array.array("d", recorder.samples)  # unpickled in one cheap call


def _report(settings: Settings, options: DemoOptions, telemetry: Telemetry, ledger: Ledger,
            published: PublishReport, drained: bool, *, embedded: bool,
            metrics_port: int | None, machine: MachineLoad) -> dict[str, Any]:
    routes = Counter(r.route for r in ledger.responses.values())
    per_stream = Counter(sid for sid, _ in ledger.responses)
    slo_class = settings.slo.default_class
    budget_ms = settings.slo.budget_ms(slo_class)
    unaccounted = ledger.unaccounted()
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
        "engine": next((r.engine for r in ledger.responses.values() if r.engine != "none"),
                       None),
        "windows_without_response": len(ledger.unanswered()),
        "responses_per_stream": {sid: per_stream.get(sid, 0) for sid in sorted(
            {sid for sid, _ in ledger.windows} | set(per_stream))},
        "duplicates": dict(ledger.duplicates),
        "conflicts": dict(ledger.conflicts),
        "stages": {stage: {"p50_ms": round(s.p50_ms, 3), "p99_ms": round(s.p99_ms, 3),
                           "count": s.count}
                   for stage, s in telemetry.stage_stats().items()},
        "slo": {
            "class": slo_class,
            "e2e_budget_ms": budget_ms,
            "attainment": _round(telemetry.slo_attainment()),
            "stage_budget_ms": settings.slo.stage_p99_ms,
        },
        "sample_output": _sample_output(ledger),
        "metrics_url": f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None,
        "verdict": _verdict(settings, telemetry, ledger, published, drained, machine),
    }


def _sample_output(ledger: Ledger) -> str | None:
    """One answer to show: of a window with every modality when there is one.

    A stream's first windows go out before its audio and sensor clocks are known, without
    them ("missing audio,sensor"); the first answer is one of those and would show the
    demo at its least representative.
    """
    first = None
    for key, response in ledger.responses.items():
        if response.status != "ok":
            continue
        window = ledger.windows.get(key)
        if window is not None and not window.missing:
            return response.output
        first = response.output if first is None else first
    return first


def _verdict(settings: Settings, telemetry: Telemetry, ledger: Ledger,
             published: PublishReport, drained: bool, machine: MachineLoad) -> dict[str, Any]:
    slo = settings.slo
    slo_class = slo.default_class
    statuses = Counter(r.status for r in ledger.responses.values())
    stats = telemetry.stage_stats()
    verdict = sla_verdict(
        attainment=telemetry.slo_attainment(), objective=slo.objective,
        answered=statuses.get("ok", 0), shed=statuses.get("expired", 0),
        late_tokens=len(ledger.late & published.keys), published=len(published.keys),
        stage_p99_ms={stage: s.p99_ms for stage, s in stats.items()},
        stage_budget_ms=slo.budget_tree(slo_class), machine=machine, ledger_closed=drained)
    return {"sla_met": verdict.met, "objective": verdict.objective,
            "reasons": list(verdict.reasons), "cores": machine.cores,
            "load_before": round(machine.load_before, 2),
            "load_after": round(machine.load_after, 2),
            "line": verdict.line(slo.budget_ms(slo_class), slo_class)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@click.command()
@bootstrap_option
@click.option("--streams", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Synthetic streams to publish.")
@click.option("--seconds", default=5.0, show_default=True, type=click.FloatRange(0.5, 3600),
              help="How long to publish.")
@click.option("--inject-bad", default=0, show_default=True, type=click.IntRange(0, 1000),
              help="Also publish this many undecodable records (they must be dead-lettered).")
@click.option("--drain", default=20.0, show_default=True, type=click.FloatRange(1, 600),
              help="Seconds to wait for the last windows and responses.")
@click.option("--metrics-port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="Port for /metrics while the demo runs (0: any free port).")
@click.option("--scenario", default="normal", show_default=True,
              type=click.Choice(["normal", "partial"]),
              help="partial: the first stream withholds its video, the second speaks a "
                   "confident request (ASR 0.97), the rest are normal.")
@click.option("--engine", default=None,
              type=click.Choice(["reference", "cpu", "auto", "openai", "trtllm"]),
              help="Worker engine. Default: reference (deterministic, describes what the "
                   "window holds) unless LOCKSTEP_WORKER__ENGINE or --config names one; cpu "
                   "runs Qwen2.5-VL (docs/engines.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--report", "html_report", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the HTML SLA report (lockstep report) to this file.")
@click.option("--require-slo", is_flag=True,
              help="Exit 1 when the SLA was not met (slo.objective of windows answered "
                   "within budget), not only when the ledger did not close.")
@click.pass_context
def demo(ctx: click.Context, bootstrap: str | None, streams: int, seconds: float,
         inject_bad: int, drain: float, metrics_port: int, scenario: str,
         engine: str | None, as_json: bool, html_report: Path | None,
         require_slo: bool) -> None:
    """Run every role in one process on synthetic streams and print the SLA report.

    Without --bootstrap it starts the embedded broker: an exported
    LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS is not used, so the demo never publishes into a
    cluster it was not pointed at. Exits 0 when every published token is accounted for
    (window, late or dead letter) and every window has a response; 1 otherwise (and,
    with --require-slo, when the SLA was not met). The last line says whether the SLA was
    met and, if not, why.
    """
    from lockstep.cli.output import render_demo

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap), metrics={"port": metrics_port})
    if bootstrap is not None:
        check_cluster(settings)
    if bootstrap is None and settings.kafka.bootstrap_servers:
        click.echo(f"ignoring LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS="
                   f"{settings.kafka.bootstrap_servers}: the demo runs on the embedded broker "
                   f"unless --bootstrap is given", err=True)
        settings = settings.model_copy(update={"kafka": settings.kafka.model_copy(
            update={"bootstrap_servers": None})})
    if engine is None and "engine" not in settings.worker.model_fields_set:
        engine = "reference"
    if engine is not None:
        settings = settings.model_copy(
            update={"worker": settings.worker.model_copy(update={"engine": engine})})
    options = DemoOptions(streams=streams, seconds=seconds, inject_bad=inject_bad,
                          drain_s=drain, scenario=scenario, html_report=html_report,
                          progress=lambda step: click.echo(f"demo: {step}…", err=True))
    with summarised_warnings(ctx.obj.get("log_level", "warning")) as warnings:
        report = run_async(run_demo(settings, options))
    click.echo(json.dumps(report, indent=2) if as_json else render_demo(report))
    if warnings.summary():
        click.echo(warnings.summary(), err=True)
    if html_report is not None:
        click.echo(f"report written to {html_report}", err=True)
    sla_met = report["verdict"]["sla_met"]
    sys.exit(0 if report["ok"] and (sla_met or not require_slo) else 1)
