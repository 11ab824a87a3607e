import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.config.settings import RouteSettings, SloSettings
from lockstep.streams.route.gate import MAX_STREAMS
from lockstep.streams.route.priority import Lexicon, priority, sla_risk
from lockstep.streams.route.router import DROP, EARLY_EXIT, FULL, TEXT_ONLY, VISION_ONLY, Router
from lockstep.topics.schemas import (
    AudioToken,
    Modality,
    ModalityState,
    Timeline,
    VideoToken,
    Window,
)
from tests.factories import T0, ocr, sensor

pytestmark = pytest.mark.unit


def _frame(pixels: np.ndarray | None = None) -> VideoToken:
    if pixels is None:
        pixels = np.clip(np.random.default_rng(1).normal(128, 40, (48, 64)), 0, 255)
    return VideoToken(stream_id="s", seq=1, t_us=T0, format="gray8", width=64, height=48,
                      data=pixels.astype(np.uint8).tobytes())


def _speech(text: str | None = None, conf: float | None = None, level: float = 0.3
            ) -> AudioToken:
    n = np.arange(320)
    pcm = (level * np.sin(2 * np.pi * 440 * n / 16000) * 32767).astype("<i2").tobytes()
    return AudioToken(stream_id="s", seq=1, t_us=T0, encoding="pcm_s16le", sample_rate=16000,
                      channels=1, duration_us=20_000, data=pcm, asr_text=text,
                      asr_confidence=conf)


def _window(video: VideoToken | None = None, audio: list[AudioToken] | None = None,
            texts: tuple[str, ...] = (), slo: str = "cabin", **kw: object) -> Window:
    states = {}
    if video is not None:
        states[Modality.VIDEO] = ModalityState(present=True, skew_us=0)
    if audio:
        states[Modality.AUDIO] = ModalityState(present=True, skew_us=1000)
    missing = [] if video is not None else [Modality.VIDEO]
    fields: dict[str, object] = dict(
        stream_id="s", window_seq=1, t_start_us=T0 - 16_000, t_end_us=T0 + 16_000,
        anchor_t_us=T0, slo_class=slo, modalities=states, missing=missing, members={},
        video=video, audio=audio or [], ocr=[ocr(text=t) for t in texts],
        timeline=Timeline(capture_us=T0))
    fields.update(kw)
    return Window(**fields)  # type: ignore[arg-type]


def _router(**kw: object) -> Router:
    return Router(RouteSettings(**kw), SloSettings())  # type: ignore[arg-type]


def test_a_window_with_every_modality_trusted_goes_full_to_the_vl_pool() -> None:
    routed = _router().route(_window(_frame(), [_speech()], ("EXIT",)), T0)
    assert (routed.route, routed.reason) == (FULL, "all_trusted")
    assert routed.request is not None and routed.request.pool == "vl"
    assert routed.request.reason == "all_trusted" and routed.request.confidence["video"] > 0.8


def test_missing_video_takes_the_text_only_route_to_the_text_pool() -> None:
    routed = _router().route(_window(None, [_speech("turn left", 0.8)]), T0)
    assert (routed.route, routed.reason) == (TEXT_ONLY, "video_missing")
    assert routed.request is not None and routed.request.pool == "text"


def test_a_black_frame_is_routed_around_as_untrusted_video() -> None:
    black = _frame(np.zeros((48, 64)))
    routed = _router().route(_window(black, [_speech("turn left", 0.8)]), T0)
    assert (routed.route, routed.reason) == (TEXT_ONLY, "video_untrusted")


def test_video_without_trusted_text_or_audio_goes_vision_only() -> None:
    silent = _speech(level=0.0)
    routed = _router().route(_window(_frame(), [silent]), T0)
    assert (routed.route, routed.reason) == (VISION_ONLY, "no_trusted_text")


def test_a_confident_asr_intent_exits_early_and_skips_vision() -> None:
    routed = _router().route(_window(_frame(), [_speech("please call the doctor", 0.97)]), T0)
    assert (routed.route, routed.reason) == (EARLY_EXIT, "asr_confident_intent")
    assert routed.request is not None and routed.request.pool == "text"
    unclear = _router().route(_window(_frame(), [_speech("hmm well", 0.97)]), T0)
    assert unclear.route == FULL


def test_a_window_with_nothing_usable_is_dropped_with_a_reason() -> None:
    routed = _router().route(_window(None, [_speech(level=0.0)]), T0)
    assert (routed.route, routed.reason, routed.request) == (DROP, "nothing_usable", None)


def test_the_route_to_pool_mapping_is_configuration() -> None:
    routed = _router(pools={"full": "big", "vision_only": "vl", "text_only": "small",
                            "early_exit": "small"}).route(
        _window(_frame(), [_speech()], ("EXIT",)), T0)
    assert routed.request is not None and routed.request.pool == "big"


def test_a_sensor_out_of_its_range_is_not_trusted() -> None:
    w = _window(None, [], sensor=[sensor(value=50.0)])
    assert _router().route(w, T0).route == TEXT_ONLY
    assert _router(sensor_ranges={"imu": (0.0, 10.0)}).route(w, T0).route == DROP


def test_contradictory_windows_are_named() -> None:
    bad = _window(None, modalities={Modality.VIDEO: ModalityState(present=True)})
    assert Router.contradiction(bad) == "video marked present without a frame"
    assert Router.contradiction(_window(_frame())) is None


def test_deadline_is_capture_time_plus_the_class_budget() -> None:
    w = _window(_frame(), [_speech()], slo="surgical")
    request = _router().route(w, T0).request
    assert request is not None and request.deadline_us == T0 + 80_000


def test_routing_stamps_the_timeline() -> None:
    request = _router().route(_window(_frame(), [_speech()]), T0 + 5).request
    assert request is not None and request.window.timeline.routed_us == T0 + 5


def test_semantic_importance_weighs_domains() -> None:
    lexicon = Lexicon.of(RouteSettings().domains)
    assert lexicon.importance(["nice weather"]) == 0.0
    medical = lexicon.importance(["chest pain"])
    command = lexicon.importance(["open the door"])
    assert 0 < command < medical < lexicon.importance(["pain and bleeding"]) < 1
    assert lexicon.has_intent(["Call home"]) and not lexicon.has_intent(["hello"])


@given(s=st.floats(0, 1), r=st.floats(0, 1), d=st.floats(0, 0.5), a=st.floats(0, 1))
def test_priority_is_bounded_and_monotonic_in_importance_and_risk(
        s: float, r: float, d: float, a: float) -> None:
    p = priority(s, r, a)
    assert 0.0 <= p <= 1.0
    assert priority(min(1.0, s + d), r, a) >= p
    assert priority(s, min(1.0, r + d), a) >= p


@given(remaining=st.integers(-10**6, 10**6), p99=st.floats(0, 10**6))
def test_sla_risk_is_bounded_and_full_once_the_budget_is_gone(remaining: int, p99: float) -> None:
    risk = sla_risk(remaining, p99)
    assert 0.0 <= risk <= 1.0
    if remaining <= 0:
        assert risk == 1.0


def test_risk_rises_as_routing_eats_the_budget() -> None:
    w = _window(_frame(), [_speech()])
    early = _router().route(w, T0, downstream_p99_us=30_000).request
    late = _router().route(w, T0 + 100_000, downstream_p99_us=30_000).request
    assert early is not None and late is not None and late.priority > early.priority


def test_a_degraded_class_sends_full_windows_down_the_partial_route() -> None:
    window = _window(_frame(), [_speech()], ("EXIT",))
    routed = _router().route(window, T0, degraded=True)
    assert (routed.route, routed.reason) == (TEXT_ONLY, "slo_degraded")
    assert routed.request is not None and routed.request.pool == "text"
    vision = Router(RouteSettings(), SloSettings(breach={"degraded_route": "vision_only"})
                    ).route(window, T0, degraded=True)
    assert (vision.route, vision.reason) == (VISION_ONLY, "slo_degraded")


def test_degraded_mode_leaves_routes_other_than_full_alone() -> None:
    blind = _router().route(_window(None, [_speech("turn left", 0.8)]), T0, degraded=True)
    assert (blind.route, blind.reason) == (TEXT_ONLY, "video_missing")
    mute = _router().route(_window(_frame()), T0, degraded=True)
    assert (mute.route, mute.reason) == (VISION_ONLY, "no_trusted_text")


def test_routing_50k_distinct_streams_keeps_the_gate_state_within_its_bound() -> None:
    router = _router()
    misaligned = _window(None, [_speech("turn left", 0.8)]).model_copy(
        update={"modalities": {Modality.AUDIO: ModalityState(present=True, skew_us=90_000)}})
    first = [router.route(misaligned.model_copy(update={"stream_id": "s-0"}), T0 + i)
             for i in range(3)]
    assert first[0].confidence["gate"] > first[2].confidence["gate"]  # s-0 recalibrated
    for i in range(1, 50_000):
        router.route(misaligned.model_copy(update={"stream_id": f"s-{i}"}), T0 + 3 + i)
        assert router.tracked_streams <= MAX_STREAMS
    assert router.tracked_streams == MAX_STREAMS
    again = router.route(misaligned.model_copy(update={"stream_id": "s-0"}), T0 + 60_000)
    assert again.confidence == first[0].confidence  # evicted: starts afresh


def test_a_router_forgets_streams_idle_past_its_ttl() -> None:
    router = Router(RouteSettings(), SloSettings(), max_streams=10, idle_ttl_us=1_000_000)
    window = _window(None, [_speech("turn left", 0.8)]).model_copy(  # misaligned: held
        update={"modalities": {Modality.AUDIO: ModalityState(present=True, skew_us=90_000)}})
    for i in range(10):
        router.route(window.model_copy(update={"stream_id": f"s-{i}"}), T0 + i)
    assert router.tracked_streams == 10
    router.route(window, T0 + 5_000_000)
    assert router.tracked_streams == 1
