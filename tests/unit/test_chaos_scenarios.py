"""The chaos scenarios as data, and the small pure helpers of the runner."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lockstep.agents.children import rss_bytes
from lockstep.chaos.scenarios import (
    SCENARIOS,
    BrokerDown,
    Flood,
    KillRole,
    Processes,
    Scenario,
    select,
)
from lockstep.chaos.trial import ChaosOptions, expected_members, live_stream_ids, role_env
from lockstep.config.settings import load_settings
from lockstep.errors import ConfigError
from lockstep.kafka.apache.config import NodeAddress, server_properties
from lockstep.kafka.readback import partition_of

pytestmark = pytest.mark.unit


def test_the_issue_s_eight_scenarios_are_listed_once_each() -> None:
    names = [s.name for s in SCENARIOS]
    assert names == ["kill-align", "kill-route", "kill-worker", "broker-sigterm",
                     "broker-sigkill", "cluster-broker-kill", "hostile", "flood"]


def test_no_scenario_name_selects_them_all_in_order() -> None:
    assert select([]) == list(SCENARIOS)


def test_named_scenarios_are_selected_in_the_order_given_without_repeats() -> None:
    chosen = select(["flood", "kill-align", "flood"])
    assert [s.name for s in chosen] == ["flood", "kill-align"]


def test_an_unknown_scenario_is_a_config_error_that_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown chaos scenario nope; choose from kill-align"):
        select(["kill-align", "nope"])


def test_scaling_a_scenario_keeps_the_fault_at_the_same_share_of_the_run() -> None:
    scenario = Scenario("s", "", KillRole("align"), seconds=40.0, fault_at_s=10.0)
    assert scenario.scaled(20.0).fault_at_s == 5.0
    assert scenario.scaled(None) is scenario


def test_the_role_kills_strike_the_pipeline_the_issue_ran() -> None:
    for scenario in SCENARIOS[:3]:
        assert isinstance(scenario.fault, KillRole)
        assert scenario.process_count == 6
        assert scenario.fault_at_s < scenario.seconds - 15, "fresh data must flow after it"


def test_only_the_cluster_scenario_runs_three_brokers_and_kills_a_node_of_it() -> None:
    cluster = [s for s in SCENARIOS if s.brokers == 3]
    assert [s.name for s in cluster] == ["cluster-broker-kill"]
    assert isinstance(cluster[0].fault, BrokerDown) and cluster[0].fault.hard


def test_live_stream_ids_land_on_distinct_partitions() -> None:
    ids = live_stream_ids("run-cam", 6, 4)
    assert [partition_of(sid.encode(), 4) for sid in ids] == [0, 1, 2, 3, 0, 1]
    assert len(set(ids)) == 6


def test_role_env_carries_the_secret_the_output_is_searched_for() -> None:
    scenario = Scenario("s", "", KillRole("align"))
    env = role_env(scenario, ChaosOptions(), "127.0.0.1:1", "abc", _tmp(), secret="s3cret-x")
    assert env["LOCKSTEP_KAFKA__SASL_PASSWORD"] == "s3cret-x"
    assert env["LOCKSTEP_WORKER__OPENAI__API_KEY"] == "s3cret-x"
    assert env["LOCKSTEP_APP_ID"] == "chaos-abc"
    assert "LOCKSTEP_TOPICS__REPLICATION_FACTOR" not in env
    load_settings(environ=env)  # a valid configuration


def test_a_cluster_scenario_replicates_three_times_with_two_in_sync() -> None:
    scenario = Scenario("s", "", BrokerDown(hard=True), brokers=3)
    settings = load_settings(environ=role_env(scenario, ChaosOptions(), "h:1", "abc", _tmp(),
                                              secret="x" * 8))
    assert settings.topics.replication_factor == 3
    assert settings.topics.insync_replicas() == 2


def test_a_flood_shortens_the_stream_ttl_and_keeps_every_token() -> None:
    flood = next(s for s in SCENARIOS if isinstance(s.fault, Flood))
    settings = load_settings(environ=role_env(flood, ChaosOptions(), "h:1", "a", _tmp(),
                                              secret="x" * 8))
    assert settings.align.stream_ttl_ms == 5000
    assert settings.align.stale_after_budgets == 0


def test_expected_members_counts_every_process_in_each_of_its_groups() -> None:
    scenario = Scenario("s", "", KillRole("align"), processes=(
        Processes("align", 2), Processes("route"), Processes("worker:vl,worker:text")))
    settings = load_settings(environ={"LOCKSTEP_APP_ID": "x"})
    assert expected_members(settings, scenario) == {
        "x-align": 2, "x-route": 1, "x-worker-vl": 1, "x-worker-text": 1}


def test_a_cluster_node_lists_every_voter_and_replicates_internal_topics_three_times() -> None:
    voters = [NodeAddress(i, 9000 + i, 9100 + i) for i in (1, 2, 3)]
    props = server_properties(_tmp(), voters[1], voters, {})
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103")
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"


def test_a_single_node_is_its_own_quorum_with_nothing_replicated() -> None:
    node = NodeAddress(1, 9001, 9101)
    props = server_properties(_tmp(), node, [node], {"num.partitions": 3})
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["num.partitions"] == "3"


def test_resident_memory_is_read_from_proc_and_is_none_once_the_process_is_gone() -> None:
    assert (rss_bytes(os.getpid()) or 0) > 10 * 1024 * 1024  # this interpreter
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert rss_bytes(gone.pid) is None


def _tmp() -> Path:
    return Path("/nonexistent/chaos")
