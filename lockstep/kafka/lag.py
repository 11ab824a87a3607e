"""Consumer lag per topic and group, from committed and end offsets (the Kafka admin API).

The lag of a partition is its end offset (the high watermark) minus the group's committed
offset; a partition the group never committed to counts from its log start, which is where
Lockstep's consumers (``auto.offset.reset=earliest``) begin. This is what autoscalers read.

:func:`partition_lags` is blocking (confluent-kafka's AdminClient; call it from a thread in
async code), for the CLI and tests. :class:`LagExporter` reads the same with aiokafka in the
role processes, which use no librdkafka client (a broker killed under them cannot abort
them), and sets ``lockstep_consumer_lag``: every process of a group exports the same
value, so aggregate with ``max``, not ``sum``; an outage skips a round and is logged once
per interval. The embedded broker (tansu) answers list-offsets in produce batches, not
records, so lag read from it is wrong; Apache Kafka is right.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as Partition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError as ClientError
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError
from lockstep.kafka.wait import cluster_metadata
from lockstep.telemetry.metrics import Telemetry

log = logging.getLogger(__name__)


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


class LagExporter:
    """Polls the lag of some groups on their topics into the telemetry gauge.

    Args:
        kafka: Connection settings.
        telemetry: Where the gauge lives.
        groups: Each group and the topics it consumes.
        interval_s: Seconds between two readings.
    """

    def __init__(self, kafka: KafkaSettings, telemetry: Telemetry,
                 groups: Mapping[str, Sequence[str]], interval_s: float = 5.0) -> None:
        self._kafka = kafka
        self._telemetry = telemetry
        self.groups = {g: list(t) for g, t in groups.items()}
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._logged = 0.0
        options = kafka.aiokafka_options()
        self._admin = AIOKafkaAdminClient(**options)
        self._offsets = AIOKafkaConsumer(**options, group_id=None, enable_auto_commit=False)
        self._started = False

    async def export(self) -> dict[str, dict[str, int]]:
        """Read the lag once, set the gauge and return it per group and topic."""
        if not self._started:
            await self._admin.start()
            await self._offsets.start()
            self._started = True
        out = {}
        for group, topics in self.groups.items():
            lags = await self.partition_lags(group, topics)
            per_topic = lag_by_topic(lags)
            for topic, lag in per_topic.items():
                self._telemetry.consumer_lag.labels(topic, group).set(lag)
            out[group] = per_topic
        return out

    async def partition_lags(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        """The lag of ``group`` on every partition of ``topics`` that exists."""
        cluster = await cluster_metadata(self._offsets)
        tps = [Partition(t, p) for t in dict.fromkeys(topics)
               for p in sorted(cluster.partitions_for_topic(t) or ())]
        if not tps:
            return []
        committed = await self._admin.list_consumer_group_offsets(group, partitions=tps)
        starts = await self._offsets.beginning_offsets(tps)
        ends = await self._offsets.end_offsets(tps)
        lags = []
        for tp in tps:
            meta = committed.get(tp)
            offset = meta.offset if meta is not None and meta.offset >= 0 else None
            lags.append(PartitionLag(tp.topic, tp.partition, offset, starts[tp], ends[tp]))
        return lags

    def start(self) -> None:
        """Export periodically in the background."""
        self._task = asyncio.create_task(self._run(), name="lockstep.lag")

    async def stop(self) -> None:
        """Stop exporting."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._started:
            await self._offsets.stop()
            await self._admin.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.export()
            except (ClientError, OSError) as error:  # the cluster is away; the next round retries
                if time.monotonic() - self._logged > 60.0:
                    self._logged = time.monotonic()
                    log.warning("consumer lag not read: %r", error)
            await asyncio.sleep(self.interval_s)
