"""Records nobody on the team wrote: seeded hostile input for the pipeline's input topics.

Pure: :func:`hostile_records` returns the same records for the same seed. Each record has
a ``kind`` that says how it is broken; every one of them must end in ``deadletter`` with
a reason (none may crash a role, none may be lost). Some are aimed at a live stream —
a token with a sequence number or a capture time far off the stream's own clock, which a
naive aligner would trust and stop anchoring windows on — so the test can check the stream
carries on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import msgpack

from lockstep.topics import catalog
from lockstep.topics.codec import MAGIC, VERSION, Kind, encode
from lockstep.topics.schemas import AudioToken, Modality, SensorToken, VideoToken

#: Room the broker needs around a record value in a batch (headers, key, framing).
_BATCH_OVERHEAD = 126


@dataclass(frozen=True)
class Hostile:
    """One broken record and where it goes."""

    kind: str
    topic: str
    key: bytes | None
    value: bytes | None


def _body(kind: Kind, fields: dict[str, object]) -> bytes:
    return MAGIC + bytes((VERSION, kind)) + msgpack.packb(fields, use_bin_type=True)


def _video(stream_id: str, seq: int, t_us: int) -> VideoToken:
    return VideoToken(stream_id=stream_id, seq=seq, t_us=t_us, format="gray8", width=4,
                      height=3, data=bytes(12), quality=0.9)


def _video_fields(stream_id: str, seq: int, t_us: int) -> dict[str, object]:
    return _video(stream_id, seq, t_us).model_dump(mode="python")


def hostile_records(stream_id: str, now_us: int, seed: int, *, per_kind: int = 1,
                    max_record_bytes: int = 8 * 1024 * 1024,
                    live_seq: int = 1000) -> list[Hostile]:
    """Broken records of every kind, ``per_kind`` of each, in a seeded random order.

    Args:
        stream_id: A live stream the aimed records (spoofed seq, off-clock time, key
            mismatch) are about.
        now_us: The wall clock (capture times are set around it).
        seed: Makes the set reproducible.
        per_kind: Records of each kind.
        max_record_bytes: The topics' ``max.message.bytes`` (the oversize record is just
            under it, so the broker takes it and the pipeline must cope).
        live_seq: About where the live stream's video ``seq`` is.
    """
    rng = random.Random(seed)
    video_topic = catalog.MEDIA[Modality.VIDEO]
    audio_topic = catalog.MEDIA[Modality.AUDIO]
    sensor_topic = catalog.MEDIA[Modality.SENSOR]
    media = list(catalog.MEDIA.values())
    key = stream_id.encode()

    def other() -> bytes:
        return f"hostile-{rng.randrange(1 << 30):x}".encode()

    def sensor(kind: str, values: list[float]) -> Hostile:
        sid = other()
        fields = SensorToken(stream_id=sid.decode(), seq=rng.randrange(1000), t_us=now_us,
                             name="imu", values=[1.0]).model_dump(mode="python")
        return Hostile(kind, sensor_topic, sid, _body(Kind.SENSOR, {**fields, "values": values}))

    def oversize() -> Hostile:
        sid = other()
        # A frame whose record is just under the topic limit: the broker takes it, but its
        # window (the frame plus everything else) cannot fit a record.
        token = VideoToken(stream_id=sid.decode(), seq=1, t_us=now_us, format="jpeg",
                           width=64, height=48, data=rng.randbytes(max_record_bytes - 400))
        return Hostile("oversize_frame", video_topic, sid, encode(token))

    def just_under_limit() -> Hostile:
        value = b"LS" + rng.randbytes(max_record_bytes - _BATCH_OVERHEAD - 2 - len(key))
        return Hostile("max_size_garbage", video_topic, key, value)

    makers: dict[str, Callable[[], Hostile]] = {
        "random_bytes": lambda: Hostile("random_bytes", rng.choice(media), other(),
                                        rng.randbytes(rng.randrange(1, 512))),
        "tombstone": lambda: Hostile("tombstone", rng.choice(media), other(), None),
        "empty": lambda: Hostile("empty", rng.choice(media), other(), b""),
        "bad_magic": lambda: Hostile("bad_magic", rng.choice(media), other(),
                                     b"XX" + bytes((VERSION, Kind.VIDEO)) + b"\x80"),
        "bad_version": lambda: Hostile("bad_version", rng.choice(media), other(),
                                       MAGIC + bytes((9, Kind.VIDEO)) + b"\x80"),
        "unknown_kind": lambda: Hostile("unknown_kind", rng.choice(media), other(),
                                        MAGIC + bytes((VERSION, 99)) + b"\x80"),
        "broken_msgpack": lambda: Hostile("broken_msgpack", rng.choice(media), other(),
                                          MAGIC + bytes((VERSION, Kind.VIDEO)) + b"\xc1\xc1"),
        "not_a_map": lambda: Hostile("not_a_map", video_topic, other(),
                                     MAGIC + bytes((VERSION, Kind.VIDEO))
                                     + msgpack.packb([1, 2, 3])),
        "wrong_types": lambda: Hostile("wrong_types", video_topic, key, _body(
            Kind.VIDEO, {**_video_fields(stream_id, 1, now_us), "seq": "one"})),
        "nan_values": lambda: sensor("nan_values", [math.nan, 1.0]),
        "inf_values": lambda: sensor("inf_values", [math.inf]),
        "ancient_t_us": lambda: Hostile("ancient_t_us", video_topic, key, _body(
            Kind.VIDEO, {**_video_fields(stream_id, 1, now_us), "t_us": 1_000})),
        "future_t_us": lambda: Hostile("future_t_us", video_topic, key, encode(
            _video(stream_id, live_seq + 10, now_us + 3_600_000_000))),
        "wrong_topic": lambda: Hostile("wrong_topic", audio_topic, key, encode(
            _video(stream_id, live_seq, now_us))),
        "key_mismatch": lambda: Hostile("key_mismatch", video_topic, other(), encode(
            _video(stream_id, live_seq, now_us))),
        "pcm_size_mismatch": lambda: Hostile("pcm_size_mismatch", audio_topic, key, _body(
            Kind.AUDIO, {**AudioToken(stream_id=stream_id, seq=1, t_us=now_us,
                                      encoding="pcm_s16le", sample_rate=16000, channels=1,
                                      duration_us=20_000, data=bytes(640)
                                      ).model_dump(mode="python"), "data": bytes(7)})),
        # Each a different seq: an exact copy of a token already seen counts as a duplicate.
        "spoofed_seq": lambda: Hostile("spoofed_seq", video_topic, key, encode(
            _video(stream_id, (1 << 62) - 1 - rng.randrange(1 << 20), now_us))),
        "off_clock_seq": lambda: Hostile("off_clock_seq", video_topic, key, encode(
            _video(stream_id, live_seq + 10_000_000 + rng.randrange(1 << 20), now_us))),
        "oversize_frame": oversize,
        "max_size_garbage": just_under_limit,
    }
    out: list[Hostile] = []
    for kind, make in makers.items():
        for _ in range(per_kind if kind not in ("oversize_frame", "max_size_garbage") else 1):
            out.append(make())
    rng.shuffle(out)
    return out
