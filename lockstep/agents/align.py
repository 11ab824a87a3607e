"""The ``align`` agent: media.* → aligned.windows (late tokens → late, bad ones → deadletter).

Decodes each token of a batch, hands it to :class:`~lockstep.streams.align.aligner.Aligner` and
produces what comes out. A token is acknowledged (its offset becomes committable) only
when the record that settles it — its window, its late record or its dead letter — is
acknowledged by the broker, so a crash replays every token whose window was not written.
On takeover the windows, late records and dead letters the previous owner wrote are read
back (:mod:`lockstep.streams.replay`): tokens they settled are not settled again, and the
aligner resumes each stream where its windows ended, so a key is never written twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack

from lockstep.agents.memory import MemoryTrimmer
from lockstep.agents.shed import Shedder
from lockstep.config.settings import Settings
from lockstep.errors import BadInput, ReasonCode
from lockstep.kafka.consumer import RoleConsumer
from lockstep.kafka.outbox import Outbox, fit_late, send_dead_letter
from lockstep.kafka.readback import partition_of
from lockstep.kafka.types import Record, TopicPartition
from lockstep.streams.align.aligner import Aligner
from lockstep.streams.align.rate import RateController, effective_fps
from lockstep.streams.align.staleness import KEEP, SKIPPED, FastForward
from lockstep.streams.replay import Output, ReplayGuard
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import HEADER_SIZE, Kind, peek_kind
from lockstep.topics.edge import decode_token
from lockstep.topics.keys import HOP_BASE, TokenKey, late_tokens
from lockstep.topics.schemas import LateToken, Modality, Token, Window

log = logging.getLogger(__name__)
STAGE = "align"
#: How long after the last sign of a backlog align goes on catching up.
CATCHUP_US = 500_000
#: (partition, offset, record value) of a buffered token, by its ledger key.
Pending = tuple[TopicPartition, int, bytes | None]


class AlignAgent:
    """The align role in one process: the operator, the buffered tokens, the rate control."""

    stage = STAGE
    outputs: tuple[str, ...] = (catalog.ALIGNED, catalog.LATE, catalog.DEADLETTER)

    def __init__(self, settings: Settings, telemetry: Telemetry, outbox: Outbox) -> None:
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
        self.outbox = outbox
        self.telemetry = telemetry
        self.max_bytes = settings.kafka.max_record_bytes
        self.pending: dict[TokenKey, Pending] = {}
        self.read: dict[TopicPartition, int] = {}
        self.catchup_records = settings.align.catchup_records
        self.catchup_s = settings.align.catchup_lag_ms / 1000.0
        self.oldest_read_s = 0.0  # largest transport lag read since the last tick
        self.behind_at_us = 0  # when the task was last seen behind
        self._reported_us = 0
        self._source: RoleConsumer | None = None
        self._replay: ReplayGuard[TopicPartition] = ReplayGuard()
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._slo = slo
        self._stale_factor = settings.align.stale_after_budgets
        self._stale: dict[str, int] = {}
        self._fast_forward = FastForward(settings.align.stale_resume_share, self._at_end)
        self._shedder = Shedder(self._late)
        self.trimmer = MemoryTrimmer(compact=self._compact)

    def bind(self, consumer: RoleConsumer) -> None:
        """Take the consumer whose records this agent acknowledges."""
        self._source = consumer

    @property
    def source(self) -> RoleConsumer:
        """The consumer (bound before start)."""
        assert self._source is not None, "bind() first"
        return self._source

    # -- lifecycle ---------------------------------------------------------------------

    async def on_assigned(self, partitions: Sequence[TopicPartition],
                          replay: ReplayGuard[TopicPartition], outputs: Iterable[Output]) -> None:
        """Learn what the previous owner settled; resume its streams where they ended."""
        self._replay = replay
        # Where each media partition starts, so a backlog is known before its first record
        # is read: a takeover's backlog arrives topic by topic, and a modality whose records
        # have not come yet must still be waited for.
        started = self.source.start_positions
        for tp in partitions:
            if tp.topic in catalog.MODALITY_OF_TOPIC and tp in started:
                self.read[tp] = started[tp][0] - 1
        if self.backlog() > 0:
            self.behind_at_us = time.time_ns() // 1000
            self.aligner.catching_up = True
        for out in outputs:
            _settle(replay, out)
        for stream_id, resume in replay.resume.items():
            self.aligner.resume(stream_id, resume.closed_end_us, resume.last_window_seq)
        if replay.until:
            log.info("taking over %d media partitions: %d tokens and %d dead letters already "
                     "settled, %d streams resumed", len(partitions), len(replay.tokens),
                     len(replay.dead), len(replay.resume), extra={"stage": STAGE})

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Forget streams of revoked partitions; their unacknowledged tokens replay elsewhere."""
        media = [tp for tp in partitions if tp.topic in catalog.MODALITY_OF_TOPIC]
        if not media:
            return
        lost = {tp.partition for tp in media}
        count = len(self.source.consumer.partitions_for_topic(media[0].topic) or ())
        streams = {s for s in self.aligner.streams()
                   if count and partition_of(s.encode(), count) in lost}
        self.aligner.forget(streams)
        for key in [k for k in self.pending if k.stream_id in streams]:
            del self.pending[key]
        for tp in media:
            self.read.pop(tp, None)
        self._fast_forward.forget(media)
        self._replay.drop(media)
        log.info("forgot %d streams of revoked partitions", len(streams),
                 extra={"stage": STAGE})

    # -- records -----------------------------------------------------------------------

    async def on_batch(self, records: Sequence[Record], now_us: int) -> None:
        """Decode and align a batch of media records."""
        self.outbox.raise_if_failed()
        now_s = now_us / 1e6
        transport = [max(0.0, now_s - record.timestamp / 1000.0) for record in records]
        self.telemetry.stages("transport", transport)
        oldest = max(self.oldest_read_s, *transport) if transport else self.oldest_read_s
        for record in records:
            tp = self._tp(record.topic, record.partition)
            self.read[tp] = record.offset
            await self._one(tp, record, now_us)
            if self._replay.until:
                self._replay.passed(tp, record.offset + 1)
        await self._shedder.flush()
        self.oldest_read_s = oldest
        if oldest > self.catchup_s:
            self.behind_at_us = now_us
            self.aligner.catching_up = True  # at once: a fetch can hold seconds of backlog

    async def _one(self, tp: TopicPartition, record: Record, now_us: int) -> None:
        replay = self._replay
        guarded = bool(replay.until) and replay.guards(tp, record.offset)
        if guarded and (tp.topic, tp.partition, record.offset) in replay.dead:
            self._ack(tp, record.offset)
            self.telemetry.token(_modality_label(tp.topic), "replayed")
            return
        try:
            token = self._decode(tp.topic, record.key, record.value)
        except BadInput as error:
            self.telemetry.token(_modality_label(tp.topic), "deadletter")
            await self._dead_letter(tp, record, error)
            return
        key = TokenKey(token.stream_id, token.modality, token.seq)
        if guarded and key in replay.tokens:
            self._ack(tp, record.offset)
            self.telemetry.token(token.modality, "replayed")
            return
        # A replay was captured long before it was published: aligned, never stale.
        stale_us = 0 if token.replay else self._stale_us(token.stream_id)
        verdict = self._fast_forward.judge(tp, record.offset, now_us - token.t_us, stale_us)
        if verdict != KEEP:
            noted = self.aligner.settled_before(token, now_us)
            if noted.windows:  # (a stream evicted to make room emits what it held)
                await self.emit(noted.windows)
            if noted.duplicates:  # a second copy of a token already settled
                self.telemetry.token(token.modality, "duplicate")
                self._ack(tp, record.offset)
                return
            await self._shedder.shed(token, tp, record.offset, len(record.value or b""), now_us,
                                     stale_us, skipped=verdict == SKIPPED)
            return
        out = self.aligner.add(token, now_us, raw=record.value)
        if key in out.duplicates:
            self.telemetry.token(token.modality, "duplicate")
            self._ack(tp, record.offset)
        elif out.rejected:
            self.telemetry.token(token.modality, "deadletter")
            rejected = out.rejected[0]
            await self._dead_letter(tp, record, BadInput(rejected.reason, rejected.code))
        elif out.late:
            await self._late(out.late[0], [(tp, record.offset)])
        else:
            self.pending[key] = (tp, record.offset, record.value)
        if out.windows:
            await self.emit(out.windows)

    async def on_tick(self, now_us: int) -> None:
        """Emit the windows whose wait deadline has passed."""
        self.outbox.raise_if_failed()
        # Behind the log end by many records, or reading records produced long ago: a
        # backlog, which arrives topic by topic. It is over once neither has held for a
        # while (fetches come in bursts; between two, the signs can look clear).
        if self.backlog() > self.catchup_records or self.oldest_read_s > self.catchup_s:
            self.behind_at_us = now_us
        self.aligner.catching_up = now_us - self.behind_at_us < CATCHUP_US
        self.oldest_read_s = 0.0
        out = self.aligner.poll(now_us)
        if out.windows:
            await self.emit(out.windows)
        if now_us - self._reported_us > 1_000_000:
            self._reported_us = now_us
            self.report_clocks()
            streams = self.aligner.stream_count
            self.telemetry.align_streams.set(streams)
            self.trimmer.observe(streams)

    def wake_us(self) -> int | None:
        """The aligner's next deadline, or the end of catching up.

        Catching up ends on its own at a tick, which decides it once records stop.
        """
        wake = self.aligner.next_wake_us
        if self.aligner.catching_up:
            end = self.behind_at_us + CATCHUP_US
            wake = end if wake is None else min(wake, end)
        return wake

    def backlog(self) -> int:
        """Records between what this task read and the log end, worst media partition.

        Read positions, not committed offsets: ``lockstep_consumer_lag`` is the committed lag.
        """
        per_topic: dict[str, int] = {}
        for tp, read in self.read.items():
            end = self._log_end(tp)
            if end is None:
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

    async def emit(self, windows: list[Window]) -> None:
        """Produce windows, acknowledging their tokens once each window is acknowledged."""
        for window in windows:
            members: list[Pending] = []
            for modality, seqs in window.members.items():
                for seq in seqs:
                    entry = self.pending.pop(TokenKey(window.stream_id, modality, seq), None)
                    if entry is not None:
                        members.append(entry)
                self.telemetry.token(modality, "window", len(seqs))
            timeline = window.timeline
            held = timeline.aligned_us - timeline.ingest_us
            self.telemetry.stage(STAGE, held / 1e6, slo_class=window.slo_class)
            spent = timeline.aligned_us - window.budget_start_us
            self.rate.floor = self.degraded_stride if self.degraded(window.slo_class) else 1
            self.aligner.stride = self.rate.observe(spent / self.risk_budget_us)
            try:
                await self.outbox.send_record(catalog.ALIGNED, window.stream_id.encode(),
                                              window, self._acker(members))
            except BadInput as error:
                # A window over the record limit (a frame near it): its tokens are
                # dead-lettered, each with the reason, rather than lost.
                for tp, offset, value in members:
                    await send_dead_letter(
                        self.outbox, stage=STAGE, topic=tp.topic, partition=tp.partition,
                        offset=offset, key=window.stream_id.encode(), value=value,
                        error=BadInput(f"its window {error.reason}",
                                       ReasonCode.WINDOW_TOO_LARGE),
                        on_ack=self._acker([(tp, offset, None)]))

    async def _late(self, late: LateToken, settles: list[tuple[TopicPartition, int]],
                    count: int = 1) -> None:
        self.telemetry.token(late.modality, "late", count)
        await self.outbox.send_record(
            catalog.LATE, late.stream_id.encode(), fit_late(late, self.max_bytes),
            self._acker([(tp, o, None) for tp, o in settles]))

    async def _dead_letter(self, tp: TopicPartition, record: Record, error: BadInput) -> None:
        await send_dead_letter(self.outbox, stage=STAGE, topic=tp.topic,
                               partition=tp.partition, offset=record.offset, key=record.key,
                               value=record.value, error=error,
                               on_ack=self._acker([(tp, record.offset, None)]))

    def _compact(self) -> None:
        """Before a heap trim: drop the per-stream caches, keep marks in arrays.

        The buffered tokens' table is rebuilt at its present size: a flood grows it to
        tens of thousands of entries, and a dict keeps its table when entries leave.
        """
        self.aligner.compact()
        self._stale.clear()
        self.pending = dict(self.pending)

    def _stale_us(self, stream_id: str) -> int:
        """How old a token of ``stream_id`` may be when read (0: any age)."""
        stale = self._stale.get(stream_id)
        if stale is None:
            if len(self._stale) > 100_000:  # bounded, whatever ids the input carries
                self._stale.clear()
            budget_ms = self._slo.budget_ms(self._slo.class_of(stream_id))
            stale = self._stale[stream_id] = int(budget_ms * 1000 * self._stale_factor)
        return stale

    def _log_end(self, tp: TopicPartition) -> int | None:
        """The log end of ``tp`` the last fetch saw, else the one at assignment.

        None: not assigned any more (a rebalance), or not known yet.
        """
        try:
            end: int | None = self.source.consumer.highwater(tp)
        except (AssertionError, KeyError):  # not assigned any more (a rebalance)
            return None
        if end is None:  # no fetch has answered for it yet
            started = self.source.start_positions.get(tp)
            return None if started is None else started[1]
        return end

    def _at_end(self, tp: TopicPartition, offset: int) -> bool:
        """Whether ``offset`` is the last record of ``tp`` the last fetch knew of."""
        end = self._log_end(tp)
        return end is None or offset + 1 >= end

    def _ack(self, tp: TopicPartition, offset: int) -> None:
        self.source.ack(tp, offset)

    def _acker(self, members: list[Pending]) -> Callable[[], None]:
        ack = self.source.ack

        def acked() -> None:
            for tp, offset, _ in members:
                ack(tp, offset)
        return acked

    def _tp(self, topic: str, partition: int) -> TopicPartition:
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        return tp

    def _decode(self, topic: str, key: bytes | None, value: bytes | None) -> Token:
        return decode_token(topic, key, value, max_bytes=self.max_bytes)


def _settle(replay: ReplayGuard[TopicPartition], out: Output) -> None:
    """Note one record read back from the align stage's outputs."""
    try:
        kind = peek_kind(out.value)
        body: Any = msgpack.unpackb(out.value[HEADER_SIZE:])  # type: ignore[index]
    except (BadInput, ValueError, msgpack.UnpackException):
        return  # not ours: whoever wrote it, it settles nothing
    if not isinstance(body, dict):
        return
    try:
        if kind is Kind.WINDOW and out.topic == catalog.ALIGNED:
            replay.add_window(body["stream_id"], int(body["window_seq"]), int(body["t_end_us"]),
                              body["members"], HOP_BASE)
        elif kind is Kind.LATE and out.topic == catalog.LATE:
            replay.tokens.update(late_tokens(body))
        elif kind is Kind.DEADLETTER and body.get("stage") == STAGE:
            replay.dead.add((body["topic"], int(body["partition"]), int(body["offset"])))
    except (KeyError, TypeError, ValueError):
        log.info("a record read back from %s does not parse; ignored", out.topic,
                 extra={"stage": STAGE, "topic": out.topic})


def _modality_label(topic: str) -> str:
    modality: Modality | None = catalog.MODALITY_OF_TOPIC.get(topic)
    return modality.value if modality is not None else topic
