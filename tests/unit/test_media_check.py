"""Encoded frames are checked at the edge: what does not parse as its format is bad_media."""

from __future__ import annotations

import io
import re

import av
import numpy as np
import pytest
from PIL import Image

from lockstep.errors import BadInput, ReasonCode
from lockstep.topics.codec import encode
from lockstep.topics.edge import decode_token
from lockstep.topics.payloads import check_encoded, decode_encoded
from lockstep.topics.schemas import VideoToken
from tests.factories import T0

pytestmark = pytest.mark.unit


def _picture(width: int = 64, height: int = 48) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 4 % 256, y * 5 % 256, (x + y) % 256], -1).astype(np.uint8)


def _encoded(fmt: str, width: int = 64, height: int = 48) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_picture(width, height)).save(buf, "JPEG" if fmt == "jpeg" else "PNG")
    return buf.getvalue()


def _h264(width: int = 64, height: int = 48) -> bytes:
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuv420p"
    encoder.options = {"preset": "ultrafast", "tune": "zerolatency"}
    frame = av.VideoFrame.from_ndarray(_picture(width, height), format="rgb24")
    packets = [*encoder.encode(frame.reformat(format="yuv420p")), *encoder.encode(None)]
    return b"".join(bytes(p) for p in packets)


def _frame(fmt: str, data: bytes, width: int = 64, height: int = 48) -> VideoToken:
    return VideoToken(stream_id="cam", seq=1, t_us=T0, format=fmt,  # type: ignore[arg-type]
                      width=width, height=height, data=data)


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_a_well_formed_frame_passes_and_decodes(fmt: str) -> None:
    frame = _frame(fmt, _encoded(fmt))
    assert check_encoded(frame) is None
    assert decode_encoded(frame) is None


def test_an_annex_b_h264_access_unit_passes_and_decodes() -> None:
    frame = _frame("h264", _h264())
    assert check_encoded(frame) is None
    assert decode_encoded(frame) is None


@pytest.mark.parametrize(("fmt", "damage", "why"), [
    ("jpeg", lambda d: d[: len(d) // 2], "truncated|runs past"),
    ("jpeg", lambda d: d[2:], "SOI"),
    ("jpeg", lambda d: bytes(len(d)), "SOI"),
    ("jpeg", lambda d: d[:-2], "EOI"),
    ("png", lambda d: d[: len(d) // 2], "truncated"),
    ("png", lambda d: d[:24] + bytes([d[24] ^ 0xFF]) + d[25:], "CRC"),
    ("png", lambda d: b"\x00" + d[1:], "signature"),
    ("h264", lambda d: b"\x80" * 64, "neither Annex B"),
    ("h264", lambda d: b"\x00\x00\x00\x01\xff" + d[5:], "forbidden bit"),
])
def test_a_damaged_frame_fails_the_structure_check(fmt: str, damage: object, why: str) -> None:
    data = _h264() if fmt == "h264" else _encoded(fmt)
    frame = _frame(fmt, damage(data))  # type: ignore[operator]
    reason = check_encoded(frame)
    assert reason is not None
    assert re.search(why, reason), reason


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_a_frame_of_another_size_than_declared_fails(fmt: str) -> None:
    frame = _frame(fmt, _encoded(fmt), width=640, height=480)
    reason = check_encoded(frame)
    assert reason is not None and "64x48, declared 640x480" in reason


def test_damage_inside_png_image_data_passes_the_check_and_fails_the_decode() -> None:
    data = bytearray(_encoded("png"))
    idat = data.index(b"IDAT")
    data[idat + 10] ^= 0xFF  # inside the compressed data: only a decode finds it
    frame = _frame("png", bytes(data))
    assert check_encoded(frame) is None
    assert decode_encoded(frame) is not None


def test_full_decode_finds_a_truncated_jpeg_that_ffmpeg_would_conceal() -> None:
    frame = _frame("jpeg", _encoded("jpeg")[:-200] + b"\xff\xd9")
    assert check_encoded(frame) is None  # structure intact: the scan is just shorter
    reason = decode_encoded(frame)
    assert reason is not None and "does not decode" in reason


def test_a_corrupt_jpeg_on_media_video_is_refused_as_bad_media() -> None:
    token = _frame("jpeg", _encoded("jpeg")[:300])
    with pytest.raises(BadInput) as caught:
        decode_token("media.video", b"cam", encode(token))
    assert (caught.value.code, caught.value.field) == (ReasonCode.BAD_MEDIA, "data")
    assert decode_token("media.video", b"cam", encode(_frame("jpeg", _encoded("jpeg"))))


def test_raw_frames_are_not_checked_here() -> None:
    token = VideoToken(stream_id="cam", seq=1, t_us=T0, format="gray8", width=2, height=1,
                       data=b"\x00\x01")
    assert check_encoded(token) is None and decode_encoded(token) is None
