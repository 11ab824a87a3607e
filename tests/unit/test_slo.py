from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.config.settings import SloSettings, load_settings
from lockstep.errors import ConfigError
from lockstep.telemetry.slo import BREACH, RECOVERED, Degradation, Samples, SloMonitor, Transition

pytestmark = pytest.mark.unit

S = 1_000_000  # µs


def _slo(**breach: object) -> SloSettings:
    """One-second windows and evaluations, three to breach; no breach at once, no hold."""
    return SloSettings(breach={"window_ms": 1000, "evaluate_ms": 1000, "min_samples": 5,
                               "breach_after": 3, "breach_at_once_ratio": 100.0,
                               "hold_ms": 0, **breach})


def _feed(monitor: SloMonitor, stage: str, ms: float, at_us: int, n: int = 20,
          slo_class: str = "cabin") -> None:
    for i in range(n):
        monitor.observe(stage, slo_class, ms / 1000, at_us + i * (900_000 // n))


def _run(monitor: SloMonitor, stage: str, ms_per_second: list[float],
         start_s: int = 0) -> list[list[Transition]]:
    """One second of samples at each latency, then an evaluation at its end."""
    out = []
    for i, ms in enumerate(ms_per_second):
        t = (start_s + i) * S
        _feed(monitor, stage, ms, t)
        out.append(monitor.evaluate(t + S))
    return out


def test_three_consecutive_windows_over_budget_raise_one_breach() -> None:
    monitor = SloMonitor(_slo())
    results = _run(monitor, "route", [20, 20, 20, 20, 20])
    assert [len(r) for r in results] == [0, 0, 1, 0, 0]
    [breach] = results[2]
    assert (breach.kind, breach.stage, breach.slo_class) == (BREACH, "route", "cabin")
    assert breach.p99_ms == pytest.approx(20.0) and breach.budget_ms == 12.0
    assert breach.consecutive == 3 and not breach.renewed
    assert monitor.breached() == {("route", "cabin")}


def test_a_window_under_budget_resets_the_count_of_breaches() -> None:
    monitor = SloMonitor(_slo())
    assert not any(_run(monitor, "route", [20, 20, 5, 20, 20]))
    assert monitor.breached() == set()


def test_a_breach_clears_after_three_windows_under_the_recovery_ratio() -> None:
    monitor = SloMonitor(_slo())
    _run(monitor, "e2e", [200, 200, 200])
    # 110 ms is under the 120 ms budget but over 0.8 x 120: the hysteresis band holds.
    held = _run(monitor, "e2e", [110, 110, 110, 110], start_s=3)
    assert not any(held) and monitor.breached() == {("e2e", "cabin")}
    cleared = _run(monitor, "e2e", [50, 50, 50], start_s=7)
    assert [len(r) for r in cleared] == [0, 0, 1]
    [recovered] = cleared[2]
    assert recovered.kind == RECOVERED and recovered.degrade and recovered.consecutive == 3
    assert monitor.breached() == set()


def test_most_of_the_latest_samples_over_budget_raise_the_breach_at_once() -> None:
    monitor = SloMonitor(_slo(breach_at_once_ratio=1.0, window_ms=5000))
    [[breach]] = _run(monitor, "e2e", [200])
    assert breach.kind == BREACH and breach.consecutive == 1


def test_a_slow_tail_waits_for_consecutive_evaluations() -> None:
    monitor = SloMonitor(_slo(breach_at_once_ratio=1.0, window_ms=5000))
    results = []
    for second in range(3):
        # A quarter of each second's windows shed (counted as 10 s): the P99 is far over
        # budget, the median is not.
        _feed(monitor, "e2e", 10_000, second * S, n=5)
        _feed(monitor, "e2e", 50, second * S, n=15)
        results.append(monitor.evaluate(second * S + S))
    assert [len(r) for r in results] == [0, 0, 1]


def test_only_samples_since_the_last_evaluation_count_for_the_median() -> None:
    monitor = SloMonitor(_slo(breach_at_once_ratio=1.0, window_ms=10_000))
    # Four quiet seconds, then one where every window misses: the window's median is
    # still quiet, the latest samples' is not.
    results = _run(monitor, "e2e", [50, 50, 50, 50, 300])
    assert [len(r) for r in results] == [0, 0, 0, 0, 1]


def test_a_breach_lasts_its_hold_before_it_clears() -> None:
    monitor = SloMonitor(_slo(hold_ms=6000, hold_max_ms=30_000))
    _run(monitor, "e2e", [200, 200, 200])  # raised at 3 s
    results = _run(monitor, "e2e", [50] * 7, start_s=3)
    # Three evaluations under the recovery ratio by 6 s, but the hold runs to 9 s.
    assert [len(r) for r in results] == [0, 0, 0, 0, 0, 1, 0]
    assert results[5][0].kind == RECOVERED


def test_a_breach_that_comes_back_within_the_hold_holds_twice_as_long_up_to_the_most() -> None:
    monitor = SloMonitor(_slo(hold_ms=4000, hold_max_ms=10_000))
    over, calm = 200.0, 50.0
    seconds = ([over] * 3 + [calm] * 4 + [over] * 3 + [calm] * 8 + [over] * 3 + [calm] * 22
               + [over] * 3 + [calm] * 5)
    results = _run(monitor, "e2e", seconds)
    at = [(i + 1, t.kind) for i, r in enumerate(results) for t in r]
    assert at == [
        (3, BREACH), (7, RECOVERED),  # the base hold: 4 s
        (10, BREACH), (18, RECOVERED),  # back 3 s after it cleared: 8 s
        (21, BREACH), (31, RECOVERED),  # back again: 16 s, at most 10
        (46, BREACH), (50, RECOVERED),  # back after 15 s, longer than its hold: 4 s again
    ]


def test_only_the_degrading_stages_switch_their_class_to_degraded_mode() -> None:
    monitor = SloMonitor(_slo(degrade_on=("e2e", "infer")))
    for t in range(3):
        _feed(monitor, "align", 30, t * S)
        _feed(monitor, "infer", 90, t * S)
        transitions = monitor.evaluate(t * S + S)
    [align, infer] = sorted(transitions, key=lambda t: t.stage)
    assert (align.stage, align.degrade) == ("align", False)
    assert (infer.stage, infer.degrade, infer.budget_ms) == ("infer", True, 60.0)


def test_too_few_samples_hold_the_verdict_and_an_empty_window_counts_as_recovered() -> None:
    monitor = SloMonitor(_slo())
    for t in range(3):
        _feed(monitor, "route", 50, t * S, n=2)
        assert monitor.evaluate(t * S + S) == []
    _run(monitor, "route", [50, 50, 50], start_s=3)
    assert monitor.breached() == {("route", "cabin")}
    quiet = [monitor.evaluate((7 + i) * S) for i in range(3)]
    assert [t.kind for r in quiet for t in r] == [RECOVERED]


def test_observations_without_a_class_count_against_the_default_class() -> None:
    monitor = SloMonitor(_slo())
    for t in range(3):
        _feed(monitor, "infer", 500, t * S, slo_class="")
        result = monitor.evaluate(t * S + S)
    assert [(r.stage, r.slo_class) for r in result] == [("infer", "cabin")]


def test_evaluations_happen_at_most_once_per_interval() -> None:
    monitor = SloMonitor(_slo())
    _feed(monitor, "route", 50, 0)
    assert monitor.due(0) and monitor.evaluate(S) == [] and not monitor.due(S + 10)
    assert monitor.evaluate(S + 10) == [] and monitor.due(2 * S)


def test_a_lasting_breach_is_announced_again_within_the_ttl() -> None:
    monitor = SloMonitor(_slo(ttl_ms=3000))
    _run(monitor, "e2e", [300, 300, 300])
    renewed = [t for r in _run(monitor, "e2e", [300] * 4, start_s=3) for t in r]
    assert renewed and all(t.kind == BREACH and t.renewed for t in renewed)
    assert len(renewed) == 4  # one per ttl / 3 = 1 s


def test_a_class_stays_degraded_while_any_process_reports_a_degrading_breach() -> None:
    d = Degradation(ttl_ms=10_000)
    d.apply(BREACH, "worker-1", "e2e", "cabin", True, 0)
    d.apply(BREACH, "worker-2", "e2e", "cabin", True, 0)
    d.apply(BREACH, "align-1", "align", "ar", False, 0)  # reported, not degrading
    assert d.classes(S) == {"cabin"}
    d.apply(RECOVERED, "worker-1", "e2e", "cabin", True, S)
    assert d.degraded("cabin", S)
    d.apply(RECOVERED, "worker-2", "e2e", "cabin", True, S)
    assert not d.degraded("cabin", S)


def test_a_breach_not_announced_again_expires() -> None:
    d = Degradation(ttl_ms=1000)
    d.apply(BREACH, "worker-1", "e2e", "cabin", True, 0)
    assert d.degraded("cabin", S - 1)
    assert not d.degraded("cabin", S + 1)


def test_the_budget_tree_gives_inference_what_the_other_stages_leave() -> None:
    slo = SloSettings()
    assert slo.budget_tree("cabin") == {"e2e": 120.0, "publish": 12.0, "transport": 12.0,
                                        "align": 12.0, "route": 12.0, "queue": 12.0,
                                        "infer": 60.0, "respond": 12.0}
    assert slo.stage_budget_ms("infer", "surgical") == 20.0
    assert slo.stage_budget_ms("infer", "ar") == 140.0
    custom = SloSettings(stages_ms={"align": 30.0, "infer": 25.0})
    assert custom.stage_budget_ms("align", "cabin") == 30.0
    assert custom.stage_budget_ms("infer", "cabin") == 25.0


def test_stage_budgets_that_exceed_a_class_budget_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"surgical.*exceed"):
        load_settings(slo={"stage_p99_ms": 16.0})  # 5 x 16 = 80: nothing left for surgical


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(
    st.integers(0, 50), st.lists(st.floats(0, 1, allow_nan=False), max_size=15), st.booleans()),
    max_size=30), st.integers(0, 60))
def test_the_sample_ring_holds_what_a_bounded_queue_of_the_latest_samples_holds(
        capacity: int, batches: list[tuple[int, list[float], bool]], cut: int) -> None:
    ring, model = Samples(capacity), deque[tuple[int, float]](maxlen=capacity)
    for at_us, seconds, one_by_one in batches:
        if one_by_one:
            for v in seconds:
                ring.append(at_us, v)
        else:
            ring.extend(at_us, iter(seconds))
        model.extend((at_us, v) for v in seconds)
        assert len(ring) == len(model)
        if at_us % 3 == 0:  # read now and then: samples move from the lists to the arrays
            assert sorted(ring.after(cut)) == sorted(v for t, v in model if t > cut)
    assert ring.values() == [v for _, v in model]
    assert sorted(ring.after(cut)) == sorted(v for t, v in model if t > cut)


def test_a_stopping_process_withdraws_its_breaches_at_once() -> None:
    monitor = SloMonitor(_slo(degrade_on=["e2e"]))
    for i in range(3):  # three windows over budget: both breach
        _feed(monitor, "e2e", 500, i * S)
        _feed(monitor, "route", 20, i * S)
        monitor.evaluate((i + 1) * S)
    assert monitor.breached() == {("e2e", "cabin"), ("route", "cabin")}
    withdrawn = monitor.withdraw(7 * S)
    assert {(t.kind, t.stage, t.degrade) for t in withdrawn} == {
        (RECOVERED, "e2e", True), (RECOVERED, "route", False)}
    assert not monitor.breached()
    assert monitor.withdraw(8 * S) == []  # nothing left to withdraw
