"""Tokens far off their stream's capture clock are rejected; a re-based producer recovers."""

from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep.bench.faults import FaultSpec, generate
from lockstep.config.settings import AlignSettings
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.topics.keys import HOP_BASE
from lockstep.topics.schemas import Modality, Token
from tests.factories import T0, audio, video

pytestmark = pytest.mark.unit

P = 33_333  # 30 fps
SPOOF_SEQ = 2**62 - 1  # the largest seq the schema lets through


def _stream(frames: range, chunks: range, shift_us: int = 0) -> list[Token]:
    return ([video(seq=i, t_us=T0 + i * P + shift_us) for i in frames]
            + [audio(seq=j, t_us=T0 + j * 20_000 + shift_us) for j in chunks])


def _run(tokens: list[Token], al: Aligner | None = None) -> tuple[Aligner, AlignOutput]:
    """Deliver tokens in capture order, 3 ms after capture, polling as time goes."""
    al = al or Aligner(AlignSettings(), "cabin")
    out = AlignOutput()
    for token in sorted(tokens, key=lambda t: t.t_us):
        out.extend(al.poll(token.t_us + 3000))
        out.extend(al.add(token, token.t_us + 3000))
    out.extend(al.poll(max(t.t_us for t in tokens) + 5_000_000))
    return al, out


def _anchored(out: AlignOutput) -> set[int]:
    return {w.window_seq for w in out.windows if w.video is not None}


def test_a_spoofed_seq_is_rejected_and_every_later_frame_still_anchors() -> None:
    tokens = _stream(range(300), range(500))
    spoof = video(seq=SPOOF_SEQ, t_us=T0 + 100 * P + 5)
    _, out = _run([*tokens, spoof])
    [rejected] = out.rejected
    assert rejected.key.seq == SPOOF_SEQ and "far off the stream's video clock" in rejected.reason
    assert "expected seq ≈ 100 " in rejected.reason
    assert out.late == []
    assert set(range(101, 299)) <= _anchored(out)  # the last one waits for its successor
    assert all(w.window_seq < HOP_BASE for w in out.windows)


def test_a_token_stamped_far_off_its_clock_is_rejected_not_windowed() -> None:
    tokens = [t for t in _stream(range(300), range(500))
              if not (t.modality is Modality.VIDEO and t.seq == 100)]
    spoof = video(seq=100, t_us=T0 + 100 * P + 3_000_000)  # 3 s ahead, within max_future
    _, out = _run([*tokens, spoof])
    assert [r.key.seq for r in out.rejected] == [100]
    assert out.late == [] and set(range(101, 299)) <= _anchored(out)


def test_a_spoofed_seq_before_the_clock_is_fitted_is_rejected_by_the_seq_jump() -> None:
    _, out = _run([*_stream(range(3), range(0)), video(seq=SPOOF_SEQ, t_us=T0 + 3 * P)])
    [rejected] = out.rejected
    assert "align.max_seq_jump" in rejected.reason


def test_dropped_frames_reordering_and_jitter_are_not_off_the_clock() -> None:
    frames = [i for i in range(600) if not 100 <= i < 400]  # 10 s of frames dropped
    tokens: list[Token] = [video(seq=i, t_us=T0 + i * P + (7_000 if i % 2 else -7_000))
                           for i in frames]
    tokens += [audio(seq=j, t_us=T0 + j * 20_000) for j in range(1000)]
    al, out = Aligner(AlignSettings(), "cabin"), AlignOutput()
    arrivals = sorted(((t.t_us + 3000 + (30_000 if t.seq % 7 == 0 else 0), t) for t in tokens),
                      key=lambda x: x[0])  # every 7th token overtaken by its successors
    for arrival, token in arrivals:
        out.extend(al.poll(arrival))
        out.extend(al.add(token, arrival))
    assert out.rejected == []


def test_a_producer_that_re_bases_its_clock_recovers_after_a_run() -> None:
    # The producer restarts: the counters go on, the capture clock jumps 10 s later.
    before = _stream(range(150), range(250))
    after = _stream(range(150, 300), range(250, 500), shift_us=10_000_000)
    settings_ = AlignSettings(rebase_after=4)
    _, out = _run([*before, *after], Aligner(settings_, "cabin"))
    rejected = sorted((r.key.modality.value, r.key.seq) for r in out.rejected)
    assert rejected == [("audio", 250), ("audio", 251), ("audio", 252),
                        ("video", 150), ("video", 151), ("video", 152)]
    assert out.late == []
    assert set(range(154, 299)) <= _anchored(out)
    settled = sum(len(s) for w in out.windows for s in w.members.values()) + len(out.rejected)
    assert settled == len(before) + len(after)


def test_a_producer_silent_past_the_stream_ttl_starts_afresh_with_nothing_rejected() -> None:
    before = _stream(range(150), range(250))
    after = _stream(range(150, 300), range(250, 500), shift_us=40_000_000)
    _, out = _run([*before, *after], Aligner(AlignSettings(stream_ttl_ms=30_000), "cabin"))
    assert out.rejected == [] and out.late == []
    assert set(range(151, 299)) <= _anchored(out)


def test_isolated_spoofs_never_re_base_the_clock() -> None:
    tokens = _stream(range(300), range(500))
    spoofs = [video(seq=SPOOF_SEQ - k, t_us=T0 + (50 + 20 * k) * P + 5) for k in range(8)]
    _, out = _run([*tokens, *spoofs])
    assert sorted(r.key.seq for r in out.rejected) == sorted(s.seq for s in spoofs)
    assert out.late == [] and set(range(51, 299)) <= _anchored(out)


@cache
def _chaos(seed: int, reorder: bool, jitter_ms: float, burst: float) -> list[tuple[int, Token]]:
    spec = FaultSpec(reorder=reorder, jitter_ms=jitter_ms, drop_rate=0.3,
                     drop_burst_frames=burst, duplicate_rate=0.02)
    return generate(spec, streams=2, seconds=3.0, seed=seed).feed


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 5), reorder=st.booleans(),
       jitter_ms=st.sampled_from([0.0, 8.0, 20.0]), burst=st.sampled_from([1.0, 20.0]))
def test_legitimate_faults_never_reject_a_token(
        seed: int, reorder: bool, jitter_ms: float, burst: float) -> None:
    al, out = Aligner(AlignSettings(), "cabin"), AlignOutput()
    for arrival, token in _chaos(seed, reorder, jitter_ms, burst):
        out.extend(al.poll(arrival))
        out.extend(al.add(token, arrival))
    assert out.rejected == []
