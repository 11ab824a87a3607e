import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.streams.route.confidence import (
    audio_confidence,
    box_plausibility,
    ocr_confidence,
    sensor_confidence,
    video_confidence,
    video_quality,
)
from lockstep.streams.route.gate import GateCalibrator, alignment_gate
from lockstep.topics.schemas import AudioToken, OcrToken, VideoToken
from tests.factories import T0, audio, ocr, sensor

pytestmark = pytest.mark.unit


def _frame(pixels: np.ndarray, quality: float | None = None, fmt: str = "gray8") -> VideoToken:
    h, w = pixels.shape
    return VideoToken(stream_id="s", seq=0, t_us=T0, format=fmt, width=w, height=h,  # type: ignore[arg-type]
                      data=pixels.astype(np.uint8).tobytes(), quality=quality)


def _scene() -> np.ndarray:
    rng = np.random.default_rng(1)
    return np.clip(rng.normal(128, 40, (48, 64)), 0, 255)


def test_a_textured_well_exposed_fresh_frame_scores_high() -> None:
    q = video_quality(_frame(_scene()), age_us=0)
    assert q is not None and q.score > 0.8


def test_black_blurred_or_old_frames_score_low() -> None:
    black = video_quality(_frame(np.zeros((48, 64))), age_us=0)
    flat = video_quality(_frame(np.full((48, 64), 128.0)), age_us=0)
    old = video_quality(_frame(_scene()), age_us=1_000_000)
    assert black is not None and black.score < 0.1
    assert flat is not None and flat.focus < 0.01 and flat.score < 0.2
    assert old is not None and old.freshness < 0.01


def test_a_producer_hint_caps_a_measured_frame_and_stands_in_for_compressed_ones() -> None:
    assert video_confidence(_frame(_scene(), quality=0.4), age_us=0) == 0.4
    jpeg = VideoToken(stream_id="s", seq=0, t_us=T0, format="jpeg", width=64, height=48,
                      data=b"\xff\xd8", quality=0.7)
    assert video_confidence(jpeg, 0) == 0.7
    assert video_confidence(None, 0) == 0.0


def test_audio_uses_asr_confidence_when_given_else_the_level() -> None:
    assert audio_confidence([audio()]) == 0.8  # the factory's asr_confidence
    loud = audio().model_copy(update={"asr_confidence": None})
    quiet = AudioToken(stream_id="s", seq=1, t_us=T0, encoding="pcm_s16le", sample_rate=16000,
                       channels=1, duration_us=20_000, data=bytes(640))
    assert audio_confidence([loud]) > 0.9
    assert audio_confidence([quiet]) == 0.0
    assert audio_confidence([]) == 0.0


def test_ocr_confidence_is_scaled_by_box_plausibility() -> None:
    good = OcrToken(stream_id="s", seq=0, t_us=T0, text="EXIT", bbox=(0.1, 0.1, 0.3, 0.1),
                    confidence=0.9)
    whole_frame = ocr(text="EXIT")  # bbox (0, 0, 1, 1): a "text" the size of the frame
    outside = OcrToken(stream_id="s", seq=1, t_us=T0, text="EXIT", bbox=(0.9, 0.9, 0.5, 0.5),
                       confidence=0.9)
    assert ocr_confidence([good]) == pytest.approx(0.9 * box_plausibility(good.bbox))
    assert ocr_confidence([good]) == pytest.approx(0.9)
    assert ocr_confidence([outside]) < ocr_confidence([good])
    assert ocr_confidence([whole_frame]) < ocr_confidence([good])
    assert box_plausibility((0.1, 0.1, 0.0, 0.2)) == 0.0
    assert ocr_confidence([]) == 0.0


def test_sensor_out_of_range_or_stale_loses_confidence() -> None:
    fresh = sensor(value=5.0)
    assert sensor_confidence([fresh], T0, {"imu": (0, 10)}) == 1.0
    assert sensor_confidence([fresh], T0, {"imu": (0, 1)}) == 0.0
    assert sensor_confidence([fresh], T0 + 200_000) < 0.2
    assert sensor_confidence([], T0) == 0.0


@given(a=st.floats(0, 1), v=st.floats(0, 1), t=st.floats(0, 1), d=st.floats(0.01, 0.5))
def test_the_alignment_gate_is_bounded_and_rises_with_every_modality(
        a: float, v: float, t: float, d: float) -> None:
    g = alignment_gate(a, v, t)
    assert 0.0 < g < 1.0
    assert alignment_gate(min(1.0, a + d), v, t) >= g
    assert alignment_gate(a, min(1.0, v + d), t) >= g
    assert alignment_gate(a, v, min(1.0, t + d)) >= g


def test_the_gate_is_even_at_half_confidence_and_the_seed_form_is_k_1() -> None:
    assert alignment_gate(0.5, 0.5, 0.5) == pytest.approx(0.5)
    assert alignment_gate(1, 1, 1, steepness=1) == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_three_misaligned_windows_recalibrate_the_audio_weight_and_three_good_restore_it() -> None:
    cal = GateCalibrator(alpha=0.3)
    assert [cal.observe("s", 90_000) for _ in range(3)] == [0.3, 0.3, 0.15]
    assert cal.observe("other", 90_000) == 0.3  # per stream
    assert [cal.observe("s", 10_000) for _ in range(3)] == [0.15, 0.15, 0.3]
    assert [cal.observe("s", e) for e in (90_000, 10_000, 90_000, 90_000)] == [0.3] * 4


def test_the_calibrator_keeps_at_most_max_streams_forgetting_the_least_recent_first() -> None:
    cal = GateCalibrator(alpha=0.3, max_streams=3)
    for stream in ("a", "b", "c"):
        cal.observe(stream, 90_000, now_us=T0)
    cal.observe("a", 90_000, now_us=T0 + 1)  # a is now the most recent
    cal.observe("d", 90_000, now_us=T0 + 2)  # b, the least recent, is forgotten
    assert len(cal) == 3
    assert cal.observe("a", 90_000, now_us=T0 + 3) == 0.15  # a kept its run: third in a row
    assert cal.observe("b", 90_000, now_us=T0 + 4) == 0.3  # b starts afresh


def test_a_stream_idle_past_the_ttl_starts_afresh_and_is_swept() -> None:
    cal = GateCalibrator(alpha=0.3, idle_ttl_us=1_000_000)
    assert [cal.observe("s", 90_000, now_us=T0 + i) for i in range(3)] == [0.3, 0.3, 0.15]
    assert cal.observe("s", 90_000, now_us=T0 + 1_000_002) == 0.15  # within the TTL
    assert cal.observe("other", 90_000, now_us=T0 + 2_000_003) == 0.3
    assert len(cal) == 1  # s, idle for longer than the TTL, was swept
    assert cal.observe("s", 90_000, now_us=T0 + 2_000_004) == 0.3  # fresh: one misaligned


def test_a_calibrator_needs_room_for_a_stream_and_a_positive_ttl() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        GateCalibrator(max_streams=0)
    with pytest.raises(ValueError, match="idle_ttl_us"):
        GateCalibrator(idle_ttl_us=0)


def test_streams_that_stay_aligned_hold_no_calibration_state() -> None:
    cal = GateCalibrator(alpha=0.3)
    assert [cal.observe(f"new-{i}", 10_000, now_us=T0 + i) for i in range(1_000)] == [0.3] * 1_000
    assert len(cal) == 0  # a flood of aligned new ids leaves nothing behind
    assert [cal.observe("s", e) for e in (90_000, 10_000, 90_000, 90_000, 90_000)] == [
        0.3, 0.3, 0.3, 0.3, 0.15]  # an aligned window still breaks a misaligned run
    assert len(cal) == 1
    assert [cal.observe("s", 10_000) for _ in range(3)] == [0.15, 0.15, 0.3]
    assert len(cal) == 0  # restored: back to a fresh stream's state
