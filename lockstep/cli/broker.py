"""``lockstep broker``: the embedded broker (tansu, in memory) in the foreground."""

from __future__ import annotations

import asyncio

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import until_signalled


@click.command()
@click.option("--port", default=None, type=click.IntRange(1, 65535),
              help="Port to listen on (default: a free port).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
def broker(port: int | None, host: str) -> None:
    """Run the embedded broker (tansu, in memory) in the foreground.

    Prints its bootstrap address, then serves until SIGINT/SIGTERM. Point other commands
    at it with --bootstrap or LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS; set
    LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS=5 for low latency against it, and
    LOCKSTEP_KAFKA__LINGER_MS=2 so that producers send fewer, fuller requests.
    """
    from lockstep.kafka.embedded import EmbeddedBroker

    async def main() -> None:
        embedded = EmbeddedBroker(port=port, host=host)
        await asyncio.to_thread(embedded.start)
        click.echo(embedded.bootstrap)
        try:
            await until_signalled(lambda: asyncio.to_thread(embedded.wait))
        finally:
            await asyncio.to_thread(embedded.stop)

    run_async(main())
