import pytest

from streams.router import FULL, PARTIAL, Router
from streams.settings import RouteSettings, SloSettings
from tests.factories import T0
from topics.schemas import Modality, ModalityState, Timeline, Window

pytestmark = pytest.mark.unit


def _window(missing: list[Modality], conf: float = 0.8, slo: str = "cabin") -> Window:
    return Window(stream_id="s", window_seq=1, t_start_us=T0, t_end_us=T0 + 100_000,
                  anchor_t_us=T0, slo_class=slo,
                  modalities={Modality.VIDEO: ModalityState(present=True, confidence=conf)},
                  missing=missing, members={}, timeline=Timeline(capture_us=T0))


def test_complete_window_goes_full_and_incomplete_goes_partial() -> None:
    router = Router(RouteSettings(pool="vl"), SloSettings())
    assert router.route(_window([]), T0).route == FULL
    request = router.route(_window([Modality.AUDIO]), T0)
    assert request.route == PARTIAL and request.pool == "vl"


def test_deadline_is_capture_time_plus_the_class_budget() -> None:
    router = Router(RouteSettings(), SloSettings())
    assert router.route(_window([], slo="surgical"), T0).deadline_us == T0 + 80_000
    assert router.route(_window([], slo="unknown"), T0).deadline_us == T0 + 120_000


def test_priority_rises_with_confidence_and_with_spent_budget() -> None:
    router = Router(RouteSettings(semantic_weight=0.5), SloSettings())
    fresh_low = router.route(_window([], conf=0.2), T0).priority
    fresh_high = router.route(_window([], conf=0.9), T0).priority
    late_high = router.route(_window([], conf=0.9), T0 + 100_000).priority
    assert fresh_low < fresh_high < late_high <= 1.0
    assert router.route(_window([], conf=0.9), T0 + 10**9).priority == pytest.approx(0.95)


def test_routing_stamps_the_timeline() -> None:
    request = Router(RouteSettings(), SloSettings()).route(_window([]), T0 + 5)
    assert request.window.timeline.routed_us == T0 + 5
    assert request.window.timeline.capture_us == T0
