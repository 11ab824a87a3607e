"""Exporting the consumer lag of this process's groups as ``lockstep_consumer_lag``.

Every ``interval_s`` the committed offsets of each group (the admin API) and the start and
end offsets of the topics it consumes are read with aiokafka, and the lag per topic
(:class:`~lockstep.kafka.lag.PartitionLag`) is set on the gauge. Every process of a group
exports the same value: aggregate with ``max``, not ``sum``. Role processes use no
librdkafka client, so a broker killed under them cannot abort them; an outage skips a
round and is logged once per interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.lag import PartitionLag, lag_by_topic
from lockstep.kafka.wait import cluster_metadata
from lockstep.telemetry.metrics import Telemetry

log = logging.getLogger(__name__)


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
        tps = [TopicPartition(t, p) for t in dict.fromkeys(topics)
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
            except (KafkaError, OSError) as error:  # the cluster is away; the next round retries
                if time.monotonic() - self._logged > 60.0:
                    self._logged = time.monotonic()
                    log.warning("consumer lag not read: %r", error)
            await asyncio.sleep(self.interval_s)
