"""``lockstep top``: a live terminal view of the pipeline's SLA, read from the roles' /metrics.

Per stage P50/P99 against its budget, SLO attainment per class (and degraded mode), routes,
the token ledger and consumer lag; shed requests count as missed. Each refresh shows what
was observed since the previous one; ``--once`` prints the totals since the processes
started, once. Without URLs it reads every role of this host at its default port.
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
from lockstep.streams.settings import ROLE_METRICS_PORTS, Settings, SloSettings


def default_urls(settings: Settings) -> list[str]:
    """The ``/metrics`` URLs of the roles of this host: the configured port, or each role's.

    The worker of every pool in ``topics.pools`` has its own default port.
    """
    metrics = settings.metrics
    host = "127.0.0.1" if metrics.host in ("0.0.0.0", "::", "") else metrics.host
    if metrics.port:
        ports = [metrics.port]
    else:
        ports = [ROLE_METRICS_PORTS["align"], ROLE_METRICS_PORTS["route"],
                 *(ROLE_METRICS_PORTS["worker"] + i for i in range(len(settings.topics.pools)))]
    return [f"http://{host}:{port}/metrics" for port in ports]


def scrape_all(urls: Sequence[str]) -> tuple[Scrape, list[str], list[str]]:
    """Scrape every URL; return the merged metrics, the URLs read and the errors of the rest."""
    scrapes, read, errors = [], [], []
    for url in urls:
        try:
            scrapes.append(parse(fetch(url)))
            read.append(url)
        except ScrapeError as error:
            errors.append(str(error))
    return merge(scrapes), read, errors


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(summary: Summary, *, title: str, errors: Sequence[str] = (),
           sources: Sequence[str] = ()) -> Group:
    """The view of one summary as rich tables (``sources``: the URLs it was read from)."""
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
    if sources:
        parts.append(Text("metrics from " + ", ".join(sources), style="dim"))
    parts.extend(Text(e, style="red") for e in errors)
    return Group(*parts)


def run_top(urls: Sequence[str], slo: SloSettings, *, interval_s: float = 2.0,
            once: bool = False, console: Console | None = None,
            optional: bool = False) -> int:
    """Show the view; return 0, or 1 if ``once`` and no endpoint answered.

    Args:
        urls: The ``/metrics`` URLs to read and merge.
        slo: SLO classes and budgets (budgets the endpoints export take precedence).
        interval_s: Seconds between refreshes.
        once: Print the totals since start once and return.
        console: Where to print.
        optional: The URLs are guesses (the default ports): those that do not answer are
            not reported unless none does.
    """
    console = console or Console()

    def shown(read: list[str], errors: list[str]) -> list[str]:
        return [] if optional and read else errors

    scrape, read, errors = scrape_all(urls)
    if once:
        console.print(render(summarize(scrape, slo), title="since start",
                             errors=shown(read, errors), sources=read))
        return 0 if read else 1
    with Live(render(summarize(scrape, slo), title="since start", errors=shown(read, errors),
                     sources=read),
              console=console, refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(interval_s)
            current, now_read, errors = scrape_all(urls)
            steady = now_read == read
            window = current - scrape if steady else current
            title = f"last {interval_s:g} s" if steady else "since start"
            live.update(render(summarize(window, slo), title=title,
                               errors=shown(now_read, errors), sources=now_read))
            scrape, read = current, now_read
