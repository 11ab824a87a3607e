import pytest

from lockstep.streams.dedupe import RecentKeys

pytestmark = pytest.mark.unit


def test_a_key_is_new_once_then_seen() -> None:
    recent = RecentKeys()
    assert not recent.seen("cam", 7)
    assert recent.seen("cam", 7)
    assert not recent.seen("cam", 8)
    assert not recent.seen("cam2", 7)


def test_keys_are_remembered_for_at_least_one_generation_and_the_memory_is_bounded() -> None:
    recent = RecentKeys(capacity=100)
    for seq in range(1000):
        assert not recent.seen("cam", seq)
        # the last `capacity` keys are always recognised
        assert all(recent.seen("cam", s) for s in range(max(0, seq - 99), seq + 1))
        assert len(recent) <= 2 * 100
    assert not recent.seen("cam", 0)  # long gone: forgotten


def test_a_forgotten_key_is_new_again_and_the_others_stay_known() -> None:
    keys = RecentKeys(capacity=4)
    for seq in range(6):  # across two generations
        keys.seen("s", seq)
    keys.forget("s", 1)
    keys.forget("s", 5)
    assert not keys.seen("s", 1) and not keys.seen("s", 5)
    assert keys.seen("s", 4)
