"""`lockstep bench align` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.clirun import lockstep_path, run

pytestmark = pytest.mark.e2e

ARGS = ("align", "--json", "--seconds", "3", "--streams", "2")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return run(argv, timeout=300)


def _check(report: dict[str, object]) -> None:
    assert report["streams"] == 2 and report["seconds"] == 3.0 and report["seed"] == 7
    for key in ("misaligned_rate", "partial_rate", "windows", "tokens_per_s"):
        sides = report[key]
        assert isinstance(sides, dict) and set(sides) == {"lockstep", "baseline"}
    rates = report["misaligned_rate"]
    assert isinstance(rates, dict) and all(0.0 <= r <= 1.0 for r in rates.values())
    errors = report["alignment_error_ms"]
    assert isinstance(errors, dict)
    for side in ("lockstep", "baseline"):
        assert errors[side]["p50"] <= errors[side]["p99"]
    faults = report["faults"]
    assert isinstance(faults, dict) and faults["drop_rate"] == 0.15


def test_bench_group_runs_align_as_a_program() -> None:
    code = "from lockstep.bench import bench; bench(prog_name='lockstep bench')"
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
    assert "misaligned: lockstep" in result.stdout and "tokens/s" in result.stdout
