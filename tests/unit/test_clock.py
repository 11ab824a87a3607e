import numpy as np
import pytest

from lockstep.streams.align.clock import CaptureClock, ClockLag, LagFloor
from lockstep.streams.align.clockguard import ClockGuard
from lockstep.topics.schemas import Modality

pytestmark = pytest.mark.unit

PERIOD = 10_000
T0 = 1_800_000_000_000_000


def _fitted(points: int = 20, lag: int = 3_000) -> tuple[CaptureClock, ClockLag]:
    """A clock fitted on exact stamps, and lags of tokens arriving ``lag`` µs after them."""
    clock, lags = CaptureClock(), ClockLag(size=16, every=4)
    for seq in range(points):
        clock.update(seq, T0 + seq * PERIOD)
        lags.push(seq, T0 + seq * PERIOD + lag, clock)
    return clock, lags


def test_capture_clock_recovers_capture_times_from_jittered_stamps() -> None:
    rng = np.random.default_rng(1)
    clock = CaptureClock()
    errors = []
    for seq in range(400):
        recovered = clock.update(seq, T0 + seq * PERIOD + int(rng.normal(0, 8_000)))
        if seq >= 200:
            errors.append(abs(recovered - (T0 + seq * PERIOD)))
    assert clock.ready and clock.period_us == pytest.approx(PERIOD, abs=30)
    assert max(errors) < 3_000  # the raw stamps are off by up to ~25 ms


def test_clock_lag_is_the_low_lag_against_the_fit() -> None:
    _, lags = _fitted(lag=3_000)
    assert lags.low == 3_000 and lags.samples == 16


def test_clock_lag_follows_the_fit_without_new_samples() -> None:
    clock, lags = _fitted()
    before = lags.current(clock)
    fitted = clock.time_of(19)
    for seq in range(20, 40):  # the stamps move 2 ms later; no lag is pushed
        clock.update(seq, T0 + seq * PERIOD + 2_000)
    moved = clock.time_of(19)
    assert before is not None and fitted is not None and moved is not None and moved > fitted
    assert lags.current(clock) == pytest.approx(before - (moved - fitted), abs=1)


def test_clock_lag_forgets_its_samples_when_the_clock_restarts() -> None:
    clock, lags = _fitted()
    for seq in range(20, 24):  # the device clock jumps by a second: the fit restarts
        clock.update(seq, T0 + seq * PERIOD + 1_000_000)
    assert clock.resets == 1
    assert lags.push(24, T0 + 24 * PERIOD, clock) is None
    assert lags.samples == 1


def test_lag_floor_is_the_minimum_over_its_window() -> None:
    floor = LagFloor(size=3)
    assert [floor.push(arrival, 0) for arrival in (5, 2, 7, 8, 9)] == [5, 2, 2, 2, 7]


def _guard() -> ClockGuard:
    return ClockGuard(max_error_us=1_000_000, max_seq_jump=1000, rebase_after=3)


def test_clock_guard_names_the_seq_a_far_off_token_should_have_had() -> None:
    clock, _ = _fitted()
    runs: dict[Modality, list[tuple[int, int]]] = {}
    reason = _guard().check(clock, runs, Modality.VIDEO, 2**62 - 1, T0 + 20 * PERIOD)
    assert reason is not None and "expected seq ≈ 20 at that t_us" in reason
    assert _guard().check(clock, runs, Modality.VIDEO, 5_000, T0 + 5_000 * PERIOD) is None
    assert runs == {}  # a fitting token ends the run


def test_clock_guard_re_bases_the_clock_after_a_run_that_agrees() -> None:
    clock, _ = _fitted()
    guard = _guard()
    runs: dict[Modality, list[tuple[int, int]]] = {}
    jumped = [(seq, T0 + seq * PERIOD + 5_000_000) for seq in range(20, 23)]
    reasons = [guard.check(clock, runs, Modality.AUDIO, seq, t) for seq, t in jumped]
    assert reasons[0] and reasons[1] and reasons[2] is None
    assert clock.resets == 1 and clock.last_seq == 21  # refit from the run before the last


def test_clock_guard_bounds_seq_jumps_before_the_clock_is_fitted() -> None:
    clock = CaptureClock()
    clock.update(0, T0)
    runs: dict[Modality, list[tuple[int, int]]] = {}
    assert _guard().check(clock, runs, Modality.OCR, 1000, T0 + 1) is None
    reason = _guard().check(clock, runs, Modality.OCR, 1001, T0 + 1)
    assert reason is not None and "align.max_seq_jump" in reason


def test_slope_sigma_shrinks_as_the_fit_grows() -> None:
    rng = np.random.default_rng(2)
    clock = CaptureClock()
    sigmas = []
    for seq in range(200):
        clock.update(seq, T0 + seq * PERIOD + int(rng.normal(0, 8_000)))
        if seq in (10, 199):
            sigmas.append(clock.slope_sigma)
    assert sigmas[0] > 10 * sigmas[1] > 0
