"""Where an agent's records come from: one consumer group per role, batches, owned commits.

:class:`RoleConsumer` is the Faust service under each agent: an aiokafka consumer in the
role's group that fetches batches (``getmany``) and hands them to the agent
(:class:`Agent`), so no per-record framework machinery sits on the hot path. It owns the
commit: an offset is committed only once every record before it has been acknowledged
by the agent (:class:`~lockstep.streams.offsets.OffsetLedger`), which the agent does only
once the broker has acknowledged what the record produced. On a rebalance the agent
finishes its batch, what is in flight is delivered, the acknowledged prefix is committed,
and only then are the partitions released; a partition taken over starts where its
group committed, and a group that never committed commits its starting position at once.

A broker that is away is waited for with backoff (one log line per interval), at start and
during the run; the consumer never exits because the cluster is restarting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import mode
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.outbox import Outbox, wall_us
from lockstep.kafka.readback import (
    CLOCK_MARGIN_MS,
    first_timestamp_ms,
    partition_of,
    read_back,
)
from lockstep.kafka.types import Record, TopicPartition
from lockstep.kafka.wait import wait_for_broker
from lockstep.streams.offsets import OffsetLedger
from lockstep.streams.replay import Output, ReplayGuard

log = logging.getLogger(__name__)
#: Records handed to the agent at once; between two chunks the event loop runs others.
CHUNK = 200


def fetch_wait_ms(wake_us: int | None, now_us: int, tick_ms: int) -> int:
    """How long a fetch may wait for records.

    Until the agent's next wake-up (rounded up to the fetch's 1-ms resolution, at least
    1 ms), at most ``tick_ms``.
    """
    if wake_us is None:
        return tick_ms
    return max(1, min(tick_ms, -(-(wake_us - now_us) // 1000)))


class Agent(Protocol):
    """What a role implements to run on a :class:`RoleConsumer`."""

    #: The stage name (module, log field, metric label).
    stage: str

    def bind(self, consumer: RoleConsumer) -> None:
        """Receive the consumer (for acknowledgements and positions) before it starts."""

    #: Topics whose records (keyed by stream id) a previous owner may have produced from
    #: records that are now replayed: read back on takeover (empty: none).
    outputs: tuple[str, ...]

    async def on_assigned(self, partitions: Sequence[TopicPartition],
                          replay: ReplayGuard[TopicPartition], outputs: Iterable[Output]) -> None:
        """Partitions were assigned (before any of their records is handed over).

        Args:
            partitions: The partitions taken over.
            replay: Guard to fill from ``outputs`` (its ``until`` is set already).
            outputs: Records of :attr:`outputs` a previous owner may have produced for them.
        """

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions are being taken away: forget their state, produce nothing more."""

    async def on_batch(self, records: Sequence[Record], now_us: int) -> None:
        """Handle a batch of records, in offset order per partition."""

    async def on_tick(self, now_us: int) -> None:
        """Called after every batch, at :meth:`wake_us` and at least every ``tick_ms``."""

    def wake_us(self) -> int | None:
        """The wall time (µs) at which :meth:`on_tick` has work next (None: none known).

        Records arriving end the wait at once; this only bounds it when none come, so a
        deadline is met on time without ticking every few milliseconds while idle.
        """


class RoleConsumer(mode.Service):
    """One role's consumer group membership, batch loop and commits.

    Args:
        kafka: Connection settings.
        group: The role's consumer group.
        topics: Topics to subscribe to (all with the same partition count when the role
            needs co-partitioning: partitions are assigned by range, so a member gets
            partition p of every topic).
        agent: The role.
        outbox: The process's producer (flushed before partitions are released).
        new_group_reset: Where a group with no committed offset starts (earliest, latest);
            it commits that position before reading.
        max_records: Largest batch handed to the agent.
        tick_ms: Longest time between two :meth:`Agent.on_tick` calls (sooner when
            :meth:`Agent.wake_us` asks for it).
        commit_ms: How often the acknowledged prefix is committed.
    """

    def __init__(self, kafka: KafkaSettings, group: str, topics: Sequence[str], agent: Agent,
                 outbox: Outbox, *, new_group_reset: str = "earliest", max_records: int = 1000,
                 tick_ms: int = 100, commit_ms: int = 100) -> None:
        super().__init__()
        self.kafka = kafka
        self.group = group
        self.topics = list(topics)
        self.agent = agent
        self.outbox = outbox
        self.max_records = max_records
        self.tick_ms = tick_ms
        self.commit_s = commit_ms / 1000.0
        self.ledger: OffsetLedger[TopicPartition] = OffsetLedger()
        #: Inputs a previous owner may have settled (filled on takeover; see
        #: lockstep.streams.replay).
        self.replay: ReplayGuard[TopicPartition] = ReplayGuard()
        self.lock = asyncio.Lock()  # held while the agent works; rebalances wait for it
        self.assigned = asyncio.Event()
        #: Per partition assigned last: (position reading starts at, log end then).
        self.start_positions: dict[TopicPartition, tuple[int, int]] = {}
        self.new_group_reset = new_group_reset
        #: Bumped by every revocation and assignment (a commit refused for an earlier one
        #: does not fence the role).
        self._generation = 0
        self._fenced_since = 0.0
        self._fence_limit_s = max(30.0, 3 * kafka.session_timeout_ms / 1000.0)
        #: The group's rebalance timeout; releasing partitions waits 80 % of it at most.
        self._rebalance_ms = max(kafka.rebalance_timeout_ms, kafka.session_timeout_ms)
        self._consumer: AIOKafkaConsumer | None = None
        self._last_commit = 0.0
        self._fenced = False
        agent.bind(self)

    @property
    def label(self) -> str:
        """The service's name in logs."""
        return f"{type(self).__name__}({self.group})"

    def ack(self, tp: TopicPartition, offset: int) -> None:
        """Acknowledge one input record: its offset may be committed once those before are."""
        self.ledger.ack(tp, offset)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns now."""
        return set(self.consumer.assignment()) if self._consumer is not None else set()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        """The aiokafka consumer (created at start)."""
        assert self._consumer is not None, "not started"
        return self._consumer

    @property
    def rebalance_timeout_s(self) -> float:
        """The group's rebalance timeout: how long a member may take to hand over."""
        return self._rebalance_ms / 1000.0

    async def on_start(self) -> None:
        """Connect (waiting for the cluster) and join the group."""
        kafka = self.kafka
        self._consumer = AIOKafkaConsumer(
            **kafka.aiokafka_options(), group_id=self.group, enable_auto_commit=False,
            auto_offset_reset=self.new_group_reset,
            fetch_max_wait_ms=kafka.fetch_max_wait_ms,
            max_partition_fetch_bytes=kafka.max_record_bytes,
            fetch_max_bytes=max(kafka.max_record_bytes, 52_428_800),
            session_timeout_ms=kafka.session_timeout_ms,
            rebalance_timeout_ms=self._rebalance_ms,
            heartbeat_interval_ms=max(100, kafka.session_timeout_ms // 3),
            partition_assignment_strategy=(RangePartitionAssignor,))
        await wait_for_broker(self.consumer.start, self.kafka, what=f"group {self.group}")
        self.consumer.subscribe(self.topics, listener=_Listener(self))

    async def on_stop(self) -> None:
        """Commit what is acknowledged and leave the group."""
        if self._consumer is None:
            return
        try:
            await self.outbox.flush(timeout_s=5.0)
            await self.commit()
        finally:
            await self.consumer.stop()

    @mode.Service.task
    async def _consume(self) -> None:
        consumer = self.consumer
        agent = self.agent
        while not self.should_stop:
            self.outbox.raise_if_failed()
            if self._fenced:
                # The group moved on without us (a commit was refused): another member may
                # own our partitions now, so nothing more is produced for them until the
                # rejoin (the coordinator's own task) revokes and assigns again.
                waited = time.monotonic() - self._fenced_since
                if waited > self._fence_limit_s:
                    # Never reassigned: exit (the process supervisor restarts the role)
                    # rather than hold the partitions' place in the group doing nothing.
                    raise RuntimeError(
                        f"group {self.group}: no partitions assigned {waited:.0f} s after a "
                        "refused commit; exiting so that the role is restarted")
                await asyncio.sleep(self.tick_ms / 1000.0)
                continue
            wait_ms = fetch_wait_ms(self.agent.wake_us(), wall_us(), self.tick_ms)
            try:
                batches = await consumer.getmany(timeout_ms=wait_ms, max_records=self.max_records)
            except IllegalStateError:  # between a revocation and the next assignment
                await asyncio.sleep(self.tick_ms / 1000.0)
                continue
            async with self.lock:
                if batches:
                    await self._deliver(batches)
                    # Not held through the next fetch: the last records of a burst, kept
                    # alive while the role idles, pin the allocator's arenas of the burst.
                    del batches
                await agent.on_tick(wall_us())
            if time.monotonic() - self._last_commit >= self.commit_s:
                await self.commit()

    async def _deliver(self, batches: Mapping[TopicPartition, list[Record]]) -> None:
        """Hand a fetch to the agent, in chunks."""
        records: list[Record] = []
        for tp, part in batches.items():
            for record in part:
                self.ledger.read(tp, record.offset)
            records += part
        for start in range(0, len(records), CHUNK):
            if start:
                # Let the heartbeat and delivery callbacks run: a long batch must not cost
                # the group its membership.
                await asyncio.sleep(0)
            await self.agent.on_batch(records[start:start + CHUNK], wall_us())

    async def commit(self) -> None:
        """Commit the acknowledged prefix of every partition that moved."""
        self._last_commit = time.monotonic()
        offsets = self.ledger.committable()
        if not offsets:
            return
        generation = self._generation
        try:
            await self.consumer.commit(offsets)
        except CommitFailedError as error:
            self.ledger.uncommit(offsets)
            if generation != self._generation:
                # The group moved on while the commit was in flight and has assigned
                # partitions again already: nothing to wait for (waiting would be forever).
                log.info("commit of an earlier assignment refused (%s)", error,
                         extra={"group": self.group})
                return
            # This member's generation is over (its session expired, or the group is
            # rebalancing): stop producing until partitions are assigned again.
            self._fenced = True
            self._fenced_since = time.monotonic()
            log.warning("commit refused (%s): pausing until the group assigns partitions "
                        "again", error, extra={"group": self.group})
        except KafkaError as error:
            # A rebalance or an outage: the same offsets (or later ones) go next time.
            self.ledger.uncommit(offsets)
            log.info("commit deferred: %r", error, extra={"group": self.group})

    async def _revoked(self, revoked: Sequence[TopicPartition]) -> None:
        self._generation += 1
        self.assigned.clear()
        if not revoked:
            return
        async with self.lock:  # the batch in progress finishes first
            await self.agent.on_revoked(revoked)
            if not await self.outbox.flush(timeout_s=self.rebalance_timeout_s * 0.8):
                log.warning("partitions released with records still in flight; their inputs "
                            "stay uncommitted and are replayed", extra={"group": self.group})
            await self.commit()
            self.ledger.revoke(revoked)

    async def _assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self._generation += 1
        self._fenced = False
        async with self.lock:
            consumer = self.consumer
            fresh: dict[TopicPartition, int] = {}
            behind: dict[TopicPartition, int] = {}
            ends = await consumer.end_offsets(list(assigned)) if assigned else {}
            for tp in assigned:
                committed = await consumer.committed(tp)
                position = await consumer.position(tp)
                self.ledger.start(tp, position, committed=committed is not None)
                self.start_positions[tp] = (position, ends.get(tp, position))
                if committed is None:
                    fresh[tp] = position  # no earlier member of this group produced anything
                elif position < ends.get(tp, 0):
                    behind[tp] = position
            if fresh:
                # A group's first position is committed before anything is read, so a crash
                # before the first acknowledgement resumes here, not at the log end.
                log.info("new group %s starts at %s", self.group,
                         {f"{tp.topic}/{tp.partition}": o for tp, o in fresh.items()})
                await self.commit()
            outputs = await self._read_back(assigned, behind, ends)
            await self.agent.on_assigned(assigned, self.replay, outputs)
        self.assigned.set()

    async def _read_back(self, assigned: Sequence[TopicPartition],
                         behind: dict[TopicPartition, int],
                         ends: dict[TopicPartition, int]) -> Iterable[Output]:
        """Outputs a previous owner may have produced from the records to be replayed."""
        self.replay.drop(list(assigned))
        if not behind or not self.agent.outputs:
            return ()
        since = await first_timestamp_ms(self.kafka, behind)
        if since is None:
            return ()
        for tp in behind:
            self.replay.until[tp] = ends[tp]
        # Partitions taken, by the partition count of their topic (co-partitioned topics
        # share one): a key is kept when it hashes to one of them.
        owned: dict[int, set[int]] = {}
        for tp in assigned:
            n = len(self.consumer.partitions_for_topic(tp.topic) or ())
            if n:
                owned.setdefault(n, set()).add(tp.partition)

        def keep(key: bytes | None) -> bool:
            return key is not None and any(
                partition_of(key, n) in parts for n, parts in owned.items())

        # Taken before the read-back: a record acknowledged in between is read back.
        unacked = [Output(topic, -1, key, value) for topic, key, value
                   in self.outbox.unacknowledged(self.agent.outputs) if keep(key)]
        written = await read_back(self.kafka, self.agent.outputs, since - CLOCK_MARGIN_MS, keep)
        if unacked:
            log.info("%d records produced before the rebalance are still being re-sent; "
                     "their inputs count as answered", len(unacked), extra={"group": self.group})
        return [*written, *unacked]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: RoleConsumer) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        await self._source._revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        await self._source._assigned(list(assigned))
