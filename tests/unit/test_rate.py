import pytest

from lockstep.streams.align.rate import FALLBACK_FPS, RateController, effective_fps

pytestmark = pytest.mark.unit


def test_effective_rate_prefers_the_recovered_clock() -> None:
    assert effective_fps([0, 10, 20], period_us=40_000) == pytest.approx(25.0)


def test_effective_rate_is_the_median_inter_arrival() -> None:
    times = [0, 33_000, 66_000, 99_000, 200_000]  # one long gap from a dropped frame
    assert effective_fps(times) == pytest.approx(1e6 / 33_000)


def test_effective_rate_falls_back_to_24_fps_with_fewer_than_two_frames() -> None:
    assert effective_fps([]) == effective_fps([5]) == FALLBACK_FPS


def test_stride_doubles_under_sustained_risk_and_recovers_after() -> None:
    rc = RateController(max_stride=4, hold=3)
    assert [rc.observe(1.5) for _ in range(3)] == [1, 1, 2]
    assert [rc.observe(1.5) for _ in range(6)][-1] == 4
    assert [rc.observe(1.5) for _ in range(3)][-1] == 4  # capped
    assert [rc.observe(0.2) for _ in range(3)][-1] == 2
    assert [rc.observe(0.2) for _ in range(3)][-1] == 1


def test_a_single_spike_does_not_change_the_rate() -> None:
    rc = RateController(hold=3)
    assert [rc.observe(r) for r in (2.0, 0.7, 2.0, 0.7, 2.0)] == [1] * 5


def test_classes_that_keep_every_frame_never_sample_down() -> None:
    rc = RateController(hold=1, enabled=False)
    assert [rc.observe(9.0) for _ in range(5)] == [1] * 5


def test_a_floor_raises_the_stride_while_set_and_releases_it_after() -> None:
    rc = RateController(max_stride=4, hold=3)
    rc.floor = 2
    assert [rc.observe(0.2) for _ in range(3)] == [2, 2, 2]
    rc.floor = 8  # capped at max_stride
    assert rc.observe(0.2) == 4
    rc.floor = 1
    assert rc.observe(0.2) == 1


def test_a_class_that_must_not_drop_frames_ignores_the_floor() -> None:
    rc = RateController(enabled=False, floor=4)
    assert rc.observe(2.0) == 1
