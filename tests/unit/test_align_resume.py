"""A new owner of a partition resumes after the windows the previous one emitted."""

from collections import Counter
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep.bench.faults import BENCH_MEDIA, FaultSpec, generate
from lockstep.config.settings import AlignSettings
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.topics.keys import HOP_BASE, TokenKey
from lockstep.topics.schemas import Modality, Token, Window
from tests.factories import T0, audio, video

pytestmark = pytest.mark.unit

P = 33_333


def _settled(out: AlignOutput) -> Counter[TokenKey]:
    """Keys settled by an output: window members, late records and rejections."""
    keys = Counter(TokenKey(w.stream_id, m, s) for w in out.windows
                   for m, seqs in w.members.items() for s in seqs)
    keys.update(TokenKey(x.stream_id, x.modality, x.seq) for x in out.late)
    keys.update(r.key for r in out.rejected)
    return keys


def test_tokens_owned_before_the_resumed_end_go_late() -> None:
    al = Aligner(AlignSettings(required=("video",)), "cabin")
    al.resume("s", T0 + 10 * P + P // 2, last_window_seq=10)
    out = al.add(video(seq=9, t_us=T0 + 9 * P), T0 + 20 * P)
    out.extend(al.add(audio(seq=5, t_us=T0 + 10 * P), T0 + 20 * P))  # ends after it: kept
    assert [(x.seq, x.reason) for x in out.late] == [(9, "window already emitted")]


def test_no_frame_window_at_or_below_the_resumed_key_is_emitted() -> None:
    al = Aligner(AlignSettings(required=("video",)), "cabin")
    al.resume("s", T0, last_window_seq=12)  # the previous owner keyed frames up to 12
    out = AlignOutput()
    for i in range(10, 16):  # a producer that reuses seqs keeps those frames as members
        out.extend(al.add(video(seq=i, t_us=T0 + (i - 9) * P), T0 + (i - 9) * P + 1000))
    out.extend(al.flush(T0 + 10 * P))
    keys = [w.window_seq for w in out.windows]
    assert all(k > 12 for k in keys) and 13 in keys
    assert sum(len(s) for w in out.windows for s in w.members.values()) == 6


def test_hop_windows_resume_past_the_emitted_end_without_reusing_a_key() -> None:
    hop = 100_000
    al = Aligner(AlignSettings(required=("audio",), hop_ms=100), "cabin")
    end = T0 + 2 * hop + 40_000  # mid-hop: the previous owner's last window ended here
    al.resume("s", end, last_window_seq=None)
    out = AlignOutput()
    for j in range(30):
        token = audio(seq=j, t_us=T0 + j * 20_000)
        out.extend(al.add(token, token.t_us + 21_000))
    out.extend(al.flush(T0 + 1_000_000))
    assert out.windows and min(w.t_start_us for w in out.windows) >= end
    assert all(w.window_seq >= HOP_BASE + (end // hop) for w in out.windows)
    assert sum(len(s) for w in out.windows for s in w.members.values()) + len(out.late) == 30


def test_resuming_a_live_stream_keeps_its_buffered_tokens_in_later_windows() -> None:
    al = Aligner(AlignSettings(max_wait_ms=10_000), "cabin")  # waits for audio
    out = AlignOutput()
    for i in range(3):
        out.extend(al.add(video(seq=i, t_us=T0 + i * P), T0 + i * P + 1000))
    assert out.windows == []
    al.resume("s", T0 + P, last_window_seq=1)
    out = al.flush(T0 + 5 * P)
    assert all(w.t_start_us >= T0 + P and w.window_seq > 1 for w in out.windows)
    assert sorted(s for w in out.windows for s in w.members["video"]) == [0, 1, 2]


# -- property: a crash, a resume and a replay settle every token once ----------------------

@cache
def _log(seed: int, with_video: bool) -> list[tuple[int, Token]]:
    spec = FaultSpec(reorder=True, duplicate_rate=0.05, drop_rate=0.2, jitter_ms=8.0)
    media = BENCH_MEDIA if with_video else replace(
        BENCH_MEDIA, withheld=frozenset({Modality.VIDEO}))  # hop windows
    return generate(spec, streams=2, seconds=2.0, seed=seed, media=media).feed


def _resume_marks(windows: list[Window]) -> dict[str, tuple[int, int | None]]:
    marks: dict[str, tuple[int, int | None]] = {}
    for w in windows:
        end, seq = marks.get(w.stream_id, (w.t_end_us, None))
        if w.window_seq < HOP_BASE:
            seq = w.window_seq if seq is None else max(seq, w.window_seq)
        marks[w.stream_id] = (max(end, w.t_end_us), seq)
    return marks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 7), with_video=st.booleans(), crash=st.floats(0.05, 1.0),
       back=st.floats(0.0, 1.0), delay_us=st.integers(0, 2_000_000), catch_up=st.booleans())
def test_after_a_crash_a_resumed_replay_settles_every_token_once_with_unique_keys(
        seed: int, with_video: bool, crash: float, back: float, delay_us: int,
        catch_up: bool) -> None:
    log = _log(seed, with_video)
    k = int(crash * len(log))
    a, out_a = Aligner(AlignSettings(), "cabin"), AlignOutput()
    for arrival, token in log[:k]:
        out_a.extend(a.poll(arrival))
        out_a.extend(a.add(token, arrival))
    # A crashed: what it settled was committed; the rest is replayed from an offset at or
    # before its first unsettled token.
    settled_a = _settled(out_a)
    unsettled = [i for i, (_, t) in enumerate(log[:k])
                 if TokenKey(t.stream_id, t.modality, t.seq) not in settled_a]
    j = int(back * (unsettled[0] if unsettled else k))

    b, out_b = Aligner(AlignSettings(), "cabin"), AlignOutput()
    marks = _resume_marks(out_a.windows)
    for stream_id, (end, seq) in marks.items():
        b.resume(stream_id, end, seq)
    b.catching_up = catch_up
    for i, (arrival, token) in enumerate(log[j:], start=j):
        if i == k:
            b.catching_up = False
        if TokenKey(token.stream_id, token.modality, token.seq) in settled_a:
            continue  # committed by A
        out_b.extend(b.poll(arrival + delay_us))
        out_b.extend(b.add(token, arrival + delay_us))
    end = log[-1][0] + delay_us + 10_000_000
    b.catching_up = False
    out_b.extend(b.poll(end))
    out_b.extend(b.flush(end))

    keys = [(w.stream_id, w.window_seq) for w in out_a.windows + out_b.windows]
    assert len(keys) == len(set(keys))
    for w in out_b.windows:  # B goes on where A stopped
        end, seq = marks.get(w.stream_id, (0, None))
        assert w.t_start_us >= end
        assert seq is None or w.window_seq > seq
    assert settled_a + _settled(out_b) == Counter(
        {TokenKey(t.stream_id, t.modality, t.seq): 1 for _, t in log})
