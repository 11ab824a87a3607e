"""The ``route`` agent: aligned.windows → requests.<pool> (or a response for drops).

Decodes each window of a batch, asks :class:`~lockstep.streams.route.router.Router` for the
request and produces it; the window is acknowledged when the request is. A window that
reaches route already past its deadline is answered at once (status ``expired``, detail
``stale``) instead of queueing work no engine can finish in time; a window with nothing
usable is answered ``dropped``: every window gets exactly one answer. On takeover, the
requests and responses the previous owner wrote are read back so a replayed window is not
routed twice (:mod:`lockstep.streams.replay`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from lockstep.agents.memory import MemoryTrimmer
from lockstep.config.settings import Settings
from lockstep.errors import BadInput, ReasonCode
from lockstep.kafka.consumer import RoleConsumer
from lockstep.kafka.outbox import Outbox, send_dead_letter, wall_us
from lockstep.kafka.types import Record, TopicPartition
from lockstep.streams.dedupe import RecentKeys
from lockstep.streams.replay import Output, ReplayGuard, settle_keys
from lockstep.streams.route.router import Router
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import Response, Window

log = logging.getLogger(__name__)
STAGE = "route"


class RouteAgent:
    """The route role in one process."""

    stage = STAGE

    def __init__(self, settings: Settings, telemetry: Telemetry, outbox: Outbox,
                 pools: Sequence[str]) -> None:
        route = settings.route
        self.router = Router(route, settings.slo, max_streams=route.max_streams,
                             idle_ttl_us=int(route.stream_ttl_ms * 1000))
        self.trimmer = MemoryTrimmer()
        #: Windows routed lately: a second copy (a produce retried) is not routed again.
        self.recent = RecentKeys()
        self.slo = settings.slo
        self.outbox = outbox
        self.telemetry = telemetry
        self.max_bytes = settings.kafka.max_record_bytes
        self.outputs: tuple[str, ...] = (*(catalog.requests_topic(p) for p in pools),
                                         catalog.RESPONSES, catalog.DEADLETTER)
        self._p99_us = 0.0
        self._p99_at_us = 0
        self._source: RoleConsumer | None = None
        self._replay: ReplayGuard[TopicPartition] = ReplayGuard()
        #: Whether an SLO class is in degraded mode (set from slo.events by the runner).
        self.degraded: Callable[[str], bool] = lambda slo_class: False

    def bind(self, consumer: RoleConsumer) -> None:
        """Take the consumer whose records this agent acknowledges."""
        self._source = consumer

    async def on_assigned(self, partitions: Sequence[TopicPartition],
                          replay: ReplayGuard[TopicPartition], outputs: Iterable[Output]) -> None:
        """Learn which windows the previous owner already routed."""
        self._replay = replay
        settle_keys(replay, outputs, STAGE)

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Nothing is buffered per partition: nothing to forget."""
        self._replay.drop(list(partitions))

    async def on_tick(self, now_us: int) -> None:
        """Route has no deadlines of its own; after a flood of streams, memory goes back."""
        self.trimmer.observe(self.router.tracked_streams)

    def wake_us(self) -> int | None:
        """No deadlines: ``tick_ms`` paces the ticks."""
        return None

    async def on_batch(self, records: Sequence[Record], now_us: int) -> None:
        """Route a batch of windows."""
        self.outbox.raise_if_failed()
        assert self._source is not None, "bind() first"
        replay = self._replay
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            await self._one(tp, record, replay)
            if replay.until:
                replay.passed(tp, record.offset + 1)

    async def _one(self, tp: TopicPartition, record: Record,
                   replay: ReplayGuard[TopicPartition]) -> None:
        assert self._source is not None
        ack = self._source.ack
        offset = record.offset

        def acked() -> None:
            ack(tp, offset)

        received = wall_us()
        guarded = bool(replay.until) and replay.guards(tp, offset)
        if guarded and (tp.topic, tp.partition, offset) in replay.dead:
            acked()
            return
        try:
            window = decode_as(Window, record.value, max_bytes=self.max_bytes)
            contradiction = self.router.contradiction(window)
            if contradiction is not None:
                raise BadInput(f"contradictory window: {contradiction}",
                               ReasonCode.CONTRADICTORY)
        except BadInput as error:
            await send_dead_letter(self.outbox, stage=STAGE, topic=tp.topic,
                                   partition=tp.partition, offset=offset, key=record.key,
                                   value=record.value, error=error, on_ack=acked)
            return
        key = window.stream_id.encode()
        if guarded and (window.stream_id, window.window_seq) in replay.keys:
            acked()
            return
        if self.recent.seen(window.stream_id, window.window_seq):
            self.telemetry.duplicates.labels(STAGE).inc()
            acked()
            return
        start_us = window.budget_start_us
        deadline_us = start_us + int(self.slo.budget_ms(window.slo_class) * 1000)
        if received >= deadline_us:
            await self._answer(window, "none", received, acked, status="expired",
                               reason="stale", detail=(
                f"stale: reached route {(received - start_us) / 1000:.1f} ms "
                f"after {'align read it' if window.replay else 'capture'}, past the "
                f"{window.slo_class} budget of {self.slo.budget_ms(window.slo_class):.0f} ms"))
            return
        routed = self.router.route(window, received, self._downstream_p99_us(received),
                                   degraded=self.degraded(window.slo_class))
        self.telemetry.windows.labels(routed.route).inc()
        request = routed.request
        if request is not None and request.token_drop is not None:
            self.telemetry.token_drop.labels(routed.route).observe(request.token_drop.dropped)
        pool = request.pool if request is not None else ""
        self.telemetry.stage(STAGE, (wall_us() - received) / 1e6, route=routed.route,
                             pool=pool, slo_class=window.slo_class)
        if request is not None:
            await self.outbox.send_record(catalog.requests_topic(pool), key, request, acked)
            return
        # Nothing usable: the window still gets its answer, so every window has one.
        await self._answer(window, routed.route, received, acked, status="dropped",
                           reason=routed.reason)

    async def _answer(self, window: Window, route: str, received: int,
                      acked: Callable[[], None], *, status: str, reason: str = "",
                      detail: str = "") -> None:
        responded = wall_us()
        response = Response(
            stream_id=window.stream_id, window_seq=window.window_seq, route=route,
            pool="", engine="none", slo_class=window.slo_class, output="", scores={},
            missing=window.missing, deadline_us=window.timeline.capture_us,
            timeline=window.timeline.model_copy(update={"routed_us": received,
                                                        "responded_us": responded}),
            status=status, reason=reason, detail=detail,  # type: ignore[arg-type]
            e2e_us=responded - window.timeline.capture_us, replay=window.replay)
        if window.replay:
            self.telemetry.replay(slo_class=window.slo_class, status=status)
        elif status == "expired":
            self.telemetry.expired(slo_class=window.slo_class)
        await self.outbox.send_record(catalog.RESPONSES, window.stream_id.encode(), response,
                                      acked)

    def _downstream_p99_us(self, now_us: int) -> float:
        """Live P99 of queueing plus inference in this process (0 where they run elsewhere)."""
        if now_us - self._p99_at_us > 1_000_000:
            stats = self.telemetry.stage_stats()
            self._p99_us = sum(stats[s].p99_ms * 1000 for s in ("queue", "infer") if s in stats)
            self._p99_at_us = now_us
        return self._p99_us
