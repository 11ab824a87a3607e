"""``lockstep bench all``: the command (the Markdown is :mod:`lockstep.bench.markdown`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import click

from lockstep.cli.base import bootstrap_option
from lockstep.errors import BenchFailed


def _plan(quick: bool, bootstrap: str | None, soak: float) -> list[tuple[str, list[str]]]:
    """(title, arguments after ``lockstep bench``) of every bench, in order."""
    kafka = ["--bootstrap", bootstrap] if bootstrap else []
    step = ["--step-seconds", "10"] if quick else []
    pipeline = ["pipeline", *kafka, *step, "--overload"]
    if quick:
        pipeline += ["--raw-records", "20000", "--warmup-seconds", "5"]
    if soak:
        pipeline += ["--soak", f"{soak:g}"]
    return [
        ("bench align", ["align", *(["--seconds", "5"] if quick else [])]),
        ("bench batching", ["batching", *(["--seconds", "5"] if quick else [])]),
        ("bench pipeline", pipeline),
        ("bench pipeline --shape demo", ["pipeline", "--shape", "demo", *kafka, *step]),
    ]


def _run(args: list[str]) -> dict[str, Any]:
    from lockstep.agents.children import lockstep_argv

    argv = [*lockstep_argv(), "bench", *args, "--json"]
    # stderr passes through: warnings and progress reach the person waiting.
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if done.returncode != 0:
        raise BenchFailed(f"lockstep bench {' '.join(args)} exited with {done.returncode}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@click.command("all")
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
    from lockstep.bench.markdown import Section, command_line, render_markdown
    from lockstep.bench.pipeline.table import render_pipeline

    renders = {"align": render_align, "batching": render_batching, "pipeline": render_pipeline}
    sections = []
    for title, args in _plan(quick, bootstrap, soak):
        click.echo(f"lockstep bench all: running lockstep bench {' '.join(args)}", err=True)
        report = _run(args)
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
