"""The ledger read back from the output topics: produce times, where each token settled."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lockstep.chaos.readback import TopicReadback, token_key
from lockstep.config.settings import KafkaSettings
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import (
    DeadLetter,
    LateToken,
    Modality,
    ModalityState,
    Response,
    Timeline,
    Window,
)
from tests.factories import T0, video

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Record:
    """The fields of an aiokafka ConsumerRecord the read-back uses."""

    value: bytes | None
    offset: int
    timestamp: int


def _window(seq: int, frames: list[int], *, start_us: int = T0, aligned_us: int = 0) -> bytes:
    return encode(Window(
        stream_id="cam", window_seq=seq, t_start_us=start_us, t_end_us=start_us + 33_000,
        anchor_t_us=start_us, slo_class="cabin",
        modalities={Modality.VIDEO: ModalityState(present=True, confidence=0.9)}, missing=[],
        members={Modality.VIDEO: frames}, timeline=Timeline(aligned_us=aligned_us)))


def _late(seq: int, reason: str = "stale", more: tuple[int, ...] = ()) -> bytes:
    return encode(LateToken(stream_id="cam", modality=Modality.VIDEO, seq=seq, t_us=T0,
                            watermark_us=T0, reason=reason, at_us=T0, more_seqs=list(more)))


def _response(seq: int, output: str = "x") -> bytes:
    return encode(Response(stream_id="cam", window_seq=seq, route="full", pool="vl",
                           engine="reference", slo_class="cabin", output=output, scores={},
                           missing=[], deadline_us=T0, timeline=Timeline()))


def _readback() -> TopicReadback:
    return TopicReadback(KafkaSettings(bootstrap_servers="127.0.0.1:1"))


def _key(seq: int) -> TokenKey:
    return TokenKey("cam", Modality.VIDEO, seq)


def test_the_first_copy_of_a_window_and_a_response_gives_their_produce_times() -> None:
    readback = _readback()
    readback.add(catalog.ALIGNED, Record(_window(1, [1]), 0, 1_000))
    readback.add(catalog.ALIGNED, Record(_window(1, [1]), 1, 2_000))  # a retried produce
    readback.add(catalog.RESPONSES, Record(_response(1), 0, 3_000))
    assert readback.window_at_ms == {("cam", 1): 1_000}
    assert readback.response_at_ms == {("cam", 1): 3_000}
    assert readback.ledger.duplicates["window"] == 1
    assert readback.settled_twice == set() and not readback.conflict_examples


def test_a_key_read_with_other_bytes_is_a_conflict_with_both_offsets() -> None:
    readback = _readback()
    readback.add(catalog.RESPONSES, Record(_response(4, "one"), 10, 0))
    readback.add(catalog.RESPONSES, Record(_response(4, "two"), 12, 0))
    assert readback.conflict_examples == ["response cam#4 at offsets 10 and 12"]


def test_a_token_in_a_window_and_a_late_record_is_settled_twice_and_says_where() -> None:
    readback = _readback()
    readback.add(catalog.ALIGNED, Record(_window(1, [5]), 7, 0))
    readback.add(catalog.LATE, Record(_late(5, "window already emitted"), 3, 0))
    assert readback.settled_twice == {_key(5)}
    first, second = readback.twice[_key(5)]
    assert first == "window cam#1 (offset 7)"
    assert second.startswith("late (window already emitted, offset 3")


def test_the_same_late_record_read_twice_is_a_duplicate_not_a_second_outcome() -> None:
    readback = _readback()
    readback.add(catalog.LATE, Record(_late(5), 3, 0))
    readback.add(catalog.LATE, Record(_late(5), 4, 0))
    assert readback.settled_twice == set()
    assert readback.repeated_late == {_key(5)}
    readback.add(catalog.LATE, Record(_late(5, "other"), 5, 0))  # other bytes: twice
    assert readback.settled_twice == {_key(5)}


def test_a_late_record_of_a_shed_run_settles_every_token_it_names() -> None:
    readback = _readback()
    readback.add(catalog.LATE, Record(_late(7, more=(8, 9, 11)), 3, 0))
    assert readback.lost({_key(s) for s in (7, 8, 9, 10, 11)}) == {_key(10)}
    readback.add(catalog.LATE, Record(_late(7, more=(8, 9, 11)), 4, 0))  # a retried produce
    assert readback.repeated_late == {_key(7), _key(8), _key(9), _key(11)}
    assert readback.settled_twice == set()
    readback.add(catalog.ALIGNED, Record(_window(1, [9]), 0, 0))  # and in a window too
    assert readback.settled_twice == {_key(9)}


def test_a_dead_lettered_token_is_accounted_for_and_its_source_recorded() -> None:
    readback = _readback()
    token = video(stream="cam", seq=9)
    letter = DeadLetter(stage="align", topic="media.video", partition=2, offset=40,
                        reason="far off the clock", error="BadInput", key=b"cam",
                        value=encode(token), at_us=T0)
    readback.add(catalog.DEADLETTER, Record(encode(letter), 0, 0))
    assert readback.dead_sources == {("media.video", 2, 40)}
    assert readback.lost({_key(9), _key(10)}) == {_key(10)}
    assert readback.accounted(("media.video", 2, 40), None)
    assert not readback.accounted(("media.video", 2, 41), _key(10))


def test_a_window_and_its_response_settle_the_ledger() -> None:
    readback = _readback()
    readback.add(catalog.ALIGNED, Record(_window(1, [1, 2]), 0, 0))
    assert not readback.settled({_key(1), _key(2)})  # unanswered
    readback.add(catalog.RESPONSES, Record(_response(1), 0, 0))
    assert readback.settled({_key(1), _key(2)})
    assert not readback.settled({_key(1), _key(3)})


def test_only_valid_tokens_have_a_token_key() -> None:
    assert token_key(encode(video(stream="cam", seq=3))) == _key(3)
    assert token_key(b"LS\x01\x01\xc1") is None
    assert token_key(_late(3)) is None
