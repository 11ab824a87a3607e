"""SLO breach events: detection in every process, degraded mode where windows are made.

:class:`SloTask` feeds the process's stage observations to a
:class:`~lockstep.telemetry.slo.SloMonitor` and, on a timer, produces a
:class:`~lockstep.topics.schemas.SloEvent` to ``slo.events`` for each breach raised,
re-announced or cleared. :class:`SloListener` reads ``slo.events`` from its end without a
consumer group (every process sees every event) into a
:class:`~lockstep.telemetry.slo.Degradation`, which the align and route roles ask whether a
window's class is in degraded mode.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from lockstep.config.settings import Settings
from lockstep.errors import BadInput
from lockstep.kafka.outbox import Outbox, wall_us
from lockstep.kafka.reader import TopicReader
from lockstep.telemetry.metrics import Telemetry, monotonic_us
from lockstep.telemetry.slo import BREACH, Degradation, SloMonitor, Transition
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import SloEvent

log = logging.getLogger(__name__)
STAGE = "slo"


class SloTask:
    """Breach detection over this process's observations."""

    def __init__(self, settings: Settings, telemetry: Telemetry, outbox: Outbox,
                 name: str) -> None:
        slo = settings.slo
        self.monitor = SloMonitor(slo)
        telemetry.watch(self.monitor, {c: slo.budget_tree(c) for c in slo.classes},
                        default_class=slo.default_class)
        self.telemetry = telemetry
        self.outbox = outbox
        self.source = f"{name}@{socket.gethostname()}:{os.getpid()}"

    async def on_tick(self) -> list[SloEvent]:
        """Evaluate the monitor; produce and return the events of its transitions."""
        self.outbox.raise_if_failed()
        events = []
        for transition in self.monitor.evaluate(monotonic_us()):
            event = self.event(transition)
            if event.kind == BREACH and not transition.renewed:
                self.telemetry.slo_breaches.labels(event.stage, event.slo_class).inc()
            log.warning("slo %s: %s p99 %.1f ms, budget %.1f ms", event.kind, event.stage,
                        event.p99_ms, event.budget_ms,
                        extra={"stage": event.stage, "slo_class": event.slo_class})
            await self._publish(event)
            events.append(event)
        return events

    async def withdraw(self) -> list[SloEvent]:
        """Announce that the breaches this process holds are over (it is stopping)."""
        events = [self.event(t) for t in self.monitor.withdraw(monotonic_us())]
        for event in events:
            log.info("slo withdrawn on stop: %s", event.stage,
                     extra={"stage": event.stage, "slo_class": event.slo_class})
            await self._publish(event)
        return events

    async def _publish(self, event: SloEvent) -> None:
        """Produce an event to ``slo.events``, keyed by its class."""
        await self.outbox.send_record(catalog.SLO_EVENTS, event.slo_class.encode(), event)

    def event(self, t: Transition) -> SloEvent:
        """The wire record of a transition."""
        return SloEvent(kind=t.kind, stage=t.stage, slo_class=t.slo_class,  # type: ignore[arg-type]
                        p99_ms=round(t.p99_ms, 3), budget_ms=t.budget_ms, samples=t.samples,
                        consecutive=t.consecutive, degrade=t.degrade, source=self.source,
                        at_us=wall_us())


class SloListener:
    """Reads ``slo.events`` into the degraded mode of each SLO class."""

    def __init__(self, settings: Settings, telemetry: Telemetry) -> None:
        self.degradation = Degradation(settings.slo.breach.ttl_ms)
        self.events: list[SloEvent] = []
        self._settings = settings
        self._telemetry = telemetry
        self._reader = TopicReader(settings.kafka, [catalog.SLO_EVENTS],
                                   what="slo.events listener",
                                   fetch_wait_ms=max(settings.kafka.fetch_max_wait_ms, 100),
                                   connect_timeout_s=None)
        self._task: asyncio.Task[None] | None = None
        for name in settings.slo.classes:
            telemetry.slo_degraded.labels(name).set(0)

    def degraded(self, slo_class: str) -> bool:
        """Whether ``slo_class`` is in degraded mode now."""
        return self.degradation.degraded(slo_class, monotonic_us())

    async def start(self) -> None:
        """Assign ``slo.events`` at its end and start reading."""
        await self._reader.start()
        try:
            await self._reader.seek_to_end()
        except BaseException:
            await self._reader.stop()
            raise
        self._task = asyncio.create_task(self._run(), name="lockstep.slo.listener")

    async def stop(self) -> None:
        """Stop reading."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._reader.stop()

    def apply(self, event: SloEvent) -> None:
        """Take one event and refresh the degraded-mode gauge."""
        now = monotonic_us()
        self.degradation.apply(event.kind, event.source, event.stage, event.slo_class,
                               event.degrade, now)
        self.events.append(event)
        degraded = self.degradation.classes(now)
        for name in {*self._settings.slo.classes, event.slo_class}:
            self._telemetry.slo_degraded.labels(name).set(1 if name in degraded else 0)

    async def _run(self) -> None:
        while True:
            batches = await self._reader.fetch(timeout_ms=500, max_records=500)
            for records in batches.values():
                for record in records:
                    try:
                        event = decode_as(SloEvent, record.value)
                    except BadInput as error:
                        log.warning("undecodable record on %s: %s", catalog.SLO_EVENTS,
                                    error.reason, extra={"stage": STAGE,
                                                         "topic": catalog.SLO_EVENTS,
                                                         "offset": record.offset})
                        continue
                    self.apply(event)
            if not batches:
                # Expire breaches that were not re-announced.
                degraded = self.degradation.classes(monotonic_us())
                for name in self._settings.slo.classes:
                    self._telemetry.slo_degraded.labels(name).set(int(name in degraded))
