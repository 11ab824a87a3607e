"""``lockstep report``: a single-file HTML SLA report from /metrics scrapes, saved or live."""

from __future__ import annotations

from pathlib import Path

import click

from lockstep.cli.base import settings_for


@click.command()
@click.argument("metrics", nargs=-1, type=click.Path(exists=True, dir_okay=False,
                                                      path_type=Path))
@click.option("--url", "urls", multiple=True, metavar="URL",
              help="Scrape a role's /metrics URL (repeatable): once, or with --every.")
@click.option("--every", "every", metavar="DURATION", default=None,
              help="Sample the URLs every DURATION (5s, 500ms, 1m): the report gets a time "
                   "axis.")
@click.option("--for", "for_", metavar="DURATION", default=None,
              help="How long to sample with --every (default 60s).")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the scrapes as a scrape log (JSON lines) that lockstep report "
                   "reads back.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("lockstep-report.html"), show_default=True, help="HTML file to write.")
@click.pass_context
def report(ctx: click.Context, metrics: tuple[Path, ...], urls: tuple[str, ...],
           every: str | None, for_: str | None, save: Path | None, output: Path) -> None:
    """Write a single-file HTML SLA report from /metrics scrapes, saved or live.

    Saved scrapes with their time (a scrape log from --save, or a first line
    '# lockstep-scrape at=SECONDS source=NAME'), or --every, give a time axis: P99 per
    stage and attainment per interval, throughput, queues and breaches. Metrics of several
    roles are merged.
    """
    from lockstep.errors import ConfigError
    from lockstep.observe.htmlreport import write_report
    from lockstep.observe.timeseries import collect, parse_duration, save_log

    every_s = parse_duration(every) if every is not None else None
    for_s = parse_duration(for_) if for_ is not None else None
    if save is not None and every_s is None:
        raise ConfigError("--save keeps scrapes sampled over time: give --every too")
    if every_s is not None:
        click.echo(f"sampling {len(urls)} URL(s) every {every} for {for_ or '60s'}", err=True)

    def progress(n: int, rounds: int, errors: list[str]) -> None:
        click.echo(f"scrape {n}/{rounds}" + "".join(f"; {e}" for e in errors), err=True)

    settings = settings_for(ctx)
    texts, scrapes = collect(metrics, urls, every_s=every_s, for_s=for_s, on_round=progress)
    if save is not None:
        click.echo(f"scrapes saved to {save_log(save, scrapes)}", err=True)
    names = [*(p.name for p in metrics), *urls]
    sources = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    write_report(output, texts, settings.slo, scrapes=scrapes, meta={"metrics": sources})
    click.echo(f"wrote {output}")
