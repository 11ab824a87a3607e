"""The output ledger: where each token ended up, replays told apart from second outcomes."""

from __future__ import annotations

import gc

import pytest

from lockstep.kafka.reader import Read
from lockstep.observe.describe import describe
from lockstep.observe.ledger import Ledger
from lockstep.topics.codec import encode
from lockstep.topics.keys import TokenKey, TokenSet
from lockstep.topics.schemas import LateToken, Modality, ReasonCode, Response, Timeline
from tests.factories import T0, request

pytestmark = pytest.mark.unit


def _late(seq: int, at_us: int = T0 + 5_000, code: ReasonCode = ReasonCode.WINDOW_EMITTED,
          more: tuple[int, ...] = ()) -> bytes:
    return encode(LateToken(stream_id="s", modality=Modality.AUDIO, seq=seq, t_us=T0,
                            watermark_us=T0 + 1_000, reason="window already emitted",
                            at_us=at_us, code=code, more_seqs=list(more)))


def test_a_late_record_written_again_by_a_replay_is_a_duplicate_not_a_second_outcome() -> None:
    ledger = Ledger()
    ledger.add(_late(1))
    ledger.add(_late(1))  # the same bytes: a replay re-sent it
    ledger.add(_late(2, code=ReasonCode.STALE))
    assert ledger.late == {TokenKey("s", Modality.AUDIO, 1), TokenKey("s", Modality.AUDIO, 2)}
    assert ledger.settled_twice == set()
    ledger.add(_late(1, at_us=T0 + 9_000))  # re-decided after a takeover: later at_us
    assert ledger.duplicates["late"] == 2 and not ledger.conflicts
    assert ledger.late_codes == {"window_emitted": 1, "stale": 1}


def test_a_stale_record_of_a_shed_run_settles_each_token_it_names_once() -> None:
    ledger = Ledger()
    ledger.add(_late(4, code=ReasonCode.STALE, more=(5, 6, 9)))
    assert ledger.late == {TokenKey("s", Modality.AUDIO, s) for s in (4, 5, 6, 9)}
    assert ledger.late_codes == {"stale": 4}
    published = {TokenKey("s", Modality.AUDIO, s) for s in range(4, 10)}
    assert ledger.unaccounted(published) == {TokenKey("s", Modality.AUDIO, s) for s in (7, 8)}
    ledger.add(_late(6, code=ReasonCode.STALE, more=(7,)))  # a replay regrouped the run
    assert ledger.duplicates["late"] == 1 and ledger.late_codes == {"stale": 5}
    assert ledger.settled_twice == set()


def test_expecting_published_tokens_in_slices_tracks_the_same_tokens_as_at_once() -> None:
    published = [TokenKey("s", Modality.AUDIO, s) for s in range(10)]
    ledger = Ledger()
    ledger.add(_late(1))
    ledger.expect(())
    ledger.expect_more(published[:4])
    ledger.add(_late(2))  # settled between two slices, after its slice
    ledger.add(_late(7))  # and before its slice
    ledger.expect_more(published[4:])
    assert ledger.unaccounted() == set(published) - {TokenKey("s", Modality.AUDIO, s)
                                                     for s in (1, 2, 7)}
    assert ledger.unaccounted_count == 7
    whole = Ledger()
    for seq in (1, 2, 7):
        whole.add(_late(seq))
    whole.expect(published)
    assert whole.unaccounted() == ledger.unaccounted()


def test_inspect_names_a_stale_run_by_its_first_token_and_how_many_more() -> None:
    late = LateToken(stream_id="s", modality=Modality.VIDEO, seq=42, more_seqs=[43, 44],
                     t_us=T0, watermark_us=T0, at_us=T0, code=ReasonCode.STALE,
                     reason="stale: 3 tokens, the first read 150 ms after capture")
    line = describe(Read("late", 0, 7, 0, b"s", late, None))
    assert line.startswith("s video seq 42 (+2 more) late [stale]: stale: 3 tokens")


def _window_bytes(seq: int) -> bytes:
    members = {Modality.VIDEO: [seq], Modality.AUDIO: [2 * seq, 2 * seq + 1]}
    return encode(request(seq, members=members).window)


def _response_bytes(seq: int) -> bytes:
    return encode(Response(stream_id="s", window_seq=seq, route="full", pool="vl",
                           engine="reference", slo_class="cabin", output="ok", scores={},
                           missing=[], deadline_us=T0 + 120_000,
                           timeline=Timeline(capture_us=T0, responded_us=T0 + 50_000)))


def test_what_the_ledger_keeps_of_a_run_is_not_walked_by_the_cyclic_collector() -> None:
    # The demo's ledger lives beside the roles: an object per token or a model per response
    # made every full collection walk the whole run, stalling the event loop.
    ledger = Ledger()
    tracked = []
    for first in (1, 201):  # the first round also builds what is made once
        for seq in range(first, first + 200):
            ledger.add(_window_bytes(seq))
            ledger.add(_response_bytes(seq))
        gc.collect()
        tracked.append(len(gc.get_objects()))
    assert tracked[1] - tracked[0] < 50  # not 200 windows' and responses' worth
    assert len(ledger.windows) == len(ledger.responses) == 400
    assert len(ledger.in_windows) == 1200
    assert TokenKey("s", Modality.AUDIO, 801) in ledger.in_windows
    assert TokenKey("s", Modality.AUDIO, 802) not in ledger.in_windows
    assert ledger.responses[("s", 7)].status == "ok"
    assert ledger.responses[("s", 7)].timeline.responded_us == T0 + 50_000


def test_a_token_set_is_a_set_of_token_keys() -> None:
    keys = {TokenKey("a", Modality.VIDEO, 1), TokenKey("a", Modality.AUDIO, 2),
            TokenKey("b", Modality.VIDEO, 1)}
    tokens = TokenSet(keys)
    tokens.add(TokenKey("a", Modality.VIDEO, 1))
    assert len(tokens) == 3 and tokens == keys and keys == tokens
    published = keys | {TokenKey("b", Modality.VIDEO, 2)}
    assert published - tokens == {TokenKey("b", Modality.VIDEO, 2)}
    assert (published & tokens) == (tokens & published) == keys
    assert ("a", Modality.VIDEO, 1) not in tokens  # only token keys are members
    assert tokens.has("b", Modality.VIDEO, 1) and not tokens.has("b", Modality.AUDIO, 1)
