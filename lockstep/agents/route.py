"""The ``route`` agent: aligned.windows → requests.<pool>.

Decodes each window, asks :class:`~lockstep.streams.router.Router` for the request and produces it;
the window's event is acknowledged when the request is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import faust
from faust.types import EventT, StreamT

from lockstep.agents.outbox import Outbox, wall_us
from lockstep.errors import BadInput
from lockstep.streams.router import Router
from lockstep.streams.settings import Settings
from lockstep.streams.telemetry import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import Response, Window

STAGE = "route"


class RouteTask:
    """State of the route role in one process."""

    def __init__(self, app: faust.App, settings: Settings, telemetry: Telemetry) -> None:
        self.router = Router(settings.route, settings.slo)
        self.outbox = Outbox(app, STAGE)
        self.telemetry = telemetry
        self.max_bytes = settings.kafka.max_record_bytes
        self._p99_us = 0.0
        self._p99_at_us = 0
        #: Whether an SLO class is in degraded mode (set from slo.events by the runner).
        self.degraded: Callable[[str], bool] = lambda slo_class: False

    async def on_event(self, event: EventT[bytes]) -> None:
        """Route one window."""
        self.outbox.raise_if_failed()
        received = wall_us()
        try:
            window = decode_as(Window, event.value, max_bytes=self.max_bytes)
        except BadInput as error:
            await self.outbox.dead_letter(event, error)
            return
        contradiction = self.router.contradiction(window)
        if contradiction is not None:
            await self.outbox.dead_letter(event, BadInput(f"contradictory window: {contradiction}"))
            return
        routed = self.router.route(window, received, self._downstream_p99_us(received),
                                   degraded=self.degraded(window.slo_class))
        self.telemetry.windows.labels(routed.route).inc()
        if routed.request is not None and routed.request.token_drop is not None:
            self.telemetry.token_drop.labels(routed.route).observe(
                routed.request.token_drop.dropped)
        request = routed.request
        pool = request.pool if request is not None else ""
        self.telemetry.stage(STAGE, (wall_us() - received) / 1e6, route=routed.route,
                             pool=pool, slo_class=window.slo_class)
        key = window.stream_id.encode()
        if request is not None:
            await self.outbox.send(catalog.requests_topic(pool), key, request, ack=[event])
            return
        # Nothing usable: the window still gets its answer, so every window has one.
        dropped = Response(
            stream_id=window.stream_id, window_seq=window.window_seq, route=routed.route,
            pool="", engine="none", slo_class=window.slo_class, output="", scores={},
            missing=window.missing, deadline_us=window.timeline.capture_us,
            timeline=window.timeline.model_copy(update={"routed_us": received,
                                                        "responded_us": wall_us()}),
            status="dropped", reason=routed.reason)
        await self.outbox.send(catalog.RESPONSES, key, dropped, ack=[event])

    def _downstream_p99_us(self, now_us: int) -> float:
        """Live P99 of queueing plus inference in this process (0 where they run elsewhere)."""
        if now_us - self._p99_at_us > 1_000_000:
            stats = self.telemetry.stage_stats()
            self._p99_us = sum(stats[s].p99_ms * 1000 for s in ("queue", "infer") if s in stats)
            self._p99_at_us = now_us
        return self._p99_us


def register(app: faust.App, settings: Settings, telemetry: Telemetry) -> RouteTask:
    """Register the route agent on ``app``."""
    task = RouteTask(app, settings, telemetry)
    windows = app.topic(catalog.ALIGNED, key_serializer="raw", value_serializer="raw")

    @app.agent(windows, name="lockstep.route")
    async def route(stream: StreamT[bytes]) -> None:
        async for event in cast(faust.Stream[bytes], stream).noack().events():
            await task.on_event(event)

    return task
