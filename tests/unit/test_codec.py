import math

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.errors import DecodeError, SchemaError
from lockstep.topics.codec import DEFAULT_MAX_BYTES, Kind, decode, decode_as, encode, peek_kind
from lockstep.topics.schemas import (
    MAX_T_US,
    DeadLetter,
    LateToken,
    Modality,
    ModalityState,
    Request,
    Response,
    SensorToken,
    Timeline,
    VideoToken,
    Window,
)
from tests.factories import T0, audio, ocr, sensor, video

pytestmark = pytest.mark.unit


def _window() -> Window:
    return Window(
        stream_id="cam-1", window_seq=7, t_start_us=T0, t_end_us=T0 + 100_000,
        anchor_t_us=T0 + 50_000, slo_class="cabin",
        modalities={Modality.VIDEO: ModalityState(present=True, confidence=0.9, tokens=1)},
        missing=[Modality.AUDIO], members={Modality.VIDEO: [3]},
        video=video(stream="cam-1", seq=3, t_us=T0 + 50_000),
        timeline=Timeline(capture_us=T0 + 50_000, aligned_us=T0 + 60_000),
    )


RECORDS = [
    video(), audio(), ocr(), sensor(), _window(),
    Request(window=_window(), route="partial", pool="vl", priority=0.5, deadline_us=T0),
    Response(stream_id="cam-1", window_seq=7, route="full", pool="vl", engine="reference",
             slo_class="cabin", output="x", scores={"a": 1.0}, missing=[], deadline_us=T0,
             timeline=Timeline()),
    DeadLetter(stage="align", topic="media.video", partition=0, offset=5, reason="bad",
               error="DecodeError", key=b"k", value=b"\x00", at_us=T0),
    LateToken(stream_id="cam-1", modality=Modality.OCR, seq=1, t_us=T0, watermark_us=T0,
              reason="late", at_us=T0, value=b"raw"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_wire_record_round_trips(record: object) -> None:
    data = encode(record)  # type: ignore[arg-type]
    assert data[:2] == b"LS" and data[2] == 1
    assert decode(data) == record


def test_header_names_the_kind() -> None:
    assert peek_kind(encode(audio())) is Kind.AUDIO
    assert peek_kind(encode(_window())) is Kind.WINDOW


def test_binary_payload_is_msgpack_bin_not_base64() -> None:
    token = video()
    body = msgpack.unpackb(encode(token)[4:], raw=False)
    assert body["data"] == token.data and isinstance(body["data"], bytes)


@pytest.mark.parametrize(("value", "reason"), [
    (None, "tombstone"),
    (b"", "magic"),
    (b"{\"json\": true}", "magic"),
    (b"LS\x02\x01", "version 2"),
    (b"LS\x01\x63", "unknown record kind 99"),
    (b"LS\x01\x01\xc1", "MessagePack"),
    (b"LS\x01\x01\x93\x01\x02\x03", "not a map"),
])
def test_foreign_or_broken_bytes_raise_decode_error_with_reason(
        value: bytes | None, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode(value)


def test_oversize_record_is_rejected() -> None:
    data = encode(video(width=64, height=64))
    with pytest.raises(DecodeError, match="exceeds"):
        decode(data, max_bytes=1000)
    assert decode(data, max_bytes=DEFAULT_MAX_BYTES) == video(width=64, height=64)


def _tamper(token: object, **fields: object) -> bytes:
    data = encode(token)  # type: ignore[arg-type]
    body = msgpack.unpackb(data[4:], raw=False)
    body.update(fields)
    return data[:4] + msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize(("token", "fields", "reason"), [
    (sensor(), {"values": [math.nan]}, "values.0"),
    (sensor(), {"values": [math.inf]}, "values.0"),
    (video(), {"t_us": MAX_T_US + 1}, "t_us"),
    (video(), {"t_us": 12}, "t_us"),
    (video(), {"width": 9}, "needs 54 bytes, got 48"),
    (audio(), {"duration_us": 40_000}, "does not match duration"),
    (ocr(), {"confidence": 1.5}, "confidence"),
    (ocr(), {"surprise": 1}, "surprise"),
    (video(), {"stream_id": "bad id with spaces"}, "stream_id"),
])
def test_contract_violations_raise_schema_error_naming_the_field(
        token: object, fields: dict[str, object], reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        decode(_tamper(token, **fields))


def test_decode_as_refuses_a_record_of_another_kind() -> None:
    with pytest.raises(DecodeError, match="expected a Window"):
        decode_as(Window, encode(video()))
    assert decode_as(VideoToken, encode(video())) == video()


def test_encode_refuses_non_wire_objects() -> None:
    with pytest.raises(TypeError):
        encode(Timeline())


@given(
    seq=st.integers(0, 2**62 - 1),
    t_us=st.integers(T0, MAX_T_US),
    values=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8),
    name=st.text(min_size=1, max_size=20),
)
def test_sensor_tokens_round_trip_for_any_valid_field(
        seq: int, t_us: int, values: list[float], name: str) -> None:
    token = SensorToken(stream_id="s", seq=seq, t_us=t_us, name=name, values=values)
    assert decode(encode(token)) == token


def test_trusted_records_equal_validated_ones_and_encode_alike() -> None:
    from lockstep.topics.schemas import trusted

    timeline = Timeline(capture_us=T0, aligned_us=T0 + 5)
    fast = trusted(Timeline, **timeline.model_dump())
    assert fast == timeline and encode(_window()) == encode(
        trusted(Window, **dict(_window())))
    with pytest.raises(TypeError, match="missing fields"):
        trusted(Timeline, capture_us=T0)
