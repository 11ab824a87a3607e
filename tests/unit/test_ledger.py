"""The output ledger: where each token ended up, replays told apart from second outcomes."""

from __future__ import annotations

import pytest

from lockstep.ledger import Ledger
from lockstep.records import Read, describe
from lockstep.streams.aligner import TokenKey
from lockstep.topics.codec import encode
from lockstep.topics.schemas import LateToken, Modality, ReasonCode
from tests.factories import T0

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


def test_inspect_names_a_stale_run_by_its_first_token_and_how_many_more() -> None:
    late = LateToken(stream_id="s", modality=Modality.VIDEO, seq=42, more_seqs=[43, 44],
                     t_us=T0, watermark_us=T0, at_us=T0, code=ReasonCode.STALE,
                     reason="stale: 3 tokens, the first read 150 ms after capture")
    line = describe(Read("late", 0, 7, 0, b"s", late, None))
    assert line.startswith("s video seq 42 (+2 more) late [stale]: stale: 3 tokens")
