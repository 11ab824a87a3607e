"""The aligner's per-stream state stays bounded, and eviction never loses a token."""

from collections import Counter

import pytest

from lockstep.config.settings import AlignSettings
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import Token
from tests.factories import T0, audio, video

pytestmark = pytest.mark.unit

P = 33_333


def _ledger(out: AlignOutput) -> Counter[TokenKey]:
    settled = Counter(TokenKey(w.stream_id, m, s) for w in out.windows
                      for m, seqs in w.members.items() for s in seqs)
    settled.update(TokenKey(x.stream_id, x.modality, x.seq) for x in out.late)
    settled.update(r.key for r in out.rejected)
    return settled


def test_a_flood_of_streams_keeps_the_state_bounded_and_settles_every_token() -> None:
    # 25 times the live bound and 5 times the memory of evicted streams (1/10 of the
    # 50,000 streams this ran with: the same bounds crossed, the same behaviour)
    settings = AlignSettings(max_streams=200, max_evicted_streams=1_000, stream_ttl_ms=30_000)
    al, out, fed = Aligner(settings, "cabin"), AlignOutput(), Counter[TokenKey]()
    frame, chunk = video(), audio()
    peak = 0
    for i in range(5_000):
        sid, now = f"cam-{i}", T0 + i * 100
        tokens: list[Token] = [frame.model_copy(update={"stream_id": sid, "t_us": now}),
                               chunk.model_copy(update={"stream_id": sid, "t_us": now})]
        for token in tokens:
            out.extend(al.add(token, now + 21_000))
            fed[TokenKey(sid, token.modality, token.seq)] += 1
        if i % 97 == 0:
            out.extend(al.poll(now + 21_000))
        peak = max(peak, al.stream_count)
    assert peak == settings.max_streams
    out.extend(al.poll(T0 + 5_000 * 100 + 31_000_000))  # past the TTL: every stream idle
    assert al.stream_count == 0 and al.streams() == {}
    assert al.evicted_count == settings.max_evicted_streams
    assert _ledger(out) == fed  # every token once: evicted streams emitted theirs first


def test_a_stream_evicted_for_room_emits_its_buffered_tokens_as_a_partial_window() -> None:
    al = Aligner(AlignSettings(max_streams=1, max_wait_ms=10_000), "cabin")
    al.add(video(stream="a", seq=0, t_us=T0), T0 + 1000)
    out = al.add(video(stream="b", seq=0, t_us=T0), T0 + 2000)  # "a" makes room for "b"
    [window] = out.windows
    assert window.stream_id == "a" and window.members == {"video": [0]}
    assert al.stream_count == 1 and al.evicted_count == 1


def test_a_stream_idle_past_its_ttl_is_evicted_with_its_tokens_emitted() -> None:
    al = Aligner(AlignSettings(stream_ttl_ms=1_000), "cabin")
    al.catching_up = True  # no deadlines: the window would wait for audio forever
    al.add(video(seq=0, t_us=T0), T0 + 1000)
    assert al.poll(T0 + 900_000).windows == []
    out = al.poll(T0 + 1_002_000)
    assert [w.members for w in out.windows] == [{"video": [0]}]
    assert al.stream_count == 0


def test_a_straggler_of_a_stream_evicted_for_room_is_late_and_keys_are_not_reused() -> None:
    al = Aligner(AlignSettings(max_streams=1, required=("video",)), "cabin")
    out = AlignOutput()
    for i in range(3):
        out.extend(al.add(video(stream="a", seq=i, t_us=T0 + i * P), T0 + i * P + 1000))
    out.extend(al.add(video(stream="b", seq=0, t_us=T0), T0 + 3 * P))  # evicts "a"
    out.extend(al.add(video(stream="a", seq=1, t_us=T0 + P), T0 + 3 * P + 1))  # replayed
    assert [(x.stream_id, x.seq) for x in out.late] == [("a", 1)]
    out.extend(al.add(video(stream="a", seq=3, t_us=T0 + 3 * P), T0 + 4 * P))  # evicts "b"
    out.extend(al.flush(T0 + 5 * P))
    keys = [(w.stream_id, w.window_seq) for w in out.windows]
    assert len(keys) == len(set(keys)) and ("a", 3) in keys


def test_evicted_memory_is_bounded_by_its_setting() -> None:
    al = Aligner(AlignSettings(max_streams=2, max_evicted_streams=5, required=("video",)),
                 "cabin")
    for i in range(50):
        al.add(video(stream=f"s{i}", t_us=T0 + i), T0 + i + 1000)
    assert al.stream_count == 2 and al.evicted_count == 5


def test_a_second_copy_of_a_token_settled_outside_the_aligner_is_a_duplicate() -> None:
    al = Aligner(AlignSettings(required=("video",)), "cabin")
    frame = video(stream="a", seq=7, t_us=T0)
    assert al.settled_before(frame, T0 + 5_000_000).duplicates == []  # sent late as stale
    again = al.settled_before(frame, T0 + 5_300_000)  # the producer wrote it twice
    assert again.duplicates == [TokenKey("a", frame.modality, 7)]
    assert al.add(frame, T0 + 5_400_000).duplicates == [TokenKey("a", frame.modality, 7)]
    assert al.settled_before(video(stream="a", seq=8, t_us=T0 + P), T0 + 5_500_000
                             ).duplicates == []
