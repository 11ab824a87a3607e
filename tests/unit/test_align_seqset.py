"""The duplicate check's seq sets: exactly sets of ints, held as bitmaps, not int objects."""

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.config.settings import AlignSettings
from lockstep.streams.align.aligner import Aligner
from lockstep.streams.align.seqset import SLACK, SPAN, SeqSet
from lockstep.streams.align.state import Stream
from lockstep.topics.schemas import Modality
from tests.factories import T0, video

pytestmark = pytest.mark.unit

_SEQS = st.lists(st.one_of(
    st.integers(0, 300),  # around the first seq: in order, overtaken, repeated
    st.integers(-SLACK - 5, SPAN + 5),  # across the bitmap's bounds
    st.integers(0, 1 << 62)), max_size=400)  # far away: a re-based producer


@settings(max_examples=200, deadline=None)
@given(seqs=_SEQS, probes=st.lists(st.integers(-100, SPAN + 100), max_size=50))
def test_a_seq_set_holds_exactly_the_seqs_added(seqs: list[int], probes: list[int]) -> None:
    held, model = SeqSet(), set[int]()
    for seq in seqs:
        assert (seq in held) == (seq in model)
        held.add(seq)
        model.add(seq)
        assert len(held) == len(model)
    assert all((p in held) == (p in model) for p in probes + seqs)


@settings(max_examples=100, deadline=None)
@given(seqs=st.lists(st.integers(0, 6_000), max_size=3_000))
def test_the_duplicate_check_remembers_two_generations_of_2048_seqs(seqs: list[int]) -> None:
    stream, seen, before = Stream(), set[int](), set[int]()
    for seq in seqs:
        expected = seq in seen or seq in before
        if not expected:
            seen.add(seq)
            if len(seen) >= 2048:
                seen, before = set(), seen
        assert stream.seen_before(Modality.AUDIO, seq) is expected


def test_a_long_stream_keeps_its_recent_seqs_in_a_few_kilobytes_not_an_object_each() -> None:
    held = SeqSet()
    for seq in range(1_000_000, 1_002_048):
        held.add(seq)
    # A set of 2,048 ints takes ~64 kB for the ints and ~128 kB for its table.
    assert sys.getsizeof(held._bits) <= SPAN // 8 + 100
    assert held._others is None


def test_compacting_the_aligner_rebuilds_the_stream_table_a_flood_grew() -> None:
    al = Aligner(AlignSettings(stream_ttl_ms=1_000, required=("video",)), "cabin")
    frame = video()
    al.add(frame.model_copy(update={"stream_id": "live", "t_us": T0}), T0 + 1_000)
    small = sys.getsizeof(al.streams())
    for i in range(5_000):
        al.add(frame.model_copy(update={"stream_id": f"flood-{i}", "t_us": T0}), T0 + 2_000)
    al.add(frame.model_copy(update={"stream_id": "live", "t_us": T0 + 1_500_000}),
           T0 + 1_501_000)
    al.poll(T0 + 1_600_000)  # every flood stream idle past its TTL
    assert al.stream_count == 1
    assert sys.getsizeof(al.streams()) > 10 * small  # a dict keeps its grown table
    al.compact()
    assert sys.getsizeof(al.streams()) <= 2 * small
    assert list(al.streams()) == ["live"]
    out = al.add(frame.model_copy(update={"stream_id": "flood-3", "t_us": T0 - 40_000}),
                 T0 + 1_700_000)
    assert len(out.late) == 1  # what the evicted streams left is still known
