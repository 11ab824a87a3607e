import urllib.request

import pytest

from lockstep.telemetry.metrics import Telemetry

pytestmark = pytest.mark.unit


def test_stage_percentiles_are_exact_over_recent_samples() -> None:
    t = Telemetry()
    for ms in range(1, 101):
        t.stage("align", ms / 1000)
    stats = t.stage_stats()["align"]
    assert stats.count == 100
    assert stats.p50_ms == pytest.approx(50.5) and stats.p99_ms == pytest.approx(99.01)


def test_budget_overruns_count_as_slo_violations() -> None:
    t = Telemetry(stage_budget_s=0.012)
    t.stage("route", 0.005, slo_class="cabin")
    t.stage("route", 0.020, slo_class="cabin")
    t.e2e(0.150, route="full", slo_class="cabin", budget_s=0.120)
    t.e2e(0.050, route="full", slo_class="cabin", budget_s=0.120)
    reg = t.registry
    assert reg.get_sample_value("lockstep_slo_violations_total",
                                {"stage": "route", "slo_class": "cabin"}) == 1
    assert reg.get_sample_value("lockstep_slo_violations_total",
                                {"stage": "e2e", "slo_class": "cabin"}) == 1
    assert t.slo_attainment() == 0.5


def test_metrics_endpoint_serves_the_design_metric_names() -> None:
    t = Telemetry()
    t.stage("infer", 0.003, route="full", pool="vl")
    t.e2e(0.01, route="full", slo_class="cabin", budget_s=0.12)
    t.token("video", "window")
    t.windows.labels("full").inc()
    t.batch_size.labels("vl").observe(4)
    t.queue_depth.labels("vl").set(2)
    t.consumer_lag.labels("media.video", "lockstep-align").set(0)
    port = t.serve("127.0.0.1", 0)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for name in ("lockstep_stage_latency_seconds_bucket", "lockstep_e2e_latency_seconds_bucket",
                 "lockstep_slo_violations_total", "lockstep_windows_total",
                 "lockstep_tokens_total", "lockstep_batch_size_bucket",
                 "lockstep_queue_depth", "lockstep_consumer_lag"):
        assert name in body
    assert 'le="0.012"' in body and 'le="0.0001"' in body
