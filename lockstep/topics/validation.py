"""Checking records as the pipeline will, one at a time (``lockstep validate``).

Pure: :func:`check` takes one record value (with its topic and key where known) and says
whether Lockstep accepts it, and if not the :class:`~lockstep.errors.ReasonCode`, the field
and the reason it would be dead-lettered with. It runs the decoder, the edge checks of
the align stage (:mod:`lockstep.topics.edge`) and the capture-time bound; what needs a
stream's history (its clock, duplicates, lateness) is not checked. :func:`read_file` turns
a file into records to check (raw record files, hex, JSON and JSON Lines).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgpack
from pydantic import BaseModel, ValidationError

from lockstep.errors import BadInput, ReasonCode, RecordMismatch, SchemaError
from lockstep.topics.codec import (
    DEFAULT_MAX_BYTES,
    HEADER_SIZE,
    MODELS,
    STRICT_KINDS,
    TOKEN_KINDS,
    Kind,
    decode,
    encode,
    peek_kind,
)
from lockstep.topics.contract import KIND_OF_STEM, STEMS, from_json
from lockstep.topics.edge import check_frame, decode_token, kind_of_topic
from lockstep.topics.payloads import decode_encoded
from lockstep.topics.schemas import (
    LateToken,
    Request,
    Response,
    SensorToken,
    VideoToken,
    Window,
)

#: Codes of ``lockstep validate`` itself (a JSON record that is not what its bytes say, or
#: an input it cannot read); the pipeline never writes them.
JSON_MISMATCH: Final = "json_mismatch"
UNREADABLE: Final = "unreadable"
_NO_KEY: Final = object()


@dataclass(frozen=True)
class Candidate:
    """One record to check: its value and, where known, its topic and key."""

    source: str
    value: bytes | None
    topic: str | None = None
    key: bytes | object | None = _NO_KEY
    #: The record's JSON form and kind, when the input gave one.
    record: Mapping[str, Any] | None = None
    kind: Kind | None = None
    #: Why the input could not be read (then nothing else is checked).
    error: str | None = None


@dataclass(frozen=True)
class Verdict:
    """What Lockstep would do with one record."""

    source: str
    ok: bool
    kind: str | None = None
    what: str = ""
    code: str | None = None
    field: str | None = None
    reason: str | None = None
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The verdict as a JSON object."""
        return {"source": self.source, "ok": self.ok, "kind": self.kind, "what": self.what,
                "code": self.code, "field": self.field, "reason": self.reason,
                "notes": list(self.notes)}


def check(candidate: Candidate, *, now_us: int, max_future_us: int,
          max_bytes: int = DEFAULT_MAX_BYTES, decode_media: bool = False) -> Verdict:
    """Check one record as the pipeline would; never raises for bad input.

    Args:
        candidate: The record.
        now_us: The wall clock (capture times more than ``max_future_us`` ahead fail).
        max_future_us: ``align.max_future_ms`` in µs.
        max_bytes: ``kafka.max_record_bytes``.
        decode_media: Also decode encoded frames (FFmpeg): slower, finds more damage.
    """
    src = candidate.source
    if candidate.error is not None:
        return Verdict(src, False, code=UNREADABLE, reason=candidate.error)
    value = candidate.value
    try:
        if candidate.record is not None:
            value = _from_record(candidate, value)
        record = _decode(candidate, value, max_bytes)
        _more(record, now_us=now_us, max_future_us=max_future_us, decode_media=decode_media)
    except BadInput as error:
        return Verdict(src, False, kind=_kind_name(value), code=error.code.value,
                       field=error.field, reason=error.reason)
    except RecordMismatch as error:
        return Verdict(src, False, kind=_kind_name(value), code=JSON_MISMATCH,
                       reason=str(error))
    kind = peek_kind(value)
    assert value is not None  # it decoded
    return Verdict(src, True, kind=STEMS[kind], what=describe(record),
                   notes=_ignored_keys(kind, value))


def _from_record(candidate: Candidate, value: bytes | None) -> bytes | None:
    kind = candidate.kind
    assert kind is not None and candidate.record is not None
    try:
        model = from_json(kind, candidate.record)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise SchemaError(f"invalid {STEMS[kind]}: {where}: {first['msg']}",
                          ReasonCode.SCHEMA, field=where) from None
    encoded = encode(model)
    if value is None:
        return encoded
    if value[:HEADER_SIZE] != encoded[:HEADER_SIZE] or _safe_decode(value) != model:
        raise RecordMismatch("the JSON record is not what value_hex decodes to")
    if value != encoded:
        raise RecordMismatch("value_hex decodes to the JSON record but is not its canonical "
                        "encoding (key order, int or float widths)")
    return value


def _safe_decode(value: bytes) -> BaseModel | None:
    try:
        return decode(value)
    except BadInput:
        return None


def _decode(candidate: Candidate, value: bytes | None, max_bytes: int) -> BaseModel:
    topic, key = candidate.topic, candidate.key
    expected = kind_of_topic(topic) if topic is not None else None
    if topic is not None and expected in TOKEN_KINDS:
        if key is _NO_KEY:  # the check needs one: the record's own stream id stands in
            key = _own_key(value)
        return decode_token(topic, key, value, max_bytes=max_bytes)  # type: ignore[arg-type]
    if expected is not None and peek_kind(value) is not expected:
        kind = peek_kind(value)
        raise BadInput(f"a {kind.name.lower()} record does not belong on {topic}",
                       ReasonCode.WRONG_KIND)
    record = decode(value, max_bytes=max_bytes)
    if isinstance(record, VideoToken):
        check_frame(record)
    stream_id = _stream_of(record)
    if key is not _NO_KEY and stream_id is not None and key != stream_id.encode():
        raise BadInput(f"record key {key!r} is not the record's stream_id {stream_id!r}",
                       ReasonCode.KEY_MISMATCH, field="stream_id")
    return record


def _own_key(value: bytes | None) -> bytes | None:
    try:
        body = msgpack.unpackb(value[HEADER_SIZE:], raw=False)  # type: ignore[index]
        return str(body["stream_id"]).encode()
    except (TypeError, KeyError, ValueError, msgpack.UnpackException):
        return None  # the decoder names what is wrong


def _stream_of(record: BaseModel) -> str | None:
    if isinstance(record, Request):
        return record.window.stream_id
    if isinstance(record, Window | Response | LateToken):
        return record.stream_id
    if peek_kind(encode(record)) in TOKEN_KINDS:
        return str(record.stream_id)  # type: ignore[attr-defined]
    return None


def _more(record: BaseModel, *, now_us: int, max_future_us: int, decode_media: bool) -> None:
    t_us = getattr(record, "t_us", None)
    if peek_kind(encode(record)) in TOKEN_KINDS and t_us is not None \
            and t_us > now_us + max_future_us:
        raise BadInput(f"t_us {t_us} is more than {max_future_us} µs in the future",
                       ReasonCode.FUTURE_T_US, field="t_us")
    if decode_media and isinstance(record, VideoToken):
        why = decode_encoded(record)
        if why is not None:
            raise BadInput(why, ReasonCode.BAD_MEDIA, field="data")


def _kind_name(value: bytes | None) -> str | None:
    try:
        return STEMS[peek_kind(value)]
    except BadInput:
        return None


def _ignored_keys(kind: Kind, value: bytes) -> tuple[str, ...]:
    if kind in STRICT_KINDS:
        return ()
    body = msgpack.unpackb(value[HEADER_SIZE:], raw=False)
    unknown = sorted(set(body) - set(MODELS[kind].model_fields))
    return tuple(f"unknown field {k!r} ignored (a newer writer's?)" for k in unknown)


def describe(record: BaseModel) -> str:
    """A few words naming a valid record."""
    if isinstance(record, VideoToken):
        return (f"{record.stream_id} video seq {record.seq} {record.format} "
                f"{record.width}x{record.height}")
    if isinstance(record, SensorToken):
        return f"{record.stream_id} sensor {record.name} seq {record.seq}"
    if hasattr(record, "modality") and hasattr(record, "seq"):
        return f"{record.stream_id} {record.modality.value} seq {record.seq}"  # type: ignore[attr-defined]
    if isinstance(record, Request):
        return f"{record.window.stream_id} #{record.window.window_seq} -> {record.pool}"
    if isinstance(record, Window | Response):
        return f"{record.stream_id} #{record.window_seq}"
    return type(record).__name__


# -- inputs ------------------------------------------------------------------------------


def read_file(path: Path) -> Iterator[Candidate]:
    """The records of one file.

    ``.json`` (one object or an array of them) and ``.jsonl`` (one object a line): each
    object has ``value_hex`` or ``value_base64`` (the record value; null for a tombstone)
    and/or ``kind`` with ``record`` (its JSON form), and may name ``topic`` and ``key`` (or
    ``key_hex``). ``.hex``: one record value as hex (whitespace and ``#`` comments are
    ignored). Anything else: the file's bytes are one record value.
    """
    name = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        yield Candidate(name, None, error=f"cannot read {name}: {exc.strerror}")
        return
    suffix = path.suffix.lower()
    if suffix == ".hex":
        text = "\n".join(line.split("#", 1)[0] for line in data.decode("utf-8", "replace")
                         .splitlines())
        try:
            yield Candidate(name, bytes.fromhex("".join(text.split())))
        except ValueError:
            yield Candidate(name, None, error=f"{name} is not hex")
        return
    if suffix not in (".json", ".jsonl"):
        yield Candidate(name, data)
        return
    try:
        text = data.decode("utf-8")
        if suffix == ".jsonl":
            objects = [(f"{name}:{n}", json.loads(line))
                       for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        else:
            loaded = json.loads(text)
            items = loaded if isinstance(loaded, list) else [loaded]
            objects = [(name if len(items) == 1 else f"{name}[{i}]", o)
                       for i, o in enumerate(items)]
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        yield Candidate(name, None, error=f"{name} is not JSON: {exc}")
        return
    for source, obj in objects:
        yield from_object(source, obj)


def from_object(source: str, obj: Any) -> Candidate:
    """A record given as a JSON object (see :func:`read_file`)."""
    if not isinstance(obj, dict):
        return Candidate(source, None, error="a record must be a JSON object")
    try:
        value = _value(obj)
        key: bytes | object | None = _NO_KEY
        if "key_hex" in obj:
            key = bytes.fromhex(obj["key_hex"]) if obj["key_hex"] is not None else None
        elif "key" in obj:
            key = obj["key"].encode() if obj["key"] is not None else None
        kind = _kind(obj.get("kind")) if "record" in obj else None
    except (ValueError, TypeError, AttributeError, binascii.Error) as exc:
        return Candidate(source, None, error=f"cannot read the record: {exc}")
    if "record" not in obj and value is _NO_KEY:
        return Candidate(source, None, error="give value_hex, value_base64 or kind + record")
    record = obj.get("record")
    if record is not None and not isinstance(record, dict):
        return Candidate(source, None, error="record must be a JSON object")
    return Candidate(source, None if value is _NO_KEY else value,  # type: ignore[arg-type]
                     topic=obj.get("topic"), key=key, record=record, kind=kind)


def _value(obj: dict[str, Any]) -> bytes | object | None:
    if "value_hex" in obj:
        return bytes.fromhex(obj["value_hex"]) if obj["value_hex"] is not None else None
    if "value_base64" in obj:
        raw = obj["value_base64"]
        return base64.b64decode(raw, validate=True) if raw is not None else None
    return _NO_KEY


def _kind(name: Any) -> Kind:
    if isinstance(name, int) and not isinstance(name, bool):
        return Kind(name)
    if isinstance(name, str):
        by_model = {m.__name__: k for k, m in MODELS.items()}
        kind = KIND_OF_STEM.get(name) or by_model.get(name)
        if kind is not None:
            return kind
    raise ValueError(f"unknown kind {name!r} (one of {', '.join(KIND_OF_STEM)})")
