"""docs/wire-format.md is true: records built by hand from the doc decode, and it cannot drift.

Every record here is built the way a producer in another language would build it: the
4-byte header by hand and the body with a plain MessagePack packer, never Lockstep's
:func:`~lockstep.topics.codec.encode` (which only serves to check the worked example).
"""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiokafka.partitioner import murmur2
from pydantic import BaseModel

from lockstep.errors import BadInput, DecodeError, SchemaError
from lockstep.topics.codec import Kind, decode, encode
from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, VideoToken

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"
T0 = 1_800_000_000_000_000  # 2027-01-15T08:00:00Z in µs


def header(kind: int) -> bytes:
    """The 4-byte header as the doc spells it: b"LS", version 1, kind."""
    return b"LS" + bytes((1, kind))


def record(kind: int, body: dict[str, Any]) -> bytes:
    """A record value built from the doc alone: header + one MessagePack map (bin for bytes)."""
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return header(kind) + packed


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def worked_example_bytes() -> bytes:
    match = re.search(r"<!-- worked-example-hex:.*?-->\s*```text\n(.*?)```", doc_text(), re.S)
    assert match is not None, "the worked example hex block is missing from the doc"
    return bytes.fromhex(match.group(1))


GRAY = bytes(range(12))  # a 4x3 gray8 frame
PCM = struct.pack("<320h", *range(320))  # 20 ms of mono pcm_s16le at 16 kHz

HAND_BUILT: list[tuple[Kind, dict[str, Any], BaseModel]] = [
    (
        Kind.VIDEO,
        {"stream_id": "cam-1", "seq": 0, "t_us": T0, "format": "gray8", "width": 4,
         "height": 3, "data": GRAY, "quality": 0.75},
        VideoToken(stream_id="cam-1", seq=0, t_us=T0, format="gray8", width=4, height=3,
                   data=GRAY, quality=0.75, keyframe=True),
    ),
    (
        Kind.AUDIO,
        {"stream_id": "cab/mic:0", "seq": 12, "t_us": T0 + 20_000, "encoding": "pcm_s16le",
         "sample_rate": 16_000, "channels": 1, "duration_us": 20_000, "data": PCM,
         "asr_text": "hello", "asr_confidence": 0.5},
        AudioToken(stream_id="cab/mic:0", seq=12, t_us=T0 + 20_000, encoding="pcm_s16le",
                   sample_rate=16_000, channels=1, duration_us=20_000, data=PCM,
                   asr_text="hello", asr_confidence=0.5),
    ),
    (
        Kind.OCR,
        {"stream_id": "cam-1", "seq": 3, "t_us": T0, "modality": "ocr", "text": "EXIT",
         "bbox": [0.1, 0.2, 0.3, 0.1], "confidence": 0.9},
        OcrToken(stream_id="cam-1", seq=3, t_us=T0, text="EXIT", bbox=(0.1, 0.2, 0.3, 0.1),
                 confidence=0.9),
    ),
    (
        Kind.SENSOR,
        {"stream_id": "car.7@site", "seq": 2**62 - 1, "t_us": T0, "name": "imu",
         "values": [0.5, -1.25, 9.81], "unit": "m/s2", "confidence": None},
        SensorToken(stream_id="car.7@site", seq=2**62 - 1, t_us=T0, name="imu",
                    values=[0.5, -1.25, 9.81], unit="m/s2"),
    ),
]


@pytest.mark.parametrize(("kind", "body", "expected"), HAND_BUILT,
                         ids=[k.name.lower() for k, _, _ in HAND_BUILT])
def test_hand_built_token_decodes_to_the_expected_model(
        kind: Kind, body: dict[str, Any], expected: BaseModel) -> None:
    assert decode(record(kind, body)) == expected


@pytest.mark.parametrize(("kind", "body", "expected"), HAND_BUILT,
                         ids=[k.name.lower() for k, _, _ in HAND_BUILT])
def test_hand_built_token_matches_lockstep_own_encoding_field_for_field(
        kind: Kind, body: dict[str, Any], expected: BaseModel) -> None:
    ours = msgpack.unpackb(encode(expected)[4:], raw=False)
    theirs = msgpack.unpackb(record(kind, body)[4:], raw=False)
    assert encode(expected)[:4] == header(kind)
    assert {k: v for k, v in ours.items() if k in theirs} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in theirs.items()}


def test_worked_example_hex_in_the_doc_is_what_the_codec_encodes() -> None:
    token = SensorToken(stream_id="cam-1", seq=7, t_us=T0, name="imu", values=[1.5],
                        unit="m/s")
    assert worked_example_bytes() == encode(token)
    assert decode(worked_example_bytes()) == token


def test_minimal_worked_example_with_int64_time_and_free_key_order_decodes_the_same() -> None:
    def pair(key: str, packed_value: bytes) -> bytes:
        packed_key: bytes = msgpack.packb(key)
        return packed_key + packed_value

    body = b"\x86" + b"".join((  # fixmap of 6, keys in an order of our choosing
        pair("values", b"\x91\xcb" + struct.pack(">d", 1.5)),
        pair("unit", b"\xa3m/s"),
        pair("name", b"\xa3imu"),
        pair("seq", b"\x07"),
        pair("t_us", b"\xd3" + struct.pack(">q", T0)),  # int 64 instead of uint 64
        pair("stream_id", b"\xa5cam-1"),
    ))
    assert decode(header(Kind.SENSOR) + body) == decode(worked_example_bytes())


def test_doc_kind_table_matches_the_codec() -> None:
    text = doc_text()
    names = {Kind.VIDEO: "VideoToken", Kind.AUDIO: "AudioToken", Kind.OCR: "OcrToken",
             Kind.SENSOR: "SensorToken", Kind.WINDOW: "Window", Kind.REQUEST: "Request",
             Kind.RESPONSE: "Response", Kind.DEADLETTER: "DeadLetter", Kind.LATE: "LateToken",
             Kind.SLO_EVENT: "SloEvent"}
    assert set(names) == set(Kind)
    for kind, name in names.items():
        row = f"| {int(kind)} | `0x{int(kind):02x}` | {name} |"
        assert row in text, f"kind table row missing: {row}"


def test_doc_partition_test_vector_is_java_compatible_murmur2() -> None:
    match = re.search(r'murmur2\(b"cam-1"\) = (0x[0-9a-f]+)`, so `cam-1` goes to partition '
                      r"(\d+) of 4", doc_text())
    assert match is not None
    digest = murmur2(b"cam-1") & 0xFFFFFFFF
    assert digest == int(match.group(1), 16)
    assert (digest & 0x7FFFFFFF) % 4 == int(match.group(2))


def test_nil_and_an_omitted_optional_field_give_the_same_default() -> None:
    base = {"stream_id": "s", "seq": 1, "t_us": T0, "name": "imu", "values": [1.0]}
    omitted = decode(record(Kind.SENSOR, base))
    explicit = decode(record(Kind.SENSOR, {**base, "confidence": None}))
    assert omitted == explicit
    assert isinstance(omitted, SensorToken)
    assert omitted.confidence is None and omitted.unit == ""
    assert omitted.modality is Modality.SENSOR


@pytest.mark.parametrize(("size", "accepted"), [(640, True), (638, True), (642, True),
                                                (641, False), (644, False)])
def test_pcm_size_rule_allows_one_sample_of_slack(size: int, accepted: bool) -> None:
    body = {"stream_id": "mic", "seq": 0, "t_us": T0, "encoding": "pcm_s16le",
            "sample_rate": 16_000, "channels": 1, "duration_us": 20_000, "data": bytes(size)}
    if accepted:
        assert isinstance(decode(record(Kind.AUDIO, body)), AudioToken)
    else:
        with pytest.raises(SchemaError, match="pcm_s16le"):
            decode(record(Kind.AUDIO, body))


VIDEO = {"stream_id": "cam-1", "seq": 0, "t_us": T0, "format": "gray8", "width": 4,
         "height": 3, "data": GRAY}
SENSOR = {"stream_id": "cam-1", "seq": 0, "t_us": T0, "name": "imu", "values": [1.0]}

REJECTED: list[tuple[str, Kind, dict[str, Any]]] = [
    ("base64 text instead of bin frame", Kind.VIDEO,
     {**VIDEO, "data": base64.b64encode(GRAY).decode()}),
    ("gray8 frame one byte short", Kind.VIDEO, {**VIDEO, "data": GRAY[:-1]}),
    ("rgb24 frame sized for gray8", Kind.VIDEO, {**VIDEO, "format": "rgb24"}),
    ("format not lowercase", Kind.VIDEO, {**VIDEO, "format": "GRAY8"}),
    ("width 0", Kind.VIDEO, {**VIDEO, "width": 0}),
    ("keyframe nil", Kind.VIDEO, {**VIDEO, "keyframe": None}),
    ("NaN sensor value", Kind.SENSOR, {**SENSOR, "values": [float("nan")]}),
    ("infinite sensor value", Kind.SENSOR, {**SENSOR, "values": [float("inf")]}),
    ("NaN confidence", Kind.SENSOR, {**SENSOR, "confidence": float("nan")}),
    ("unknown field", Kind.SENSOR, {**SENSOR, "firmware": "1.2"}),
    ("no values", Kind.SENSOR, {**SENSOR, "values": []}),
    ("unit nil", Kind.SENSOR, {**SENSOR, "unit": None}),
    ("modality of another kind", Kind.SENSOR, {**SENSOR, "modality": "video"}),
    ("t_us before 2000", Kind.SENSOR, {**SENSOR, "t_us": 946_684_800_000_000 - 1}),
    ("t_us after 2100", Kind.SENSOR, {**SENSOR, "t_us": 4_102_444_800_000_000 + 1}),
    ("t_us in milliseconds", Kind.SENSOR, {**SENSOR, "t_us": T0 // 1000}),
    ("stream_id with a space", Kind.SENSOR, {**SENSOR, "stream_id": "cam 1"}),
    ("stream_id too long", Kind.SENSOR, {**SENSOR, "stream_id": "x" * 129}),
    ("negative seq", Kind.SENSOR, {**SENSOR, "seq": -1}),
    ("bbox of three", Kind.OCR, {"stream_id": "s", "seq": 0, "t_us": T0, "text": "",
                                 "bbox": [0.0, 0.0, 1.0], "confidence": 0.5}),
    ("confidence above 1", Kind.OCR, {"stream_id": "s", "seq": 0, "t_us": T0, "text": "",
                                      "bbox": [0.0, 0.0, 1.0, 1.0], "confidence": 1.5}),
]


@pytest.mark.parametrize(("kind", "body"), [(k, b) for _, k, b in REJECTED],
                         ids=[name for name, _, _ in REJECTED])
def test_record_breaking_the_documented_contract_is_rejected_as_bad_input(
        kind: Kind, body: dict[str, Any]) -> None:
    with pytest.raises((SchemaError, DecodeError)):
        decode(record(kind, body))


@pytest.mark.parametrize(("value", "reason", "documented"), [
    (None, "empty record value (tombstone)", "empty record value (tombstone)"),
    (b'{"stream_id": "cam-1"}', "not a Lockstep record: missing b'LS' magic",
     "not a Lockstep record: missing b'LS' magic"),
    (b"LS\x02\x04" + msgpack.packb(SENSOR), "unsupported wire format version 2 ",
     "unsupported wire format version N "),
    (b"LS\x01\x05" + msgpack.packb(SENSOR), "unknown record kind 5", "unknown record kind N"),
    (header(Kind.SENSOR) + msgpack.packb(SENSOR) + b"\xc0", "bad MessagePack body: ",
     "bad MessagePack body: "),
    (header(Kind.SENSOR) + msgpack.packb([1, 2]), "record body is a MessagePack list, not a map",
     "record body is a MessagePack list, not a map"),
])
def test_broken_framing_is_a_decode_error_with_the_documented_reason(
        value: bytes | None, reason: str, documented: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(value)
    assert caught.value.reason.startswith(reason)
    assert documented in doc_text()


def test_value_over_the_record_limit_is_a_decode_error() -> None:
    value = record(Kind.SENSOR, SENSOR)
    with pytest.raises(DecodeError, match=f"record of {len(value)} bytes exceeds the 64-byte"):
        decode(value, max_bytes=64)
    assert "record of N bytes exceeds the M-byte limit" in doc_text()


def test_schema_violation_reason_names_the_kind_and_the_field() -> None:
    with pytest.raises(SchemaError) as caught:
        decode(record(Kind.SENSOR, {**SENSOR, "values": [float("nan")]}))
    assert caught.value.reason == "invalid sensor: values.0: Input should be a finite number"
    assert caught.value.reason in doc_text()
    assert isinstance(caught.value, BadInput)
