"""Test vectors: one or more records of every kind, and records the pipeline must refuse.

Pure and fixed: the same records every time, so docs/test-vectors/ can be regenerated and
compared. A client in any language decodes each vector's ``value_hex``, compares it with
``record`` (the JSON form) and re-encodes it; each invalid vector names the code it must be
refused with.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Final

import msgpack
from pydantic import BaseModel

from lockstep.errors import ReasonCode
from lockstep.topics import catalog
from lockstep.topics.codec import MAGIC, VERSION, Kind, encode
from lockstep.topics.keys import HOP_BASE
from lockstep.topics.schemas import (
    AudioToken,
    DeadLetter,
    LateToken,
    Modality,
    ModalityState,
    OcrToken,
    Request,
    Response,
    SensorToken,
    SloEvent,
    Timeline,
    TokenDrop,
    VideoToken,
    Window,
)

T0: Final = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z
STREAM: Final = "cam-1"
#: A 16x8 grey JPEG (baseline, quality 50), so the vector carries a frame that decodes.
JPEG_16X8: Final = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a18"
    "1616183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d717970647"
    "85c656763ffc0000b080008001001011100ffc4001f0000010501010101010100000000000000000102"
    "030405060708090a0bffc400b5100002010303020403050504040000017d010203000411051221314106"
    "13516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a34353637"
    "38393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788"
    "898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5"
    "d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00c9d12cfeef15d4"
    "6a177fd8ba149729c4effbb878fe33d0f4238009e7ae31debfffd9")
PCM_2MS: Final = struct.pack("<32h", *(round(8000 * math.sin(i / 5)) for i in range(32)))


@dataclass(frozen=True)
class Vector:
    """A valid record: where it goes and what it is."""

    name: str
    description: str
    topic: str
    key: bytes | None
    record: BaseModel

    @property
    def value(self) -> bytes:
        """The record value as the codec encodes it."""
        return encode(self.record)


@dataclass(frozen=True)
class Invalid:
    """A record the pipeline refuses, with the code (and field) it must be refused with."""

    name: str
    description: str
    topic: str
    key: bytes | None
    value: bytes | None
    code: ReasonCode
    field: str | None = None


def _video(**fields: object) -> VideoToken:
    base: dict[str, object] = dict(stream_id=STREAM, seq=42, t_us=T0, format="jpeg",
                                   width=16, height=8, data=JPEG_16X8, quality=0.8)
    return VideoToken.model_validate({**base, **fields})


def _audio() -> AudioToken:
    return AudioToken(stream_id=STREAM, seq=1260, t_us=T0 - 1_000, encoding="pcm_s16le",
                      sample_rate=16_000, channels=1, duration_us=2_000, data=PCM_2MS,
                      asr_text="stop", asr_confidence=0.91)


def _ocr() -> OcrToken:
    return OcrToken(stream_id=STREAM, seq=3, t_us=T0 - 500_000, text="EXIT 12",
                    bbox=(0.05, 0.6, 0.4, 0.12), confidence=0.93)


def _sensor() -> SensorToken:
    return SensorToken(stream_id=STREAM, seq=7, t_us=T0, name="imu", values=[1.5], unit="m/s")


def _window() -> Window:
    gray = _video(format="gray8", width=4, height=2, data=bytes(range(0, 256, 32)))
    return Window(
        stream_id=STREAM, window_seq=42, t_start_us=T0 - 16_667, t_end_us=T0 + 16_667,
        anchor_t_us=T0, slo_class="cabin",
        modalities={
            Modality.VIDEO: ModalityState(present=True, confidence=0.8, skew_us=0,
                                          matched_seq=42, tokens=1),
            Modality.AUDIO: ModalityState(present=True, confidence=0.91, skew_us=0,
                                          matched_seq=1260, tokens=1),
            Modality.SENSOR: ModalityState(present=False, tokens=0)},
        missing=[Modality.SENSOR], members={Modality.VIDEO: [42], Modality.AUDIO: [1260]},
        video=gray, audio=[_audio()],
        timeline=Timeline(capture_us=T0 + 1_000, ingest_us=T0 + 9_000, aligned_us=T0 + 21_000))


def _hop_window() -> Window:
    start = T0 + 100_000
    return Window(
        stream_id="mic-2", window_seq=HOP_BASE + start // 100_000, t_start_us=start,
        t_end_us=start + 100_000, anchor_t_us=start + 50_000, slo_class="ar",
        modalities={Modality.VIDEO: ModalityState(present=False)}, missing=[Modality.VIDEO],
        members={Modality.SENSOR: [11]},
        sensor=[SensorToken(stream_id="mic-2", seq=11, t_us=start + 50_000, name="temp",
                            values=[21.5], unit="C", confidence=0.99)],
        timeline=Timeline(capture_us=start + 50_000, aligned_us=start + 160_000))


def _request() -> Request:
    window = _window()
    window = window.model_copy(update={"timeline": window.timeline.model_copy(
        update={"routed_us": T0 + 23_000})})
    return Request(window=window, route="full", pool="vl", priority=0.62,
                   deadline_us=T0 + 121_000, reason="all_trusted",
                   confidence={"video": 0.8, "audio": 0.91, "text": 0.91, "gate": 0.97},
                   token_drop=TokenDrop(patch=2, rows=1, cols=2, keep=b"\x80", dropped=0.5))


def _response(status: str = "ok") -> Response:
    capture, responded = T0 + 1_000, T0 + 65_400
    timeline = Timeline(capture_us=capture, ingest_us=T0 + 9_000, aligned_us=T0 + 21_000,
                        routed_us=T0 + 23_000, dequeued_us=T0 + 30_000,
                        inferred_us=T0 + 62_000 if status == "ok" else 0,
                        responded_us=responded)
    common: dict[str, object] = dict(
        stream_id=STREAM, window_seq=42, route="full", pool="vl", engine="reference",
        slo_class="cabin", missing=["sensor"], deadline_us=T0 + 121_000, timeline=timeline,
        reason="all_trusted", e2e_us=responded - capture)
    if status == "ok":
        return Response.model_validate({**common, "output": "a person near the exit sign",
                                        "scores": {"video": 0.8}, "max_new_tokens": 64})
    return Response.model_validate({**common, "output": "", "scores": {}, "status": status,
                                    "detail": "deadline passed"})


def valid() -> list[Vector]:
    """Every kind at least once (Video in two formats, Window with and without video)."""
    key = STREAM.encode()
    bad = b'{"stream_id": "cam-1"}'
    return [
        Vector("video-jpeg", "a JPEG frame", catalog.MEDIA[Modality.VIDEO], key, _video()),
        Vector("video-gray8", "a raw 4x2 gray8 frame, rows top to bottom",
               catalog.MEDIA[Modality.VIDEO], key,
               _video(format="gray8", width=4, height=2, data=bytes(range(0, 256, 32)),
                      quality=None, keyframe=False)),
        Vector("audio-pcm", "2 ms of 16 kHz mono pcm_s16le with an ASR result",
               catalog.MEDIA[Modality.AUDIO], key, _audio()),
        Vector("ocr", "a caption seen in the scene", catalog.MEDIA[Modality.OCR], key, _ocr()),
        Vector("sensor", "an IMU reading with a unit",
               catalog.MEDIA[Modality.SENSOR], key, _sensor()),
        Vector("sensor-final", "the stream's last sensor reading (final: no more will come)",
               catalog.MEDIA[Modality.SENSOR], key,
               _sensor().model_copy(update={"seq": 8, "final": True})),
        Vector("window", "a frame-anchored window, sensor missing", catalog.ALIGNED, key,
               _window()),
        Vector("window-hop", "a hop window of a stream without video (window_seq >= 2^62)",
               catalog.ALIGNED, b"mic-2", _hop_window()),
        Vector("request", "a window routed to the vl pool with a token-drop mask",
               catalog.requests_topic("vl"), key, _request()),
        Vector("response", "an answered window with its e2e latency", catalog.RESPONSES, key,
               _response()),
        Vector("response-expired", "a request the worker shed: answered, never dropped",
               catalog.RESPONSES, key, _response("expired")),
        Vector("deadletter", "a JSON record sent to media.video", catalog.DEADLETTER, key,
               DeadLetter(stage="align", topic="media.video", partition=3, offset=1021,
                          reason="not a Lockstep record: missing b'LS' magic",
                          error="DecodeError", key=key, value=bad, at_us=T0 + 5_000,
                          value_size=len(bad), value_sha256=hashlib.sha256(bad).hexdigest(),
                          code=ReasonCode.BAD_MAGIC)),
        Vector("late", "an OCR token whose window was already emitted", catalog.LATE, key,
               LateToken(stream_id=STREAM, modality=Modality.OCR, seq=3, t_us=T0 - 500_000,
                         watermark_us=T0 - 400_000, reason="window already emitted",
                         at_us=T0 + 2_000, value=encode(_ocr()),
                         value_size=len(encode(_ocr())), code=ReasonCode.WINDOW_EMITTED)),
        Vector("late-stale", "three frames read long after capture, shed in one record "
               "(not carried)", catalog.LATE, key,
               LateToken(stream_id=STREAM, modality=Modality.VIDEO, seq=42, more_seqs=[43, 44],
                         t_us=T0, watermark_us=T0 + 30_000, at_us=T0 + 150_000,
                         reason="stale: 3 tokens, the first read 150 ms after capture, past "
                                "the 120 ms their windows could wait", value_size=1230,
                         code=ReasonCode.STALE)),
        Vector("slo-event", "an e2e breach that degrades the cabin class", catalog.SLO_EVENTS,
               b"cabin", SloEvent(kind="breach", stage="e2e", slo_class="cabin", p99_ms=131.5,
                                  budget_ms=120.0, samples=412, consecutive=3, degrade=True,
                                  source="lockstep-worker-vl@host-1", at_us=T0 + 7_000_000)),
    ]


def _raw(kind: int, body: object) -> bytes:
    return MAGIC + bytes((VERSION, kind)) + msgpack.packb(body, use_bin_type=True)


def _fields(record: BaseModel, **changes: object) -> dict[str, object]:
    return {**record.model_dump(mode="python"), **changes}


def invalid() -> list[Invalid]:
    """Records a media topic's reader must refuse, one per edge check, with the code."""
    video, key = catalog.MEDIA[Modality.VIDEO], STREAM.encode()
    sensor_topic, audio_topic = catalog.MEDIA[Modality.SENSOR], catalog.MEDIA[Modality.AUDIO]
    jpeg = encode(_video())
    return [
        Invalid("tombstone", "a null value", video, key, None, ReasonCode.TOMBSTONE),
        Invalid("json", "JSON instead of the wire format", video, key,
                b'{"stream_id": "cam-1"}', ReasonCode.BAD_MAGIC),
        Invalid("version-2", "a wire version this build does not read", video, key,
                MAGIC + bytes((2, Kind.VIDEO)) + jpeg[4:], ReasonCode.BAD_VERSION),
        Invalid("kind-99", "an unknown kind byte", video, key, MAGIC + bytes((1, 99)) + b"\x80",
                ReasonCode.UNKNOWN_KIND),
        Invalid("broken-msgpack", "bytes after the map", sensor_topic, key,
                encode(_sensor()) + b"\xc0", ReasonCode.BAD_MSGPACK),
        Invalid("list-body", "a MessagePack array, not a map", sensor_topic, key,
                _raw(Kind.SENSOR, [1, 2, 3]), ReasonCode.NOT_A_MAP),
        Invalid("window-on-media", "a window record on a media topic", video, key,
                encode(_window()), ReasonCode.WRONG_KIND),
        Invalid("video-on-audio", "a video token on media.audio", audio_topic, key, jpeg,
                ReasonCode.WRONG_TOPIC),
        Invalid("key-mismatch", "keyed otherwise than by its stream_id", video, b"cam-2", jpeg,
                ReasonCode.KEY_MISMATCH, "stream_id"),
        Invalid("nan-value", "NaN in a sensor reading", sensor_topic, key,
                _raw(Kind.SENSOR, _fields(_sensor(), values=[math.nan])), ReasonCode.SCHEMA,
                "values.0"),
        Invalid("seq-as-text", "a string where an int belongs", video, key,
                _raw(Kind.VIDEO, _fields(_video(), seq="42")), ReasonCode.SCHEMA, "seq"),
        Invalid("pcm-size", "a PCM chunk whose size does not match its duration", audio_topic,
                key, _raw(Kind.AUDIO, _fields(_audio(), data=PCM_2MS[:40])),
                ReasonCode.SCHEMA, "data"),
        Invalid("unknown-field", "a field the contract does not list", sensor_topic, key,
                _raw(Kind.SENSOR, _fields(_sensor(), firmware="1.2")), ReasonCode.SCHEMA,
                "firmware"),
        Invalid("jpeg-truncated", "a JPEG cut short (no EOI)", video, key,
                encode(_video(data=JPEG_16X8[:200])), ReasonCode.BAD_MEDIA, "data"),
        Invalid("jpeg-random", "bytes that are no JPEG at all", video, key,
                encode(_video(data=bytes(range(256)) * 4)), ReasonCode.BAD_MEDIA, "data"),
        Invalid("jpeg-size", "a JPEG whose size is not the declared one", video, key,
                encode(_video(width=32)), ReasonCode.BAD_MEDIA, "data"),
        Invalid("future", "captured in 2099: more than align.max_future_ms ahead", video, key,
                encode(_video(t_us=4_070_908_800_000_000)), ReasonCode.FUTURE_T_US, "t_us"),
    ]
