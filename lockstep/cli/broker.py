"""``lockstep broker``: the embedded broker (tansu, in memory) in the foreground."""

from __future__ import annotations

import asyncio

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import on_signals, until_signalled


@click.command()
@click.option("--port", default=None, type=click.IntRange(1, 65535),
              help="Port to listen on (default: a free port).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def broker(port: int | None, host: str) -> None:
    """Run the embedded broker (tansu, in memory) in the foreground.

    Prints its bootstrap address (and on stderr a warning of how far it lasts: it keeps
    every record in memory and slows as its logs grow), then serves until
    SIGINT/SIGTERM. Point other commands
    at it with --bootstrap or LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS; set
    LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS=5 for low latency against it, and
    LOCKSTEP_KAFKA__LINGER_MS=2 so that producers send fewer, fuller requests.
    """
    from lockstep.kafka.embedded import SLOW_AFTER_RECORDS, EmbeddedBroker

    async def main() -> None:
        stop = on_signals()  # a SIGTERM while the broker starts stops it once started
        embedded = EmbeddedBroker(port=port, host=host)
        try:
            await asyncio.to_thread(embedded.start)
            if stop.is_set():
                return
            click.echo(embedded.bootstrap)
            click.echo(f"lockstep broker: warning: the embedded broker keeps every record in "
                       f"memory and slows past ~{SLOW_AFTER_RECORDS:,} records in a topic (4 "
                       f"cameras' audio pass that in about 8 minutes; `lockstep bench "
                       f"broker`): for development; run Apache Kafka for anything longer",
                       err=True)
            await until_signalled(lambda: asyncio.to_thread(embedded.wait), stop=stop)
        finally:
            await asyncio.to_thread(embedded.stop)

    run_async(main())
