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


def test_bench_batching_json_scores_the_three_policies_on_each_repetition() -> None:
    result = _run("--json", "--engine", "simulated", "--seconds", "2", "--seed", "3",
                  "--repeats", "2", "--calibrations", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    for key in ("slo_attainment", "slo_attainment_high", "items_per_s", "p99_ms", "expired",
                "lateness_max_ms"):
        assert set(report[key]) == POLICIES, key
    assert all(0.0 <= s["min"] <= s["max"] <= 1.0 for s in report["slo_attainment"].values())
    assert report["engine"] == "simulated" and report["seeds"] == [3, 4]
    assert report["requests"]["min"] > 50
    # Every request of the trace is accounted for under the two batching policies.
    assert report["unanswered"]["lockstep"]["max"] == 0 == report["unanswered"]["fifo"]["max"]
    assert all(s["max"] == 0 for s in report["failed"].values())
    # batch size 1 cannot keep up with a load sized for full batches, in any repetition
    for rep in report["repetitions"]:
        policies = rep["policies"]
        assert policies["batch1"]["items_per_s"] < policies["fifo"]["items_per_s"]
    ratio = report["ratios"]["items_per_s_vs_fifo"]
    assert ratio["n"] == 2 and ratio["min"] > 0
    assert report["calibration"]["runs"] == 2 and "text" in report["verdict"]
    assert {"cores", "load_before", "steal_share"} <= set(report["machine"])


def test_bench_batching_on_a_virtual_clock_is_instant_and_says_so() -> None:
    result = _run("--json", "--engine", "simulated", "--virtual-clock", "--seconds", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["virtual_clock"] is True and report["ratios"]["repetitions"] == 3


def test_bench_batching_refuses_a_virtual_clock_for_a_real_engine() -> None:
    result = _run("--engine", "reference", "--virtual-clock")
    assert result.returncode == 2 and "--virtual-clock needs --engine simulated" in result.stderr


def test_bench_batching_on_the_cpu_engine_prints_the_table() -> None:
    result = _run("--engine", "cpu", "--seconds", "2", "--load", "0.3", "--repeats", "1",
                  "--calibrations", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "on the cpu engine" in out and "SLO attainment" in out
    assert "lockstep vs fifo:" in out and "verdict:" in out and "machine:" in out
