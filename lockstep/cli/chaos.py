"""``lockstep chaos``: fault-injection scenarios against the pipeline, and their verdicts.

The output layer of :mod:`lockstep.chaos`: runs the chosen scenarios one after another,
prints one progress line per scenario on stderr, then the table (or JSON) on stdout, and
exits 1 when any scenario missed the acceptance.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import click

from lockstep.agents.app import run_async
from lockstep.chaos.outcome import Outcome, Rss

_COLUMNS = ("scenario", "published", "lost", "conflicts", "unanswered", "crashes",
            "recovery s", "verdict")


def verdict(failures: list[str]) -> str:
    """``met``, or what was not met."""
    return "met" if not failures else "NOT MET: " + "; ".join(failures)


def render_table(outcomes: list[Outcome]) -> str:
    """The scenario table and a closing line that names what was not met."""
    rows = [[o.scenario, f"{o.published:,}", str(o.lost), str(o.conflicts + o.settled_twice),
             str(o.unanswered), str(len(o.crashes)),
             "-" if o.recovery_s is None else f"{o.recovery_s:.1f}", verdict(o.failures())]
            for o in outcomes]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS[:-1])]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(_COLUMNS[:-1], widths, strict=True)))
             + "  " + _COLUMNS[-1]]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row[:-1], widths, strict=True)))
                     + "  " + row[-1])
    missed = [o for o in outcomes if not o.ok]
    if missed:
        lines.append(f"{len(missed)} of {len(outcomes)} scenarios missed the acceptance: "
                     + ", ".join(o.scenario for o in missed)
                     + (f"; logs in {', '.join(o.logs for o in missed if o.logs)}"
                        if any(o.logs for o in missed) else ""))
    else:
        lines.append(f"all {len(outcomes)} scenarios met the acceptance: nothing lost, no key "
                     f"with two windows, every window answered, no role crash, role kills "
                     f"recovered within the session timeout + 5 s")
    return "\n".join(lines)


def as_json(outcome: Outcome) -> dict[str, Any]:
    """One outcome as JSON-ready data, with its verdict."""
    data: dict[str, Any] = {}
    for f in fields(outcome):
        value = getattr(outcome, f.name)
        if isinstance(value, dict):  # Counters and Rss records (asdict mangles Counters)
            value = {k: asdict(v) if isinstance(v, Rss) else v for k, v in value.items()}
        data[f.name] = value
    data["failures"] = outcome.failures()
    data["ok"] = outcome.ok
    return data


@click.command()
@click.argument("scenario_names", nargs=-1, metavar="[SCENARIO]...")
@click.option("--seconds", type=click.FloatRange(10, 3600), default=None,
              help="Publishing time of each scenario (default: its own, 35 s); the fault "
                   "strikes at the same share of it.")
@click.option("--streams", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Live synthetic streams.")
@click.option("--session-timeout-ms", default=6000, show_default=True,
              type=click.IntRange(3000, 300_000),
              help="The roles' consumer session timeout (a role kill must recover within "
                   "it + 5 s).")
@click.option("--drain", "drain_s", default=90.0, show_default=True,
              type=click.FloatRange(5, 3600),
              help="Seconds the ledger may take to close after publishing.")
@click.option("--kafka-classpath", envvar="LOCKSTEP_KAFKA_CLASSPATH", metavar="CP",
              help="Apache Kafka 4.x broker jars as a Java classpath (default: resolved by "
                   "Maven from the repository's tests/kafka/pom.xml, which an installed "
                   "wheel does not have).")
@click.option("--kafka-pom", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A pom pinning the broker jars (resolved by mvn into ~/.m2).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where each scenario's brokers and logs go (default: the temp dir).")
@click.option("--keep-logs", is_flag=True,
              help="Keep every scenario's logs (failed scenarios keep theirs anyway).")
@click.option("--role-log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="Log level of the role processes (their logs are kept on a failure).")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
@click.option("--json", "json_out", is_flag=True, help="Print the outcomes as JSON.")
def chaos(scenario_names: tuple[str, ...], seconds: float | None, streams: int,
          session_timeout_ms: int, drain_s: float, kafka_classpath: str | None,
          kafka_pom: Path | None, work_dir: Path | None, keep_logs: bool,
          role_log_level: str, list_only: bool, json_out: bool) -> None:
    """Break the pipeline on purpose and check that nothing is lost or poisoned.

    Each SCENARIO (default: all) starts Apache Kafka (one broker, or a three-broker KRaft
    cluster) from its jars, runs the pipeline as separate `lockstep run` processes (two
    align, one route, two vl workers, one text worker), publishes live synthetic streams,
    strikes one fault (a role SIGKILLed, the broker SIGTERMed or SIGKILLed and restarted
    on its log dir, hostile records, a flood of new streams) and reads the ledger back
    from the topics. Exits 1 when any scenario misses the acceptance: a token lost, a key
    with two windows, a window unanswered, a role crash, a slow recovery.
    """
    from lockstep.chaos.scenarios import SCENARIOS, select
    from lockstep.chaos.trial import ChaosOptions, run_scenario
    from lockstep.kafka.apache import DEFAULT_POM
    from lockstep.kafka.apache.node import NodeOptions, Runtime

    if list_only:
        for s in SCENARIOS:
            click.echo(f"{s.name:<20} {s.about}")
        return
    chosen = select(scenario_names)
    # Java and the jars once, up front: a missing one is one line, not eight failures.
    runtime = Runtime.resolve(NodeOptions(pom=kafka_pom or DEFAULT_POM,
                                          classpath=kafka_classpath or None))
    options = ChaosOptions(streams=streams, seconds=seconds,
                           session_timeout_ms=session_timeout_ms, drain_s=drain_s,
                           classpath=runtime.classpath, pom=kafka_pom or DEFAULT_POM,
                           work_dir=work_dir, keep=keep_logs, role_log_level=role_log_level)

    async def main() -> list[Outcome]:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        outcomes = []
        for scenario in chosen:
            click.echo(f"{scenario.name}: {scenario.about} ...", err=True)
            outcome = await run_scenario(scenario, options)
            click.echo(f"{scenario.name}: {verdict(outcome.failures())} "
                       f"({outcome.wall_s:.0f} s)", err=True)
            outcomes.append(outcome)
        return outcomes

    try:
        outcomes = run_async(main())
    except asyncio.CancelledError:
        click.echo("lockstep chaos: interrupted; brokers and processes stopped", err=True)
        sys.exit(130)
    click.echo(json.dumps([as_json(o) for o in outcomes], indent=2) if json_out
               else render_table(outcomes))
    sys.exit(0 if all(o.ok for o in outcomes) else 1)
