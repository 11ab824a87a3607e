"""`lockstep bench broker` as an operator runs it, in a tiny configuration.

The report's structure and that every record sent was read and timed, on both brokers;
never how fast this machine is (the ratios are printed, not asserted).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.clirun import lockstep

pytestmark = pytest.mark.e2e

ARGS = ("--rate", "200", "--seconds", "2", "--held", "5000", "--repeats", "2")


def _report(*extra: str) -> dict[str, Any]:
    result = lockstep("bench", "broker", "--json", *ARGS, *extra, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def _check(report: dict[str, Any]) -> None:
    assert report["options"] == {"rate": 200, "seconds": 2.0, "held": 5000, "partitions": 4,
                                 "repeats": 2}
    assert len(report["repetitions"]) == 2
    topics = {r["topic"] for r in report["repetitions"]}
    assert len(topics) == 2  # a topic of its own each
    for rep in report["repetitions"]:
        for phase in ("empty", "held"):
            # Paced: about rate x seconds sent, and every one read back and timed.
            assert 350 <= rep[phase]["sent"] <= 450, rep
            assert rep[phase]["read"] == rep[phase]["sent"], rep
            assert rep[phase]["read_share"] == 1.0
            assert 0 < rep[phase]["hop_p50_ms"] <= rep[phase]["hop_p99_ms"], rep
        assert rep["write_held_s"] > 0
    assert report["unread"] == 0
    for phase in ("empty", "held"):
        assert report["phases"][phase]["hop_p50_ms"]["n"] == 2
    ratio = report["ratios"]["hop_p50_held_over_empty"]
    assert ratio["n"] == 2 and ratio["median"] > 0
    assert {"cores", "load_before", "busy_share"} <= set(report["machine"])


def test_bench_broker_on_the_embedded_broker_measures_its_cpu_per_phase() -> None:
    report = _report()
    assert report["broker"] == "embedded tansu"
    _check(report)
    for phase in ("empty", "held"):
        share = report["phases"][phase]["broker_cpu_share"]
        assert share is not None and share["n"] == 2 and 0 < share["median"] < 2.5
    assert report["ratios"]["broker_cpu_held_over_empty"]["n"] == 2


def test_bench_broker_on_apache_kafka_leaves_no_topic_behind(apache_kafka: str) -> None:
    report = _report("--bootstrap", apache_kafka)
    assert report["broker"] == "kafka"
    _check(report)
    # Not a process of this machine's bench: no CPU share.
    assert report["phases"]["empty"]["broker_cpu_share"] is None
    listed = AdminClient({"bootstrap.servers": apache_kafka}).list_topics(timeout=10).topics
    assert not {r["topic"] for r in report["repetitions"]} & set(listed)


def test_bench_broker_text_output_has_the_phases_and_ratios() -> None:
    result = lockstep("bench", "broker", "--rate", "100", "--seconds", "1", "--held", "1000",
                      "--repeats", "1", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("bench broker on embedded tansu: 100 records/s for 1 s")
    assert any(line.split()[:1] == ["empty"] for line in lines)
    assert any(line.split()[:1] == ["held"] for line in lines)
    assert "held over empty (within each repetition): hop P50" in result.stdout
