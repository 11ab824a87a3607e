"""What a media record must pass at the edge, before any stage trusts it.

Pure: the align agent calls :func:`decode_token` on every record it reads from a
``media.*`` topic, and ``lockstep validate`` calls the same checks, so a producer team sees
exactly what the pipeline will refuse. Each failure is a :class:`~lockstep.errors.BadInput`
with its :class:`~lockstep.errors.ReasonCode`.
"""

from __future__ import annotations

from typing import Final

from lockstep.errors import BadInput, DecodeError, ReasonCode
from lockstep.topics import catalog
from lockstep.topics.codec import DEFAULT_MAX_BYTES, TOKEN_KINDS, Kind, decode, peek_kind
from lockstep.topics.payloads import check_encoded
from lockstep.topics.schemas import Token, VideoToken

#: The kind each pipeline topic carries (``requests.*`` and ``responses.*`` by prefix).
KIND_OF_TOPIC: Final[dict[str, Kind]] = {
    **{topic: Kind[m.name] for m, topic in catalog.MEDIA.items()},
    catalog.ALIGNED: Kind.WINDOW,
    catalog.RESPONSES: Kind.RESPONSE,
    catalog.DEADLETTER: Kind.DEADLETTER,
    catalog.LATE: Kind.LATE,
    catalog.SLO_EVENTS: Kind.SLO_EVENT,
}


def kind_of_topic(topic: str) -> Kind | None:
    """The kind of record a Lockstep topic carries; None for a topic outside the catalog."""
    if topic.startswith(catalog.REQUESTS_PREFIX):
        return Kind.REQUEST
    if topic.startswith(catalog.RESPONSES + "."):
        return Kind.RESPONSE
    return KIND_OF_TOPIC.get(topic)


def decode_token(topic: str, key: bytes | None, value: bytes | None, *,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> Token:
    """Decode a record read from a media topic; refuse what the pipeline must not align.

    Raises:
        DecodeError: Not a record of our format (see :func:`~lockstep.topics.codec.decode`),
            not a media token (``wrong_kind``), a token of another modality than the topic's
            (``wrong_topic``), or keyed otherwise than by its ``stream_id`` (``key_mismatch``).
        SchemaError: The token breaks its schema.
        BadInput: An encoded frame is not what its ``format`` says (``bad_media``).
    """
    kind = peek_kind(value)
    if kind not in TOKEN_KINDS:
        raise DecodeError(f"a {kind.name.lower()} record is not a media token",
                          ReasonCode.WRONG_KIND)
    token = decode(value, max_bytes=max_bytes)
    expected = catalog.MODALITY_OF_TOPIC.get(topic)
    if expected is None or token.modality is not expected:  # type: ignore[attr-defined]
        raise DecodeError(f"a {kind.name.lower()} token does not belong on {topic}",
                          ReasonCode.WRONG_TOPIC)
    stream_id: str = token.stream_id  # type: ignore[attr-defined]
    if key != stream_id.encode():
        # Partitioning is by key: a token keyed otherwise would reach another align task
        # than the rest of its stream and make a second window with the same key.
        raise DecodeError(f"record key {key!r} is not the token's stream_id {stream_id!r}",
                          ReasonCode.KEY_MISMATCH, field="stream_id")
    if kind is Kind.VIDEO:
        check_frame(token)  # type: ignore[arg-type]
    return token  # type: ignore[return-value]


def check_frame(frame: VideoToken) -> None:
    """Refuse an encoded frame whose bytes are not a well-formed stream of its format.

    Raises:
        BadInput: ``bad_media``, naming what is wrong.
    """
    why = check_encoded(frame)
    if why is not None:
        raise BadInput(why, ReasonCode.BAD_MEDIA, field="data")
