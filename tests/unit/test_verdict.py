"""The demo's verdict says whether the SLA was met, and why not."""

from __future__ import annotations

import logging

import pytest

from lockstep.kafka.logfilter import summarised_warnings
from lockstep.observe.verdict import MachineLoad, sla_verdict

pytestmark = pytest.mark.unit
IDLE = MachineLoad(cores=2, load_before=0.2, load_after=0.4)
BUDGETS = {"e2e": 120.0, "transport": 12.0, "align": 12.0, "infer": 60.0}


def _verdict(**kw: object) -> object:
    args: dict[str, object] = dict(attainment=0.995, objective=0.99, answered=990, shed=0,
                                   late_tokens=3, published=4000,
                                   stage_p99_ms={"transport": 5.0, "align": 8.0, "infer": 30.0},
                                   stage_budget_ms=BUDGETS, machine=IDLE, ledger_closed=True)
    args.update(kw)
    return sla_verdict(**args)  # type: ignore[arg-type]


def test_a_run_within_its_objective_meets_the_sla() -> None:
    verdict = _verdict()
    assert verdict.met and not verdict.reasons  # type: ignore[attr-defined]
    assert verdict.line(120, "cabin").startswith("SLA met (cabin): 99.5 %")  # type: ignore[attr-defined]
    # a few shed windows within the objective (they count as misses in the attainment)
    shed = _verdict(attainment=0.9967, shed=2)
    assert shed.met  # type: ignore[attr-defined]
    assert "2 shed" in shed.line(120, "cabin")  # type: ignore[attr-defined]


def test_a_run_below_its_objective_says_which_stages_were_over_budget() -> None:
    verdict = _verdict(attainment=0.41, shed=162, stage_p99_ms={"transport": 100.0,
                                                                "align": 8.0, "infer": 30.0})
    assert not verdict.met  # type: ignore[attr-defined]
    line = verdict.line(120, "cabin")  # type: ignore[attr-defined]
    assert "SLA NOT met" in line and "41.0 % within budget" in line
    assert "162 windows shed" in line and "transport 100.0 ms (budget 12)" in line
    assert "align" not in line.split("stage P99 over budget:")[1]


def test_a_busy_machine_is_named_as_a_cause_only_when_the_sla_was_missed() -> None:
    busy = MachineLoad(cores=2, load_before=4.5, load_after=5.0)
    assert _verdict(machine=busy).met  # type: ignore[attr-defined]
    missed = _verdict(machine=busy, attainment=0.5)
    assert any("machine was busy: load 5.0 on 2 cores" in r
               for r in missed.reasons)  # type: ignore[attr-defined]


def test_an_open_ledger_or_many_late_tokens_fail_the_verdict() -> None:
    assert not _verdict(ledger_closed=False).met  # type: ignore[attr-defined]
    assert not _verdict(late_tokens=400).met  # type: ignore[attr-defined]


def test_warnings_are_summarised_once_at_the_default_level(
        caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("lockstep.test")
    handler = logging.StreamHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with summarised_warnings("warning") as held:
            for p99 in (10.0, 12.5, 30.1):
                log.warning("slo breach: queue p99 %.1f ms", p99)
            log.error("this one is printed")
        assert held.summary().startswith("3 warnings during the run")
        assert ("3 x slo breach: queue p99 10.0 ms (the first) (lockstep.test)"
                in held.summary())
        with summarised_warnings("info") as shown:
            log.warning("printed as it happens")
        assert shown.summary() == ""
    finally:
        root.removeHandler(handler)
