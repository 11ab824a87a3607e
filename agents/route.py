"""The ``route`` agent: aligned.windows → requests.<pool>.

Decodes each window, asks :class:`~streams.router.Router` for the request and produces it;
the window's event is acknowledged when the request is.
"""

from __future__ import annotations

from typing import cast

import faust
from faust.types import EventT, StreamT

from agents.outbox import Outbox, wall_us
from lockstep.errors import BadInput
from streams.router import Router
from streams.settings import Settings
from streams.telemetry import Telemetry
from topics import catalog
from topics.codec import decode_as
from topics.schemas import Window

STAGE = "route"


class RouteTask:
    """State of the route role in one process."""

    def __init__(self, app: faust.App, settings: Settings, telemetry: Telemetry) -> None:
        self.router = Router(settings.route, settings.slo)
        self.outbox = Outbox(app, STAGE)
        self.telemetry = telemetry
        self.max_bytes = settings.kafka.max_record_bytes

    async def on_event(self, event: EventT[bytes]) -> None:
        """Route one window."""
        self.outbox.raise_if_failed()
        received = wall_us()
        try:
            window = decode_as(Window, event.value, max_bytes=self.max_bytes)
        except BadInput as error:
            await self.outbox.dead_letter(event, error)
            return
        request = self.router.route(window, received)
        self.telemetry.windows.labels(request.route).inc()
        self.telemetry.stage(STAGE, (wall_us() - received) / 1e6, route=request.route,
                             pool=request.pool, slo_class=window.slo_class)
        await self.outbox.send(catalog.requests_topic(request.pool), window.stream_id.encode(),
                               request, ack=[event])


def register(app: faust.App, settings: Settings, telemetry: Telemetry) -> RouteTask:
    """Register the route agent on ``app``."""
    task = RouteTask(app, settings, telemetry)
    windows = app.topic(catalog.ALIGNED, key_serializer="raw", value_serializer="raw")

    @app.agent(windows, name="lockstep.route")
    async def route(stream: StreamT[bytes]) -> None:
        async for event in cast(faust.Stream[bytes], stream).noack().events():
            await task.on_event(event)

    return task
