"""FastForward: a stale backlog is crossed to fresh data, not served at the edge of staleness."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockstep.streams.staleness import KEEP, SKIPPED, STALE, FastForward

STALE_US = 120_000


def _never() -> bool:
    return False


def test_fresh_tokens_are_kept_and_stale_ones_shed() -> None:
    ff = FastForward(0.5)
    assert ff.judge("p", 10_000, STALE_US, _never) == KEEP
    assert ff.judge("p", 130_000, STALE_US, _never) == STALE


def test_after_a_stale_token_its_partition_skips_until_one_is_read_fresh() -> None:
    ff = FastForward(0.5)
    assert ff.judge("p", 200_000, STALE_US, _never) == STALE
    # Not stale, but behind a stale one on the same partition: skipped.
    assert ff.judge("p", 100_000, STALE_US, _never) == SKIPPED
    assert ff.judge("p", 61_000, STALE_US, _never) == SKIPPED
    # Another partition is not behind.
    assert ff.judge("q", 100_000, STALE_US, _never) == KEEP
    assert ff.skipping() == frozenset({"p"})
    # Within half the stale age: kept, and the partition no longer skips.
    assert ff.judge("p", 60_000, STALE_US, _never) == KEEP
    assert ff.judge("p", 100_000, STALE_US, _never) == KEEP
    assert ff.skipping() == frozenset()


def test_a_partition_read_to_its_log_end_stops_skipping() -> None:
    ff = FastForward(0.25)
    ff.judge("p", 500_000, STALE_US, _never)
    asked = []

    def at_end() -> bool:
        asked.append(True)
        return True

    # However old the newest token is (the hop itself may be slow), it is kept.
    assert ff.judge("p", 110_000, STALE_US, at_end) == KEEP
    assert asked == [True]
    assert ff.skipping() == frozenset()


def test_the_log_end_is_asked_only_of_a_token_that_may_be_skipped() -> None:
    ff = FastForward(0.5)

    def fail() -> bool:
        raise AssertionError("asked")

    assert ff.judge("p", 10_000, STALE_US, fail) == KEEP  # not skipping
    assert ff.judge("p", 130_000, STALE_US, fail) == STALE  # stale anyway
    assert ff.judge("p", 20_000, STALE_US, fail) == KEEP  # fresh enough


def test_no_stale_age_keeps_every_token() -> None:
    ff = FastForward(0.5)
    assert ff.judge("p", 10**12, 0, _never) == KEEP
    assert ff.skipping() == frozenset()


def test_forget_drops_revoked_partitions() -> None:
    ff = FastForward(0.5)
    ff.judge("p", 200_000, STALE_US, _never)
    ff.judge("q", 200_000, STALE_US, _never)
    ff.forget(["p"])
    assert ff.skipping() == frozenset({"q"})
    assert ff.judge("p", 100_000, STALE_US, _never) == KEEP


@given(st.lists(st.integers(0, 400_000), max_size=60))
def test_a_resume_share_of_one_sheds_exactly_the_stale_tokens(ages: list[int]) -> None:
    ff = FastForward(1.0)
    verdicts = [ff.judge("p", age, STALE_US, _never) for age in ages]
    assert verdicts == [STALE if age > STALE_US else KEEP for age in ages]


@given(st.lists(st.tuples(st.integers(0, 400_000), st.booleans()), max_size=60),
       st.floats(0.05, 1.0))
def test_skipping_sheds_only_between_resume_and_stale_after_a_stale_token(
        reads: list[tuple[int, bool]], share: float) -> None:
    ff = FastForward(share)
    behind = False
    for age, at_end in reads:
        verdict = ff.judge("p", age, STALE_US, lambda at_end=at_end: at_end)
        if age > STALE_US:
            assert verdict == STALE
            behind = True
        elif behind and age > STALE_US * share and not at_end:
            assert verdict == SKIPPED
        else:
            assert verdict == KEEP
            behind = False
