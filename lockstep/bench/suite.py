"""``lockstep bench all``: every bench in turn, and BENCHMARKS.md from their output.

The Markdown holds, per bench, the command that produced it and the bench's own rendering,
which opens with the machine line (cores, CPU, load before and during, busy, steal,
reference speed): every figure the docs quote can be traced to a run and the state of the
machine it ran on.
"""

from __future__ import annotations

import datetime
import json
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockstep.agents.children import lockstep_argv
from lockstep.errors import BenchFailed


@dataclass(frozen=True)
class Section:
    """One bench's output: its title, the command line, its report and how to render it."""

    title: str
    command: str
    report: dict[str, Any]
    render: Callable[..., str]


def as_markdown(text: str) -> str:
    """A bench's text rendering (made with ``markdown=True``) as Markdown paragraphs.

    Table rows stay together; every other line becomes its own paragraph.
    """
    out: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            out.append(stripped)
            continue
        if out and out[-1].startswith("|"):
            out.append("")
        if stripped:
            out += [stripped, ""]
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def render_markdown(sections: list[Section], command: str,
                    now: datetime.datetime | None = None) -> str:
    """BENCHMARKS.md: how it was made, then each bench with its command and machine line."""
    when = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks",
        "",
        f"Written by `{command}` on {when}; rerun it to refresh this file (do not edit it by "
        "hand). Each section names its own command and the state of the machine while it "
        "ran: a loaded machine (load above its core count, busy near 100 %, steal) makes "
        "absolute throughputs lower and latencies longer, not the ratios between the "
        "contenders of one run. docs/bench.md explains every figure.",
    ]
    for section in sections:
        # The rendering opens with the machine line.
        lines += ["", f"## {section.title}", "", f"Command: `{section.command}`", "",
                  as_markdown(section.render(section.report, markdown=True))]
    return "\n".join(lines) + "\n"


def command_line(argv: list[str]) -> str:
    """A command as a reader would type it."""
    return " ".join(shlex.quote(a) for a in argv)


def plan(quick: bool, bootstrap: str | None, soak: float) -> list[tuple[str, list[str]]]:
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


def run_one(args: list[str]) -> dict[str, Any]:
    """Run ``lockstep bench ARGS --json`` in a process of its own; its report.

    Raises:
        BenchFailed: The bench exited with an error.
    """
    argv = [*lockstep_argv(), "bench", *args, "--json"]
    # stderr passes through: warnings and progress reach the person waiting.
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if done.returncode != 0:
        raise BenchFailed(f"lockstep bench {' '.join(args)} exited with {done.returncode}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report
