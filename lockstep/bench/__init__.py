"""``lockstep bench``: benchmarks that print ratios against a baseline."""

from __future__ import annotations

import json

import click

from lockstep.clikit import LockstepGroup


@click.group(cls=LockstepGroup)
def bench() -> None:
    """Benchmarks of Lockstep's operators against naive baselines."""


@bench.command("align")
@click.option("--streams", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Synthetic streams.")
@click.option("--seconds", default=20.0, show_default=True, type=click.FloatRange(0.5, 600),
              help="Capture span of each stream.")
@click.option("--seed", default=7, show_default=True, type=click.IntRange(0),
              help="Seed of the fault injection (same seed, same feed).")
@click.option("--drop-rate", default=0.15, show_default=True, type=click.FloatRange(0.0, 0.9),
              help="Fraction of video frames dropped before publishing.")
@click.option("--jitter-ms", default=8.0, show_default=True, type=click.FloatRange(0.0, 1000.0),
              help="Standard deviation of the timestamp jitter.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1, 20),
              help="Timed runs per operator (the fastest counts).")
@click.option("--slack-ms", default=2.0, show_default=True, type=click.FloatRange(0.0, 100.0),
              help="A pairing is misaligned when it is this much worse than the ideal one "
                   "(0: any other token than the ideal; see misaligned_rate_strict).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def align_command(ctx: click.Context, streams: int, seconds: float, seed: int,
                  drop_rate: float, jitter_ms: float, repeats: int, slack_ms: float,
                  as_json: bool) -> None:
    """Score Lockstep's aligner and a fixed 30 fps grid on the same faulty feed.

    Generates seeded synthetic streams with dropped frames, audio gaps, timestamp jitter,
    clock skew and drift, feeds them to both aligners in arrival order, and compares each
    window's pairing with the ground truth. Alignment settings come from --config and
    LOCKSTEP_ALIGN__*. See docs/bench.md.
    """
    from lockstep.bench.align import AlignBenchOptions, run_align_bench
    from lockstep.bench.render import render_align
    from streams.chaos import FaultSpec
    from streams.settings import load_settings

    root = ctx.find_root().obj
    settings = load_settings(root.get("config") if isinstance(root, dict) else None)
    options = AlignBenchOptions(streams=streams, seconds=seconds, seed=seed, repeats=repeats,
                                slack_ms=slack_ms,
                                faults=FaultSpec(drop_rate=drop_rate, jitter_ms=jitter_ms))
    report = run_align_bench(options, settings.align, settings.slo.default_class)
    click.echo(json.dumps(report, indent=2) if as_json else render_align(report))
