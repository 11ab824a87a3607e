"""Builders of valid records for tests."""

from __future__ import annotations

import numpy as np

from lockstep.topics.schemas import (
    AudioToken,
    Modality,
    ModalityState,
    OcrToken,
    Request,
    SensorToken,
    Timeline,
    VideoToken,
    Window,
)

T0 = 1_800_000_000_000_000  # 2027-01-15, a fixed capture time


def video(stream: str = "s", seq: int = 0, t_us: int = T0, quality: float | None = 0.9,
          width: int = 8, height: int = 6) -> VideoToken:
    frame = np.zeros((height, width), np.uint8)
    frame[seq % height, seq % width] = 255
    return VideoToken(stream_id=stream, seq=seq, t_us=t_us, format="gray8", width=width,
                      height=height, data=frame.tobytes(), quality=quality)


def audio(stream: str = "s", seq: int = 0, t_us: int = T0, duration_us: int = 20_000,
          rate: int = 16_000, tone_hz: float = 1000.0) -> AudioToken:
    n = round(duration_us * rate / 1e6)
    t = (np.arange(n) + seq * n) / rate
    pcm = (0.5 * np.sin(2 * np.pi * tone_hz * t) * 32767).astype("<i2").tobytes()
    return AudioToken(stream_id=stream, seq=seq, t_us=t_us, encoding="pcm_s16le",
                      sample_rate=rate, channels=1, duration_us=duration_us, data=pcm,
                      asr_confidence=0.8)


def ocr(stream: str = "s", seq: int = 0, t_us: int = T0, text: str = "EXIT") -> OcrToken:
    return OcrToken(stream_id=stream, seq=seq, t_us=t_us, text=text, bbox=(0, 0, 1, 1),
                    confidence=0.9)


def sensor(stream: str = "s", seq: int = 0, t_us: int = T0, value: float = 1.0) -> SensorToken:
    return SensorToken(stream_id=stream, seq=seq, t_us=t_us, name="imu", values=[value],
                       unit="m/s")


def request(seq: int = 1, *, stream: str = "s", priority: float = 0.5,
            deadline_us: int = T0 + 120_000, routed_us: int = T0 + 1000, route: str = "full",
            confidence: dict[str, float] | None = None, **window: object) -> Request:
    """A routed request around a window of ``stream`` (override window fields by keyword)."""
    fields: dict[str, object] = dict(
        stream_id=stream, window_seq=seq, t_start_us=T0, t_end_us=T0 + 100_000,
        anchor_t_us=T0, slo_class="cabin",
        modalities={Modality.VIDEO: ModalityState(present=True)}, missing=[], members={},
        timeline=Timeline(capture_us=T0, routed_us=routed_us))
    fields.update(window)
    return Request(window=Window(**fields), route=route, pool="vl",  # type: ignore[arg-type]
                   priority=priority, deadline_us=deadline_us, confidence=confidence or {})
