"""`lockstep bench pipeline` as a user runs it, in a tiny configuration.

One process per role on the embedded broker, steps of a few seconds: the report's
structure and that its numbers are present and sane, never how fast this machine is.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockstep.bench.pipeline.table import render_pipeline
from tests.clirun import lockstep

pytestmark = pytest.mark.e2e

ROLES = {"align", "route", "worker:vl", "worker:text"}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    result = lockstep("bench", "pipeline", "--json", "--step-seconds", "3", "--max-streams",
                      "2", "--warmup-seconds", "3", "--confirm", "1", "--raw-records", "3000",
                      "--raw-repeats", "2", "--overload", "--overload-seconds", "3", "--soak",
                      "8", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_pipeline_bench_runs_one_process_per_role_on_the_embedded_broker(
        report: dict[str, Any]) -> None:
    assert set(report["roles"]) == ROLES and report["broker"] == "embedded tansu"
    assert report["warmup_s"] > 0
    # The unmeasured warm-up at the first step's count ran, and is not one of the steps.
    warm = report["warmup_load"]
    assert warm["streams"] == 1 and warm["seconds"] == 3
    assert warm["attainment"] is None or 0.0 <= warm["attainment"] <= 1.0
    assert {"cores", "load_before", "steal_share"} <= set(report["machine"])


def test_pipeline_bench_ramps_steps_and_names_a_capacity(report: dict[str, Any]) -> None:
    steps = report["steps"]
    assert steps and steps[0]["streams"] == 1
    for step in steps:
        assert step["tokens_published"] > 0 and step["producer_ok"]
        assert step["held"] == (step["why"] == "")
        attainment = step["span"]["attainment"]
        assert attainment is None or 0.0 <= attainment <= 1.0
    assert 0 <= report["capacity_streams"] <= 2
    held = {s["streams"] for s in steps if s["held"]}
    assert report["capacity_streams"] in held | {0}


def test_pipeline_bench_reports_stages_and_cpu_per_token_at_half_capacity(
        report: dict[str, Any]) -> None:
    half = report["half_capacity"]
    assert half["streams"] == max(1, report["capacity_streams"] // 2)
    stages = half["span"]["stages"]
    assert {"align", "route", "infer", "e2e"} <= set(stages)
    for stage in stages.values():
        assert stage["p50_ms"] is None or 0 <= stage["p50_ms"] <= stage["p99_ms"]
    # Apart: the same step from half its 3 s on (every stream running), a later part of
    # the same span, so never more observations of a stage than the whole step has.
    steady = half["steady"]
    assert steady["after_s"] == 1.5
    later = steady["span"]["stages"]
    assert "e2e" in later and 0 < later["e2e"]["count"] <= stages["e2e"]["count"]
    assert all(s["count"] <= stages[name]["count"] for name, s in later.items())
    per_token = half["cpu_ms_per_token"]
    assert set(per_token) >= ROLES and all(per_token[r] is not None for r in ROLES)
    assert sum(per_token[r] for r in ROLES) > 0


def test_pipeline_bench_measures_the_raw_limit_and_the_ratio(report: dict[str, Any]) -> None:
    for key, client, name in (("passthrough", "aiokafka", "pipeline_vs_passthrough"),
                              ("passthrough_librdkafka", "librdkafka", "pipeline_vs_librdkafka")):
        raw = report[key]
        assert raw["arrived"] == raw["records"] == 3000 and raw["repetitions"] == 2
        assert raw["records_per_s"]["n"] == 2 and raw["records_per_s"]["min"] > 0
        assert {r["client"] for r in raw["runs"]} == {client}
        ratio = report["ratios"][name]
        if report["capacity_streams"]:
            assert ratio["n"] == 2 and ratio["min"] > 0
            assert report["capacity_runs"]["runs"] >= 1
        else:
            assert ratio is None
    assert report["ratios"]["tokens_per_cpu_s_at_half"] > 0
    assert report["ratios"]["tokens_per_s_at_capacity"] >= 0


def test_pipeline_bench_reports_overload_and_soak(report: dict[str, Any]) -> None:
    over = report["overload"]
    assert over["streams"] > over["then_streams"] >= 1
    assert over["per_second"] and over["answered_during"] > 0
    assert over["recovery_s"] is None or over["recovery_s"] >= 0
    soak = report["soak"]
    assert set(soak["rss_mb"]) >= ROLES
    assert all(len(series) >= 3 for series in soak["rss_mb"].values())
    assert set(soak["rss_flat"]) == set(soak["rss_growth"])


def test_pipeline_bench_prints_its_report_as_a_table(report: dict[str, Any]) -> None:
    # What the command prints without --json: this run's report as the table.
    out = render_pipeline(report)
    assert "capacity:" in out and "at half capacity" in out
    assert "raw consume->produce over 3 hops (librdkafka" in out
    assert "note: the embedded broker slows as its logs grow" in out


def test_pipeline_bench_runs_on_apache_kafka_when_a_bootstrap_is_given(
        apache_kafka: str) -> None:
    result = lockstep("bench", "pipeline", "--json", "--bootstrap", apache_kafka,
                      "--step-seconds", "3", "--max-streams", "1", "--confirm", "1",
                      "--raw-records", "2000", "--raw-repeats", "1", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["broker"] == "kafka" and set(report["roles"]) == ROLES
    assert report["steps"][0]["tokens_published"] > 0
    assert report["passthrough"]["arrived"] == report["passthrough_librdkafka"]["arrived"] == 2000
    # The bench's own groups and raw topics: nothing of it is left on the cluster's roles.
    assert "broker" not in report["half_capacity"]["cpu_ms_per_token"]
