"""``lockstep bench``: benchmarks that print ratios against a baseline or a limit."""

from __future__ import annotations

import json

import click

from lockstep.cli.base import LockstepGroup, bootstrap_option
from lockstep.cli.bench_all import all_command
from lockstep.cli.bench_pipeline import pipeline_command


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
    from lockstep.config.settings import load_settings

    root = ctx.find_root().obj
    settings = load_settings(root.get("config") if isinstance(root, dict) else None)
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
    from lockstep.config.settings import load_settings

    root = ctx.find_root().obj
    settings = load_settings(root.get("config") if isinstance(root, dict) else None).worker
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
    from lockstep.cli.base import kafka_overrides, settings_for

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    options = BrokerBenchOptions(rate=rate, seconds=seconds, held=held, partitions=partitions,
                                 repeats=repeats)
    report = run_async(run_broker_bench(settings.kafka, options))
    click.echo(json.dumps(report, indent=2) if as_json else render_broker(report))


bench.add_command(pipeline_command)
bench.add_command(all_command)
