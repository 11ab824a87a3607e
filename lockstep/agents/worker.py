"""The ``worker`` agent: requests.<pool> → responses (or the request's reply topic).

Decodes each request and admits it into the pool's :class:`~lockstep.engines.dispatcher.Dispatcher`
(deadline- and priority-aware batching, see :mod:`lockstep.engines.scheduler`). When the admission
queue is full the agent stops taking events until the queue has drained to half; the
topic's channel is bounded at the same size, so Faust then stops fetching the partitions
(flow control), and memory stays bounded whatever the backlog. Events are acknowledged by
hand (the stream is ``noack``): only once the response, or the dead-letter record of a
request the engine could not process, has been acknowledged by the broker. A request shed
because it can no longer meet its deadline is answered with status ``expired``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable
from typing import cast

import faust
from faust.types import EventT, StreamT

from lockstep.agents.outbox import Outbox, wall_us
from lockstep.engines.base import ItemFailure
from lockstep.engines.dispatcher import Dispatcher, Outcome, warm_up
from lockstep.engines.latency import LatencyModel, LatencyPrior
from lockstep.engines.registry import create_engine
from lockstep.engines.scheduler import BatchPolicy, SchedulerConfig, make_policy
from lockstep.engines.worker import build_response
from lockstep.errors import BadInput
from lockstep.streams.settings import Settings
from lockstep.streams.telemetry import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import Request, Response

log = logging.getLogger(__name__)
STAGE = "worker"
Event = EventT[bytes]


class WorkerTask:
    """State of one pool's worker role in one process."""

    def __init__(self, app: faust.App, settings: Settings, telemetry: Telemetry) -> None:
        ws = settings.worker
        self.pool = ws.pool
        self.app = app
        self.topic = catalog.requests_topic(self.pool)
        self.engine = create_engine(ws, telemetry)
        self.settings = settings
        self.telemetry = telemetry
        self.outbox = Outbox(app, STAGE)
        self.max_bytes = settings.kafka.max_record_bytes
        self.config = SchedulerConfig.from_settings(ws, ws.max_batch)
        self.dispatcher: Dispatcher[Event] | None = None

    async def start(self) -> None:
        """Load the engine, time it, and build the dispatcher around its capabilities."""
        await self.engine.start()
        ws = self.settings.worker
        caps = self.engine.capabilities
        self.config = SchedulerConfig.from_settings(ws, min(ws.max_batch, caps.max_batch))
        latency = LatencyModel(LatencyPrior(), token_fractions=ws.degrade_fractions)
        if ws.warmup:
            await warm_up(self.engine, latency, self.config)
        policy: BatchPolicy[Event] = make_policy(ws.policy, self.config, latency)
        inflight = ws.max_inflight if caps.inflight_batching else 1
        self.dispatcher = Dispatcher(self.engine, policy, wall_us, self._deliver,
                                     telemetry=self.telemetry, pool=self.pool,
                                     max_inflight=inflight)

    async def close(self) -> None:
        """Release the engine."""
        await self.engine.close()

    async def serve(self, events: AsyncIterable[Event]) -> None:
        """Admit events until the stream ends; raise if dispatching or producing fails."""
        assert self.dispatcher is not None, "start() first"
        dispatching = asyncio.ensure_future(self.dispatcher.run())
        intake = asyncio.ensure_future(self._intake(events))
        try:
            done, _ = await asyncio.wait({dispatching, intake},
                                         return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in (dispatching, intake):
                task.cancel()

    async def _intake(self, events: AsyncIterable[Event]) -> None:
        assert self.dispatcher is not None
        async for event in events:
            self.outbox.raise_if_failed()
            try:
                request = decode_as(Request, event.value, max_bytes=self.max_bytes)
            except BadInput as error:
                await self.outbox.dead_letter(event, error)
                continue
            if self.dispatcher.full:
                # Stop taking events: the topic's channel (bounded at max_queue) fills and
                # Faust stops fetching its partitions until it drains. (Faust's own
                # pause_partitions drops records already fetched for a paused partition.)
                log.info("admission queue full, reading paused", extra={
                    "stage": STAGE, "pool": self.pool, "topic": self.topic})
                await self.dispatcher.wait_space()
            self.dispatcher.admit(event, request)

    async def _deliver(self, outcomes: list[Outcome[Event]]) -> None:
        for outcome in outcomes:
            if isinstance(outcome.result, ItemFailure):
                await self.outbox.dead_letter(outcome.handle, BadInput(
                    f"engine {self.engine.name} failed on this request: "
                    f"{outcome.result.reason}"))
                continue
            response = build_response(outcome, self.engine.name)
            await self._respond(outcome.request, response, outcome.handle)

    async def _respond(self, request: Request, response: Response, event: Event) -> None:
        sent = wall_us()
        response = response.model_copy(
            update={"timeline": response.timeline.model_copy(update={"responded_us": sent})})
        budget_s = self.settings.slo.budget_ms(response.slo_class) / 1000.0
        expired = response.status == "expired"

        def delivered() -> None:
            acked = wall_us()
            self.telemetry.stage("respond", (acked - sent) / 1e6, route=response.route,
                                 pool=self.pool, slo_class=response.slo_class)
            if expired:
                self.telemetry.expired(slo_class=response.slo_class)
            else:
                self.telemetry.e2e((acked - response.timeline.capture_us) / 1e6,
                                   route=response.route, slo_class=response.slo_class,
                                   budget_s=budget_s)

        await self.outbox.send(request.reply_topic or catalog.RESPONSES,
                               response.stream_id.encode(), response, ack=[event],
                               on_delivered=delivered)


def register(app: faust.App, settings: Settings, telemetry: Telemetry) -> WorkerTask:
    """Register the worker agent of ``settings.worker.pool`` on ``app``."""
    task = WorkerTask(app, settings, telemetry)
    # A bounded channel: when it is full Faust stops fetching the topic's partitions.
    requests = app.topic(task.topic, key_serializer="raw", value_serializer="raw",
                         maxsize=settings.worker.max_queue)

    @app.agent(requests, name=f"lockstep.worker.{task.pool}")
    async def worker(stream: StreamT[bytes]) -> None:
        await task.serve(cast(faust.Stream[bytes], stream).noack().events())

    return task
