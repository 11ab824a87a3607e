"""FastForward: a stale backlog is crossed to fresh data, not served at the edge of staleness."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockstep.streams.align.staleness import KEEP, SKIPPED, STALE, FastForward

STALE_US = 120_000


def test_fresh_tokens_are_kept_and_stale_ones_shed() -> None:
    ff = FastForward(0.5)
    assert ff.judge("p", 0, 10_000, STALE_US) == KEEP
    assert ff.judge("p", 0, 130_000, STALE_US) == STALE


def test_after_a_stale_token_its_partition_skips_until_one_is_read_fresh() -> None:
    ff = FastForward(0.5)
    assert ff.judge("p", 0, 200_000, STALE_US) == STALE
    # Not stale, but behind a stale one on the same partition: skipped.
    assert ff.judge("p", 0, 100_000, STALE_US) == SKIPPED
    assert ff.judge("p", 0, 61_000, STALE_US) == SKIPPED
    # Another partition is not behind.
    assert ff.judge("q", 0, 100_000, STALE_US) == KEEP
    assert ff.skipping() == frozenset({"p"})
    # Within half the stale age: kept, and the partition no longer skips.
    assert ff.judge("p", 0, 60_000, STALE_US) == KEEP
    assert ff.judge("p", 0, 100_000, STALE_US) == KEEP
    assert ff.skipping() == frozenset()


def test_a_partition_read_to_its_log_end_stops_skipping() -> None:
    asked: list[tuple[str, int]] = []

    def at_end(part: str, offset: int) -> bool:
        asked.append((part, offset))
        return offset == 7

    ff = FastForward(0.25, at_end)
    ff.judge("p", 5, 500_000, STALE_US)
    assert ff.judge("p", 6, 110_000, STALE_US) == SKIPPED
    # However old the newest token is (the hop itself may be slow), it is kept.
    assert ff.judge("p", 7, 110_000, STALE_US) == KEEP
    assert asked == [("p", 6), ("p", 7)]
    assert ff.skipping() == frozenset()


def test_the_log_end_is_asked_only_of_a_token_that_may_be_skipped() -> None:
    def fail(part: str, offset: int) -> bool:
        raise AssertionError("asked")

    ff = FastForward(0.5, fail)
    assert ff.judge("p", 0, 10_000, STALE_US) == KEEP  # not skipping
    assert ff.judge("p", 1, 130_000, STALE_US) == STALE  # stale anyway
    assert ff.judge("p", 2, 20_000, STALE_US) == KEEP  # fresh enough


def test_no_stale_age_keeps_every_token() -> None:
    ff = FastForward(0.5)
    assert ff.judge("p", 0, 10**12, 0) == KEEP
    assert ff.skipping() == frozenset()


def test_forget_drops_revoked_partitions() -> None:
    ff = FastForward(0.5)
    ff.judge("p", 0, 200_000, STALE_US)
    ff.judge("q", 0, 200_000, STALE_US)
    ff.forget(["p"])
    assert ff.skipping() == frozenset({"q"})
    assert ff.judge("p", 0, 100_000, STALE_US) == KEEP


@given(st.lists(st.integers(0, 400_000), max_size=60))
def test_a_resume_share_of_one_sheds_exactly_the_stale_tokens(ages: list[int]) -> None:
    ff = FastForward(1.0)
    verdicts = [ff.judge("p", 0, age, STALE_US) for age in ages]
    assert verdicts == [STALE if age > STALE_US else KEEP for age in ages]


@given(st.lists(st.tuples(st.integers(0, 400_000), st.booleans()), max_size=60),
       st.floats(0.05, 1.0))
def test_skipping_sheds_only_between_resume_and_stale_after_a_stale_token(
        reads: list[tuple[int, bool]], share: float) -> None:
    ends = {offset for offset, (_, at_end) in enumerate(reads) if at_end}
    ff = FastForward(share, lambda part, offset: offset in ends)
    behind = False
    for offset, (age, at_end) in enumerate(reads):
        verdict = ff.judge("p", offset, age, STALE_US)
        if age > STALE_US:
            assert verdict == STALE
            behind = True
        elif behind and age > STALE_US * share and not at_end:
            assert verdict == SKIPPED
        else:
            assert verdict == KEEP
            behind = False
