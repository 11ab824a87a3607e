"""The ``worker`` agent: requests.<pool> → responses (or the request's reply topic).

Collects batches with ``max_batch`` / ``max_wait``, runs them through
:class:`~engines.worker.Worker`, produces the responses and waits for the broker to
acknowledge them before the batch's events are acknowledged (``take_events`` acks after
the body returns).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, cast

import faust
from faust.types import EventT, StreamT

from agents.outbox import Outbox, wall_us
from engines.registry import create_engine
from engines.worker import Worker
from lockstep.errors import BadInput, EngineError
from streams.settings import Settings
from streams.telemetry import Telemetry
from topics import catalog
from topics.codec import decode_as
from topics.schemas import Request, Response

log = logging.getLogger(__name__)
STAGE = "worker"


class WorkerTask:
    """State of one pool's worker role in one process."""

    def __init__(self, app: faust.App, settings: Settings, telemetry: Telemetry) -> None:
        self.pool = settings.worker.pool
        self.engine = create_engine(settings.worker, telemetry)
        self.worker = Worker(self.engine, telemetry, self.pool, wall_us)
        self.outbox = Outbox(app, STAGE)
        self.telemetry = telemetry
        self.settings = settings
        self.max_bytes = settings.kafka.max_record_bytes

    async def start(self) -> None:
        """Load the engine."""
        await self.engine.start()

    async def close(self) -> None:
        """Release the engine."""
        await self.engine.close()

    async def on_batch(self, events: Sequence[EventT[bytes]]) -> None:
        """Infer one batch and produce its responses; return once all are acknowledged."""
        self.outbox.raise_if_failed()
        futures: list[asyncio.Future[Any]] = []
        requests: list[Request] = []
        events_of: dict[int, EventT[bytes]] = {}
        for event in events:
            try:
                request = decode_as(Request, event.value, max_bytes=self.max_bytes)
            except BadInput as error:
                futures.append(await self.outbox.dead_letter(event, error))
                continue
            events_of[id(request)] = event
            requests.append(request)
        self.telemetry.queue_depth.labels(self.pool).set(len(requests))
        try:
            answered = list(zip(requests, await self.worker.process(requests), strict=True))
        except EngineError as error:
            if error.retriable:
                raise  # the whole batch is replayed after the restart
            log.warning("engine failed on a batch of %d, retrying one by one: %s",
                        len(requests), error, extra={"stage": STAGE, "pool": self.pool})
            answered = await self._one_by_one(requests, events_of, futures)
        for request, response in answered:
            futures.append(await self._respond(request, response))
        self.telemetry.queue_depth.labels(self.pool).set(0)
        await asyncio.gather(*futures)

    async def _one_by_one(self, requests: Sequence[Request],
                          events_of: dict[int, EventT[bytes]],
                          futures: list[asyncio.Future[Any]]) -> list[tuple[Request, Response]]:
        """Infer requests singly; one the engine cannot handle alone is dead-lettered.

        Without this, a request that breaks the engine would crash every worker that
        replays it (a poison pill).
        """
        answered = []
        for request in requests:
            try:
                [response] = await self.worker.process([request])
            except EngineError as error:
                if error.retriable:
                    raise
                futures.append(await self.outbox.dead_letter(
                    events_of[id(request)], BadInput(f"engine failed on this request: {error}")))
                continue
            answered.append((request, response))
        return answered

    async def _respond(self, request: Request, response: Response) -> asyncio.Future[Any]:
        sent = wall_us()
        response = response.model_copy(
            update={"timeline": response.timeline.model_copy(update={"responded_us": sent})})
        budget_s = self.settings.slo.budget_ms(response.slo_class) / 1000.0

        def delivered() -> None:
            acked = wall_us()
            self.telemetry.stage("respond", (acked - sent) / 1e6, route=response.route,
                                 pool=self.pool, slo_class=response.slo_class)
            self.telemetry.e2e((acked - response.timeline.capture_us) / 1e6,
                               route=response.route, slo_class=response.slo_class,
                               budget_s=budget_s)

        return await self.outbox.send(request.reply_topic or catalog.RESPONSES,
                                      response.stream_id.encode(), response,
                                      on_delivered=delivered)


def register(app: faust.App, settings: Settings, telemetry: Telemetry) -> WorkerTask:
    """Register the worker agent of ``settings.worker.pool`` on ``app``."""
    task = WorkerTask(app, settings, telemetry)
    requests = app.topic(catalog.requests_topic(task.pool), key_serializer="raw",
                         value_serializer="raw")
    max_wait_s = settings.worker.max_wait_ms / 1000.0

    @app.agent(requests, name=f"lockstep.worker.{task.pool}")
    async def worker(stream: StreamT[bytes]) -> None:
        batches = cast(faust.Stream[bytes], stream).take_events(
            settings.worker.max_batch, within=max_wait_s)
        async for events in batches:
            await task.on_batch(events)

    return task
