"""The topic catalog: every topic Lockstep reads or writes, with partitions and configs.

Every record is keyed by ``stream_id``. The four ``media.*`` topics must have the same
partition count (co-partitioning), so that one align task sees every modality of a stream;
:mod:`lockstep.kafka.admin` checks this on the live cluster rather than assuming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from lockstep.config.settings import TopicsSettings
from lockstep.topics.schemas import Modality

MEDIA: Final[Mapping[Modality, str]] = {
    Modality.VIDEO: "media.video",
    Modality.AUDIO: "media.audio",
    Modality.OCR: "media.ocr",
    Modality.SENSOR: "media.sensor",
}
MODALITY_OF_TOPIC: Final[Mapping[str, Modality]] = {name: m for m, name in MEDIA.items()}
ALIGNED: Final = "aligned.windows"
RESPONSES: Final = "responses"
DEADLETTER: Final = "deadletter"
LATE: Final = "late"
SLO_EVENTS: Final = "slo.events"
REQUESTS_PREFIX: Final = "requests."


def requests_topic(pool: str) -> str:
    """The request topic of an engine pool (``requests.<pool>``)."""
    return f"{REQUESTS_PREFIX}{pool}"


TopicClass = Literal["media", "pipeline", "side"]


@dataclass(frozen=True)
class TopicSpec:
    """What a topic must look like.

    Attributes:
        name: Topic name.
        partitions: Partition count.
        replication_factor: Replicas per partition.
        configs: Topic-level configs set at creation.
        group: Topics of one group must share a partition count ("media" for media.*).
        kind: The class of topic whose settings it takes (``topics.<kind>_partitions``,
            ``topics.<kind>_retention_ms``).
    """

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    group: str | None = None
    kind: TopicClass = "pipeline"


def catalog(settings: TopicsSettings, max_record_bytes: int = 8 * 1024 * 1024) -> list[TopicSpec]:
    """All topics for the given settings: media, then the pipeline, then the side topics.

    Every partition count, replication factor and retention comes from ``settings``.

    Args:
        settings: Partition counts, replication, pools and retention per class of topic.
        max_record_bytes: ``max.message.bytes`` of every topic.
    """
    rf = settings.replication_factor
    base = {"max.message.bytes": str(max_record_bytes), "message.timestamp.type": "CreateTime"}
    insync = settings.insync_replicas()
    if insync is not None:
        base["min.insync.replicas"] = str(insync)
    media = {**base, "retention.ms": str(settings.media_retention_ms)}
    pipeline = {**base, "retention.ms": str(settings.pipeline_retention_ms)}
    side = {**base, "retention.ms": str(settings.side_retention_ms)}
    specs = [
        TopicSpec(name, settings.media_partitions, rf, media, group="media", kind="media")
        for name in MEDIA.values()
    ]
    names = [ALIGNED, *(requests_topic(pool) for pool in settings.pools), RESPONSES]
    specs.extend(TopicSpec(name, settings.pipeline_partitions, rf, pipeline) for name in names)
    specs.extend(TopicSpec(name, settings.side_partitions, rf, side, kind="side")
                 for name in (DEADLETTER, LATE, SLO_EVENTS))
    return specs
