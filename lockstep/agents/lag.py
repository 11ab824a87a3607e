"""Exporting the consumer lag of this process's group as ``lockstep_consumer_lag``.

Every ``interval_s`` the lag of the group on each topic it consumes is read through the
admin API (:mod:`lockstep.topics.lag`) and set on the gauge. Every process of a group exports the
same value: aggregate with ``max``, not ``sum``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from lockstep.errors import BrokerError
from lockstep.streams.settings import KafkaSettings
from lockstep.streams.telemetry import Telemetry
from lockstep.topics.admin import admin_client
from lockstep.topics.lag import lag_by_topic, partition_lags

log = logging.getLogger(__name__)


class LagExporter:
    """Polls one group's lag on a set of topics into the telemetry gauge."""

    def __init__(self, kafka: KafkaSettings, telemetry: Telemetry, group: str,
                 topics: Sequence[str], interval_s: float = 5.0) -> None:
        self._admin = admin_client(kafka.confluent_config())
        self._telemetry = telemetry
        self.group = group
        self.topics = list(topics)
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def export(self) -> dict[str, int]:
        """Read the lag once, set the gauge and return it per topic."""
        lags = await asyncio.to_thread(partition_lags, self._admin, self.group, self.topics)
        per_topic = lag_by_topic(lags)
        for topic, lag in per_topic.items():
            self._telemetry.consumer_lag.labels(topic, self.group).set(lag)
        return per_topic

    def start(self) -> None:
        """Export periodically in the background."""
        self._task = asyncio.create_task(self._run(), name="lockstep.lag")

    async def stop(self) -> None:
        """Stop exporting."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.export()
            except BrokerError as error:  # the cluster is away; the next round retries
                log.warning("consumer lag not read: %s", error, extra={"group": self.group})
            await asyncio.sleep(self.interval_s)
