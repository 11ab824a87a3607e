"""The route stage's and the reference engine's fast measures give the old results exactly.

The old implementations live in tests/unit/legacy_route.py and legacy_reference.py; every
float is compared with ``==`` and every request by value and by its bytes on the wire.
"""

import io
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from lockstep.config.settings import RouteSettings, SloSettings
from lockstep.engines.reference import describe
from lockstep.streams.route import tokendrop
from lockstep.streams.route.confidence import audio_confidence, video_confidence, video_quality
from lockstep.streams.route.priority import Lexicon
from lockstep.streams.route.router import Router, _round4
from lockstep.streams.route.tokendrop import patch_mask
from lockstep.topics.codec import encode
from lockstep.topics.schemas import (
    AudioToken,
    Modality,
    ModalityState,
    OcrToken,
    SensorToken,
    Timeline,
    VideoToken,
    Window,
)
from tests.factories import T0
from tests.unit import legacy_reference, legacy_route

pytestmark = pytest.mark.unit

FORMATS = ("gray8", "rgb24", "jpeg", "png")
KINDS = ("constant", "noise", "gradient", "object", "ties", "salt", "dark", "bright")
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _image(kind: str, height: int, width: int, seed: int, channels: int) -> np.ndarray:
    """A test picture, (height, width, channels) uint8."""
    rng = np.random.default_rng(seed)
    shape = (height, width, channels)
    if kind == "constant":
        return np.full(shape, seed % 256, np.uint8)
    if kind == "noise":
        sigma = 1 + seed % 60
        return np.clip(rng.normal(128, sigma, shape), 0, 255).astype(np.uint8)
    if kind == "gradient":
        ramp = np.linspace(0, 96 + seed % 150, width)
        return np.broadcast_to(ramp[None, :, None], shape).astype(np.uint8)
    if kind == "object":
        image = np.full(shape, 90, np.uint8)
        h, w = max(1, height // 3), max(1, width // 3)
        image[h:2 * h, w:2 * w] = rng.integers(0, 256, (h, w, channels))
        return image
    if kind == "ties":  # 0/4 checkerboards: patch variances of exactly 4 (std 2.0)
        yy, xx = np.indices((height, width))
        return np.broadcast_to((((yy + xx) % 2) * 4)[..., None], shape).astype(np.uint8)
    if kind == "salt":
        return (rng.integers(0, 2, shape) * 255).astype(np.uint8)
    if kind == "dark":
        return rng.integers(0, 12, shape).astype(np.uint8)
    return rng.integers(200, 256, shape).astype(np.uint8)  # bright


def _frame(image: np.ndarray, fmt: str, quality: float | None = None) -> VideoToken:
    height, width = image.shape[:2]
    if fmt == "gray8":
        data = np.ascontiguousarray(image[..., 0]).tobytes()
    elif fmt == "rgb24":
        data = np.ascontiguousarray(image).tobytes()
    else:
        buffer = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(image)).save(buffer, format=fmt.upper())
        data = buffer.getvalue()
    return VideoToken(stream_id="s", seq=1, t_us=T0, format=fmt,  # type: ignore[arg-type]
                      width=width, height=height, data=data, quality=quality)


def _picture(kind: str, height: int, width: int, seed: int, fmt: str) -> VideoToken:
    return _frame(_image(kind, height, width, seed, 1 if fmt == "gray8" else 3), fmt)


def _assert_same_measures(frame: VideoToken, age_us: int = 20_000) -> None:
    assert video_quality(frame, age_us) == legacy_route.video_quality(frame, age_us)
    assert video_confidence(frame, age_us) == legacy_route.video_confidence(frame, age_us)
    for patch, min_std in ((8, 2.0), (3, 2.1), (5, 0.5), (1, 0.0), (16, 1e-7), (8, 40.0)):
        assert patch_mask(frame, patch, min_std) == legacy_route.patch_mask(frame, patch, min_std)


@SLOW
@given(kind=st.sampled_from(KINDS), fmt=st.sampled_from(FORMATS), seed=st.integers(0, 2**16),
       height=st.integers(1, 40), width=st.integers(1, 40))
def test_frame_measures_equal_the_old_ones_on_small_frames(
        kind: str, fmt: str, seed: int, height: int, width: int) -> None:
    _assert_same_measures(_picture(kind, height, width, seed, fmt))


@SLOW
@given(pixels=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=2, max_dims=2, max_side=20)),
       rgb=st.booleans(), patch=st.integers(1, 9), min_std=st.floats(0, 80))
def test_frame_measures_equal_the_old_ones_on_arbitrary_pixels(
        pixels: np.ndarray, rgb: bool, patch: int, min_std: float) -> None:
    image = np.repeat(pixels[..., None], 3, axis=2) if rgb else pixels[..., None]
    if rgb:
        image = image.copy()
        image[..., 1] = np.roll(pixels, 1)
    frame = _frame(image, "rgb24" if rgb else "gray8")
    assert video_quality(frame, 0) == legacy_route.video_quality(frame, 0)
    assert patch_mask(frame, patch, min_std) == legacy_route.patch_mask(frame, patch, min_std)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_frame_measures_equal_the_old_ones_on_640x480_frames(kind: str, fmt: str) -> None:
    _assert_same_measures(_picture(kind, 480, 640, 7, fmt))


@pytest.mark.parametrize("total", [2**24 - 1, 2**24, 2**24 + 1, 2**25 + 3])
def test_a_large_gray_frame_mean_is_exact_on_both_sides_of_float32s_integer_range(
        total: int) -> None:
    n = 480 * 640
    flat = np.full(n, total // n, np.uint8)
    flat[: total % n] += 1
    np.random.default_rng(total).shuffle(flat)
    _assert_same_measures(_frame(flat.reshape(480, 640, 1), "gray8"))


def test_a_patch_on_the_threshold_is_decided_the_defining_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    defining = tokendrop._keep_float32

    def spy(*args: object) -> np.ndarray:
        calls.append(1)
        return defining(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(tokendrop, "_keep_float32", spy)
    ties = _picture("ties", 48, 64, 0, "gray8")  # every patch's std is exactly 2.0
    assert patch_mask(ties, 8, 2.0) == legacy_route.patch_mask(ties, 8, 2.0)
    assert calls
    calls.clear()
    noise = _picture("noise", 48, 64, 30, "gray8")
    assert patch_mask(noise, 8, 2.0) == legacy_route.patch_mask(noise, 8, 2.0)
    assert not calls  # clear-cut patches take the fast path


def _chunk(encoding: str, level: float, channels: int, seed: int, asr: bool) -> AudioToken:
    rate, samples = 16_000, 320
    wave = level * np.sin(np.arange(samples * channels) * (0.05 + seed % 7 / 10))
    if encoding == "pcm_s16le":
        data = (wave * 32767).astype("<i2").tobytes()
    elif encoding == "pcm_f32le":
        data = wave.astype("<f4").tobytes()
    else:
        data = b"\x01" * 64
    return AudioToken(stream_id="s", seq=seed, t_us=T0, encoding=encoding,  # type: ignore[arg-type]
                      sample_rate=rate, channels=channels, duration_us=20_000, data=data,
                      asr_text="call the doctor" if asr else None,
                      asr_confidence=0.5 + seed % 50 / 100 if asr else None)


_chunks = st.lists(st.builds(
    _chunk, encoding=st.sampled_from(["pcm_s16le", "pcm_f32le", "opus"]),
    level=st.sampled_from([0.0, 1e-5, 0.003, 0.3, 1.0]) | st.floats(0, 1),
    channels=st.integers(1, 2), seed=st.integers(0, 100), asr=st.booleans()), max_size=4)


@SLOW
@given(chunks=_chunks)
def test_audio_confidence_equals_the_old_one(chunks: list[AudioToken]) -> None:
    assert audio_confidence(chunks) == legacy_route.audio_confidence(chunks)


@given(texts=st.lists(st.sampled_from(
    ["chest pain", "open the door", "nice weather", "CALL home now", "", "bleeding, pain!",
     "stop stop stop", "fire exit"]) | st.text(max_size=30), max_size=4))
def test_semantic_importance_and_intent_equal_the_old_ones(texts: list[str]) -> None:
    domains = RouteSettings().domains
    lexicon = Lexicon.of(domains)
    assert lexicon.importance(texts) == legacy_route.semantic_importance(texts, domains)
    assert lexicon.has_intent(texts) == legacy_route.has_intent(texts, domains)


def _window(seq: int, frame: VideoToken | None, chunks: list[AudioToken], texts: list[str],
            skew_us: int, sensor: float | None, missing: list[Modality]) -> Window:
    states = {Modality.AUDIO: ModalityState(present=bool(chunks), skew_us=skew_us)}
    if frame is not None:
        states[Modality.VIDEO] = ModalityState(present=True, skew_us=0)
    return Window(
        stream_id=f"s{seq % 3}", window_seq=seq, t_start_us=T0 - 16_000, t_end_us=T0 + 16_000,
        anchor_t_us=T0, slo_class=("cabin", "surgical", "ar")[seq % 3], modalities=states,
        missing=missing, members={}, video=frame, audio=chunks,
        ocr=[OcrToken(stream_id="s", seq=i, t_us=T0, text=t, bbox=(0.1, 0.1, 0.3, 0.1),
                      confidence=0.9) for i, t in enumerate(texts)],
        sensor=[] if sensor is None else [SensorToken(stream_id="s", seq=0, t_us=T0 - 5000,
                                                      name="imu", values=[sensor])],
        timeline=Timeline(capture_us=T0, aligned_us=T0 + 1000))


_windows = st.lists(st.builds(
    _window, seq=st.integers(0, 50),
    frame=st.none() | st.builds(_picture, kind=st.sampled_from(KINDS),
                                height=st.integers(1, 64), width=st.integers(1, 64),
                                seed=st.integers(0, 1000), fmt=st.sampled_from(FORMATS)),
    chunks=_chunks, texts=st.lists(st.sampled_from(["EXIT", "chest pain", "hello"]), max_size=2),
    skew_us=st.sampled_from([0, 1000, 90_000]), sensor=st.none() | st.floats(-20, 20),
    missing=st.lists(st.sampled_from(list(Modality)), max_size=2, unique=True)), max_size=8)


def _assert_same_routes(windows: list[Window], route: RouteSettings, *, age_us: int = 30_000,
                        p99_us: float = 20_000.0, degraded: bool = False) -> None:
    fast, old = Router(route, SloSettings()), legacy_route.LegacyRouter(route, SloSettings())
    for window in windows:
        now = window.timeline.capture_us + age_us
        got = fast.route(window, now, p99_us, degraded=degraded)
        want = old.route(window, now, p99_us, degraded=degraded)
        assert (got.route, got.reason, got.confidence) == (want.route, want.reason,
                                                           want.confidence)
        assert got.request == want.request
        if want.request is not None and got.request is not None:
            assert encode(got.request) == encode(want.request)
            assert got.request.model_dump(exclude_unset=True) == want.request.model_dump(
                exclude_unset=True)  # the same fields set, down to the copied window


@SLOW
@given(windows=_windows, degraded=st.booleans(), age_us=st.integers(-5000, 400_000),
       min_confidence=st.sampled_from([0.0, 0.3, 0.9]), patch_size=st.sampled_from([0, 4, 8]))
def test_router_decisions_and_requests_equal_the_old_ones(
        windows: list[Window], degraded: bool, age_us: int, min_confidence: float,
        patch_size: int) -> None:
    route = RouteSettings(min_confidence=min_confidence, patch_size=patch_size,
                          sensor_ranges={"imu": (0.0, 10.0)})
    _assert_same_routes(windows, route, age_us=age_us, degraded=degraded)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["noise", "object", "gradient", "bright"])
def test_router_equals_the_old_one_on_640x480_frames(kind: str, fmt: str) -> None:
    frame = _picture(kind, 480, 640, 3, fmt)
    speech = [_chunk("pcm_s16le", 0.3, 1, 1, asr=False)]
    windows = [_window(i, frame, speech if i % 2 else [], ["EXIT"], 1000 * i, None, [])
               for i in range(3)]
    _assert_same_routes(windows, RouteSettings())


_describe_windows = st.builds(
    _window, seq=st.integers(0, 50),
    frame=st.none() | st.builds(_picture, kind=st.sampled_from(KINDS),
                                height=st.integers(1, 48), width=st.integers(1, 48),
                                seed=st.integers(0, 1000), fmt=st.sampled_from(FORMATS)),
    chunks=_chunks, texts=st.lists(st.sampled_from(["EXIT", "SIGN 4", ""]), max_size=2),
    skew_us=st.just(0), sensor=st.none() | st.floats(-20, 20),
    missing=st.lists(st.sampled_from(list(Modality)), max_size=2, unique=True))


@SLOW
@given(window=_describe_windows)
def test_reference_engine_descriptions_equal_the_old_ones(window: Window) -> None:
    assert describe(window) == legacy_reference.describe(window)


@pytest.mark.parametrize("fmt", ["gray8", "rgb24"])
@pytest.mark.parametrize("kind", ["noise", "bright", "object"])
def test_reference_engine_equals_the_old_one_on_640x480_frames(kind: str, fmt: str) -> None:
    window = _window(1, _picture(kind, 480, 640, 5, fmt),
                     [_chunk("pcm_s16le", 0.3, 1, 2, asr=False)] * 3, ["EXIT"], 0, 1.0, [])
    assert describe(window) == legacy_reference.describe(window)
    assert not math.isnan(describe(window).scores["luma_mean"])


@given(x=st.floats(0, 1) | st.sampled_from(
    [0.0, -0.0, 1.0, 0.03125, 0.09375, 0.00005, 0.99995, 5e-324, 0.12345, 0.5, 1.5, -0.2]))
def test_the_routers_rounding_equals_pythons_round_to_4_places(x: float) -> None:
    got, want = _round4(x), round(x, 4)
    assert got == want and math.copysign(1, got) == math.copysign(1, want)


def test_the_routers_rounding_equals_pythons_round_next_to_every_half() -> None:
    for k in range(10_001):
        half = (k + 0.5) / 10_000
        for x in (k / 10_000, half, float(np.nextafter(half, 0)), float(np.nextafter(half, 1))):
            if 0 <= x <= 1:
                assert _round4(x) == round(x, 4), x
