"""What every command shares: the group's error handling, settings from flags, signals."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import click

from lockstep.agents.app import run_async
from lockstep.config.settings import Settings, load_settings
from lockstep.errors import ConfigError, LockstepError


def settings_for(ctx: click.Context, *, environ: Mapping[str, str] | None = None,
                 **sections: Any) -> Settings:
    """Settings from --config and the environment, with this command's flags on top.

    Every command gets its settings here. ``environ`` reads the ``LOCKSTEP_*`` variables
    from that mapping instead of the process's environment.
    """
    return load_settings(config_file(ctx), environ=environ,
                         **{k: v for k, v in sections.items() if v})


def config_file(ctx: click.Context) -> Path | None:
    """The group's --config file (or LOCKSTEP_CONFIG), from any subcommand's context."""
    root = ctx.find_root().obj
    config = root.get("config") if isinstance(root, dict) else None
    return config if isinstance(config, Path) else None


def kafka_overrides(bootstrap: str | None) -> dict[str, Any]:
    """The kafka section override for a --bootstrap flag (nothing when not given)."""
    return {"bootstrap_servers": bootstrap} if bootstrap else {}


class LockstepGroup(click.Group):
    """A click group that turns Lockstep's errors into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        """Invoke the subcommand; exit 2 on configuration errors, 1 on other errors."""
        try:
            return super().invoke(ctx)
        except LockstepError as exc:
            click.echo(f"lockstep: error: {exc}", err=True)
            sys.exit(2 if isinstance(exc, ConfigError) else 1)


def on_signals() -> asyncio.Event:
    """An event that SIGINT/SIGTERM set, from now on (install before anything slow starts)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until_signalled(*extra: Callable[[], Awaitable[Any]],
                          stop: asyncio.Event | None = None) -> None:
    """Wait for SIGINT/SIGTERM (or for any of ``extra`` to finish).

    ``stop``: an event from :func:`on_signals`, so that a signal that came earlier (while
    something started) is not missed; without it the handlers are installed now.
    """
    stop = stop if stop is not None else on_signals()
    loop = asyncio.get_running_loop()
    waiters = [asyncio.ensure_future(stop.wait()), *(asyncio.ensure_future(f()) for f in extra)]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


bootstrap_option = click.option(
    "--bootstrap", metavar="HOST:PORT[,HOST:PORT]",
    help="Kafka bootstrap servers (default: LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS).")


def check_cluster(settings: Settings, timeout_s: float = 10.0) -> None:
    """Fail in one line within ``timeout_s`` when the cluster cannot be reached.

    Raises:
        BrokerError: No bootstrap server answered (the message names them).
    """
    from lockstep.kafka.wait import reach

    settings.kafka.require_bootstrap()
    run_async(reach(settings.kafka, timeout_s))


#: The arguments the CLI was started with from its entry point (None: invoked in-process).
ENTRY_ARGV: list[str] | None = None
