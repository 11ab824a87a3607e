"""The three-node KRaft cluster ``lockstep chaos`` runs: one node down, writes go on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lockstep.kafka.apache import KafkaCluster

pytestmark = pytest.mark.integration


def _isr(admin: AdminClient, topic: str) -> list[list[int]]:
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return [sorted(p.isrs) for _, p in sorted(partitions.items())]


def _wait_isr(admin: AdminClient, topic: str, want: list[list[int]],
              timeout_s: float) -> list[list[int]]:
    """The ISRs of ``topic`` once they are ``want``, or as they are at the deadline."""
    deadline = time.monotonic() + timeout_s
    while (isr := _isr(admin, topic)) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return isr


def _produce(bootstrap: str, topic: str, count: int) -> int:
    """Produce ``count`` records with acks=all; return how many were acknowledged."""
    acked = 0

    def done(error: object, _message: object) -> None:
        nonlocal acked
        acked += error is None

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 20_000})
    for i in range(count):
        producer.produce(topic, str(i).encode(), key=str(i).encode(), on_delivery=done)
    producer.flush(30)
    return acked


@pytest.mark.timeout(240)
def test_a_cluster_node_killed_and_restarted_on_its_log_dir_rejoins_while_writes_go_on(
        tmp_path: Path) -> None:
    with KafkaCluster(base_dir=tmp_path) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("t", 3, 3, config={"min.insync.replicas": "2"})]
                            )["t"].result(30)
        # The controller has the topic; the brokers' metadata follows a moment later.
        assert _wait_isr(admin, "t", [[1, 2, 3]] * 3, 30.0) == [[1, 2, 3]] * 3
        victim = cluster.nodes[1]
        data_dir = victim.directory
        victim.kill()
        assert victim.pid is None
        # Replication 3, min.insync 2: acks=all writes go on with one node down.
        assert _produce(cluster.bootstrap, "t", 200) == 200
        victim.start()
        assert victim.directory == data_dir and victim.is_running
        assert _wait_isr(admin, "t", [[1, 2, 3]] * 3, 60.0) == [[1, 2, 3]] * 3
        directories = [node.directory for node in cluster.nodes]
    assert all(node.pid is None for node in cluster.nodes)
    assert not any(d is not None and d.exists() for d in directories)
