"""``lockstep top``: a live terminal view of the pipeline's SLA, read from the roles' /metrics.

Which targets answered; tokens and responses per second; per stage P50/P99 against its
budget; SLO attainment per class (and degraded mode); per pool the queue depth against its
bound, the mean batch and the queue and infer P99; e2e latency per route; the token ledger,
consumer lag and dead letters. Shed requests count as missed. The figures cover a rolling
window (30 s by default, so that a P99 rests on enough samples), and a sparkline next to
each shows its history, one character per refresh. ``--once`` prints the totals since the
processes started, once. Without URLs it reads every role of this host at its default port.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live

from lockstep.config.settings import ROLE_METRICS_PORTS, Settings, SloSettings
from lockstep.errors import ScrapeError
from lockstep.observe.breakdown import dead_letter_rows, pool_rows, responses, route_rows, tokens
from lockstep.observe.metrics import Scrape, Summary, fetch, merge, parse, summarize
from lockstep.observe.timeseries import RollingWindow
from lockstep.observe.topview import Extras, Target, render

__all__ = ["Frame", "TopState", "default_urls", "render", "run_top", "scrape_each"]


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


def scrape_each(urls: Sequence[str], read: Callable[[str], str] = fetch
                ) -> tuple[dict[str, Scrape], dict[str, str]]:
    """Scrape every URL: the scrapes of those that answered, the errors of the others."""
    scrapes: dict[str, Scrape] = {}
    errors: dict[str, str] = {}
    for url in urls:
        try:
            scrapes[url] = parse(read(url))
        except ScrapeError as error:
            errors[url] = str(error)
    return scrapes, errors


@dataclass(frozen=True)
class Frame:
    """One refresh of the view."""

    title: str
    summary: Summary
    extras: Extras
    errors: list[str]


class TopState:
    """The rolling window and the sparklines' history, fed one refresh at a time.

    Pure: the time of each refresh is given, nothing is fetched here.
    """

    def __init__(self, urls: Sequence[str], slo: SloSettings, *, window_s: float = 30.0,
                 points: int = 30, optional: bool = False) -> None:
        self.urls = list(urls)
        self.slo = slo
        self.window_s = window_s
        self.optional = optional
        self._window = RollingWindow(window_s)
        self._points = points
        self._trends: dict[str, deque[float | None]] = {}
        self._refreshes = 0

    def update(self, at: float, scrapes: Mapping[str, Scrape],
               errors: Mapping[str, str]) -> Frame:
        """Take one refresh's scrapes (taken at ``at`` seconds) and return its frame."""
        self._window.add(at, scrapes)
        window, span = self._window.window(list(scrapes))
        frame = self.frame(window, span, scrapes, errors)
        shown = self._shown(frame)
        self._refreshes += 1
        filled = min(self._refreshes - 1, self._points)
        for key in {*self._trends, *shown}:
            history = self._trends.setdefault(
                key, deque([None] * filled, maxlen=self._points))
            history.append(shown.get(key))
        extras = frame.extras
        trends = {k: list(v) for k, v in self._trends.items()} if span > 0 else {}
        return Frame(frame.title, frame.summary, Extras(
            extras.targets, extras.pools, extras.routes, extras.dead_letters, span,
            extras.rates, trends), frame.errors)

    def frame(self, scrape: Scrape, span: float, read: Mapping[str, Scrape],
              errors: Mapping[str, str]) -> Frame:
        """The frame of figures over ``span`` seconds (0: totals since start)."""
        summary = summarize(scrape, self.slo)
        rates: dict[str, float] = {}
        if span > 0:
            rates = {"tokens": tokens(scrape) / span, "responses": responses(scrape) / span}
            published = tokens(scrape, ("published",))
            if published:
                rates["published"] = published / span
        targets = [Target(u, u in read) for u in self.urls]
        if span <= 0:
            title = "since start"
        elif span < self.window_s * 0.95:
            title = f"last {span:.0f} s (filling {self.window_s:g} s)"
        else:
            title = f"last {span:.0f} s"
        shown_errors = [] if self.optional and read else [errors[u] for u in self.urls
                                                            if u in errors]
        return Frame(title, summary, Extras(targets, pool_rows(scrape),
                                            route_rows(scrape, self.slo),
                                            dead_letter_rows(scrape), span, rates),
                     shown_errors)

    @staticmethod
    def _shown(frame: Frame) -> dict[str, float | None]:
        out: dict[str, float | None] = dict(frame.extras.rates)
        for row in frame.summary.stages:
            out[f"stage:{row.stage}"] = row.p99_ms
        for c in frame.summary.classes:
            out[f"class:{c.slo_class}"] = None if c.attainment is None else c.attainment * 100
        for p in frame.extras.pools:
            out[f"pool:{p.pool}"] = p.queue_depth
        for r in frame.extras.routes:
            out[f"route:{r.route}"] = r.e2e.p99_ms
        return out


def draw(frame: Frame) -> Group:
    """The rich renderable of a frame."""
    return render(frame.summary, title=frame.title, errors=frame.errors, extras=frame.extras)


def run_top(urls: Sequence[str], slo: SloSettings, *, interval_s: float = 2.0,
            window_s: float = 30.0, once: bool = False, console: Console | None = None,
            optional: bool = False, read: Callable[[str], str] = fetch,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> int:
    """Show the view until interrupted; return 0, or 1 if ``once`` and no endpoint answered.

    Args:
        urls: The ``/metrics`` URLs to read and merge.
        slo: SLO classes and budgets (budgets the endpoints export take precedence).
        interval_s: Seconds between refreshes.
        window_s: Seconds of the rolling window the figures cover.
        once: Print the totals since start once and return.
        console: Where to print.
        optional: The URLs are guesses (the default ports): those that do not answer are
            not reported as errors unless none does.
        read: Returns the text of a URL (raises :class:`ScrapeError`).
        clock: Seconds, for the window.
        sleep: Waits between refreshes.
    """
    console = console or Console()
    state = TopState(urls, slo, window_s=window_s, optional=optional)
    scrapes, errors = scrape_each(urls, read)
    if once:
        console.print(draw(state.frame(merge(scrapes.values()), 0.0, scrapes, errors)))
        return 0 if scrapes else 1
    with Live(draw(state.update(clock(), scrapes, errors)), console=console,
              refresh_per_second=4, screen=False) as live:
        while True:
            sleep(interval_s)
            scrapes, errors = scrape_each(urls, read)
            live.update(draw(state.update(clock(), scrapes, errors)))
