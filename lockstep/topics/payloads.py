"""Decoding the raw media payloads of tokens (raw frames, PCM audio) into numpy arrays.

Shared by every stage that looks inside media: the aligner (cutting audio), routing
(confidence) and the reference engine. Compressed frames are not decoded on the hot path:
:func:`check_encoded` checks their structure at the edge (cheaply), :func:`decode_encoded`
decodes them for off-path checks.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from lockstep.topics.schemas import AudioToken, VideoToken

#: NumPy dtype and full-scale value of each PCM encoding.
PCM_FORMATS: Final = {"pcm_s16le": ("<i2", 32768.0), "pcm_f32le": ("<f4", 1.0)}


def pixels(frame: VideoToken) -> npt.NDArray[np.uint8] | None:
    """A raw frame as (height, width) for gray8 or (height, width, 3) for rgb24; None else."""
    if frame.format == "gray8":
        return np.frombuffer(frame.data, np.uint8).reshape(frame.height, frame.width)
    if frame.format == "rgb24":
        return np.frombuffer(frame.data, np.uint8).reshape(frame.height, frame.width, 3)
    return None


def pcm(chunk: AudioToken, dtype: type[np.floating] = np.float32) -> np.ndarray | None:
    """A PCM chunk as (samples, channels) floats in [-1, 1]; None for compressed audio."""
    spec = PCM_FORMATS.get(chunk.encoding)
    if spec is None:
        return None
    data: np.ndarray = np.frombuffer(chunk.data, spec[0]).astype(dtype) / dtype(spec[1])
    return data.reshape(-1, chunk.channels)


# -- encoded frames: is this what its format says it is? ------------------------------------

_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
#: JPEG markers that start a frame (SOF0-SOF15 but DHT, JPG and DAC).
_JPEG_SOF: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: JPEG markers that stand alone (no length): TEM, RST0-7, SOI, EOI.
_JPEG_STANDALONE: Final = frozenset({0x01, *range(0xD0, 0xDA)})


def check_encoded(frame: VideoToken) -> str | None:
    """None when an encoded frame's bytes are a well-formed ``format`` stream; else why not.

    A structure check, not a decode: a JPEG must run from SOI through its headers to a
    scan and end in EOI, with a frame header of the declared size; a PNG must carry its
    signature, a valid IHDR of the declared size and a chain of chunks that ends in IEND;
    H.264 must be Annex B (start codes) or length-prefixed NAL units with valid headers.
    It costs microseconds whatever the frame's size (the headers are read, not the
    compressed data), so it runs on every frame; corruption inside the compressed data
    passes (:func:`decode_encoded` finds that, at the cost of a decode). Raw formats are
    checked by their size in the schema: None.
    """
    if frame.format == "jpeg":
        return _check_jpeg(frame.data, frame.width, frame.height)
    if frame.format == "png":
        return _check_png(frame.data, frame.width, frame.height)
    if frame.format == "h264":
        return _check_h264(frame.data)
    return None


def _check_jpeg(data: bytes, width: int, height: int) -> str | None:
    if data[:2] != b"\xff\xd8":
        return "jpeg frame does not start with SOI (ff d8)"
    pos, size, sof = 2, len(data), False
    while True:
        while pos < size and data[pos] == 0xFF and pos + 1 < size and data[pos + 1] == 0xFF:
            pos += 1  # fill bytes
        if pos + 2 > size or data[pos] != 0xFF:
            return f"jpeg frame has no marker at byte {pos}"
        marker = data[pos + 1]
        if marker in _JPEG_STANDALONE:
            if marker == 0xD9:
                return "jpeg frame ends (EOI) before any scan"
            pos += 2
            continue
        if pos + 4 > size:
            return "jpeg frame is cut inside a segment header"
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if length < 2 or pos + 2 + length > size:
            return f"jpeg segment ff {marker:02x} at byte {pos} runs past the end"
        if marker in _JPEG_SOF:
            if length < 8:
                return "jpeg frame header is too short"
            rows = int.from_bytes(data[pos + 5:pos + 7], "big")
            cols = int.from_bytes(data[pos + 7:pos + 9], "big")
            if cols != width or rows not in (0, height):  # 0: height set by a DNL segment
                return f"jpeg frame is {cols}x{rows}, declared {width}x{height}"
            sof = True
        elif marker == 0xDA:  # start of scan: compressed data follows, up to EOI
            if not sof:
                return "jpeg scan before any frame header"
            end = size
            while end > pos and data[end - 1] == 0:  # zero padding after EOI
                end -= 1
            if data[end - 2:end] != b"\xff\xd9":
                return "jpeg frame does not end with EOI (ff d9): truncated"
            return None
        pos += 2 + length


def _check_png(data: bytes, width: int, height: int) -> str | None:
    if data[:8] != _PNG_SIGNATURE:
        return "png frame does not start with the PNG signature"
    if data[12:16] != b"IHDR" or int.from_bytes(data[8:12], "big") != 13 or len(data) < 33:
        return "png frame does not begin with an IHDR chunk"
    if zlib.crc32(data[12:29]) != int.from_bytes(data[29:33], "big"):
        return "png IHDR chunk fails its CRC"
    cols, rows = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if (cols, rows) != (width, height):
        return f"png frame is {cols}x{rows}, declared {width}x{height}"
    pos, size, idat = 33, len(data), False
    while pos + 12 <= size:
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        end = pos + 12 + length
        if end > size:
            return f"png chunk {kind!r} at byte {pos} runs past the end: truncated"
        idat = idat or kind == b"IDAT"
        if kind == b"IEND":
            return None if idat else "png frame has no image data (IDAT)"
        pos = end
    return "png frame does not end with an IEND chunk: truncated"


def _check_h264(data: bytes) -> str | None:
    if data[:3] == b"\x00\x00\x01" or data[:4] == b"\x00\x00\x00\x01":
        start = 3 if data[2] == 1 else 4
        return _nal_header(data[start] if start < len(data) else 0x80)
    pos, size = 0, len(data)
    while pos < size:  # length-prefixed (AVCC): 4-byte big-endian sizes chain to the end
        length = int.from_bytes(data[pos:pos + 4], "big")
        if length == 0 or pos + 4 + length > size:
            return "h264 frame is neither Annex B (start codes) nor length-prefixed NAL units"
        why = _nal_header(data[pos + 4])
        if why is not None:
            return why
        pos += 4 + length
    return None


def _nal_header(byte: int) -> str | None:
    if byte & 0x80:
        return "h264 NAL unit header has its forbidden bit set"
    if not 1 <= byte & 0x1F <= 23:
        return f"h264 NAL unit type {byte & 0x1F} is reserved or unspecified"
    return None


def decode_encoded(frame: VideoToken) -> str | None:
    """None when an encoded frame decodes (FFmpeg, through PyAV) to its declared size.

    Far costlier than :func:`check_encoded` (docs/wire-format.md §9 has the figures): for
    checks off the hot path, such as ``lockstep validate --decode``. Raw formats: None.
    """
    codec = {"jpeg": "mjpeg", "png": "png", "h264": "h264"}.get(frame.format)
    if codec is None:
        return None
    import av  # PyAV is a core dependency; imported here to keep it off import time

    context: Any = av.CodecContext.create(codec, "r")  # a video decoder
    # Fail on damage FFmpeg would otherwise conceal (a truncated JPEG decodes, grey-filled).
    context.options = {"err_detect": "crccheck+bitstream+buffer+explode"}
    try:
        decoded = context.decode(av.Packet(frame.data))
        if frame.format == "h264":
            decoded += context.decode(None)  # flush: a single access unit is buffered
    except (av.FFmpegError, ValueError) as exc:
        return f"{frame.format} frame does not decode: {exc}"
    if not decoded:
        return f"{frame.format} frame decodes to no picture"
    picture = decoded[0]
    if (picture.width, picture.height) != (frame.width, frame.height):
        return (f"{frame.format} frame decodes to {picture.width}x{picture.height}, declared "
                f"{frame.width}x{frame.height}")
    return None
