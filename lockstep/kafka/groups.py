"""Who owns what: consumer groups as the cluster describes them.

:func:`describe` tells each group's state and each member's partitions (by client id);
:func:`wait_joined` waits until groups are stable with all their members (the chaos runner
does before each fault).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupState, KafkaException

from lockstep.config.settings import Settings
from lockstep.errors import BrokerError
from lockstep.kafka.admin import admin_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Group:
    """A consumer group: its state and each member's partitions, by client id."""

    name: str
    stable: bool
    members: Mapping[str, frozenset[tuple[str, int]]]


def describe(settings: Settings, names: list[str], timeout_s: float = 10.0) -> list[Group]:
    """Describe ``names`` (blocking; call it while the brokers are up).

    aiokafka's DescribeGroups decoding fails on Kafka 4.x clusters, so this is one of the
    runner's few librdkafka calls; every request is awaited before the client goes.

    Raises:
        BrokerError: The cluster did not answer.
    """
    admin = admin_client(settings.kafka.confluent_config())
    out: list[Group] = []
    try:
        futures = admin.describe_consumer_groups(names, request_timeout=timeout_s)
        for name in names:
            description = futures[name].result()
            out.append(Group(name, description.state == ConsumerGroupState.STABLE, {
                m.client_id: frozenset((tp.topic, tp.partition)
                                       for tp in m.assignment.topic_partitions)
                for m in description.members}))
    except KafkaException as error:
        raise BrokerError(f"cannot describe consumer groups {', '.join(names)}: {error}") \
            from None
    return out


async def wait_joined(settings: Settings, expected: Mapping[str, int],
                      timeout_s: float) -> list[Group]:
    """Wait until each group is stable with ``expected[group]`` members owning partitions.

    Raises:
        BrokerError: Not so within ``timeout_s`` (the message says which group lags).
    """
    deadline = time.monotonic() + timeout_s
    names = list(expected)
    groups: list[Group] = []
    while True:
        try:
            groups = await asyncio.to_thread(describe, settings, names)
        except BrokerError as error:
            log.info("%s", error)
        else:
            waiting = [g for g in groups
                       if not g.stable or sum(1 for m in g.members.values() if m)
                       < expected[g.name]]
            if not waiting:
                return groups
        if time.monotonic() > deadline:
            lagging = ", ".join(f"{g.name} ({len(g.members)} of {expected[g.name]} members"
                                f"{', rebalancing' if not g.stable else ''})"
                                for g in groups if g.name in expected) or ", ".join(names)
            raise BrokerError(f"consumer groups not joined after {timeout_s:.0f} s: {lagging}")
        await asyncio.sleep(0.5)


