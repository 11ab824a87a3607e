"""`lockstep bench align` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.clirun import lockstep_path, run

pytestmark = pytest.mark.e2e

ARGS = ("align", "--json", "--seconds", "3", "--streams", "2", "--repeats", "2",
        "--timing-runs", "2")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return run(argv, timeout=300)


def _check(report: dict[str, Any]) -> None:
    assert report["streams"] == 2 and report["seconds"] == 3.0 and report["seed"] == 7
    assert report["seeds"] == [7, 8]
    for key in ("misaligned_rate", "partial_rate", "windows", "tokens_per_s",
                "tokens_per_reference_unit"):
        sides = report[key]
        assert set(sides) == {"lockstep", "baseline"}
        assert all(s["n"] == 2 and s["min"] <= s["median"] <= s["max"] for s in sides.values())
    rates = report["misaligned_rate"]
    assert all(0.0 <= r["min"] <= r["max"] <= 1.0 for r in rates.values())
    errors = report["alignment_error_ms"]
    for side in ("lockstep", "baseline"):
        assert errors[side]["p50"]["median"] <= errors[side]["p99"]["median"]
    assert report["faults"]["drop_rate"] == 0.15
    # The baseline misaligns far more often, in every repetition.
    assert report["ratios"]["misaligned_baseline_over_lockstep"]["min"] > 5
    assert report["machine"]["cores"] >= 1


def test_bench_group_runs_align_as_a_program() -> None:
    code = "from lockstep.cli.bench import bench; bench(prog_name='lockstep bench')"
    result = _run([sys.executable, "-c", code, *ARGS])
    assert result.returncode == 0, result.stderr[-3000:]
    _check(json.loads(result.stdout))


def test_lockstep_bench_align_json_scores_both_aligners() -> None:
    result = _run([lockstep_path(), "bench", *ARGS])
    assert result.returncode == 0, result.stderr[-3000:]
    _check(json.loads(result.stdout))


def test_lockstep_bench_align_prints_the_table_and_ratios() -> None:
    result = _run([lockstep_path(), "bench", "align", "--seconds", "2", "--streams", "1"])
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "misaligned: lockstep" in out and "tokens/s" in out and "machine:" in out
