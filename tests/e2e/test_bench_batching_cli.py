"""`lockstep bench batching` as a user runs it."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.clirun import lockstep

pytestmark = pytest.mark.e2e

POLICIES = {"lockstep", "fifo", "batch1"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return lockstep("bench", "batching", *args, timeout=300)


def test_bench_batching_json_scores_the_three_policies_on_one_trace() -> None:
    result = _run("--json", "--engine", "simulated", "--seconds", "2", "--seed", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    for key in ("slo_attainment", "slo_attainment_high", "items_per_s", "p99_ms", "expired"):
        assert set(report[key]) == POLICIES, key
    assert all(0.0 <= v <= 1.0 for v in report["slo_attainment"].values())
    assert report["engine"] == "simulated" and report["seed"] == 3 and report["requests"] > 50
    # Every request of the trace is accounted for under the two batching policies.
    assert report["unanswered"]["lockstep"] == 0 and report["unanswered"]["fifo"] == 0
    assert report["failed"] == {p: 0 for p in POLICIES}
    # batch size 1 cannot keep up with a load sized for full batches
    assert report["items_per_s"]["batch1"] < report["items_per_s"]["fifo"]
    ratios = report["ratios"]
    assert ratios["items_per_s_vs_fifo"] == pytest.approx(
        report["items_per_s"]["lockstep"] / report["items_per_s"]["fifo"])


def test_bench_batching_on_the_cpu_engine_prints_the_table() -> None:
    result = _run("--engine", "cpu", "--seconds", "2", "--load", "0.3")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "on the cpu engine" in out and "SLO attainment" in out
    assert "lockstep vs fifo:" in out
