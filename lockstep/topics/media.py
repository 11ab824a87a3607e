"""Decoding the raw media payloads of tokens (raw frames, PCM audio) into numpy arrays.

Shared by every stage that looks inside media: the aligner (cutting audio), routing
(confidence) and the reference engine. Compressed formats are not decoded here.
"""

from __future__ import annotations

from typing import Final

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
