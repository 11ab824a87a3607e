"""The HTML report: a time axis, breakdowns, "≥ 10 s" for saturated P99s, no empty ledger."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pytest
from prometheus_client import generate_latest

from lockstep.config.settings import SloSettings
from lockstep.observe.htmlreport import RunDetail, latency_svg, render_html, run_of, write_report
from lockstep.observe.ledger import Ledger, SeenResponse, SeenWindow
from lockstep.observe.metrics import parse, summarize
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import DeadLetter, Modality, Response, SloEvent, Timeline
from tests.reportscenario import START, scrapes

pytestmark = pytest.mark.unit

SLO = SloSettings()


@pytest.fixture(scope="module")
def page() -> str:
    return render_html(run_of(scrapes=scrapes()), SLO, meta={"metrics": "synthetic"})


def _svg(page: str, series: str) -> str:
    found = re.search(rf'<svg class="[a-z-]+" data-series="{series}".*?</svg>', page, re.S)
    assert found, f"no chart {series}"
    return found.group(0)


def _find(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    assert found, pattern
    return found.group(1)


def _section(page: str, title: str) -> str:
    found = re.search(rf"<h2>{title}</h2>(.*?)(<h2>|</body>)", page, re.S)
    assert found, f"no section {title}"
    return found.group(1)


def test_scrapes_over_time_give_a_p99_per_stage_per_interval_against_its_budget(
        page: str) -> None:
    assert "13 scrapes from" in page
    for stage in ("align", "route", "queue", "infer", "e2e"):
        svg = _svg(page, f"p99-{stage}")
        assert svg.count("<circle") == 12  # one point per interval
    infer = _svg(page, "p99-infer")
    assert "budget 60 ms" in infer
    # the slow middle stands out: points above the budget line, then back under it
    ys = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', infer)]
    budget_y = float(_find(r'class="ref" x1="\d+" y1="([\d.]+)"', infer))
    assert [y < budget_y for y in ys] == [n in range(5, 9) for n in range(1, 13)]


def test_attainment_per_class_per_interval_drops_when_requests_are_shed(page: str) -> None:
    svg = _svg(page, "attainment")
    tips = re.findall(r"<title>cabin at (\d+) s: ([\d.]+) %</title>", svg)
    shares = {int(t): float(v) for t, v in tips}
    assert shares[5] == 100 and shares[60] == 100
    # vl's answers are slow and a third of all requests shed: only text's third is in time
    assert shares[25] == pytest.approx(100 / 3, abs=0.1)
    assert 'class="shade"' in svg  # cabin ran degraded


def test_a_saturated_p99_reads_at_least_10_s_and_never_10000(page: str) -> None:
    stages = _section(page, "Stages: latency against budget")
    assert re.search(r"<td>e2e</td>.*?<td class=n>≥ 10 s</td>", stages)
    assert "P99 ≥ 10 s" in _svg(page, "p99-e2e") and 'class="capped"' in _svg(page, "p99-e2e")
    assert re.search(r'data-stage="e2e".*?P99 ≥ 10 s</text>', page, re.S)
    assert "10000.00" not in page and "10000.0 ms" not in page


def test_the_p99_label_of_a_saturated_stage_is_drawn_inside_its_plot() -> None:
    t = Telemetry()
    for _ in range(10):
        t.expired(slo_class="cabin")
    [row] = summarize(parse(generate_latest(t.registry).decode()), SLO).stages
    svg = latency_svg(row)
    x = float(_find(r'<text x="([\d.]+)"[^>]*text-anchor="end">P99 ≥ 10 s', svg))
    assert x <= 560


def test_pools_routes_and_dead_letters_each_get_a_breakdown(page: str) -> None:
    pools = _section(page, "Per pool")
    assert re.search(r"<td>vl</td><td>expired 80, ok 400</td>.*?3 / 256", pools)
    assert re.search(r"<td>text</td><td>ok 240</td>.*?<td class=n>8.0</td>", pools)
    routes = _section(page, "Routes")
    assert re.search(r"<td>full</td><td class=n>480</td><td class=n>66.7%</td>", routes)
    assert "text_only" in routes
    dead = _section(page, "Dead letters")
    assert re.search(r"<td>align</td><td>SchemaError</td><td class=n>12</td>", dead)
    assert "DecodeError" in dead


def test_the_breach_timeline_marks_breaches_and_the_degraded_span(page: str) -> None:
    svg = _svg(page, "breaches")
    assert "infer · cabin" in svg and "e2e · cabin" in svg and "degraded · cabin" in svg
    assert "1 breach raised" in _section(page, "Over time")


def test_slo_events_join_the_breach_timeline(tmp_path: Path) -> None:
    event = SloEvent(kind="breach", stage="queue", slo_class="cabin", p99_ms=30.5,
                     budget_ms=12.0, samples=400, consecutive=3, degrade=False,
                     source="worker-1", at_us=int((START + 20) * 1e6))
    path = write_report(tmp_path / "r.html", [], SLO, scrapes=scrapes(),
                        detail=RunDetail(events=[event]))
    page = path.read_text()
    assert "queue · cabin" in _svg(page, "breaches")
    assert "breach: P99 30.5 / 12 ms" in page and "worker-1" in page


def test_a_role_report_without_tokens_says_so_instead_of_a_ledger_of_zeros() -> None:
    worker = Telemetry()
    worker.stage("infer", 0.02, route="full", pool="vl", slo_class="cabin")
    worker.e2e(0.05, route="full", slo_class="cabin", budget_s=0.12)
    page = render_html(run_of([generate_latest(worker.registry).decode()]), SLO)
    ledger = _section(page, "Token ledger")
    assert "No ledger in this scrape" in ledger and "<table" not in ledger
    assert "One scrape: no time axis" in page and "--every 5s --for 60s" in page
    assert "<h2>Dead letters</h2>" not in page  # nothing to show, no empty table


def _response(stream: str, seq: int, e2e_ms: float,
              status: Literal["ok", "expired"] = "ok") -> Response:
    capture = 1_717_000_000_000_000
    return Response(stream_id=stream, window_seq=seq, route="full", pool="vl",
                    engine="reference", slo_class="cabin", output="", scores={}, missing=[],
                    deadline_us=capture + 120_000, status=status,
                    timeline=Timeline(capture_us=capture,
                                      responded_us=capture + int(e2e_ms * 1000)))


def test_per_stream_figures_and_dead_letter_reasons_come_from_an_observer_ledger() -> None:
    ledger = Ledger()
    for seq in range(10):
        ledger.windows[("cam0", seq)] = SeenWindow("cam0", seq, 0, 1, 0, (), b"")
        e2e_ms = 40.0 if seq < 9 else 300.0
        ledger.responses[("cam0", seq)] = SeenResponse.of(_response("cam0", seq, e2e_ms))
    ledger.windows[("cam1", 0)] = SeenWindow("cam1", 0, 0, 1, 0, (), b"")
    ledger.responses[("cam1", 0)] = SeenResponse.of(_response("cam1", 0, 0.0, "expired"))
    ledger.late.add(TokenKey("cam1", Modality.AUDIO, 3))
    ledger.dead_letters.append(DeadLetter(
        stage="align", topic="media.video", partition=0, offset=7, reason="t_us in the future",
        error="BadInput", key=b"cam1", value=b"", at_us=0))
    detail = RunDetail.of_ledger(ledger, SLO)
    page = render_html(run_of(scrapes=scrapes(3)), SLO, detail=detail)
    streams = _section(page, "Per stream")
    assert re.search(r"<td>cam0</td><td class=n>10</td><td>ok 10</td>.*?<td class=n>90.00%</td>",
                     streams)
    assert re.search(r"<td>cam1</td><td class=n>1</td><td>expired 1</td><td class=n>1</td>"
                     r"<td class=n>1</td>.*?<td class=n>0.00%</td>", streams)
    assert "t_us in the future" in _section(page, "Dead letters")


def test_without_a_ledger_the_report_says_where_per_stream_figures_come_from(
        page: str) -> None:
    assert "a ledger of the output topics" in _section(page, "Per stream")
