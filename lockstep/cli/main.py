"""The ``lockstep`` command line."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import click

from lockstep import __version__
from lockstep.agents.allocator import reexec_with_system_allocator
from lockstep.agents.app import run_async
from lockstep.cli.base import (
    LockstepGroup,
    bootstrap_option,
    check_cluster,
    kafka_overrides,
    settings_for,
    until_signalled,
)
from lockstep.cli.bench import bench
from lockstep.cli.chaos import chaos
from lockstep.cli.inspect import inspect
from lockstep.cli.publish import publish, subscribe
from lockstep.cli.topics import topics
from lockstep.cli.validate import validate
from lockstep.errors import RoleCrashed
from lockstep.kafka.logfilter import route_client_logs, summarised_warnings


@click.group(cls=LockstepGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockstep")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path),
              envvar="LOCKSTEP_CONFIG", help="TOML settings file (env vars win over it).")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.pass_context
def cli(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """Lockstep: real-time multimodal inference over Kafka.

    Producers publish video, audio, OCR and sensor tokens to media.* topics; align, route
    and worker roles turn them into aligned windows, routed requests and responses.
    """
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Kafka clients log every failed reconnect: quiet and rate-limited, even in a long outage;
    # a short command reports its own connection failure in one line, so theirs are muted.
    long_running = ctx.invoked_subcommand in ("run", "demo", "chaos", "bench", "broker")
    route_client_logs(level=logging.WARNING if long_running else logging.CRITICAL)
    ctx.obj = {"config": config, "log_level": log_level}


@cli.command()
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
    from lockstep.cli.demo_run import DemoOptions, run_demo
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


@cli.command()
@bootstrap_option
@click.option("--roles", required=True, metavar="ROLES",
              help="Comma-separated roles: align, route, worker (or all); worker:POOL runs "
                   "the worker of one pool (worker:vl,worker:text for two).")
@click.option("--pool", default=None, metavar="POOL[,POOL]",
              help="Engine pool(s) of the worker role (default: LOCKSTEP_WORKER__POOL, or "
                   "every routed pool when route runs in the same process).")
@click.option("--create-topics/--no-create-topics", default=False, show_default=True,
              help="Create missing topics at start instead of only verifying them.")
@click.option("--metrics-port", default=None, type=click.IntRange(0, 65535),
              help="Port for /metrics (default: LOCKSTEP_METRICS__PORT, else the first "
                   "role's: align 9464, route 9465, worker 9466 + the pool's place in "
                   "topics.pools; 0: any free port).")
@click.option("--group", "group_prefix", default=None, metavar="PREFIX",
              help="Consumer group prefix (default: LOCKSTEP_APP_ID, lockstep): the groups "
                   "are PREFIX-align, PREFIX-route and PREFIX-worker-POOL.")
@click.pass_context
def run(ctx: click.Context, bootstrap: str | None, roles: str, pool: str | None,
        create_topics: bool, metrics_port: int | None, group_prefix: str | None) -> None:
    """Run agent roles against a Kafka cluster until SIGINT/SIGTERM.

    Each role has its own consumer group (lockstep-align, lockstep-route,
    lockstep-worker-POOL), whatever else runs in the process: processes running a role
    share its group and split its partitions, so start more of them to scale a role.
    Waits for the cluster if it is not up yet. Exits 1 if a role crashes (its
    unacknowledged records are then replayed by the next process of the group). A
    process running align first re-executes itself on glibc's allocator, so a flood of
    stream ids' memory goes back once they are evicted (align.system_allocator; an
    exported PYTHONMALLOC is kept).
    """
    from lockstep.agents.runner import (
        parse_roles,
        pools_in,
        prepare_topics,
        routed_pools,
        start_roles,
    )
    from lockstep.telemetry.metrics import Telemetry

    pools = list(dict.fromkeys(
        [*pools_in(roles), *(p.strip() for p in (pool or "").split(",") if p.strip())]))
    settings = settings_for(
        ctx, kafka=kafka_overrides(bootstrap), worker={"pool": pools[0]} if pools else {},
        metrics={"port": metrics_port} if metrics_port is not None else {},
        **({"app_id": group_prefix} if group_prefix else {}))
    role_list = parse_roles(roles)
    settings.kafka.require_bootstrap()
    if "align" in role_list and settings.align.system_allocator:
        reexec_with_system_allocator(ENTRY_ARGV)  # returns at once once re-executed
    if not pools and "route" in role_list:
        pools = routed_pools(settings)  # a whole pipeline here

    async def main() -> None:
        telemetry = Telemetry(settings.slo.stage_p99_ms / 1000.0)
        if settings.metrics.enabled:
            host = settings.metrics.host
            port = settings.metrics.port_for(role_list, pools or [settings.worker.pool],
                                             settings.topics.pools)
            port = telemetry.serve(host, port)
            click.echo(f"metrics on http://{host}:{port}/metrics", err=True)
        # A role outlives broker restarts: it waits for the cluster, however long.
        await prepare_topics(settings, create=create_topics, wait_s=None)
        running = await start_roles(settings, role_list, telemetry, worker_pools=pools or None)
        click.echo(f"running {','.join(role_list)} in groups {', '.join(running.groups)}",
                   err=True)
        try:
            await until_signalled(running.wait_crashed)
        finally:
            await running.stop()
        if running.crash_reason is not None:
            raise RoleCrashed(f"roles {','.join(role_list)} crashed: {running.crash_reason!r}")

    run_async(main())


@cli.command()
@click.option("--port", default=None, type=click.IntRange(1, 65535),
              help="Port to listen on (default: a free port).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def broker(port: int | None, host: str) -> None:
    """Run the embedded broker (tansu, in memory) in the foreground.

    Prints its bootstrap address, then serves until SIGINT/SIGTERM. Point other commands
    at it with --bootstrap or LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS; set
    LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS=5 for low latency against it, and
    LOCKSTEP_KAFKA__LINGER_MS=2 so that producers send fewer, fuller requests.
    """
    from lockstep.kafka.embedded import EmbeddedBroker

    async def main() -> None:
        embedded = EmbeddedBroker(port=port, host=host)
        await asyncio.to_thread(embedded.start)
        click.echo(embedded.bootstrap)
        try:
            await until_signalled(lambda: asyncio.to_thread(embedded.wait))
        finally:
            await asyncio.to_thread(embedded.stop)

    run_async(main())


@cli.command()
@click.option("--url", "urls", multiple=True, metavar="URL",
              help="A role's /metrics URL (repeat for several; default: every role on this "
                   "host at LOCKSTEP_METRICS__PORT or the roles' default ports).")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.2, 600),
              help="Seconds between refreshes.")
@click.option("--window", default=30.0, show_default=True, type=click.FloatRange(1, 3600),
              help="Seconds of the rolling window the figures cover.")
@click.option("--once", is_flag=True, help="Print the totals since start once and exit.")
@click.pass_context
def top(ctx: click.Context, urls: tuple[str, ...], interval: float, window: float,
        once: bool) -> None:
    """Live view: targets up, rates, per-stage P50/P99 against budget, attainment, pools.

    Reads the roles' /metrics; the figures cover a rolling window (--window), with a
    sparkline of each one's history. Exits 1 with --once when no URL answered.
    """
    from lockstep.observe.top import default_urls, run_top

    settings = settings_for(ctx)
    try:
        sys.exit(run_top(urls or default_urls(settings), settings.slo, interval_s=interval,
                         window_s=window, once=once, optional=not urls))
    except KeyboardInterrupt:
        sys.exit(0)


@cli.command()
@click.argument("metrics", nargs=-1, type=click.Path(exists=True, dir_okay=False,
                                                      path_type=Path))
@click.option("--url", "urls", multiple=True, metavar="URL",
              help="Scrape a role's /metrics URL (repeatable): once, or with --every.")
@click.option("--every", "every", metavar="DURATION", default=None,
              help="Sample the URLs every DURATION (5s, 500ms, 1m): the report gets a time "
                   "axis.")
@click.option("--for", "for_", metavar="DURATION", default=None,
              help="How long to sample with --every (default 60s).")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the scrapes as a scrape log (JSON lines) that lockstep report "
                   "reads back.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("lockstep-report.html"), show_default=True, help="HTML file to write.")
@click.pass_context
def report(ctx: click.Context, metrics: tuple[Path, ...], urls: tuple[str, ...],
           every: str | None, for_: str | None, save: Path | None, output: Path) -> None:
    """Write a single-file HTML SLA report from /metrics scrapes, saved or live.

    Saved scrapes with their time (a scrape log from --save, or a first line
    '# lockstep-scrape at=SECONDS source=NAME'), or --every, give a time axis: P99 per
    stage and attainment per interval, throughput, queues and breaches. Metrics of several
    roles are merged.
    """
    from lockstep.errors import ConfigError
    from lockstep.observe.htmlreport import write_report
    from lockstep.observe.timeseries import collect, parse_duration, save_log

    every_s = parse_duration(every) if every is not None else None
    for_s = parse_duration(for_) if for_ is not None else None
    if save is not None and every_s is None:
        raise ConfigError("--save keeps scrapes sampled over time: give --every too")
    if every_s is not None:
        click.echo(f"sampling {len(urls)} URL(s) every {every} for {for_ or '60s'}", err=True)

    def progress(n: int, rounds: int, errors: list[str]) -> None:
        click.echo(f"scrape {n}/{rounds}" + "".join(f"; {e}" for e in errors), err=True)

    settings = settings_for(ctx)
    texts, scrapes = collect(metrics, urls, every_s=every_s, for_s=for_s, on_round=progress)
    if save is not None:
        click.echo(f"scrapes saved to {save_log(save, scrapes)}", err=True)
    names = [*(p.name for p in metrics), *urls]
    sources = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    write_report(output, texts, settings.slo, scrapes=scrapes, meta={"metrics": sources})
    click.echo(f"wrote {output}")


cli.add_command(topics)
cli.add_command(publish)
cli.add_command(subscribe)
cli.add_command(inspect)
cli.add_command(bench)
cli.add_command(chaos)
cli.add_command(validate)


#: The group's options, accepted anywhere on the command line (``lockstep run … --config x``).
GLOBAL_OPTIONS = ("--config", "--log-level")


def hoist_global_options(argv: list[str]) -> list[str]:
    """``argv`` with the group's options moved before the subcommand, where click reads them."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest += argv[i:]
            break
        if name in GLOBAL_OPTIONS:
            if "=" in arg or i + 1 >= len(argv):
                front.append(arg)
            else:
                front += [arg, argv[i + 1]]
                i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


#: The arguments the CLI was started with from its entry point (None: invoked in-process).
ENTRY_ARGV: list[str] | None = None


def main() -> None:
    """Console-script entry point."""
    global ENTRY_ARGV
    ENTRY_ARGV = sys.argv[1:]
    cli(args=hoist_global_options(ENTRY_ARGV), prog_name="lockstep")
