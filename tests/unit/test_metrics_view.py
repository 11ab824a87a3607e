import re
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from rich.console import Console

from lockstep.config.settings import SloSettings
from lockstep.observe.htmlreport import write_report
from lockstep.observe.metrics import merge, parse, summarize
from lockstep.observe.top import render
from lockstep.telemetry.metrics import LATENCY_BUCKETS, Telemetry
from lockstep.telemetry.slo import SloMonitor

pytestmark = pytest.mark.unit


def _scaled(p99_s: float, n: int = 20_000, seed: int = 7) -> np.ndarray:
    """Log-normal latencies whose P99 is exactly ``p99_s``."""
    raw = np.random.default_rng(seed).lognormal(0.0, 0.6, n)
    return raw * (p99_s / np.percentile(raw, 99))


@pytest.mark.parametrize(("p99_s", "tolerance"), [
    (0.00035, 0.1), (0.0009, 0.1), (0.012, 0.05), (0.0125, 0.05), (0.08, 0.05), (0.12, 0.05),
    (2.4, 0.15)])
def test_the_buckets_resolve_a_p99_from_sub_millisecond_to_seconds(
        p99_s: float, tolerance: float) -> None:
    t = Telemetry()
    for v in _scaled(p99_s):
        t.stage("align", float(v), slo_class="cabin")
    [hist] = parse(generate_latest(t.registry).decode()).histogram(
        "lockstep_stage_latency_seconds").values()
    estimate = hist.quantile(0.99)
    assert estimate == pytest.approx(p99_s, rel=tolerance)


def test_the_buckets_reach_seconds_and_hold_every_class_budget() -> None:
    assert LATENCY_BUCKETS[0] < 0.001 and LATENCY_BUCKETS[-1] >= 5.0
    slo = SloSettings()
    for name in slo.classes:
        assert slo.budget_ms(name) / 1000 in LATENCY_BUCKETS  # attainment is exact
    assert 0.012 in LATENCY_BUCKETS


def test_stage_latency_is_labelled_by_stage_route_pool_and_slo_class() -> None:
    t = Telemetry()
    t.stage("route", 0.002, route="full", pool="vl", slo_class="surgical")
    assert t.registry.get_sample_value(
        "lockstep_stage_latency_seconds_count",
        {"stage": "route", "route": "full", "pool": "vl", "slo_class": "surgical"}) == 1


def test_a_watched_telemetry_feeds_the_slo_monitor_and_exports_the_budget_tree() -> None:
    slo = SloSettings(breach={"min_samples": 1, "breach_after": 1})
    t = Telemetry()
    monitor = SloMonitor(slo)
    t.watch(monitor, {"cabin": slo.budget_tree("cabin")})
    t.e2e(0.5, route="full", slo_class="cabin", budget_s=0.12)
    assert t.registry.get_sample_value("lockstep_slo_budget_seconds",
                                       {"stage": "infer", "slo_class": "cabin"}) == 0.06
    import time
    [breach] = monitor.evaluate(time.monotonic_ns() // 1000)
    assert (breach.stage, breach.slo_class) == ("e2e", "cabin")


def _telemetry(infer_ms: float, n: int = 200) -> Telemetry:
    t = Telemetry()
    slo = SloSettings()
    t.watch(SloMonitor(slo), {c: slo.budget_tree(c) for c in slo.classes})
    rng = np.random.default_rng(3)
    for _ in range(n):
        t.stage("route", float(rng.uniform(0.0005, 0.002)), route="full", pool="vl",
                slo_class="cabin")
        t.stage("infer", infer_ms / 1000, route="full", pool="vl")
        t.e2e(float(rng.uniform(0.05, 0.1)), route="full", slo_class="cabin", budget_s=0.12)
        t.windows.labels("full").inc()
        t.token("video", "window")
    t.token("audio", "late", 2)
    t.consumer_lag.labels("media.video", "lockstep-align").set(7)
    return t


def test_merged_scrapes_add_histograms_and_counters_and_keep_the_largest_gauge() -> None:
    a, b = _telemetry(30.0, n=100), _telemetry(30.0, n=50)
    b.consumer_lag.labels("media.video", "lockstep-align").set(3)
    merged = merge(parse(generate_latest(t.registry).decode()) for t in (a, b))
    summary = summarize(merged, SloSettings())
    infer = next(r for r in summary.stages if r.stage == "infer")
    assert infer.count == 150 and summary.routes == {"full": 150}
    assert summary.lag == {("media.video", "lockstep-align"): 7}
    assert summary.ledger == {"audio": {"late": 4}, "video": {"window": 150}}


def test_the_summary_puts_an_injected_delay_in_its_stage_against_its_budget() -> None:
    summary = summarize(parse(generate_latest(_telemetry(75.0).registry).decode()),
                        SloSettings())
    rows = {r.stage: r for r in summary.stages}
    assert list(rows) == ["route", "infer", "e2e"]
    assert rows["infer"].p99_ms == pytest.approx(75.0, abs=5) and rows["infer"].over
    assert rows["infer"].budget_ms == 60.0
    assert rows["route"].p99_ms is not None and rows["route"].p99_ms < 3 and not rows["route"].over
    [cabin] = summary.classes
    assert cabin.attainment == 1.0 and cabin.budget_ms == 120.0 and not cabin.degraded


def test_a_later_scrape_minus_an_earlier_one_holds_what_happened_in_between() -> None:
    t = _telemetry(5.0, n=10)
    before = parse(generate_latest(t.registry).decode())
    for _ in range(30):
        t.stage("infer", 0.3, route="full", pool="vl")
    window = parse(generate_latest(t.registry).decode()) - before
    infer = next(r for r in summarize(window, SloSettings()).stages if r.stage == "infer")
    assert infer.count == 30 and infer.p50_ms is not None and infer.p50_ms > 250


def test_the_html_report_embeds_one_latency_plot_per_stage(tmp_path: Path) -> None:
    text = generate_latest(_telemetry(40.0).registry).decode()
    path = write_report(tmp_path / "r.html", [text], SloSettings(), meta={"run": "unit"})
    page = path.read_text()
    plots = re.findall(r'<svg class="latency-plot" data-stage="([a-z0-9]+)".*?</svg>', page,
                       re.S)
    assert plots == ["route", "infer", "e2e"]
    infer_svg = re.search(r'data-stage="infer".*?</svg>', page, re.S)
    assert infer_svg is not None and infer_svg.group(0).count("<rect") >= 1
    assert re.search(r"P99 (39|40)\.\d ms", infer_svg.group(0))
    assert "budget 60.0 ms" in infer_svg.group(0)
    assert "cabin" in page and "100.00%" in page and "lockstep-align" in page
    # a single self-contained file: nothing is loaded from anywhere
    assert not re.search(r'(src|href)=', page) and "<script" not in page


def test_top_renders_stages_against_budget_classes_and_lag() -> None:
    t = _telemetry(75.0)
    t.slo_degraded.labels("cabin").set(1)
    summary = summarize(parse(generate_latest(t.registry).decode()), SloSettings())
    console = Console(record=True, width=140)
    console.print(render(summary, title="since start"))
    out = console.export_text()
    assert re.search(r"infer\s+│\s+200\s+│\s+7\d\.\d\d\s+│\s+7\d\.\d\d\s+│\s+60\.00\s+│ over", out)
    assert "degraded" in out and "lag media.video [lockstep-align]" in out


def test_requests_shed_unanswered_count_against_a_class_attainment() -> None:
    t = _telemetry(5.0, n=200)  # every answer within the 120 ms budget
    for _ in range(50):
        t.expired(slo_class="cabin")
    [cabin] = summarize(parse(generate_latest(t.registry).decode()), SloSettings()).classes
    assert (cabin.responses, cabin.expired) == (200, 50)
    assert cabin.attainment == pytest.approx(0.8)
