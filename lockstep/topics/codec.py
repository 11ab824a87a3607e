"""The versioned binary wire codec (see docs/wire-format.md).

A record value is a 4-byte header followed by one MessagePack map::

    byte 0-1  magic  b"LS"
    byte 2    format version (1)
    byte 3    kind (see :class:`Kind`)
    byte 4-   MessagePack map, string keys, binary fields as MessagePack ``bin``

The map's fields are those of the model named by the kind (:mod:`lockstep.topics.schemas`).
Decoding checks the header, the size and the contract; every failure is a
:class:`~lockstep.errors.BadInput` with a reason fit for a dead-letter record and a stable
:class:`~lockstep.errors.ReasonCode`.

Media tokens (what producers write) must hold exactly the fields of their kind. The
records Lockstep writes (windows, requests, responses, dead letters, late records, SLO
events) are read leniently: keys this build does not know are ignored, so a newer writer
may add optional fields within a wire version (docs/wire-format.md §10).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Final, TypeVar

import msgpack
from pydantic import BaseModel, ValidationError

from lockstep.errors import DecodeError, ReasonCode, SchemaError
from lockstep.topics.schemas import (
    AudioToken,
    DeadLetter,
    LateToken,
    OcrToken,
    Request,
    Response,
    SensorToken,
    SloEvent,
    VideoToken,
    Window,
)

MAGIC: Final = b"LS"
VERSION: Final = 1
HEADER_SIZE: Final = 4
#: Default largest record accepted by :func:`decode` (matches the topics' max.message.bytes).
DEFAULT_MAX_BYTES: Final = 8 * 1024 * 1024


class Kind(IntEnum):
    """Record kinds; the fourth header byte."""

    VIDEO = 1
    AUDIO = 2
    OCR = 3
    SENSOR = 4
    WINDOW = 16
    REQUEST = 17
    RESPONSE = 18
    DEADLETTER = 32
    LATE = 33
    SLO_EVENT = 48


MODELS: Final[dict[Kind, type[BaseModel]]] = {
    Kind.VIDEO: VideoToken,
    Kind.AUDIO: AudioToken,
    Kind.OCR: OcrToken,
    Kind.SENSOR: SensorToken,
    Kind.WINDOW: Window,
    Kind.REQUEST: Request,
    Kind.RESPONSE: Response,
    Kind.DEADLETTER: DeadLetter,
    Kind.LATE: LateToken,
    Kind.SLO_EVENT: SloEvent,
}
_KINDS: Final[dict[type[BaseModel], Kind]] = {model: kind for kind, model in MODELS.items()}
TOKEN_KINDS: Final = frozenset({Kind.VIDEO, Kind.AUDIO, Kind.OCR, Kind.SENSOR})
#: Kinds whose unknown keys are rejected (producers' records); the others ignore them.
STRICT_KINDS: Final = TOKEN_KINDS
#: Token flags sent only when true.
_OPTIONAL_FLAGS: Final = frozenset({"replay", "final"})

M = TypeVar("M", bound=BaseModel)


def encode(record: BaseModel) -> bytes:
    """Encode a contract model as header + MessagePack.

    Args:
        record: An instance of one of the models in :data:`MODELS`.

    Returns:
        The record value to produce.

    Raises:
        TypeError: ``record`` is not a wire model.
    """
    kind = _KINDS.get(type(record))
    if kind is None:
        raise TypeError(f"{type(record).__name__} is not a Lockstep wire record")
    fields = record.__dict__
    if kind in TOKEN_KINDS and not (fields["replay"] and fields["final"]):
        # Tokens are read strictly: ``replay`` and ``final`` are sent only when set, so a
        # token without them stays readable by aligners that predate the fields
        # (docs/wire-format.md §4).
        fields = {k: v for k, v in fields.items() if k not in _OPTIONAL_FLAGS or v}
    body = msgpack.packb(fields, default=_plain, use_bin_type=True)
    return MAGIC + bytes((VERSION, kind)) + body


def _plain(value: object) -> object:
    """A nested model as its field map: what ``model_dump(mode="python")`` gives, uncopied.

    The map's order is the order the fields were set in (declaration order for validated
    records); MessagePack maps are unordered, and decoding is unaffected.
    """
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"cannot encode {type(value).__name__}")


def peek_kind(value: bytes | None) -> Kind:
    """Return the kind named in a record's header without decoding the body.

    Raises:
        DecodeError: The header is missing, foreign or of an unknown version or kind.
    """
    return _header(value)[0]


def _header(value: bytes | None) -> tuple[Kind, bytes]:
    if value is None:
        raise DecodeError("empty record value (tombstone)", ReasonCode.TOMBSTONE)
    if len(value) < HEADER_SIZE or value[:2] != MAGIC:
        raise DecodeError("not a Lockstep record: missing b'LS' magic", ReasonCode.BAD_MAGIC)
    if value[2] != VERSION:
        raise DecodeError(f"unsupported wire format version {value[2]} (this build reads 1)",
                          ReasonCode.BAD_VERSION)
    try:
        return Kind(value[3]), value
    except ValueError:
        raise DecodeError(f"unknown record kind {value[3]}", ReasonCode.UNKNOWN_KIND) from None


def decode(value: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> BaseModel:
    """Decode and validate any wire record.

    Raises:
        DecodeError: Oversize, bad header or bad MessagePack.
        SchemaError: The body breaks the contract of its kind.
    """
    kind, value = _header(value)
    if len(value) > max_bytes:
        raise DecodeError(f"record of {len(value)} bytes exceeds the {max_bytes}-byte limit",
                          ReasonCode.OVERSIZE)
    body = _unpack(value)
    try:
        if kind in STRICT_KINDS:
            return MODELS[kind].model_validate(body)
        return MODELS[kind].model_validate(body, extra="ignore")
    except ValidationError as exc:
        raise SchemaError(f"invalid {kind.name.lower()}: {_summarise(exc)}", ReasonCode.SCHEMA,
                          field=_first_field(exc)) from None


def decode_as(model: type[M], value: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> M:
    """Decode a record that must be of one model's kind (e.g. a :class:`Window`).

    Raises:
        DecodeError: As :func:`decode`, or the record is of another kind.
        SchemaError: As :func:`decode`.
    """
    kind = peek_kind(value)
    if MODELS[kind] is not model:
        raise DecodeError(f"expected a {model.__name__} record, got kind {kind.name.lower()}",
                          ReasonCode.WRONG_KIND)
    record = decode(value, max_bytes=max_bytes)
    if not isinstance(record, model):  # pragma: no cover - MODELS maps kinds one to one
        raise DecodeError(f"expected a {model.__name__} record", ReasonCode.WRONG_KIND)
    return record


def _unpack(value: bytes) -> dict[str, Any]:
    try:
        body = msgpack.unpackb(value[HEADER_SIZE:], raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException) as exc:
        raise DecodeError(f"bad MessagePack body: {exc}", ReasonCode.BAD_MSGPACK) from None
    if not isinstance(body, dict):
        raise DecodeError(f"record body is a MessagePack {type(body).__name__}, not a map",
                          ReasonCode.NOT_A_MAP)
    return body


def _first_field(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    return ".".join(str(p) for p in errors[0]["loc"]) if errors else "record"


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "record"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
