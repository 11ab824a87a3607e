"""A stream that says it ends (``final`` tokens): its last window closes at once."""

from __future__ import annotations

import pytest

from lockstep.config.settings import AlignSettings
from lockstep.producer.synthetic import SyntheticStream
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.topics.codec import decode, encode
from lockstep.topics.schemas import Modality, Token
from tests.factories import T0, audio, video

pytestmark = pytest.mark.unit

LAG = 2_000  # µs from capture to arrival
#: Ends 24 ms after a frame: the windows from then run past the last whole audio chunk.
END_US = T0 + 2_024_000


def _tokens(*, final: bool) -> list[Token]:
    """Two seconds of a synthetic stream (video, audio, OCR, sensor), as a device sends them."""
    source = SyntheticStream("cam", T0, until_us=END_US if final else None)
    tokens = source.due(END_US, whole=True)
    # Sent in the order they are captured whole (an audio chunk at its end).
    return sorted(tokens, key=lambda t: t.t_us + getattr(t, "duration_us", 0))


def _feed(al: Aligner, tokens: list[Token]) -> tuple[AlignOutput, int]:
    out = AlignOutput()
    now = T0
    for token in tokens:
        now = max(now, token.t_us + getattr(token, "duration_us", 0) + LAG)
        out.extend(al.poll(now))
        out.extend(al.add(token, now))
    return out, now


def _members(out: AlignOutput) -> int:
    return sum(len(seqs) for w in out.windows for seqs in w.members.values())


def test_the_last_token_of_each_modality_is_marked_final_and_no_other() -> None:
    tokens = _tokens(final=True)
    finals = [t for t in tokens if t.final]
    assert sorted(t.modality for t in finals) == sorted(Modality)
    for token in finals:
        assert token.seq == max(t.seq for t in tokens if t.modality is token.modality)
    assert not any(t.final for t in _tokens(final=False))


def test_a_stream_that_ends_has_every_window_out_when_its_last_token_arrives() -> None:
    al = Aligner(AlignSettings(), "cabin")
    tokens = _tokens(final=True)
    out, _now = _feed(al, tokens)
    assert al.open_windows == 0
    assert _members(out) == len(tokens)  # every token in a window, none left to a deadline
    last = out.windows[-1]
    assert last.t_end_us >= max(t.t_us for t in tokens)
    anchored = [w for w in out.windows if w.video is not None]
    assert anchored[-1].missing == []  # the last frame's window has its audio and sensor


def test_without_final_the_last_window_waits_for_its_deadline() -> None:
    al = Aligner(AlignSettings(), "cabin")
    tokens = _tokens(final=False)
    out, now = _feed(al, tokens)
    assert al.open_windows > 0  # it waits for audio past its end that never comes
    out.extend(al.poll(now + int(AlignSettings().max_wait_ms * 1000) + 200_000))
    assert al.open_windows == 0 and _members(out) == len(tokens)


def test_the_same_tokens_make_the_same_windows_with_and_without_final() -> None:
    with_final, _ = _feed(Aligner(AlignSettings(), "cabin"), _tokens(final=True))
    plain_al = Aligner(AlignSettings(), "cabin")
    plain, now = _feed(plain_al, _tokens(final=False))
    plain.extend(plain_al.poll(now + 1_000_000))
    # Every window but the stream's tail is the same; the tail closes sooner, not otherwise.
    keys = [(w.window_seq, w.t_start_us, w.t_end_us) for w in with_final.windows]
    assert keys[:-2] == [(w.window_seq, w.t_start_us, w.t_end_us) for w in plain.windows][:-2]


def test_a_modality_sent_again_after_its_final_token_is_waited_for_again() -> None:
    p = 33_333
    al = Aligner(AlignSettings(estimate_offsets=False), "cabin")
    tokens: list[Token] = [video(seq=i, t_us=T0 + i * p) for i in range(10)]
    tokens += [audio(seq=i, t_us=T0 + i * 20_000) for i in range(15)]
    tokens.append(audio(seq=15, t_us=T0 + 15 * 20_000).model_copy(update={"final": True}))
    out = AlignOutput()
    for token in sorted(tokens, key=lambda t: t.t_us):
        out.extend(al.add(token, token.t_us + LAG))
    assert al.streams()["s"].final == {Modality.AUDIO: 15}
    # Audio is back: a window past its last chunk waits for it again rather than closing.
    resumed = audio(seq=16, t_us=T0 + 16 * 20_000)
    out.extend(al.add(resumed, resumed.t_us + LAG))
    assert Modality.AUDIO not in al.streams()["s"].final
    emitted = len(out.windows)
    frame = video(seq=10, t_us=T0 + 10 * p)
    out.extend(al.add(frame, frame.t_us + LAG))
    frame = video(seq=11, t_us=T0 + 11 * p)
    out.extend(al.add(frame, frame.t_us + LAG))
    assert all(w.t_end_us <= T0 + 17 * 20_000 + 5_000 for w in out.windows[emitted:])
    assert al.open_windows > 0


def test_final_is_sent_only_when_true_and_reads_back() -> None:
    plain = audio(seq=3)
    assert b"final" not in encode(plain)
    last = plain.model_copy(update={"final": True})
    back = decode(encode(last))
    assert isinstance(back, type(plain)) and back.final and back == last


def test_a_stream_that_ended_read_back_topic_by_topic_sends_nothing_late() -> None:
    # A takeover's backlog arrives topic by topic: the stream's final video and audio
    # tokens come before any of its sensor readings, which must still join their windows.
    tokens = _tokens(final=True)
    order = [Modality.OCR, Modality.VIDEO, Modality.AUDIO, Modality.SENSOR]
    al, out, now = Aligner(AlignSettings(), "cabin"), AlignOutput(), END_US + 5_000_000
    al.catching_up = True
    for i, m in enumerate(order):
        al.backlogged = frozenset(order[i:])  # as the agent sets it: topics with unread records
        for token in (t for t in tokens if t.modality is m):
            now += 50
            out.extend(al.poll(now))
            out.extend(al.add(token, now))
    al.catching_up = False
    out.extend(al.poll(now))
    assert out.late == []
    assert al.open_windows == 0 and _members(out) == len(tokens)


def test_the_last_tokens_sent_again_as_final_end_the_stream_after_the_fact() -> None:
    al = Aligner(AlignSettings(), "cabin")
    tokens = _tokens(final=False)
    out, now = _feed(al, tokens)
    assert al.open_windows > 0  # waiting for more audio
    for m in (Modality.VIDEO, Modality.AUDIO, Modality.SENSOR):
        last = max((t for t in tokens if t.modality is m), key=lambda t: t.seq)
        again = al.add(last.model_copy(update={"final": True}), now + 1_000)
        assert [k.seq for k in again.duplicates] == [last.seq]  # not aligned twice
        out.extend(again)
    assert al.open_windows == 0 and _members(out) == len(tokens)


def test_a_final_token_shed_as_stale_still_ends_its_modality() -> None:
    # Align sheds a token read past its budget before aligning it (settled_before): when
    # that token is a modality's last, the stream's last window must not wait for more.
    tokens = _tokens(final=True)
    last_audio = next(t for t in tokens if t.final and t.modality is Modality.AUDIO)
    al = Aligner(AlignSettings(), "cabin")
    out, now = _feed(al, [t for t in tokens if t is not last_audio])
    assert al.open_windows > 0  # waiting for audio past the end
    noted = al.settled_before(last_audio, now + 1_000)
    assert noted.duplicates == []
    out.extend(noted)
    assert al.open_windows == 0 and _members(out) == len(tokens) - 1
    assert al.streams()["cam"].final[Modality.AUDIO] == last_audio.seq
