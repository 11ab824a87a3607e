"""``lockstep top``: a live terminal view of the pipeline's SLA, read from the roles' /metrics.

Per stage P50/P99 against its budget, SLO attainment per class (and degraded mode), routes,
the token ledger and consumer lag. Each refresh shows what was observed since the previous
one; ``--once`` prints the totals since the processes started, once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from lockstep.metrics_view import Scrape, ScrapeError, Summary, fetch, merge, parse, summarize
from lockstep.streams.settings import SloSettings


def scrape_all(urls: Sequence[str]) -> tuple[Scrape, list[str]]:
    """Scrape every URL; return the merged metrics and the errors of those that failed."""
    scrapes, errors = [], []
    for url in urls:
        try:
            scrapes.append(parse(fetch(url)))
        except ScrapeError as error:
            errors.append(str(error))
    return merge(scrapes), errors


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(summary: Summary, *, title: str, errors: Sequence[str] = ()) -> Group:
    """The view of one summary as rich tables."""
    stages = Table(title=title, title_justify="left", expand=False)
    for column in ("stage", "count", "p50 ms", "p99 ms", "budget ms", ""):
        stages.add_column(column, justify="left" if column in ("stage", "") else "right")
    for row in summary.stages:
        status = Text("over", style="bold red") if row.over else Text("ok", style="green")
        stages.add_row(row.stage, f"{row.count:.0f}", _ms(row.p50_ms), _ms(row.p99_ms),
                       _ms(row.budget_ms), status if row.p99_ms is not None else "")
    classes = Table(title="SLO classes", title_justify="left")
    for column in ("class", "responses", "expired", "within budget", "e2e p99 ms", "budget ms",
                   "mode", "breaches"):
        classes.add_column(column, justify="left" if column in ("class", "mode") else "right")
    for c in summary.classes:
        attained = "-" if c.attainment is None else f"{c.attainment * 100:.1f}%"
        mode = Text("degraded", style="bold yellow") if c.degraded else Text("normal")
        classes.add_row(c.slo_class, f"{c.responses:.0f}", f"{c.expired:.0f}", attained,
                        _ms(c.p99_ms),
                        f"{c.budget_ms:.0f}", mode, f"{c.breaches:.0f}")
    side = Table(title="routes · ledger · lag", title_justify="left", show_header=False)
    side.add_column("what")
    side.add_column("value", justify="right")
    for route, n in summary.routes.items():
        side.add_row(f"route {route}", f"{n:.0f}")
    for modality, outcomes in summary.ledger.items():
        side.add_row(f"tokens {modality}",
                     ", ".join(f"{o} {n:.0f}" for o, n in sorted(outcomes.items())))
    for (topic, group), n in summary.lag.items():
        side.add_row(escape(f"lag {topic} [{group}]"), f"{n:.0f}")
    for pool, mean in summary.batch.items():
        side.add_row(f"mean batch {pool}", f"{mean:.1f}")
    parts: list[Table | Text] = [stages, classes, side]
    parts.extend(Text(e, style="red") for e in errors)
    return Group(*parts)


def run_top(urls: Sequence[str], slo: SloSettings, *, interval_s: float = 2.0,
            once: bool = False, console: Console | None = None) -> int:
    """Show the view; return 0, or 1 if ``once`` and no endpoint answered."""
    console = console or Console()
    scrape, errors = scrape_all(urls)
    if once:
        console.print(render(summarize(scrape, slo), title="since start", errors=errors))
        return 0 if len(errors) < len(urls) else 1
    with Live(render(summarize(scrape, slo), title="since start", errors=errors),
              console=console, refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(interval_s)
            current, errors = scrape_all(urls)
            window = current - scrape if not errors else current
            title = f"last {interval_s:g} s" if not errors else "since start"
            live.update(render(summarize(window, slo), title=title, errors=errors))
            scrape = current
