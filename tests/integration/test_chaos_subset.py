"""``lockstep chaos`` in CI: a role kill and a broker SIGKILL, smaller and shorter.

Each runs on Apache Kafka brokers of its own with the pipeline as separate ``lockstep run``
processes, and must meet the acceptance read back from the topics: nothing lost, no key
with two windows, every window answered, no role crash, fresh responses after the fault
(for the kill, within the session timeout + 5 s). The full set is ``lockstep chaos``
(docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lockstep.chaos.scenarios import Processes, select
from lockstep.chaos.trial import ChaosOptions, run_scenario
from lockstep.cli.chaos import verdict

pytestmark = pytest.mark.integration

#: One process per role and pool: the smallest pipeline of separate roles.
SMALL = (Processes("route"), Processes("worker:vl"), Processes("worker:text"))


def _options(tmp_path: Path) -> ChaosOptions:
    return ChaosOptions(streams=4, startup_s=90.0, drain_s=60.0, work_dir=tmp_path,
                        role_log_level="info")  # detailed logs for a failure's post-mortem


@pytest.mark.timeout(240)
async def test_a_sigkilled_align_process_loses_nothing_and_the_other_takes_over_in_time(
        tmp_path: Path) -> None:
    scenario = replace(select(["kill-align"])[0], processes=(Processes("align", 2), *SMALL),
                       seconds=16.0, fault_at_s=5.0)
    outcome = await run_scenario(scenario, _options(tmp_path))
    assert outcome.ok, f"{verdict(outcome.failures())}; logs in {outcome.logs}"
    assert outcome.published > 7_000
    assert outcome.recovery_limit_s == 11.0
    assert outcome.fault.startswith("SIGKILL align-")


@pytest.mark.timeout(240)
async def test_a_sigkilled_broker_restarted_on_its_log_dir_loses_nothing(
        tmp_path: Path) -> None:
    scenario = replace(select(["broker-sigkill"])[0], processes=(Processes("align"), *SMALL),
                       seconds=18.0, fault_at_s=5.0)
    outcome = await run_scenario(scenario, _options(tmp_path))
    assert outcome.ok, f"{verdict(outcome.failures())}; logs in {outcome.logs}"
    assert outcome.published > 7_000
    assert outcome.fault.startswith("SIGKILL broker node 1")
    assert outcome.recovery_s is not None
