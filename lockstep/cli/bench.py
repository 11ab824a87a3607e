"""``lockstep bench``: benchmarks that print ratios against a baseline or a limit."""

from __future__ import annotations

import json
from pathlib import Path

import click

from lockstep.cli.base import (
    LockstepGroup,
    bootstrap_option,
    config_file,
    kafka_overrides,
    settings_for,
)


@click.group(cls=LockstepGroup)
def bench() -> None:
    """Benchmarks: operators against baselines, the pipeline against its limit.

    Every figure is the median and spread of several repetitions, next to the state of
    the machine it ran on; see docs/bench.md.
    """


@bench.command("align")
@click.option("--streams", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Synthetic streams.")
@click.option("--seconds", default=20.0, show_default=True, type=click.FloatRange(0.5, 600),
              help="Capture span of each stream.")
@click.option("--seed", default=7, show_default=True, type=click.IntRange(0),
              help="Seed of the first repetition's feed (then seed+1, ...; same seed, same "
                   "feed).")
@click.option("--drop-rate", default=0.15, show_default=True, type=click.FloatRange(0.0, 0.9),
              help="Fraction of video frames dropped before publishing.")
@click.option("--jitter-ms", default=8.0, show_default=True, type=click.FloatRange(0.0, 1000.0),
              help="Standard deviation of the timestamp jitter.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 50),
              help="Repetitions, one seed each (figures are medians and spreads over them).")
@click.option("--timing-runs", default=3, show_default=True, type=click.IntRange(1, 20),
              help="Timed runs of each aligner per repetition, interleaved (the median "
                   "counts).")
@click.option("--slack-ms", default=2.0, show_default=True, type=click.FloatRange(0.0, 100.0),
              help="A pairing is misaligned when it is this much worse than the ideal one "
                   "(0: any other token than the ideal; see misaligned_rate_strict).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def align_command(ctx: click.Context, streams: int, seconds: float, seed: int,
                  drop_rate: float, jitter_ms: float, repeats: int, timing_runs: int,
                  slack_ms: float, as_json: bool) -> None:
    """Score Lockstep's aligner and a fixed 30 fps grid on the same faulty feeds.

    Generates seeded synthetic streams with dropped frames, audio gaps, timestamp jitter,
    clock skew and drift, feeds them to both aligners in arrival order (timed runs
    interleaved), and compares each window's pairing with the ground truth; repeated over
    --repeats seeds. Alignment settings come from --config and LOCKSTEP_ALIGN__*. See
    docs/bench.md.
    """
    from lockstep.bench.align import AlignBenchOptions, run_align_bench
    from lockstep.bench.align_table import render_align
    from lockstep.bench.faults import FaultSpec
    settings = settings_for(ctx)
    options = AlignBenchOptions(streams=streams, seconds=seconds, seed=seed, repeats=repeats,
                                timing_runs=timing_runs, slack_ms=slack_ms,
                                faults=FaultSpec(drop_rate=drop_rate, jitter_ms=jitter_ms))
    report = run_align_bench(options, settings.align, settings.slo.default_class)
    click.echo(json.dumps(report, indent=2) if as_json else render_align(report))


@bench.command("batching")
@click.option("--engine", "engine_name", default="auto", show_default=True,
              type=click.Choice(["auto", "cpu", "simulated", "reference"]),
              help="Engine to batch into (auto: cpu where a checkpoint is configured, "
                   "else simulated).")
@click.option("--seconds", default=10.0, show_default=True, type=click.FloatRange(1, 600),
              help="Length of each arrival trace (each policy replays it in real time).")
@click.option("--load", default=0.6, show_default=True, type=click.FloatRange(0.05, 5.0),
              help="Poisson arrival rate as a share of the engine's full-batch throughput "
                   "(bursts come on top).")
@click.option("--seed", default=11, show_default=True, type=click.IntRange(0),
              help="Seed of the first repetition's trace (then seed+1, ...).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 50),
              help="Repetitions (one trace each; the policies interleaved on it).")
@click.option("--calibrations", default=3, show_default=True, type=click.IntRange(1, 20),
              help="Engine calibrations before the first repetition (one more at the end).")
@click.option("--virtual-clock", is_flag=True,
              help="Simulated engine only: replay on a virtual clock (instant, and the same "
                   "on any machine).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def batching_command(ctx: click.Context, engine_name: str, seconds: float, load: float,
                     seed: int, repeats: int, calibrations: int, virtual_clock: bool,
                     as_json: bool) -> None:
    """Replay bursty traces through Lockstep's scheduler, a FIFO batcher and batch size 1.

    The engine is calibrated several times and the traces are sized from it; each
    repetition replays its trace through the three policies in turn (the order rotates),
    on the same engine. Prints the median and spread of every figure and a verdict (none
    when the calibration is unstable). Worker settings (max_batch, max_wait_ms,
    margin_ms, degrade_fractions...) come from --config and LOCKSTEP_WORKER__*;
    max_wait_ms is also the FIFO batcher's fixed delay. See docs/bench.md.
    """
    from lockstep.bench.batching import BatchingOptions, run_batching
    from lockstep.bench.batching_table import render_batching
    from lockstep.bench.trace import TraceSpec
    settings = settings_for(ctx).worker
    options = BatchingOptions(trace=TraceSpec(seconds=seconds, load=load, seed=seed),
                              repeats=repeats, calibrations=calibrations)
    report = run_batching(engine_name, settings, options, virtual_clock=virtual_clock)
    click.echo(json.dumps(report, indent=2) if as_json else render_batching(report))


@bench.command("broker")
@bootstrap_option
@click.option("--rate", default=800, show_default=True, type=click.IntRange(10, 100_000),
              help="Records a second of each measured phase.")
@click.option("--seconds", default=10.0, show_default=True, type=click.FloatRange(1, 600),
              help="Length of each measured phase.")
@click.option("--held", default=500_000, show_default=True,
              type=click.IntRange(1000, 100_000_000),
              help="Records written to the topic between the two phases (never read).")
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(1, 256),
              help="Partitions of the bench's topic.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 50),
              help="Repetitions (a topic each; on the embedded broker a broker each).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def broker_command(ctx: click.Context, bootstrap: str | None, rate: int, seconds: float,
                   held: int, partitions: int, repeats: int, as_json: bool) -> None:
    """Time one hop on an empty topic, then after --held records sit in it.

    Runs on the embedded broker (a fresh one a repetition), or on the cluster at
    --bootstrap. Each phase sends --rate records a second and reads them at the log end;
    prints the hop's P50/P99, the embedded broker's CPU share and the ratios held / empty.
    Shows whether a broker that served a long run or an overload costs more per record.
    See docs/bench.md.
    """
    from lockstep.agents.app import run_async
    from lockstep.bench.broker import BrokerBenchOptions, render_broker, run_broker_bench
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    options = BrokerBenchOptions(rate=rate, seconds=seconds, held=held, partitions=partitions,
                                 repeats=repeats)
    report = run_async(run_broker_bench(settings.kafka, options))
    click.echo(json.dumps(report, indent=2) if as_json else render_broker(report))


@bench.command("pipeline")
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
              help="Records of each raw pass-through that measures the limit.")
@click.option("--raw-repeats", default=3, show_default=True, type=click.IntRange(1, 9),
              help="Raw pass-through runs per client, interleaved with the pipeline's steps.")
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
    raw consume->produce limit over the same hops and broker on librdkafka and on aiokafka
    (--raw-repeats runs each, interleaved) with the ratios. See docs/bench.md.
    """
    from lockstep.agents.app import run_async
    from lockstep.bench.pipeline.course import PipelineOptions, run_pipeline_bench
    from lockstep.bench.pipeline.demo_shape import run_demo_shape
    from lockstep.bench.pipeline.table import render_pipeline

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    options = PipelineOptions(step_seconds=step_seconds, start_streams=start_streams,
                              warmup_seconds=warmup_seconds,
                              max_streams=max_streams, target=target, overload=overload,
                              overload_seconds=overload_seconds,
                              recover_seconds=overload_seconds, soak_seconds=soak_seconds,
                              confirm=confirm, passthrough_records=raw_records,
                              passthrough_repeats=raw_repeats)
    if shape == "demo":
        report = run_async(run_demo_shape(options, config_file(ctx),
                                          settings.kafka.bootstrap_servers))
    else:
        report = run_async(run_pipeline_bench(settings, options, config_file(ctx)))
    click.echo(json.dumps(report, indent=2) if as_json else render_pipeline(report))


@bench.command("all")
@bootstrap_option
@click.option("--markdown", is_flag=True,
              help="Write the results as Markdown to --output (and every report as JSON next "
                   "to it, same name with .json) instead of printing them.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("BENCHMARKS.md"), show_default=True,
              help="Where --markdown writes.")
@click.option("--quick", is_flag=True,
              help="Shorter traces and 10 s pipeline steps (a smoke run, not figures to quote).")
@click.option("--soak", default=0.0, show_default=True, type=click.FloatRange(0, 86400),
              metavar="SECONDS", help="Passed to bench pipeline --soak.")
def all_command(bootstrap: str | None, markdown: bool, output: Path, quick: bool,
                soak: float) -> None:
    """Run every bench (align, batching, pipeline with --overload, the demo shape).

    Each runs as its own `lockstep bench ... --json` process, one after the other. With
    --markdown the results go to BENCHMARKS.md with each command and machine line, and the
    full reports to BENCHMARKS.json.
    """
    from lockstep.bench.align_table import render_align
    from lockstep.bench.batching_table import render_batching
    from lockstep.bench.pipeline.table import render_pipeline
    from lockstep.bench.suite import Section, command_line, plan, render_markdown, run_one

    renders = {"align": render_align, "batching": render_batching, "pipeline": render_pipeline}
    sections = []
    for title, args in plan(quick, bootstrap, soak):
        click.echo(f"lockstep bench all: running lockstep bench {' '.join(args)}", err=True)
        report = run_one(args)
        sections.append(Section(title, command_line(["lockstep", "bench", *args]), report,
                                renders[args[0]]))
        if not markdown:
            click.echo(renders[args[0]](report) + "\n")
    if markdown:
        flags = [*(["--bootstrap", bootstrap] if bootstrap else []),
                 *(["--quick"] if quick else []), *(["--soak", f"{soak:g}"] if soak else [])]
        me = command_line(["lockstep", "bench", "all", "--markdown", *flags])
        output.write_text(render_markdown(sections, me), encoding="utf-8")
        reports = {s.command: s.report for s in sections}
        output.with_suffix(".json").write_text(json.dumps(reports, indent=1) + "\n",
                                               encoding="utf-8")
        click.echo(f"wrote {output} and {output.with_suffix('.json')}")
