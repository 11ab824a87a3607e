"""``lockstep top``: a live view of the pipeline's SLA, read from the roles' /metrics."""

from __future__ import annotations

import sys

import click

from lockstep.cli.base import settings_for


@click.command()
@click.option("--url", "urls", multiple=True, metavar="URL",
              help="A role's /metrics URL (repeat for several; default: every role on this "
                   "host at LOCKSTEP_METRICS__PORT or the roles' default ports).")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.2, 600),
              help="Seconds between refreshes.")
@click.option("--window", default=30.0, show_default=True, type=click.FloatRange(1, 3600),
              help="Seconds of the rolling window the figures cover.")
@click.option("--once", is_flag=True, help="Print the totals since start once and exit.")
@click.pass_context
def top(ctx: click.Context, urls: tuple[str, ...], interval: float, window: float,
        once: bool) -> None:
    """Live view: targets up, rates, per-stage P50/P99 against budget, attainment, pools.

    Reads the roles' /metrics; the figures cover a rolling window (--window), with a
    sparkline of each one's history. Exits 1 with --once when no URL answered.
    """
    from lockstep.observe.top import default_urls, run_top

    settings = settings_for(ctx)
    try:
        sys.exit(run_top(urls or default_urls(settings), settings.slo, interval_s=interval,
                         window_s=window, once=once, optional=not urls))
    except KeyboardInterrupt:
        sys.exit(0)
