"""The ``worker`` agent: requests.<pool> → responses (or the request's reply topic).

Decodes each request of a batch and admits it into the pool's
:class:`~lockstep.engines.batching.dispatcher.Dispatcher` (deadline- and priority-aware batching,
see :mod:`lockstep.engines.batching.scheduler`). When the admission queue is full the agent stops
taking batches until it has drained to half, so the consumer stops fetching and memory
stays bounded whatever the backlog. A request is acknowledged only once its response, or
the dead letter of a request the engine could not process, has been acknowledged by the
broker. A request shed because it can no longer meet its deadline is answered with status
``expired``. On takeover the responses the previous owner wrote are read back, so a
replayed request is not answered twice (:mod:`lockstep.streams.replay`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

from lockstep.config.settings import Settings
from lockstep.engines.base import ItemFailure
from lockstep.engines.batching.dispatcher import Dispatcher, Outcome, warm_up
from lockstep.engines.batching.latency import LatencyModel, LatencyPrior
from lockstep.engines.batching.policy import BatchPolicy, SchedulerConfig
from lockstep.engines.batching.scheduler import make_policy
from lockstep.engines.registry import create_engine
from lockstep.engines.responses import build_response
from lockstep.errors import BadInput, ReasonCode
from lockstep.kafka.consumer import RoleConsumer
from lockstep.kafka.outbox import Outbox, send_dead_letter, wall_us
from lockstep.kafka.types import Record, TopicPartition
from lockstep.streams.dedupe import RecentKeys
from lockstep.streams.replay import Output, ReplayGuard, settle_keys
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import Request, Response

log = logging.getLogger(__name__)
STAGE = "worker"
#: A request's handle in the dispatcher: where it came from, to acknowledge and dead-letter.
Handle: TypeAlias = Record


class WorkerAgent:
    """One pool's worker role in one process."""

    stage = STAGE

    def __init__(self, settings: Settings, telemetry: Telemetry, outbox: Outbox) -> None:
        ws = settings.worker
        self.pool = ws.pool
        self.topic = catalog.requests_topic(self.pool)
        self.outputs: tuple[str, ...] = (catalog.RESPONSES, catalog.DEADLETTER)
        self.engine = create_engine(ws, telemetry)
        self.settings = settings
        self.telemetry = telemetry
        self.outbox = outbox
        #: Requests admitted lately: a second copy (a produce retried) is not answered again.
        self.recent = RecentKeys()
        self.max_bytes = settings.kafka.max_record_bytes
        self.config = SchedulerConfig.from_settings(ws, ws.max_batch)
        self.dispatcher: Dispatcher[Handle] | None = None
        self._dispatching: asyncio.Task[None] | None = None
        self._source: RoleConsumer | None = None
        self._replay: ReplayGuard[TopicPartition] = ReplayGuard()

    def bind(self, consumer: RoleConsumer) -> None:
        """Take the consumer whose records this agent acknowledges."""
        self._source = consumer

    async def start(self) -> None:
        """Load the engine, time it, build the dispatcher and start dispatching."""
        await self.engine.start()
        ws = self.settings.worker
        caps = self.engine.capabilities
        slo = self.settings.slo
        self.config = SchedulerConfig.from_settings(
            ws, min(ws.max_batch, caps.max_batch),
            queue_budget_ms=slo.stage_budget_ms("queue", slo.default_class))
        latency = LatencyModel(LatencyPrior(), token_fractions=ws.degrade_fractions)
        if ws.warmup:
            await warm_up(self.engine, latency, self.config)
        policy: BatchPolicy[Handle] = make_policy(ws.policy, self.config, latency)
        inflight = ws.max_inflight if caps.inflight_batching else 1
        self.dispatcher = Dispatcher(self.engine, policy, wall_us, self._deliver,
                                     telemetry=self.telemetry, pool=self.pool,
                                     max_inflight=inflight)
        self.telemetry.set_queue_capacity(self.pool, self.config.max_queue)
        self._dispatching = asyncio.create_task(self.dispatcher.run(),
                                                name=f"lockstep.worker.{self.pool}")

    async def close(self) -> None:
        """Stop dispatching and release the engine."""
        if self._dispatching is not None:
            self._dispatching.cancel()
            await asyncio.gather(self._dispatching, return_exceptions=True)
        await self.engine.close()

    async def on_assigned(self, partitions: Sequence[TopicPartition],
                          replay: ReplayGuard[TopicPartition], outputs: Iterable[Output]) -> None:
        """Learn which requests the previous owner already answered."""
        self._replay = replay
        settle_keys(replay, outputs, STAGE)

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Give back the queued requests of revoked partitions; finish the running batches.

        The partitions' next owner reads every request not yet acknowledged here again, so
        one still queued here would be answered by both. Those are taken out of the queue
        unanswered (and their keys forgotten, for when a partition comes back). A batch
        already running is waited for, so its answers are acknowledged and committed
        before the partitions are released.
        """
        self._replay.drop(list(partitions))
        dispatcher = self.dispatcher
        if dispatcher is None:
            return
        lost = {(tp.topic, tp.partition) for tp in partitions}
        withdrawn = dispatcher.withdraw(lambda record: (record.topic, record.partition) in lost)
        for request in withdrawn:
            self.recent.forget(request.window.stream_id, request.window.window_seq)
        # A fifth of the group's rebalance timeout; the producer's flush after it may take
        # the rest.
        assert self._source is not None, "bind() first"
        if not await dispatcher.settle(0.2 * self._source.rebalance_timeout_s):
            log.warning("partitions released while a batch still runs: its requests may be "
                        "answered by their next owner as well",
                        extra={"stage": STAGE, "pool": self.pool})
        if withdrawn:
            log.info("gave back %d queued requests of revoked partitions", len(withdrawn),
                     extra={"stage": STAGE, "pool": self.pool})

    async def on_tick(self, now_us: int) -> None:
        """Raise what failed in the dispatcher (its own task owns the deadlines)."""
        if self._dispatching is not None and self._dispatching.done():
            self._dispatching.result()
            raise RuntimeError("the dispatcher stopped")

    def wake_us(self) -> int | None:
        """No deadlines on the consumer's loop (the dispatcher keeps its own)."""
        return None

    async def on_batch(self, records: Sequence[Record], now_us: int) -> None:
        """Admit a batch of requests (waits while the admission queue is full)."""
        self.outbox.raise_if_failed()
        dispatcher = self.dispatcher
        assert dispatcher is not None and self._source is not None, "start() and bind() first"
        replay = self._replay
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            guarded = bool(replay.until) and replay.guards(tp, record.offset)
            if replay.until:
                replay.passed(tp, record.offset + 1)
            if guarded and (tp.topic, tp.partition, record.offset) in replay.dead:
                self._source.ack(tp, record.offset)
                continue
            try:
                request = decode_as(Request, record.value, max_bytes=self.max_bytes)
            except BadInput as error:
                await self._dead_letter(record, error)
                continue
            window = request.window
            if guarded and (window.stream_id, window.window_seq) in replay.keys:
                self._source.ack(tp, record.offset)
                continue
            if self.recent.seen(window.stream_id, window.window_seq):
                self.telemetry.duplicates.labels(STAGE).inc()
                self._source.ack(tp, record.offset)
                continue
            if dispatcher.full:
                log.info("admission queue full, reading paused", extra={
                    "stage": STAGE, "pool": self.pool, "topic": self.topic})
                await dispatcher.wait_space()
            dispatcher.admit(record, request)

    async def _deliver(self, outcomes: list[Outcome[Handle]]) -> None:
        for outcome in outcomes:
            if isinstance(outcome.result, ItemFailure):
                await self._dead_letter(outcome.handle, BadInput(
                    f"engine {self.engine.name} failed on this request: "
                    f"{outcome.result.reason}", ReasonCode.ENGINE_FAILED))
                continue
            response = build_response(outcome, self.engine.name)
            await self._respond(outcome.request, response, outcome.handle)

    async def _dead_letter(self, record: Record, error: BadInput) -> None:
        await send_dead_letter(self.outbox, stage=STAGE, topic=record.topic,
                               partition=record.partition, offset=record.offset,
                               key=record.key, value=record.value, error=error,
                               on_ack=self._acker(record))

    def _acker(self, record: Record) -> Callable[[], None]:
        assert self._source is not None
        ack = self._source.ack
        tp = TopicPartition(record.topic, record.partition)
        offset = record.offset

        def acked() -> None:
            ack(tp, offset)
        return acked

    async def _respond(self, request: Request, response: Response, record: Record) -> None:
        sent = wall_us()
        response = response.model_copy(
            update={"timeline": response.timeline.model_copy(update={"responded_us": sent}),
                    "e2e_us": sent - response.timeline.capture_us,
                    "replay": request.window.replay})
        budget_s = self.settings.slo.budget_ms(response.slo_class) / 1000.0
        expired = response.status == "expired"
        ack = self._acker(record)

        def delivered() -> None:
            acked = wall_us()
            self.telemetry.stage("respond", (acked - sent) / 1e6, route=response.route,
                                 pool=self.pool, slo_class=response.slo_class)
            if response.replay:  # kept out of the live SLO figures
                self.telemetry.replay(slo_class=response.slo_class, status=response.status)
            elif expired:
                self.telemetry.expired(slo_class=response.slo_class)
            else:
                self.telemetry.e2e((acked - response.timeline.capture_us) / 1e6,
                                   route=response.route, slo_class=response.slo_class,
                                   budget_s=budget_s)
            ack()

        await self.outbox.send_record(request.reply_topic or catalog.RESPONSES,
                                      response.stream_id.encode(), response, delivered)
