"""What the chaos runner writes besides the live streams: hostile records and stream floods.

Both return only what the broker acknowledged: those records are what the ledger must
account for (hostile ones in ``deadletter``, flood tokens like any other token).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lockstep.chaos.hostile import Hostile, hostile_records
from lockstep.chaos.readback import Source, token_key
from lockstep.chaos.scenarios import Flood, HostileInput
from lockstep.config.settings import KafkaSettings
from lockstep.kafka.clients import RawWriter
from lockstep.producer.publisher import Publisher
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, Token, VideoToken

log = logging.getLogger(__name__)

#: Hostile kinds sent once per scenario: records of several MB each.
_ONCE = frozenset({"oversize_frame", "max_size_garbage"})
#: Hostile kinds whose seq is drawn at random (keys may repeat across calls).
_AIMED = frozenset({"spoofed_seq", "off_clock_seq"})


@dataclass(frozen=True)
class Sent:
    """A hostile record the broker acknowledged: its kind, and its token key if it decodes."""

    kind: str
    token: TokenKey | None


async def send_hostile(kafka: KafkaSettings, live: Sequence[str], spec: HostileInput,
                       started_us: int, fps: float) -> dict[Source, Sent]:
    """Every second for ``spec.spread_s`` s, hostile records aimed at each live stream.

    Args:
        kafka: Connection settings.
        live: The live streams (aimed records carry their ids, near their clocks).
        spec: How many records of each kind, for how long.
        started_us: When the live streams began (their video ``seq`` is 0 there).
        fps: The live streams' frame rate.

    Returns:
        Each acknowledged record, by where it was written.
    """
    sources: dict[Source, Sent] = {}
    aimed: set[TokenKey] = set()
    failed = 0
    began = time.monotonic()
    async with RawWriter(kafka) as writer:
        for second in range(max(1, round(spec.spread_s))):
            batch: list[Hostile] = []
            for i, stream_id in enumerate(live):
                now_us = time.time_ns() // 1000
                records = hostile_records(
                    stream_id, now_us, seed=spec.seed + 1000 * second + i,
                    per_kind=spec.per_kind, max_record_bytes=kafka.max_record_bytes,
                    live_seq=round((now_us - started_us) / 1e6 * fps))
                for h in records:
                    if h.kind in _ONCE and (second or i):
                        continue
                    # Aimed tokens draw their seq at random: one whose key was already
                    # sent would be a second token with that key, not a new hostile one.
                    key = token_key(h.value) if h.kind in _AIMED else None
                    if key is not None and key in aimed:
                        continue
                    if key is not None:
                        aimed.add(key)
                    batch.append(h)
            results = await writer.write([(h.topic, h.key, h.value) for h in batch])
            for hostile, result in zip(batch, results, strict=True):
                if isinstance(result, BaseException):
                    failed += 1
                else:
                    sources[result] = Sent(hostile.kind, token_key(hostile.value))
            await asyncio.sleep(max(0.0, began + second + 1 - time.monotonic()))
    if failed:
        log.warning("%d hostile records were not acknowledged", failed)
    return sources


_FLOOD_ORDER = (Modality.VIDEO, Modality.AUDIO, Modality.SENSOR, Modality.OCR)


def flood_token(stream_id: str, modality: Modality, seq: int, t_us: int) -> Token:
    """One small token of a flood stream."""
    if modality is Modality.VIDEO:
        return VideoToken(stream_id=stream_id, seq=seq, t_us=t_us, format="gray8", width=4,
                          height=3, data=bytes(12), quality=0.9)
    if modality is Modality.AUDIO:
        return AudioToken(stream_id=stream_id, seq=seq, t_us=t_us, encoding="pcm_s16le",
                          sample_rate=16_000, channels=1, duration_us=20_000, data=bytes(640))
    if modality is Modality.SENSOR:
        return SensorToken(stream_id=stream_id, seq=seq, t_us=t_us, name="imu",
                           values=[1.0, 0.5], unit="m/s,rad", confidence=0.99)
    return OcrToken(stream_id=stream_id, seq=seq, t_us=t_us, text="FLOOD",
                    bbox=(0.1, 0.1, 0.3, 0.1), confidence=0.9)


def flood_tokens(stream_id: str, count: int, t_us: int) -> list[Token]:
    """``count`` tokens of a new stream, all captured at ``t_us``: video, audio, sensor, OCR."""
    return [flood_token(stream_id, _FLOOD_ORDER[i % 4], i // 4, t_us) for i in range(count)]


def _flood(kafka: KafkaSettings, prefix: str, spec: Flood) -> tuple[set[TokenKey], int]:
    publisher = Publisher(kafka, track_keys=True)
    for i in range(spec.streams):
        # Captured as they are sent: fresh when read, so each stream gets aligner state
        # (a token read past its staleness budget is shed to late without any).
        for token in flood_tokens(f"{prefix}{i}", spec.tokens, time.time_ns() // 1000):
            publisher.publish(token)
    undelivered = publisher.close()
    return publisher.acknowledged_keys(), undelivered + len(publisher.failed_keys())


async def send_flood(kafka: KafkaSettings, prefix: str, spec: Flood) -> tuple[set[TokenKey], int]:
    """Publish the flood (in a thread); return the acknowledged keys and how many failed."""
    keys, failed = await asyncio.to_thread(_flood, kafka, prefix, spec)
    log.info("flood: %d tokens of %d new streams acknowledged, %d not", len(keys),
             spec.streams, failed)
    return keys, failed

