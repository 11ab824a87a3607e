"""The pipeline bench's pure parts: capacity search, recovery, RSS, spans, rendering."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from prometheus_client import generate_latest

from lockstep.agents.children import parse_stat
from lockstep.bench.pipeline.demo_shape import marginal_cpu_ms
from lockstep.bench.pipeline.metrics import degraded, diff, figures
from lockstep.bench.pipeline.passthrough import sustained_rate
from lockstep.bench.pipeline.ramp import (
    Step,
    aggregate,
    capacity,
    held,
    next_streams,
    plan_next,
    recovery_seconds,
    rss_growth,
)
from lockstep.bench.pipeline.steps import split
from lockstep.bench.pipeline.table import render_pipeline
from lockstep.bench.stats import spread_json
from lockstep.bench.suite import Section, as_markdown, render_markdown
from lockstep.config.settings import SloSettings
from lockstep.observe.metrics import parse
from lockstep.telemetry.metrics import Telemetry

pytestmark = pytest.mark.unit


def _search(capacity_of: int, start: int = 1, limit: int = 64) -> list[int]:
    """The stream counts the ramp tries against a pipeline that holds ``capacity_of``."""
    history: list[Step] = []
    while (n := next_streams(history, start, limit)) is not None:
        history.append(Step(n, n <= capacity_of))
    return [s.streams for s in history]


def test_ramp_doubles_until_a_step_fails_then_bisects_to_one_stream() -> None:
    assert _search(5) == [1, 2, 4, 8, 6, 5]
    assert _search(2) == [1, 2, 4, 3]
    assert _search(1) == [1, 2]


def test_ramp_stops_at_its_limit_and_goes_down_when_the_first_step_fails() -> None:
    assert _search(100, limit=16) == [1, 2, 4, 8, 16]
    assert _search(3, start=8) == [8, 4, 2, 3]
    assert _search(0, start=4) == [4, 2, 1]


def test_ramp_settles_large_capacities_to_an_eighth() -> None:
    tried = _search(40)
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64] and len(tried) <= 10
    history = [Step(n, n <= 40) for n in tried]
    assert 36 <= capacity(history) <= 40


def test_capacity_is_the_most_streams_held_below_the_first_failure() -> None:
    noisy = [Step(1, True), Step(2, True), Step(4, False), Step(3, True), Step(8, True)]
    assert capacity(noisy) == 3  # a lucky 8 above a failed 4 does not count
    assert capacity([Step(1, False)]) == 0
    assert capacity([]) == 0


def test_a_step_holds_only_at_target_with_its_windows_answered() -> None:
    assert held(0.995, 1.0, 0.99, 0.95) == (True, "")
    ok, why = held(0.98, 0.5, 0.99, 0.95, producer_ok=False)
    assert not ok
    assert "98.00 % < 99 %" in why and "50.0 % of the frames" in why and "producers" in why
    assert held(None, None, 0.99, 0.95)[1] == "nothing was answered"


def test_recovery_counts_from_the_overload_end_to_a_held_run_of_seconds() -> None:
    timeline = [(1.0, 0.5, 10), (2.0, 0.4, 10), (3.0, 0.7, 10), (4.0, 0.995, 10),
                (5.0, 1.0, 10), (6.0, 0.999, 10), (7.0, 1.0, 10)]
    assert recovery_seconds(timeline, overload_end=2.0, target=0.99) == 1.0
    never = [(t, 0.5, 10.0) for t in (1.0, 2.0, 3.0, 4.0)]
    assert recovery_seconds(never, overload_end=2.0, target=0.99) is None
    fine = [(t, 1.0, 10.0) for t in (1.0, 2.0, 3.0)]
    assert recovery_seconds(fine, overload_end=1.5, target=0.99) == 0.0
    # Seconds without answers neither break nor make a recovery.
    quiet = [(1.0, 0.5, 5), (2.0, None, 0), (3.0, 1.0, 5), (4.0, 1.0, 5), (5.0, 1.0, 5)]
    assert recovery_seconds(quiet, overload_end=1.0, target=0.99) == 1.0


def test_rss_growth_compares_the_last_quarter_with_the_first_after_warm_up() -> None:
    assert rss_growth([100.0] * 20) == 0.0
    leaking = [50.0] + [100.0 + 5 * i for i in range(19)]
    growth = rss_growth(leaking)
    assert growth is not None and growth > 0.5
    assert rss_growth([1.0, 2.0]) is None


def test_producers_split_streams_evenly_under_the_bound() -> None:
    assert split(5, 16) == [5]
    assert split(33, 16) == [11, 11, 11]
    assert split(17, 16) == [9, 8]


def test_proc_stat_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    text = "42 (lockstep (run) x) S 7 42 42 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 3 0"
    assert parse_stat(text) == (7, pytest.approx(3.0))
    assert parse_stat("garbage") is None


def test_sustained_rate_leaves_out_the_start_and_the_tail() -> None:
    arrivals = [(0.0, 100), (10.0, 200), (11.0, 1200), (12.0, 2200), (30.0, 2500)]
    # 10 % of 2500 = 250 arrives at t=11 (1200), 90 % = 2250 at t=30 (2500).
    assert sustained_rate(arrivals, 2500) == pytest.approx(1300 / 19)
    assert sustained_rate([(1.0, 10)], 2500) is None


def _metrics(latencies_s: list[float], expired: int, degrade: bool = False) -> str:
    telemetry = Telemetry()
    for s in latencies_s:
        telemetry.e2e(s, route="full", slo_class="cabin", budget_s=0.12)
        telemetry.stage("align", s / 10, route="full", slo_class="cabin")
    for _ in range(expired):
        telemetry.expired(slo_class="cabin")
    telemetry.token("video", "window", len(latencies_s))
    if degrade:
        telemetry.slo_degraded.labels("cabin").set(1)
    return generate_latest(telemetry.registry).decode()


def test_span_attainment_counts_shed_requests_as_misses() -> None:
    before = {"worker": parse(_metrics([0.05] * 10, 0))}
    after = {"worker": parse(_metrics([0.05] * 10 + [0.05] * 97 + [0.3] * 1, 2))}
    span = figures(diff(after, before), SloSettings())
    assert span.answered == 98 and span.expired == 2
    assert span.attainment == pytest.approx(97 / 100)
    assert span.tokens["window"] == 98
    assert span.stages["align"]["count"] == 98 and span.e2e_p50_ms is not None


def test_degraded_classes_are_read_from_the_roles_gauges() -> None:
    assert degraded({"route": parse(_metrics([], 0, degrade=True))}) == ["cabin"]
    assert degraded({"route": parse(_metrics([], 0))}) == []


def _pipeline_report() -> dict[str, Any]:
    span = {"attainment": 0.995, "e2e_p99_ms": 80.0, "answered": 300, "expired": 0,
            "stages": {"align": {"count": 300, "p50_ms": 2.0, "p99_ms": 9.0,
                                 "budget_ms": 12.0}}}
    step = {"streams": 2, "tokens_per_s": 264.0, "coverage": 1.0, "held": True, "why": "",
            "span": span}
    failed = {**step, "streams": 4, "held": False, "why": "SLO attainment 90.00 % < 99 %"}
    machine = {"cores": 2, "usable_cores": 2, "cpu_model": "X", "python": "3.11",
               "load_before": 1.0, "load_during": {"mean": 2.0, "max": 3.0},
               "busy_share": 0.5, "steal_share": 0.0,
               "reference_units_per_cpu_s": {"median": 400.0, "min": 390.0, "max": 410.0}}
    return {
        "options": {"step_seconds": 30.0, "target": 0.99, "min_coverage": 0.95,
                    "overload_seconds": 20.0, "recover_seconds": 20.0},
        "roles": ["align", "route", "worker:vl"], "broker": "embedded tansu",
        "machine": machine, "warmup_s": 6.0, "idle_cpu_ms_per_s": {"align": 5.0},
        "steps": [step, failed], "capacity_streams": 2,
        "half_capacity": {**step, "streams": 1, "cpu_ms_per_token": {"align": 0.5}},
        "capacity_runs": {"runs": 3, "held": 2, "attainment": spread_json([0.995, 0.99, 0.98]),
                          "tokens_per_s": spread_json([264.0] * 3)},
        "passthrough": {"hops": 3, "repetitions": 3,
                        "records_per_s": spread_json([5000.0, 4800.0, 5200.0]),
                        "hop_cpu_ms_per_record": spread_json([0.2, 0.2, 0.2])},
        "passthrough_librdkafka": {"hops": 3, "repetitions": 3,
                                   "records_per_s": spread_json([30000.0, 29000.0, 31000.0]),
                                   "hop_cpu_ms_per_record": spread_json([0.02, 0.02, 0.02])},
        "ratios": {"tokens_per_s_at_capacity": 264.0,
                   "pipeline_vs_passthrough": spread_json([0.0528, 0.055, 0.0508]),
                   "pipeline_vs_librdkafka": spread_json([0.0088, 0.0091, 0.0085]),
                   "tokens_per_cpu_s_at_half": 2000.0,
                   "cpu_ms_per_token_roles_at_half": 0.5},
        "overload": {"streams": 4, "then_streams": 1, "overload_end_s": 22.0,
                     "attainment_during": 0.93, "answered_during": 2000, "expired_during": 5,
                     "late_tokens_during": 100, "recovery_s": 2.0},
        "soak": {"streams": 1, "seconds": 60.0, "span": span,
                 "rss_growth": {"align": 0.01, "route": 0.2},
                 "rss_flat": {"align": True, "route": False}},
    }


def test_pipeline_text_names_capacity_stages_limit_overload_and_soak() -> None:
    text = render_pipeline(_pipeline_report())
    for part in ("capacity: 2 streams", "held in 2 of 3 runs", "at half capacity",
                 "raw consume->produce over 3 hops (aiokafka", "5,000 (4,800-5,200) records/s",
                 "0.05x (0.05-0.06)", "raw consume->produce over 3 hops (librdkafka",
                 "30,000 (29,000-31,000) records/s", "pipeline at capacity / raw librdkafka",
                 "tokens per CPU-second at half capacity (every process measured): 2,000",
                 "back at target after 2 s", "route 20.0 % NOT FLAT",
                 "machine:", "no: SLO attainment 90.00 % < 99 %"):
        assert part in text, part


def test_pipeline_text_warns_that_the_embedded_broker_slows_only_on_it() -> None:
    report = _pipeline_report()
    assert "note: the embedded broker slows as its logs grow" in render_pipeline(report)
    report["broker"] = "kafka"
    assert "embedded broker" not in render_pipeline(report)


def test_pipeline_text_names_the_unmeasured_warm_up_at_load() -> None:
    report = _pipeline_report()
    assert "unmeasured" not in render_pipeline(report)  # an older report: none ran
    report["warmup_load"] = {"streams": 4, "seconds": 15.0, "attainment": 0.9712,
                             "e2e_p99_ms": 140.0}
    assert "then 4 streams for 15 s unmeasured (97.1 %)" in render_pipeline(report)
    report["warmup_load"]["attainment"] = None
    assert "unmeasured (nothing answered)" in render_pipeline(report)


def test_pipeline_text_says_so_when_not_even_one_stream_held() -> None:
    report = _pipeline_report()
    report["capacity_streams"] = 0
    text = render_pipeline(report)
    assert "capacity: 0 streams (not even the smallest step held" in text
    assert "pipeline at capacity / raw librdkafka: - (no capacity)" in text


def test_benchmarks_markdown_carries_each_command_and_machine_line() -> None:
    report = _pipeline_report()
    section = Section("bench pipeline", "lockstep bench pipeline --overload", report,
                      render_pipeline)
    when = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC)
    text = render_markdown([section], "lockstep bench all --markdown", now=when)
    assert text.startswith("# Benchmarks\n")
    assert "`lockstep bench all --markdown` on 2026-01-02 03:04 UTC" in text
    assert "## bench pipeline" in text and "Command: `lockstep bench pipeline --overload`" in text
    assert "machine: 2 cores (2 usable), X" in text and text.count("machine:") == 1
    assert "| streams | tokens/s |" in text


def test_markdown_keeps_table_rows_together_and_splits_other_lines() -> None:
    text = as_markdown("title\n  indented line\n\n| a |\n|---|\n| 1 |\nafter")
    assert text == "title\n\nindented line\n\n| a |\n|---|\n| 1 |\n\nafter"


def test_demo_shape_cpu_slope_leaves_the_start_up_out() -> None:
    steps = [{"tokens_published": 1000, "cpu_seconds": 5.0 + 1.0},
             {"tokens_published": 3000, "cpu_seconds": 5.0 + 3.0}]
    assert marginal_cpu_ms(steps) == pytest.approx(1.0)
    assert marginal_cpu_ms(steps[:1]) is None


def test_demo_shape_text_names_its_capacity_and_why_a_step_failed() -> None:
    machine = _pipeline_report()["machine"]
    steps = [{"streams": 1, "tokens_per_s": 132.0, "attainment": 0.995, "coverage": 1.0,
              "cpu_ms_per_token": 3.0, "held": True, "why": ""},
             {"streams": 2, "tokens_per_s": 264.0, "attainment": 0.9, "coverage": 1.0,
              "cpu_ms_per_token": 2.0, "held": False, "why": "SLO attainment 90.00 % < 99 %"}]
    text = render_pipeline({"shape": "demo", "options": {"step_seconds": 30.0},
                            "machine": machine, "steps": steps, "capacity_streams": 1,
                            "marginal_cpu_ms_per_token": 1.4})
    assert "capacity: 1 streams; marginal CPU 1.4 ms per token" in text
    assert "no: SLO attainment 90.00 % < 99 %" in text


def _confirmed_search(outcomes: dict[int, list[bool]], confirm: int = 3) -> list[int]:
    """Stream counts tried when each count's successive runs hold as in ``outcomes``."""
    history: list[Step] = []
    seen: dict[int, int] = {}
    while (n := plan_next(history, 1, 64, confirm)) is not None:
        i = seen.get(n, 0)
        seen[n] = i + 1
        history.append(Step(n, outcomes[n][i]))
    return [s.streams for s in history]


def test_the_capacity_and_the_failure_above_it_run_again_until_confirmed() -> None:
    steady = {n: [n <= 3] * 3 for n in range(1, 9)}
    assert _confirmed_search(steady) == [1, 2, 4, 3, 3, 3, 4, 4]
    history = [Step(n, n <= 3) for n in _confirmed_search(steady)]
    assert capacity(aggregate(history)) == 3


def test_an_unlucky_failure_is_overturned_and_the_search_goes_on() -> None:
    # One stream failed once on a busy machine, then held twice: the capacity is not 0.
    assert _confirmed_search({1: [False, True, True], 2: [False] * 3}) == [1, 1, 1, 2, 2, 2]
    unlucky = {1: [True] * 3, 2: [True] * 3, 3: [True] * 3, 4: [False, True, True],
               5: [False] * 3, 6: [False] * 3, 8: [False] * 3}
    assert _confirmed_search(unlucky) == [1, 2, 4, 3, 3, 3, 4, 4, 8, 6, 5, 5, 5]


def test_a_lucky_step_at_the_capacity_is_overturned_by_its_repeats() -> None:
    # 3 held once by luck, then failed twice: the capacity falls back to 2, confirmed.
    lucky = {1: [True] * 3, 2: [True] * 3, 3: [True, False, False], 4: [False] * 3}
    tried = _confirmed_search(lucky)
    assert tried == [1, 2, 4, 3, 3, 3, 2, 2]
    history = []
    seen: dict[int, int] = {}
    for n in tried:
        seen[n] = seen.get(n, 0) + 1
        history.append(Step(n, lucky[n][seen[n] - 1]))
    assert capacity(aggregate(history)) == 2


def test_a_tied_count_is_run_again_before_the_search_goes_on() -> None:
    history = [Step(1, True), Step(2, True), Step(4, False), Step(3, True), Step(3, False)]
    assert plan_next(history, 1, 64, confirm=3) == 3
    # Without confirmation a tie counts as not held.
    assert plan_next(history, 1, 64, confirm=1) is None
    assert capacity(aggregate(history)) == 2
