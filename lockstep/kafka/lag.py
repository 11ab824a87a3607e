"""Consumer lag per topic and group, from committed and end offsets (the Kafka admin API).

The lag of a partition is its end offset (the high watermark) minus the group's committed
offset; a partition the group never committed to counts from its log start, which is where
Lockstep's consumers (``auto.offset.reset=earliest``) begin. This is what autoscalers read.

Blocking (confluent-kafka's AdminClient): call from a thread in async code. The embedded
broker (tansu) answers list-offsets in produce batches, not records, so lag read from it is
wrong; Apache Kafka is right.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from lockstep.errors import BrokerError


@dataclass(frozen=True)
class PartitionLag:
    """Where a group stands on one partition.

    Attributes:
        topic: Topic name.
        partition: Partition number.
        committed: The group's committed offset, or None if it never committed one.
        start: The log start offset.
        end: The log end offset (high watermark).
    """

    topic: str
    partition: int
    committed: int | None
    start: int
    end: int

    @property
    def lag(self) -> int:
        """Records between the committed offset (or the log start) and the log end."""
        position = self.committed if self.committed is not None else self.start
        return max(0, self.end - max(position, self.start))


def partition_lags(admin: AdminClient, group: str, topics: Iterable[str],
                   timeout_s: float = 10.0) -> list[PartitionLag]:
    """The lag of ``group`` on every partition of ``topics`` (topics that do not exist are skipped).

    Raises:
        BrokerError: The cluster did not answer.
    """
    try:
        metadata = admin.list_topics(timeout=timeout_s)
        tps = [TopicPartition(name, p) for name in dict.fromkeys(topics)
               if (topic := metadata.topics.get(name)) is not None and topic.error is None
               for p in sorted(topic.partitions)]
        if not tps:
            return []
        request = [ConsumerGroupTopicPartitions(group, tps)]
        answer = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in answer[group].result(timeout=timeout_s).topic_partitions
                     if tp.error is None}
        starts = _offsets(admin, tps, OffsetSpec.earliest(), timeout_s)  # type: ignore[no-untyped-call]
        ends = _offsets(admin, tps, OffsetSpec.latest(), timeout_s)  # type: ignore[no-untyped-call]
    except KafkaException as exc:
        raise BrokerError(f"reading the lag of group {group} failed: {exc.args[0].str()}"
                          ) from exc
    lags = []
    for tp in tps:
        key = (tp.topic, tp.partition)
        offset = committed.get(key)
        lags.append(PartitionLag(tp.topic, tp.partition,
                                 offset if offset is not None and offset >= 0 else None,
                                 starts[key], ends[key]))
    return lags


def lag_by_topic(lags: Iterable[PartitionLag]) -> dict[str, int]:
    """Sum partition lags per topic."""
    out: dict[str, int] = {}
    for lag in lags:
        out[lag.topic] = out.get(lag.topic, 0) + lag.lag
    return out


def _offsets(admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec,
             timeout_s: float) -> Mapping[tuple[str, int], int]:
    futures = admin.list_offsets({tp: spec for tp in tps}, request_timeout=timeout_s)
    return {(tp.topic, tp.partition): int(future.result(timeout=timeout_s).offset)
            for tp, future in futures.items()}
