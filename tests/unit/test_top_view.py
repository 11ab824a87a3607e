"""`lockstep top`: targets, rates, pools, routes, a rolling 30 s window and sparklines."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from prometheus_client import generate_latest
from rich.console import Console

from lockstep.config.settings import SloSettings
from lockstep.errors import ScrapeError
from lockstep.observe.metrics import Scrape, parse
from lockstep.observe.top import Frame, TopState, draw, run_top
from lockstep.observe.topview import sparkline
from lockstep.telemetry.metrics import Telemetry
from tests.reportscenario import scrapes

pytestmark = pytest.mark.unit

ALIGN, WORKER, GONE = ("http://h:9464/metrics", "http://h:9466/metrics",
                       "http://h:9467/metrics")
DOWN = {GONE: f"cannot scrape {GONE}: <urlopen error [Errno 111] Connection refused>"}


def _text(frame: Frame, width: int = 160) -> str:
    console = Console(record=True, width=width)
    console.print(draw(frame))
    return console.export_text()


def _rounds() -> list[tuple[float, dict[str, Scrape]]]:
    """The synthetic run's rounds (two roles every 5 s), keyed by URL."""
    urls = {"align": ALIGN, "worker": WORKER}
    by_time: dict[float, dict[str, Scrape]] = {}
    for s in scrapes():
        by_time.setdefault(round(s.at), {})[urls[s.source]] = s.scrape
    return sorted(by_time.items())


def _fed(upto: int | None = None) -> tuple[TopState, Frame]:
    state = TopState([ALIGN, WORKER, GONE], SloSettings())
    frame = None
    for at, read in _rounds()[:upto]:
        frame = state.update(at, read, DOWN)
    assert frame is not None
    return state, frame


def test_the_header_says_which_targets_answered_and_which_are_down() -> None:
    _, frame = _fed()
    out = _text(frame)
    assert f"targets 2/3 up · metrics from {ALIGN}, {WORKER} · down: {GONE}" in out
    assert "Connection refused" in out  # the error line of the URL that was asked for


def test_the_figures_cover_a_rolling_30_s_window_not_the_last_refresh() -> None:
    _, frame = _fed()
    assert frame.title == "last 30 s" and frame.extras.span_s == 30
    infer = next(r for r in frame.summary.stages if r.stage == "infer")
    assert infer.count == 6 * 60  # six 5 s intervals of 60, not one
    _, filling = _fed(upto=3)
    assert filling.title == "last 10 s (filling 30 s)"
    _, first = _fed(upto=1)
    assert first.title == "since start" and not first.extras.trends


def test_rates_per_second_pools_and_latency_per_route_are_shown() -> None:
    _, frame = _fed()
    assert frame.extras.rates["responses"] == pytest.approx(12.0)
    assert frame.extras.rates["tokens"] == pytest.approx((360 + 3 + 1) / 5, rel=0.01)
    out = _text(frame)
    assert re.search(r"throughput over 30 s: tokens settled 72\.\d/s .* responses 12\.0/s", out)
    assert re.search(r"│ vl\s+│\s+8\.0/s │ expired 40, ok 200\s+│\s+3/256 │\s+4\.0 │", out)
    assert re.search(r"│ text\s+│\s+4\.0/s │ ok 120\s+│\s+1/256 │\s+8\.0 │", out)
    assert re.search(r"│ full\s+│\s+200 │\s+5\d\.\d\d │\s+19\d\.\d\d │\s+80\.0% │", out)
    assert "dead letters align SchemaError" in out


def test_a_saturated_p99_reads_at_least_10_s() -> None:
    _, frame = _fed()
    out = _text(frame)
    assert re.search(r"│ e2e\s+│\s+\d+ │\s+\d+\.\d\d │\s+≥ 10 s │\s+120\.00 │ over", out)
    assert "10000.00" not in out


def test_each_figure_has_a_sparkline_of_its_history() -> None:
    _, frame = _fed()
    trends = frame.extras.trends
    # nothing was observed before the first refresh; 12 intervals since
    assert len(trends["stage:infer"]) == 13 and trends["stage:infer"][0] is None
    assert trends["tokens"][0] is None  # no rate before the second refresh
    out = _text(frame)
    row = next(line for line in out.splitlines() if line.startswith("│ vl"))
    assert "▂▂▂▂████▂▂▂▂" in row  # the queue filled in the slow middle and drained


def test_a_target_that_comes_up_late_adds_nothing_from_before_it_was_watched() -> None:
    state = TopState([ALIGN, WORKER], SloSettings())
    rounds = _rounds()
    for at, read in rounds[:-1]:
        state.update(at, {ALIGN: read[ALIGN]}, {WORKER: "down"})
    at, read = rounds[-1]
    frame = state.update(at, read, {})
    infer = [r for r in frame.summary.stages if r.stage == "infer"]
    assert not infer or infer[0].count == 0  # not the worker's totals since it started


def test_once_prints_a_snapshot_of_the_totals_since_start() -> None:
    t = Telemetry()
    for _ in range(40):
        t.stage("infer", 0.02, route="full", pool="vl", slo_class="cabin")
    text = generate_latest(t.registry).decode()

    def read(url: str) -> str:
        if url == GONE:
            raise ScrapeError(DOWN[GONE])
        return text

    console = Console(record=True, width=160)
    assert run_top([ALIGN, GONE], SloSettings(), once=True, console=console, read=read) == 0
    out = console.export_text()
    assert "since start" in out and "targets 1/2 up" in out and "needs two scrapes" in out
    assert re.search(r"│ infer\s+│\s+40 │", out)
    assert run_top([GONE], SloSettings(), once=True, console=Console(record=True),
                   read=read) == 1


def test_the_live_view_refreshes_on_its_interval_until_interrupted() -> None:
    t = Telemetry()
    now = [0.0]
    reads = []

    def read(url: str) -> str:
        t.stage("infer", 0.02, route="full", pool="vl", slo_class="cabin")
        reads.append(now[0])
        return generate_latest(t.registry).decode()

    def sleep(seconds: float) -> None:
        if now[0] >= 10:
            raise KeyboardInterrupt
        now[0] += seconds

    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        run_top([ALIGN], SloSettings(), interval_s=2.0, console=Console(record=True),
                read=read, clock=clock, sleep=sleep)
    assert reads == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_sparklines_scale_rates_from_zero_and_latencies_on_a_log_scale() -> None:
    assert sparkline([10.0, 10.1, 9.9]) == "███"  # noise on a steady rate stays flat
    assert sparkline([0.0, 5.0, 10.0]) == "▁▅█"
    assert sparkline([1.0, 10.0, 100.0], log=True) == "▁▅█"
    assert sparkline([None, 1.0, 0.5]) == " █▅"
    assert sparkline([3.0, 3.0], log=True) == "▄▄"


def test_the_view_parses_what_the_exporter_serves() -> None:
    assert parse(generate_latest(Telemetry().registry).decode()).histograms
