"""What a chaos scenario measured: recovery times, verdicts, and the table people read."""

from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner

from lockstep.chaos.outcome import Outcome, Rss, answer_wait_s, recovery_s
from lockstep.cli.base import LockstepGroup
from lockstep.cli.chaos import as_json, chaos, render_table, verdict
from lockstep.observe.ledger import SeenWindow

pytestmark = pytest.mark.unit

FAULT_US = 1_800_000_000_000_000
#: The command under the CLI's error handling (as ``lockstep chaos``).
cli = LockstepGroup(commands={"chaos": chaos})


def _window(sid: str, seq: int, start_us: int) -> SeenWindow:
    return SeenWindow(sid, seq, start_us, start_us + 33_000, 0, (), b"")


def test_recovery_is_the_slowest_stream_s_first_output_of_data_captured_after_the_fault() -> None:
    windows = {("a", 1): _window("a", 1, FAULT_US - 33_000),  # before the fault
               ("a", 2): _window("a", 2, FAULT_US + 10_000),
               ("b", 1): _window("b", 1, FAULT_US + 5_000)}
    produced_ms = {("a", 1): FAULT_US // 1000 + 100,  # answered after it, but old data
                   ("a", 2): FAULT_US // 1000 + 7_000,
                   ("b", 1): FAULT_US // 1000 + 300}
    assert recovery_s(FAULT_US, ["a", "b"], windows, produced_ms) == (7.0, [])


def test_a_stream_with_no_fresh_output_has_not_recovered() -> None:
    windows = {("a", 1): _window("a", 1, FAULT_US + 1)}
    seconds, missing = recovery_s(FAULT_US, ["a", "b"], windows, {("a", 1): FAULT_US // 1000})
    assert seconds is None and missing == ["b"]


def test_the_answer_wait_is_the_longest_a_window_of_fresh_data_waited_for_its_answer() -> None:
    windows = {("a", 1): _window("a", 1, FAULT_US - 1),  # old data: not counted
               ("a", 2): _window("a", 2, FAULT_US + 1),
               ("b", 1): _window("b", 1, FAULT_US + 1)}
    at = FAULT_US // 1000
    window_at = {("a", 1): at, ("a", 2): at + 100, ("b", 1): at + 100}
    response_at = {("a", 1): at + 60_000, ("a", 2): at + 6_100, ("b", 1): at + 150}
    assert answer_wait_s(FAULT_US, windows, window_at, response_at) == 6.0
    assert answer_wait_s(FAULT_US, windows, window_at, {}) is None


def test_a_clean_outcome_meets_the_acceptance() -> None:
    outcome = Outcome("kill-align", published=100, fault_us=FAULT_US, recovery_s=7.2,
                      recovery_limit_s=11.0)
    assert outcome.ok and verdict(outcome.failures()) == "met"


@pytest.mark.parametrize(("change", "phrase"), [
    ({"lost": 12, "lost_examples": ["s/video#3"], "drained": True},
     "12 tokens lost (in no window, late record or dead letter, e.g. s/video#3)"),
    ({"lost": 2}, "2 tokens lost (in no window, late record or dead letter) when the drain "
                  "ended, the ledger still open"),
    ({"conflicts": 2}, "2 keys with two different windows or responses"),
    ({"settled_twice": 1}, "1 tokens in two windows or a window and late"),
    ({"unanswered": 4}, "4 windows unanswered"),
    ({"crashes": ["align-1 exited 1"]}, "1 role crashes (align-1 exited 1)"),
    ({"recovery_s": 12.5}, "recovery 12.5 s > 11.0 s (session timeout + 5 s)"),
    ({"recovery_s": None, "not_recovered": ["cam-2"]}, "no fresh response after the fault "
                                                       "from cam-2"),
    ({"hostile_missed": Counter(spoofed_seq=3)}, "3 hostile records neither dead-lettered"),
    ({"rss": {"align-1": Rss(90_000, 280_000, 200_000)}}, "align-1 RSS 195 MB after eviction"),
    ({"secret_seen_in": ["route-1"]}, "a secret appeared in the output of route-1"),
    ({"not_delivered": 5}, "5 tokens never acknowledged"),
    ({"published": 0}, "nothing was published"),
])
def test_each_missed_criterion_is_named_in_the_verdict(change: dict[str, object],
                                                      phrase: str) -> None:
    outcome = Outcome("s", published=100, fault_us=FAULT_US, recovery_s=7.0,
                      recovery_limit_s=11.0)
    for name, value in change.items():
        setattr(outcome, name, value)
    assert not outcome.ok
    assert phrase in verdict(outcome.failures())


def test_rss_within_a_fifth_of_its_start_counts_as_returned() -> None:
    assert Rss(100_000, 400_000, 120_000).returned
    assert not Rss(100_000, 400_000, 121_000).returned


def test_a_scenario_that_did_not_run_says_why_and_nothing_else() -> None:
    outcome = Outcome("flood", error="Kafka broker exited with code 1")
    assert outcome.failures() == ["did not run: Kafka broker exited with code 1"]


def test_the_table_has_a_row_per_scenario_and_a_closing_line_naming_the_misses() -> None:
    good = Outcome("kill-align", published=15_856, fault_us=FAULT_US, recovery_s=6.71,
                   recovery_limit_s=11.0)
    bad = Outcome("flood", published=168_496, fault_us=FAULT_US, recovery_s=0.2, logs="/tmp/x",
                  rss={"align-1": Rss(90_000, 280_000, 260_000)})
    lines = render_table([good, bad]).splitlines()
    assert lines[0].split() == ["scenario", "published", "lost", "conflicts", "unanswered",
                                "crashes", "recovery", "s", "verdict"]
    assert lines[1].split()[:7] == ["kill-align", "15,856", "0", "0", "0", "0", "6.7"]
    assert lines[1].endswith("met")
    assert "NOT MET: align-1 RSS 254 MB after eviction" in lines[2]
    assert lines[3] == "1 of 2 scenarios missed the acceptance: flood; logs in /tmp/x"


def test_json_output_keeps_counters_as_mappings_and_says_the_verdict() -> None:
    outcome = Outcome("hostile", published=10, hostile_late=Counter(spoofed_seq=3),
                      rss={"align-1": Rss(1, 2, 1)})
    data = as_json(outcome)
    assert data["hostile_late"] == {"spoofed_seq": 3}
    assert data["rss"] == {"align-1": {"start_kb": 1, "peak_kb": 2, "after_kb": 1}}
    assert data["ok"] is True and data["failures"] == []


def test_chaos_lists_its_scenarios_without_a_broker() -> None:
    result = CliRunner().invoke(cli, ["chaos", "--list"])
    assert result.exit_code == 0
    assert result.output.splitlines()[0].startswith("kill-align")
    assert len(result.output.splitlines()) == 8


def test_chaos_with_an_unknown_scenario_says_so_in_one_line_and_exits_2() -> None:
    result = CliRunner().invoke(cli, ["chaos", "kill-everything"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "lockstep: error: unknown chaos scenario kill-everything; choose from kill-align, "
        "kill-route, kill-worker, broker-sigterm, broker-sigkill, cluster-broker-kill, "
        "hostile, flood"]


def test_chaos_without_the_kafka_jars_says_how_to_give_them_in_one_line() -> None:
    result = CliRunner().invoke(cli, ["chaos", "kill-align", "--kafka-classpath",
                                      "/nonexistent/kafka.jar"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "lockstep: error: the Kafka classpath names /nonexistent/kafka.jar, which does not "
        "exist"]


def test_chaos_without_a_pom_names_the_classpath_option() -> None:
    result = CliRunner().invoke(cli, ["chaos", "--kafka-pom", "/nonexistent/pom.xml"])
    assert result.exit_code == 1
    assert "--kafka-classpath CP or LOCKSTEP_KAFKA_CLASSPATH" in result.output
