"""Align ticks at the aligner's own deadlines, not every few milliseconds."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep.config.settings import AlignSettings
from lockstep.kafka.consumer import fetch_wait_ms
from lockstep.streams.align.aligner import Aligner
from lockstep.topics.schemas import Modality, Token
from tests.factories import T0, video
from tests.unit.test_aligner import deliveries

pytestmark = pytest.mark.unit

P = 33_333  # 30 fps


def test_the_next_wake_is_the_deadline_of_a_window_waiting_for_audio() -> None:
    al = Aligner(AlignSettings(max_wait_ms=50, required=("video", "audio")), "cabin")
    assert al.next_wake_us is None  # no stream held: nothing to wake for
    al.add(video(seq=0, t_us=T0), T0 + 1000)
    al.add(video(seq=1, t_us=T0 + P), T0 + P + 1000)
    deadline = T0 + (P + 1) // 2 + 1000 + 50_000  # end + lag + max_wait
    assert al.poll(T0 + P + 1000).windows == []
    assert al.next_wake_us == deadline
    out = al.poll(deadline)
    assert [w.window_seq for w in out.windows] == [0]
    assert out.windows[0].missing == [Modality.AUDIO]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feed=deliveries(), max_wait=st.integers(0, 120))
def test_polling_only_at_arrivals_and_wakes_leaves_no_window_past_its_deadline(
        feed: list[tuple[int, Token]], max_wait: int) -> None:
    al = Aligner(AlignSettings(max_wait_ms=max_wait, max_buffered_tokens=64), "cabin")
    never = 10**9  # no periodic tick: only the wakes may poll between two records
    arrivals = [t for t, _ in feed] + [(feed[-1][0] if feed else T0) + 2_000_000]
    wakes = 0
    for (arrival, token), following in zip(feed, arrivals[1:], strict=True):
        al.poll(arrival)
        al.add(token, arrival)
        # RoleConsumer ticks after every batch: a window the record made due now (with no
        # wait allowed, its deadline can be the arrival itself) goes out at once.
        al.poll(arrival)
        now = arrival
        # The role's loop: a fetch waits for the next record or the aligner's next wake.
        while (now := now + 1000 * fetch_wait_ms(al.next_wake_us, now, never)) < following:
            al.poll(now)
            wakes += 1
        # A wake polls within the millisecond after it (the fetch's resolution).
        assert al.overdue(max(arrival, following - 1001)) == []
    # Wakes come at deadlines, idle checks and evictions, not every millisecond.
    assert wakes <= 4 * len(feed) + 8


def test_a_fetch_waits_until_the_agents_wake_up_within_the_tick() -> None:
    now = 1_000_000_000
    assert fetch_wait_ms(None, now, 100) == 100  # no deadline: the tick paces
    assert fetch_wait_ms(now + 3_200, now, 100) == 4  # rounded up: never wakes early
    assert fetch_wait_ms(now + 3_000, now, 100) == 3
    assert fetch_wait_ms(now - 5_000, now, 100) == 1  # overdue: at once (1 ms resolution)
    assert fetch_wait_ms(now + 900_000, now, 100) == 100  # far off: the tick still runs
