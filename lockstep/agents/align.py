"""The ``align`` agent: media.* → aligned.windows (late tokens → late, bad ones → deadletter).

Decodes each token, hands it to :class:`~lockstep.streams.aligner.Aligner` and produces what comes
out. A token's event is acknowledged only when the record that settles it (its window, its
late record or its dead letter) is acknowledged by the broker, so a crash replays every
token whose window was not yet written. A timer emits windows whose deadline passed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import faust
from faust.types import TP, EventT, StreamT

from lockstep.agents.outbox import Outbox, wall_us
from lockstep.errors import BadInput, DecodeError
from lockstep.streams.aligner import Aligner, AlignOutput, TokenKey
from lockstep.streams.rate import RateController, effective_fps
from lockstep.streams.settings import Settings
from lockstep.streams.telemetry import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import TOKEN_KINDS, decode, peek_kind
from lockstep.topics.schemas import Modality, Token

log = logging.getLogger(__name__)
STAGE = "align"


class AlignTask:
    """State of the align role in one process: the operator and the unacknowledged events."""

    def __init__(self, app: faust.App, settings: Settings, telemetry: Telemetry) -> None:
        slo = settings.slo
        self.aligner = Aligner(settings.align, slo.class_of)
        self.rate = RateController(
            max_stride=settings.align.max_stride,
            enabled=settings.align.allow_downsampling
            and slo.classes[slo.default_class].drop_frames)
        self.risk_budget_us = slo.budget_ms(slo.default_class) * 1000 * (
            settings.align.budget_share)
        #: Whether an SLO class is in degraded mode (set from slo.events by the runner);
        #: degraded, windows are sampled down to one per ``slo.breach.degraded_stride`` frames.
        self.degraded: Callable[[str], bool] = lambda slo_class: False
        self.degraded_stride = slo.breach.degraded_stride
        self._reported_us = 0
        self.outbox = Outbox(app, STAGE)
        self.telemetry = telemetry
        self.max_bytes = settings.kafka.max_record_bytes
        self.pending: dict[TokenKey, EventT[bytes]] = {}
        self.partition_of: dict[str, int] = {}
        self.app = app
        self.read: dict[TP, int] = {}
        self.catchup_records = settings.align.catchup_records
        self.catchup_s = settings.align.catchup_lag_ms / 1000.0
        self.oldest_read_s = 0.0  # largest transport lag read since the last tick
        self.behind_at_us = 0  # when the task was last seen behind

    async def on_event(self, event: EventT[bytes]) -> None:
        """Decode and align one media record."""
        self.outbox.raise_if_failed()
        now = wall_us()
        message = event.message
        self.read[message.tp] = message.offset
        transport_s = max(0.0, now / 1e6 - message.timestamp)
        self.oldest_read_s = max(self.oldest_read_s, transport_s)
        if transport_s > self.catchup_s:
            self.behind_at_us = now
            self.aligner.catching_up = True  # at once: a fetch can hold seconds of backlog
        self.telemetry.stage("transport", transport_s)
        try:
            token = self._decode(message.topic, message.key, event.value)
        except BadInput as error:
            self.telemetry.token(_modality_label(message.topic), "deadletter")
            await self.outbox.dead_letter(event, error)
            return
        key = TokenKey(token.stream_id, token.modality, token.seq)
        out = self.aligner.add(token, now, raw=event.value)
        if key in out.duplicates:
            self.telemetry.token(token.modality, "duplicate")
            event.ack()
        elif out.rejected:
            self.telemetry.token(token.modality, "deadletter")
            await self.outbox.dead_letter(event, BadInput(out.rejected[0].reason))
        elif out.late:
            self.telemetry.token(token.modality, "late")
            await self.outbox.send(catalog.LATE, token.stream_id.encode(), out.late[0],
                                   ack=[event])
        else:
            self.pending[key] = event
            self.partition_of[token.stream_id] = message.partition
        await self.emit(out)

    async def on_tick(self) -> None:
        """Emit the windows whose wait deadline has passed."""
        self.outbox.raise_if_failed()
        now = wall_us()
        # Behind the log end by many records, or reading records produced long ago: a
        # backlog, which arrives topic by topic. It is over once neither has held for a
        # while (fetches come in bursts; between two, the signs can look clear).
        if self.backlog() > self.catchup_records or self.oldest_read_s > self.catchup_s:
            self.behind_at_us = now
        self.aligner.catching_up = now - self.behind_at_us < 500_000
        self.oldest_read_s = 0.0
        await self.emit(self.aligner.poll(now))
        if now - self._reported_us > 1_000_000:
            self._reported_us = now
            self.report_clocks()

    def backlog(self) -> int:
        """Records between what this task read and the log end, worst media partition.

        Read positions, not committed offsets: ``lockstep_consumer_lag`` (lockstep.agents.lag) is
        the committed lag.
        """
        consumer = self.app.consumer
        per_topic: dict[str, int] = {}
        for tp in consumer.assignment():
            if tp.topic not in catalog.MODALITY_OF_TOPIC:
                continue
            try:
                end = consumer.highwater(tp)
            except AssertionError:  # aiokafka asserts assignment; a rebalance is under way
                continue
            if end is None:  # no fetch has answered for it yet
                continue
            read = self.read.get(tp)
            if read is None:
                # Nothing read from it yet: its position is unknown here (it may sit at a
                # committed offset with nothing new). Old records, once read, still tell.
                continue
            behind = max(0, end - (read + 1))
            per_topic[tp.topic] = max(per_topic.get(tp.topic, 0), behind)
        self.aligner.backlogged = frozenset(
            catalog.MODALITY_OF_TOPIC[t] for t, behind in per_topic.items() if behind > 0)
        return max(per_topic.values(), default=0)

    def report_clocks(self) -> None:
        """Publish the frame rates and the clock offsets and jitter as gauges."""
        streams = self.aligner.streams().values()
        fps = [effective_fps([], c.period_us) for st in streams
               if (c := st.clocks.get(Modality.VIDEO)) is not None and c.ready]
        if fps:
            mean = sum(fps) / len(fps)
            self.telemetry.align_fps.labels("effective").set(mean)
            self.telemetry.align_fps.labels("target").set(mean / self.aligner.stride)
        for m in Modality:
            offsets = [st.offsets[m] for st in streams if m in st.offsets]
            jitter = [j for st in streams if (c := st.clocks.get(m)) is not None
                      and (j := c.report().jitter_us) is not None]
            if offsets:
                self.telemetry.clock_offset.labels(m.value).set(
                    sum(offsets) / len(offsets) / 1000)
            if jitter:
                self.telemetry.clock_jitter.labels(m.value).set(sum(jitter) / len(jitter) / 1000)

    async def emit(self, out: AlignOutput) -> None:
        """Produce the windows of an aligner output, acknowledging their tokens on delivery."""
        for window in out.windows:
            events = []
            for modality, seqs in window.members.items():
                for seq in seqs:
                    event = self.pending.pop(TokenKey(window.stream_id, modality, seq), None)
                    if event is not None:
                        events.append(event)
                self.telemetry.token(modality, "window", len(seqs))
            timeline = window.timeline
            held = timeline.aligned_us - timeline.ingest_us
            self.telemetry.stage(STAGE, held / 1e6, slo_class=window.slo_class)
            spent = timeline.aligned_us - timeline.capture_us
            self.rate.floor = self.degraded_stride if self.degraded(window.slo_class) else 1
            self.aligner.stride = self.rate.observe(spent / self.risk_budget_us)
            await self.outbox.send(catalog.ALIGNED, window.stream_id.encode(), window,
                                   ack=events)

    def on_revoked(self, revoked: set[TP]) -> None:
        """Forget streams of revoked partitions; their unacknowledged tokens replay elsewhere."""
        lost = {tp.partition for tp in revoked if tp.topic in catalog.MODALITY_OF_TOPIC}
        streams = {s for s, p in self.partition_of.items() if p in lost}
        if not streams:
            return
        self.aligner.forget(streams)
        for key in [k for k in self.pending if k.stream_id in streams]:
            del self.pending[key]
        for stream_id in streams:
            del self.partition_of[stream_id]
        log.info("forgot %d streams of revoked partitions", len(streams),
                 extra={"stage": STAGE})

    def _decode(self, topic: str, key: object, value: bytes | None) -> Token:
        kind = peek_kind(value)
        if kind not in TOKEN_KINDS:
            raise DecodeError(f"a {kind.name.lower()} record is not a media token")
        token = decode(value, max_bytes=self.max_bytes)
        expected = catalog.MODALITY_OF_TOPIC.get(topic)
        if expected is None or token.modality is not expected:  # type: ignore[attr-defined]
            raise DecodeError(f"a {kind.name.lower()} token does not belong on {topic}")
        stream_id: str = token.stream_id  # type: ignore[attr-defined]
        if key != stream_id.encode():
            # Partitioning is by key: a token keyed otherwise would reach another align task
            # than the rest of its stream and make a second window with the same key.
            raise DecodeError(f"record key {key!r} is not the token's stream_id {stream_id!r}")
        return token  # type: ignore[return-value]


def _modality_label(topic: str) -> str:
    modality: Modality | None = catalog.MODALITY_OF_TOPIC.get(topic)
    return modality.value if modality is not None else topic


def register(app: faust.App, settings: Settings, telemetry: Telemetry) -> AlignTask:
    """Register the align agent, its deadline timer and its rebalance hook on ``app``."""
    task = AlignTask(app, settings, telemetry)
    media = app.topic(*catalog.MEDIA.values(), key_serializer="raw", value_serializer="raw")
    tick_s = max(0.001, min(0.01, settings.align.max_wait_ms / 4000.0))

    @app.agent(media, name="lockstep.align")
    async def align(stream: StreamT[bytes]) -> None:
        async for event in cast(faust.Stream[bytes], stream).noack().events():
            await task.on_event(event)

    @app.timer(tick_s, name="lockstep.align.deadlines")  # type: ignore[untyped-decorator]
    async def deadlines() -> None:
        await task.on_tick()

    @app.on_partitions_revoked.connect
    async def revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        # Faust sends the revoked set as the first argument after the sender.
        task.on_revoked(set(args[0]) if args else set())

    return task
