"""The ``lockstep`` command line: the group, its global options, and the entry point.

Each command lives in a module of its own under :mod:`lockstep.cli`, named after it.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click

from lockstep import __version__
from lockstep.cli import base
from lockstep.cli.base import LockstepGroup
from lockstep.cli.bench import bench
from lockstep.cli.broker import broker
from lockstep.cli.chaos import chaos
from lockstep.cli.demo import demo
from lockstep.cli.inspect import inspect
from lockstep.cli.publish import publish
from lockstep.cli.report import report
from lockstep.cli.run import run
from lockstep.cli.subscribe import subscribe
from lockstep.cli.top import top
from lockstep.cli.topics import topics
from lockstep.cli.validate import validate
from lockstep.kafka.logfilter import route_client_logs


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


for command in (bench, broker, chaos, demo, inspect, publish, report, run, subscribe, top,
                topics, validate):
    cli.add_command(command)


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


def main() -> None:
    """Console-script entry point."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # Until a command's event loop takes SIGTERM over: a clean exit (finally blocks
        # run, children are stopped), also as PID 1, where the default is to ignore it.
        signal.signal(signal.SIGTERM, _terminated)
    base.ENTRY_ARGV = sys.argv[1:]
    cli(args=hoist_global_options(base.ENTRY_ARGV), prog_name="lockstep")


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
