"""Lockstep's Python API: what a producer or a consumer program imports.

Everything here is stable across minor versions; import from this module, not from the
packages behind it::

    from lockstep.api import Publisher, VideoToken, iter_responses, load_settings

    settings = load_settings()                    # LOCKSTEP_* variables, or pass overrides
    with Publisher(settings.kafka) as publisher:  # confluent-kafka, idempotent, acks counted
        publisher.publish(VideoToken(stream_id="cam-1", seq=0, t_us=..., format="jpeg",
                                     width=640, height=480, data=jpeg_bytes))

    async for response in iter_responses(settings.kafka, streams=["cam-1"]):
        print(response.stream_id, response.window_seq, response.status, response.output)

Producers: :class:`Publisher` and the token classes (:class:`VideoToken`,
:class:`AudioToken`, :class:`OcrToken`, :class:`SensorToken`). Consumers:
:class:`Subscriber` / :func:`iter_responses` (responses, decoded and validated), and
:func:`read_records` for any pipeline topic. Engines: subclass :class:`Engine` and register
the class under the ``lockstep.engines`` entry-point group (docs/engines.md).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection
from types import TracebackType
from typing import Self

from lockstep.config.settings import KafkaSettings, Settings, load_settings
from lockstep.engines.base import Capabilities, Engine, InferenceResult, ItemFailure, WorkItem
from lockstep.errors import BadInput, LockstepError
from lockstep.kafka.reader import TopicReader, read_records
from lockstep.producer.publisher import Publisher
from lockstep.topics import catalog
from lockstep.topics.codec import decode, decode_as, encode
from lockstep.topics.schemas import (
    AudioToken,
    DeadLetter,
    LateToken,
    Modality,
    OcrToken,
    Response,
    SensorToken,
    VideoToken,
    Window,
)

__all__ = [
    "AudioToken",
    "Capabilities",
    "DeadLetter",
    "Engine",
    "InferenceResult",
    "ItemFailure",
    "KafkaSettings",
    "LateToken",
    "LockstepError",
    "Modality",
    "OcrToken",
    "Publisher",
    "Response",
    "SensorToken",
    "Settings",
    "Subscriber",
    "VideoToken",
    "Window",
    "WorkItem",
    "decode",
    "decode_as",
    "encode",
    "iter_responses",
    "load_settings",
    "read_records",
]

log = logging.getLogger(__name__)


class Subscriber:
    """Reads responses as they are produced (no consumer group: every subscriber sees all).

    Use as an async context manager and iterate::

        async with Subscriber(settings.kafka, streams=["cam-1"]) as responses:
            async for response in responses:
                ...

    Args:
        kafka: Connection settings.
        streams: Only responses of these streams (default: all).
        topic: The response topic (``responses``, or a stream's own reply topic).
        from_beginning: Start at the oldest retained response instead of new ones.
        connect_timeout_s: Fail this soon when the cluster cannot be reached.
    """

    def __init__(self, kafka: KafkaSettings, *, streams: Collection[str] = (),
                 topic: str = catalog.RESPONSES, from_beginning: bool = False,
                 connect_timeout_s: float = 10.0) -> None:
        self._wanted = {s.encode() for s in streams}
        self._topic = topic
        self._from_beginning = from_beginning
        self._reader = TopicReader(kafka, [topic], what="subscriber",
                                   connect_timeout_s=connect_timeout_s)
        self.skipped = 0  #: records on the topic that are not valid responses

    async def __aenter__(self) -> Self:
        reader = self._reader
        await reader.start()
        try:
            if self._from_beginning:
                await reader.seek_to_beginning()
            else:
                await reader.seek_to_end()  # fixed now, before anything new
        except BaseException:
            await reader.stop()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self._reader.stop()

    def __aiter__(self) -> AsyncIterator[Response]:
        return self._responses()

    async def _responses(self) -> AsyncIterator[Response]:
        while True:
            batches = await self._reader.fetch(timeout_ms=500, max_records=500)
            for records in batches.values():
                for record in records:
                    if self._wanted and record.key not in self._wanted:
                        continue
                    try:
                        yield decode_as(Response, record.value)
                    except BadInput as error:
                        self.skipped += 1
                        log.debug("not a response on %s: %s", self._topic, error.reason)


async def iter_responses(kafka: KafkaSettings, *, streams: Collection[str] = (),
                         topic: str = catalog.RESPONSES,
                         from_beginning: bool = False) -> AsyncIterator[Response]:
    """Responses as they are produced (see :class:`Subscriber`), until the caller stops."""
    async with Subscriber(kafka, streams=streams, topic=topic,
                          from_beginning=from_beginning) as subscriber:
        async for response in subscriber:
            yield response
