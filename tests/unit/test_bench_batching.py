"""``bench batching`` on the deterministic simulated engine and a virtual clock.

The rankings are asserted as ratios and differences, never as times: on a virtual clock
the simulated engine's batches take exactly their modelled latency, whatever the machine.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from lockstep.bench.batching import (
    BatchingOptions,
    rotation,
    run_batching,
    verdict,
)
from lockstep.bench.batching_table import render_batching
from lockstep.bench.trace import TraceSpec, make_trace
from lockstep.config.worker import WorkerSettings

pytestmark = pytest.mark.unit

OPTIONS = BatchingOptions(trace=TraceSpec(seconds=6.0), repeats=3, calibrations=2)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return run_batching("simulated", WorkerSettings(), OPTIONS, virtual_clock=True)


def _median(report: dict[str, Any], metric: str, policy: str) -> float:
    return float(report[metric][policy]["median"])


def test_lockstep_meets_more_deadlines_than_fifo_and_batch1_in_every_repetition(
        report: dict[str, Any]) -> None:
    for rep in report["repetitions"]:
        att = {p: r["slo_attainment"] for p, r in rep["policies"].items()}
        assert att["lockstep"] > att["fifo"] + 0.05 > att["batch1"] + 0.5
    assert report["ratios"]["wins_vs_fifo"] == 3
    assert report["ratios"]["attainment_minus_fifo"]["min"] > 0.05


def test_lockstep_serves_the_urgent_class_where_arrival_order_starves_it(
        report: dict[str, Any]) -> None:
    assert _median(report, "slo_attainment_high", "lockstep") >= 0.99
    assert report["ratios"]["attainment_high_minus_fifo"]["median"] > 0.2


def test_lockstep_and_fifo_keep_up_with_the_trace_batch1_does_not(
        report: dict[str, Any]) -> None:
    ratio = report["ratios"]["items_per_s_vs_fifo"]
    assert 0.95 <= ratio["min"] <= ratio["max"] <= 1.05
    assert _median(report, "items_per_s", "batch1") < 0.5 * _median(
        report, "items_per_s", "fifo")
    assert report["unanswered"]["lockstep"]["max"] == 0 == report["unanswered"]["fifo"]["max"]


def test_the_trace_meets_the_documented_target_on_a_quiet_engine(
        report: dict[str, Any]) -> None:
    assert report["calibration"]["stable"]
    assert report["verdict"]["ok"] is True, report["verdict"]["text"]
    assert "target" in report["verdict"]["text"] and "met" in report["verdict"]["text"]


def test_policies_run_interleaved_in_rotating_order(report: dict[str, Any]) -> None:
    orders = [rep["order"] for rep in report["repetitions"]]
    assert orders == [rotation(("lockstep", "fifo", "batch1"), r) for r in range(3)]
    assert [o[0] for o in orders] == ["lockstep", "fifo", "batch1"]
    assert report["seeds"] == [11, 12, 13]


def test_every_figure_is_a_median_with_its_spread(report: dict[str, Any]) -> None:
    for metric in ("slo_attainment", "items_per_s", "p99_ms", "expired"):
        for policy in ("lockstep", "fifo", "batch1"):
            s = report[metric][policy]
            assert s["n"] == 3 and s["min"] <= s["median"] <= s["max"]
    cal = report["calibration"]
    assert cal["runs"] == 3 and cal["capacity_items_per_s"]["n"] == 3
    assert report["machine"]["cores"] >= 1 and report["virtual_clock"] is True


def test_the_same_options_give_the_same_scores_on_a_virtual_clock(
        report: dict[str, Any]) -> None:
    again = run_batching("simulated", WorkerSettings(), OPTIONS, virtual_clock=True)
    for metric in ("slo_attainment", "expired", "p99_ms"):
        assert again[metric] == report[metric]


def test_an_unstable_calibration_gives_no_verdict(report: dict[str, Any]) -> None:
    shaky = copy.deepcopy(report)
    shaky["calibration"].update(stable=False, capacity_items_per_s={
        "median": 150.0, "min": 113.0, "max": 167.0, "iqr": [120.0, 160.0], "n": 4,
        "values": [113.0, 150.0, 167.0, 140.0]})
    result = verdict(shaky)
    assert result["ok"] is None and "unstable" in result["text"] and "113-167" in result["text"]


def test_the_verdict_names_what_missed_the_target(report: dict[str, Any]) -> None:
    weak = copy.deepcopy(report)
    weak["slo_attainment"]["lockstep"]["median"] = 0.95
    weak["slo_attainment"]["fifo"]["median"] = 0.93
    result = verdict(weak)
    assert result["ok"] is False
    assert "lockstep 95.00 % < 99 %" in result["text"]
    assert "fifo 93.00 % >= 90 %" in result["text"]


def test_a_median_just_under_the_target_is_not_rounded_onto_it(report: dict[str, Any]) -> None:
    close = copy.deepcopy(report)
    close["slo_attainment"]["lockstep"]["median"] = 0.98962
    assert "lockstep 98.96 % < 99 %" in verdict(close)["text"]


def test_the_verdict_notes_a_machine_that_held_the_replay_up(report: dict[str, Any]) -> None:
    assert "held the replay up" not in report["verdict"]["text"]  # a virtual clock is never late
    held_up = copy.deepcopy(report)
    held_up["lateness_p99_ms"]["fifo"]["median"] = 12.0
    held_up["lateness_max_ms"]["fifo"]["max"] = 101.5
    text = verdict(held_up)["text"]
    assert "arrivals admitted up to 102 ms late, P99 12 ms" in text


def test_the_table_shows_medians_ranges_calibration_machine_and_verdict(
        report: dict[str, Any]) -> None:
    text = render_batching(report)
    for part in ("SLO attainment", "calibration: 3 runs", "machine:", "verdict:",
                 "lockstep vs fifo", "replay late p99"):
        assert part in text
    assert "| SLO attainment |" in render_batching(report, markdown=True)


def test_trace_bursts_come_regularly_on_top_of_poisson_arrivals() -> None:
    spec = TraceSpec(seconds=20.0, load=0.5, burst_every_s=1.0, burst_size=2.0, seed=4)
    trace = make_trace(spec, capacity_per_s=200.0, batch_latency_us=50_000, max_batch=8)
    at = np.array([a.at_us for a in trace])
    assert (np.diff(at) >= 0).all() and at[-1] < 20e6
    # Poisson at 100/s for 20 s plus 16 requests per burst, about one burst per second.
    assert 2000 + 14 * 16 <= len(trace) <= 2000 + 26 * 16 + 300
    high = [a for a in trace if a.priority > 0.5]
    assert 0.25 <= len(high) / len(trace) <= 0.35
    assert all(75_000 <= a.deadline_us <= 125_000 for a in high)
    assert make_trace(spec, 200.0, 50_000, 8) == trace
