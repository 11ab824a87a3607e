"""``lockstep bench pipeline``: the command (the bench itself is :mod:`lockstep.bench.pipeline`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lockstep.cli.base import bootstrap_option


def _config(ctx: click.Context) -> Path | None:
    root = ctx.find_root().obj
    config = root.get("config") if isinstance(root, dict) else None
    return config if isinstance(config, Path) else None


@click.command("pipeline")
@bootstrap_option
@click.option("--shape", type=click.Choice(["pipeline", "demo"]), default="pipeline",
              show_default=True,
              help="pipeline: one process per role; demo: lockstep demo, all in one process.")
@click.option("--step-seconds", default=30.0, show_default=True,
              type=click.FloatRange(2, 3600), help="How long each ramp step holds its streams.")
@click.option("--start-streams", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Streams of the first step (then doubled until a step fails, then bisected).")
@click.option("--warmup-seconds", default=15.0, show_default=True,
              type=click.FloatRange(0, 3600),
              help="Run --start-streams this long before the ramp, unmeasured (0: skip).")
@click.option("--max-streams", default=64, show_default=True, type=click.IntRange(1, 1024),
              help="The ramp stops here.")
@click.option("--target", default=0.99, show_default=True, type=click.FloatRange(0.5, 1.0),
              help="SLO attainment a step must reach to count as held.")
@click.option("--overload", is_flag=True,
              help="Also run twice the capacity, then half of it; attainment and recovery.")
@click.option("--overload-seconds", default=20.0, show_default=True,
              type=click.FloatRange(1, 3600),
              help="How long --overload lasts (half capacity then runs as long again).")
@click.option("--soak", "soak_seconds", default=0.0, show_default=True,
              type=click.FloatRange(0, 86400), metavar="SECONDS",
              help="Also run half capacity this long and report every role's RSS over time.")
@click.option("--confirm", default=3, show_default=True, type=click.IntRange(1, 9),
              help="Runs of the capacity step (most must hold) before the capacity is final.")
@click.option("--raw-records", default=50_000, show_default=True,
              type=click.IntRange(1000, 10_000_000),
              help="Records of the raw pass-through that measures the limit.")
@click.option("--raw-repeats", default=3, show_default=True, type=click.IntRange(1, 9),
              help="Raw pass-through runs, interleaved with the pipeline's steps.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def pipeline_command(ctx: click.Context, bootstrap: str | None, shape: str, step_seconds: float,
                     start_streams: int, warmup_seconds: float, max_streams: int,
                     target: float, overload: bool, overload_seconds: float,
                     soak_seconds: float, confirm: int, raw_records: int, raw_repeats: int,
                     as_json: bool) -> None:
    """Find the most streams the pipeline holds at the SLO, and what each role costs.

    Starts one process per role (align, route, one worker per pool; reference engine) on
    the embedded broker, or on the Kafka cluster at --bootstrap, and ramps synthetic
    streams (132 tokens/s each, producers in their own processes) until a step of
    --step-seconds misses the SLO target; the capacity found is run --confirm times. Reports
    the capacity, per-stage P50/P99 and CPU ms per token per role at half capacity, and the
    raw consume->produce limit of the same client and broker (--raw-repeats runs,
    interleaved) with the ratio. See docs/bench.md.
    """
    from lockstep.agents.app import run_async
    from lockstep.bench.pipeline.demo_shape import run_demo_shape
    from lockstep.bench.pipeline.run import PipelineOptions, run_pipeline_bench
    from lockstep.bench.pipeline.table import render_pipeline
    from lockstep.cli.base import kafka_overrides, settings_for

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    options = PipelineOptions(step_seconds=step_seconds, start_streams=start_streams,
                              warmup_seconds=warmup_seconds,
                              max_streams=max_streams, target=target, overload=overload,
                              overload_seconds=overload_seconds,
                              recover_seconds=overload_seconds, soak_seconds=soak_seconds,
                              confirm=confirm, passthrough_records=raw_records,
                              passthrough_repeats=raw_repeats)
    if shape == "demo":
        report = run_async(run_demo_shape(options, _config(ctx),
                                          settings.kafka.bootstrap_servers))
    else:
        report = run_async(run_pipeline_bench(settings, options, _config(ctx)))
    click.echo(json.dumps(report, indent=2) if as_json else render_pipeline(report))
