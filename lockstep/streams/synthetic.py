"""Synthetic media streams with known timestamps, for the demo, tests and benchmarks.

Pure: :meth:`SyntheticStream.due` returns the tokens captured up to a given time.
Video is a bright square moving over a gradient (gray8), audio a sine tone (pcm_s16le),
OCR a caption that changes every ``ocr_every_ms``, sensor a speed/heading pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, Token, VideoToken


@dataclass(frozen=True)
class SyntheticConfig:
    """Rates and sizes of one synthetic stream."""

    fps: float = 30.0
    width: int = 64
    height: int = 48
    sample_rate: int = 16_000
    audio_chunk_ms: float = 20.0
    tone_hz: float = 440.0
    ocr_every_ms: float = 500.0
    sensor_hz: float = 50.0
    #: Modalities the stream does not send (a camera that is off, no microphone...).
    withheld: frozenset[Modality] = frozenset()
    #: Speech recognised in the audio, and the recogniser's confidence.
    asr_text: str | None = None
    asr_confidence: float | None = None


@dataclass
class SyntheticStream:
    """One stream's token generator, starting at ``start_us`` (capture clock)."""

    stream_id: str
    start_us: int
    config: SyntheticConfig = field(default_factory=SyntheticConfig)
    _next_index: dict[Modality, int] = field(default_factory=dict)

    def _period_us(self, modality: Modality) -> float:
        c = self.config
        return {
            Modality.VIDEO: 1e6 / c.fps,
            Modality.AUDIO: c.audio_chunk_ms * 1000.0,
            Modality.OCR: c.ocr_every_ms * 1000.0,
            Modality.SENSOR: 1e6 / c.sensor_hz,
        }[modality]

    def due(self, now_us: int) -> list[Token]:
        """Every token whose capture time is at or before ``now_us`` and not yet returned."""
        tokens: list[Token] = []
        for modality in Modality:
            if modality in self.config.withheld:
                continue
            period = self._period_us(modality)
            i = self._next_index.get(modality, 0)
            while self.start_us + int(i * period) <= now_us:
                tokens.append(self._make(modality, i, self.start_us + int(i * period)))
                i += 1
            self._next_index[modality] = i
        tokens.sort(key=lambda t: t.t_us)
        return tokens

    def _make(self, modality: Modality, i: int, t_us: int) -> Token:
        c = self.config
        if modality is Modality.VIDEO:
            return VideoToken(stream_id=self.stream_id, seq=i, t_us=t_us, format="gray8",
                              width=c.width, height=c.height, data=self._frame(i), quality=0.9)
        if modality is Modality.AUDIO:
            samples = round(c.sample_rate * c.audio_chunk_ms / 1000.0)
            n = np.arange(i * samples, (i + 1) * samples)
            wave = 0.3 * np.sin(2 * math.pi * c.tone_hz * n / c.sample_rate)
            pcm = (wave * 32767).astype("<i2").tobytes()
            return AudioToken(stream_id=self.stream_id, seq=i, t_us=t_us, encoding="pcm_s16le",
                              sample_rate=c.sample_rate, channels=1,
                              duration_us=round(samples * 1e6 / c.sample_rate), data=pcm,
                              asr_text=c.asr_text, asr_confidence=c.asr_confidence)
        if modality is Modality.OCR:
            return OcrToken(stream_id=self.stream_id, seq=i, t_us=t_us,
                            text=f"SIGN {i % 10}", bbox=(0.1, 0.1, 0.3, 0.1), confidence=0.95)
        angle = 2 * math.pi * i / (c.sensor_hz * 10)
        return SensorToken(stream_id=self.stream_id, seq=i, t_us=t_us, name="imu",
                           values=[round(10 + 2 * math.sin(angle), 4), round(angle % 6.283, 4)],
                           unit="m/s,rad", confidence=0.99)

    def _frame(self, i: int) -> bytes:
        c = self.config
        gradient = np.linspace(0, 96, c.width, dtype=np.float32)
        frame = np.tile(gradient, (c.height, 1))
        side = max(2, c.height // 4)
        x = int((i * 2) % (c.width - side))
        y = int((c.height - side) / 2 * (1 + math.sin(i / 15)))
        frame[y:y + side, x:x + side] = 255
        return bytes(frame.astype(np.uint8).tobytes())
