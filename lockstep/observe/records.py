"""Reading Lockstep records back from a topic and showing them to people (inspect, subscribe).

:func:`read_records` iterates a topic's records (from a time, the beginning or the end;
to the end as it was at the start, or following) without a consumer group;
:func:`describe` turns a decoded record into one readable line and :func:`as_json` into a
JSON object, both with window ids people can read (a hop window is ``#hop:N``, not
``#4611686036390209290``) and, for responses, the status and why.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import BaseModel

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BadInput, ConfigError
from lockstep.kafka.wait import topic_partitions, wait_for_broker
from lockstep.streams.align.aligner import HOP_BASE
from lockstep.topics.codec import decode
from lockstep.topics.schemas import DeadLetter, LateToken, Response, Window

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: Without --follow, reading ends once nothing has come for this long.
IDLE_S = 1.0


def parse_since(text: str, now_ms: int | None = None) -> int:
    """A ``--since`` value as epoch milliseconds: ``10m`` (ago), ISO 8601, or epoch ms.

    Raises:
        ConfigError: The text is none of those.
    """
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    text = text.strip()
    match = _RELATIVE.match(text)
    if match:
        return now_ms - int(float(match[1]) * _UNIT_MS[match[2]])
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--since {text!r}: give a duration (10m, 2h), an ISO time "
                          "(2026-12-03T10:00) or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def window_id(window_seq: int) -> str:
    """A window's id as people read it: ``#42`` (frame-anchored) or ``#hop:7``."""
    return f"#hop:{window_seq - HOP_BASE}" if window_seq >= HOP_BASE else f"#{window_seq}"


@dataclass(frozen=True)
class Read:
    """One record read back: where it was, and what it decodes to (or why it does not)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    record: BaseModel | None
    error: str | None


async def read_records(kafka: KafkaSettings, topic: str, *, since_ms: int | None = None,
                       from_end: bool = False, follow: bool = False,
                       stream_ids: Collection[str] = (),
                       connect_timeout_s: float = 10.0) -> AsyncIterator[Read]:
    """Records of ``topic``, decoded, optionally of some streams only.

    Args:
        kafka: Connection settings.
        topic: The topic.
        since_ms: Start at records produced at or after this (epoch ms); None: the
            beginning (or the end with ``from_end``).
        from_end: Start at the end (only new records; implies ``follow``).
        follow: Keep reading new records; else stop at the end as it was at the start.
        stream_ids: Only records keyed by one of these.
        connect_timeout_s: Fail this soon when the cluster cannot be reached.

    Raises:
        BrokerError: The cluster cannot be reached, or the topic does not exist.
    """
    consumer = AIOKafkaConsumer(**kafka.aiokafka_options(), group_id=None,
                                enable_auto_commit=False,
                                fetch_max_wait_ms=kafka.fetch_max_wait_ms,
                                max_partition_fetch_bytes=kafka.max_record_bytes)
    try:
        await wait_for_broker(consumer.start, kafka, what=f"reading {topic}",
                              timeout_s=connect_timeout_s)
    except BaseException:
        await consumer.stop()
        raise
    wanted = {s.encode() for s in stream_ids}
    try:
        tps = await topic_partitions(consumer, topic, connect_timeout_s)
        consumer.assign(tps)
        started_ms = time.time_ns() // 1_000_000
        await _position(consumer, tps, since_ms, from_end)
        follow = follow or from_end
        todo = set(tps)
        idle_since = time.monotonic()
        # Without --follow: until every partition brings records produced after the start,
        # or nothing comes for IDLE_S (end offsets are not used: the embedded broker's
        # count produce batches, not records).
        while todo and (follow or time.monotonic() - idle_since < IDLE_S):
            batches = await consumer.getmany(*todo, timeout_ms=200, max_records=500)
            if batches:
                idle_since = time.monotonic()
            for tp, records in batches.items():
                for r in records:
                    if not follow and r.timestamp > started_ms:
                        todo.discard(tp)  # produced after the command started: the end
                        break
                    if not wanted or r.key in wanted:
                        yield _decoded(tp, r.offset, r.timestamp, r.key, r.value)
    finally:
        await consumer.stop()


async def _position(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                    since_ms: int | None, from_end: bool) -> None:
    if from_end:
        await consumer.seek_to_end(*tps)
    elif since_ms is None:
        await consumer.seek_to_beginning(*tps)
    else:
        found = await consumer.offsets_for_times({tp: since_ms for tp in tps})
        for tp in tps:
            if found.get(tp) is None:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found[tp].offset)


def _decoded(tp: TopicPartition, offset: int, timestamp_ms: int, key: bytes | None,
             value: bytes | None) -> Read:
    try:
        return Read(tp.topic, tp.partition, offset, timestamp_ms, key, decode(value), None)
    except BadInput as error:
        return Read(tp.topic, tp.partition, offset, timestamp_ms, key, None, error.reason)


def describe(read: Read, *, now_us: int | None = None) -> str:
    """One readable line for a record read back."""
    record = read.record
    where = f"{read.topic}/{read.partition}@{read.offset}"
    if record is None:
        return f"{where} undecodable: {read.error}"
    if isinstance(record, Response):
        return describe_response(record, now_us=now_us)
    if isinstance(record, DeadLetter):
        size = record.value_size or len(record.value or b"")
        cut = ", truncated" if record.truncated else ""
        code = f" [{record.code}]" if record.code else ""
        return (f"{record.topic}/{record.partition}@{record.offset} dead-lettered by "
                f"{record.stage}{code}: {record.error}: {record.reason} (key {record.key!r}, "
                f"{size} bytes{cut})")
    if isinstance(record, LateToken):
        code = f" [{record.code}]" if record.code else ""
        more = f" (+{len(record.more_seqs)} more)" if record.more_seqs else ""
        return (f"{record.stream_id} {record.modality.value} seq {record.seq}{more} "
                f"late{code}: {record.reason}")
    if isinstance(record, Window):
        members = " ".join(f"{m.value} {len(s)}" for m, s in sorted(record.members.items()))
        missing = (f" missing {','.join(m.value for m in record.missing)}"
                   if record.missing else "")
        span_ms = (record.t_end_us - record.t_start_us) / 1000
        return (f"{record.stream_id} {window_id(record.window_seq)} {span_ms:.1f} ms "
                f"[{members}]{missing}")
    return f"{where} {type(record).__name__}"


def describe_response(response: Response, *, now_us: int | None = None) -> str:
    """A response as one line: stream, window, route, status, e2e, and output or why not."""
    timeline = response.timeline
    missing = f" missing {','.join(m.value for m in response.missing)}" if response.missing else ""
    e2e_ms = (timeline.responded_us - timeline.capture_us) / 1000.0
    received = (f" (received {(now_us - timeline.capture_us) / 1000.0:.1f} ms)"
                if now_us is not None else "")
    if response.status == "ok":
        tail = response.output
    else:
        why = response.detail or response.reason or "no reason given"
        tail = f"{response.status.upper()}: {why}"
    return (f"{response.stream_id} {window_id(response.window_seq)} "
            f"[{response.route}{missing}] {response.status} e2e {e2e_ms:.1f} ms{received}: "
            f"{tail}")


def as_json(read: Read, *, now_us: int | None = None) -> dict[str, Any]:
    """A record read back as a JSON object (bytes as lengths; window ids readable)."""
    out: dict[str, Any] = {"topic": read.topic, "partition": read.partition,
                           "offset": read.offset, "timestamp_ms": read.timestamp_ms}
    if read.record is None:
        return {**out, "error": read.error}
    body = read.record.model_dump(mode="json",
                                  exclude={"data", "value", "video", "audio", "key"})
    if "window_seq" in body:
        body["window_id"] = window_id(int(body["window_seq"]))
    if isinstance(read.record, Response):
        t = read.record.timeline
        body["e2e_ms"] = round((t.responded_us - t.capture_us) / 1000.0, 3)
        if now_us is not None:
            body["received_ms"] = round((now_us - t.capture_us) / 1000.0, 3)
    if isinstance(read.record, DeadLetter | LateToken):
        value = read.record.value
        body["value_bytes"] = len(value) if value is not None else None
    if isinstance(read.record, DeadLetter) and read.record.key is not None:
        body["key"] = read.record.key.decode(errors="replace")
    return {**out, "kind": type(read.record).__name__, **body}
