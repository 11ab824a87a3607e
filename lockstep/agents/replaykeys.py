"""Reading back the window keys route and worker already answered (lockstep.streams.replay)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import msgpack
from aiokafka import TopicPartition

from lockstep.kafka.readback import Output
from lockstep.errors import BadInput
from lockstep.streams.replay import ReplayGuard
from lockstep.topics.codec import HEADER_SIZE, Kind, peek_kind

log = logging.getLogger(__name__)


def settle_keys(replay: ReplayGuard[TopicPartition], outputs: Iterable[Output],
                stage: str) -> None:
    """Fill ``replay`` from records read back.

    Requests and responses settle their (stream_id, window_seq); dead letters written by
    ``stage`` settle their input record.
    """
    for out in outputs:
        try:
            kind = peek_kind(out.value)
            body: Any = msgpack.unpackb(out.value[HEADER_SIZE:])  # type: ignore[index]
        except (BadInput, ValueError, msgpack.UnpackException):
            continue  # not ours: it settles nothing
        if not isinstance(body, dict):
            continue
        try:
            if kind is Kind.REQUEST:
                window = body["window"]
                replay.keys.add((window["stream_id"], int(window["window_seq"])))
            elif kind is Kind.RESPONSE:
                replay.keys.add((body["stream_id"], int(body["window_seq"])))
            elif kind is Kind.DEADLETTER and body.get("stage") == stage:
                replay.dead.add((body["topic"], int(body["partition"]), int(body["offset"])))
        except (KeyError, TypeError, ValueError):
            log.info("a record read back from %s does not parse; ignored", out.topic)
