"""Records read back, shown to people (``lockstep inspect``, ``subscribe``).

Records come from :func:`lockstep.kafka.reader.read_records`; :func:`describe` turns a decoded
record into one readable line and :func:`as_json` into a JSON object, both with window ids people
can read (a hop window is ``#hop:N``, not ``#4611686036390209290``) and, for responses, the status
and why.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from lockstep.errors import ConfigError
from lockstep.kafka.reader import Read
from lockstep.topics.keys import window_id
from lockstep.topics.schemas import DeadLetter, LateToken, Response, Window

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


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
