"""The Kafka client's value types that the layers above name: a partition and a record."""

from __future__ import annotations

from typing import TypeAlias

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

#: A record as the consumer hands it over (raw key and value bytes).
Record: TypeAlias = ConsumerRecord

__all__ = ["Record", "TopicPartition"]
