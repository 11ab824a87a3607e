"""Late perception in the aligner: text recognised after its media was sent still joins.

A recogniser publishes its text when it knows it (``t_us``: the capture time of the newest
media sent), which is after the window of the media it read has gone out. Scene text joins
the next window and is held until replaced; a transcript becomes the ASR text of the window
it joins, which routes it as an early exit.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep.config.settings import AlignSettings, RouteSettings, SloSettings
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.streams.route.router import Router
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import Modality, OcrToken, Token, Window
from tests.factories import T0, audio, video

pytestmark = pytest.mark.unit

P = 40_000  # 25 fps
CHUNK = 20_000


def _aligner(**kw: object) -> Aligner:
    return Aligner(AlignSettings(**kw), "cabin")  # type: ignore[arg-type]


def _text(seq: int, t_us: int, text: str, *, source: str = "scene",
          span: tuple[int, int] | None = None, confidence: float = 0.99) -> OcrToken:
    return OcrToken(stream_id="s", seq=seq, t_us=t_us, text=text,
                    bbox=(0.04, 0.7, 0.5, 0.08) if source == "scene" else (0.0, 0.0, 0.0, 0.0),
                    confidence=confidence, source=source,  # type: ignore[arg-type]
                    span_us=span)


def _media(seconds: float) -> list[tuple[int, Token]]:
    """(arrival, token) of 25 fps video and 20 ms audio, each 2 ms after its capture."""
    frames = [video(seq=i, t_us=T0 + i * P) for i in range(round(seconds * 1e6 / P))]
    chunks = [audio(seq=i, t_us=T0 + i * CHUNK) for i in range(round(seconds * 1e6 / CHUNK))]
    return sorted(((t.t_us + 2_000 + (CHUNK if t.modality is Modality.AUDIO else 0), t)
                   for t in frames + chunks), key=lambda x: x[0])


def _run(al: Aligner, feed: list[tuple[int, Token]]) -> AlignOutput:
    out = AlignOutput()
    for arrival, token in sorted(feed, key=lambda x: x[0]):
        out.extend(al.poll(arrival))
        out.extend(al.add(token, arrival))
    return out


def _holding(windows: list[Window], text: str) -> list[int]:
    return [w.window_seq for w in windows if any(o.text == text for o in w.ocr)]


def test_a_caption_read_after_its_window_went_out_joins_the_next_window_and_is_held() -> None:
    al = _aligner()
    feed = _media(2.0)
    # frame 10 (0.4 s) was read; the reader took 0.3 s, so its text is known at 0.7 s, and
    # it reaches the aligner just after the window holding 0.7 s went out (a race with the
    # next frame): stamped 0.7 s, read at 0.74 s
    caption = _text(0, T0 + 700_000, "EXIT 12 LINE STOPPED",
                    span=(T0 + 400_000, T0 + 400_000))
    feed.append((T0 + 740_000, caption))
    out = _run(al, feed)
    assert out.late == []
    (owner,) = [w for w in out.windows if 0 in w.members.get(Modality.OCR, [])]
    assert owner.t_start_us >= T0 + 700_000  # the next window, not the frame's own
    held = _holding(out.windows, "EXIT 12 LINE STOPPED")
    assert held[0] == owner.window_seq
    # held until its TTL (2 s) runs out: every later window of the stream
    assert held == [w.window_seq for w in out.windows if w.window_seq >= owner.window_seq]


@pytest.mark.parametrize("known_after_us", [10_000, 40_000, 70_000])
def test_a_caption_known_after_its_windows_anchor_is_held_by_the_window_it_joins(
        known_after_us: int) -> None:
    # Sampled down (one window per 4 frames, as under load), a window spans 160 ms around
    # its anchor frame: text that became known after the anchor but before the window
    # closed joins it, and was on screen at the anchor (the frame it was read from).
    al = _aligner()
    al.stride = 4
    feed = _media(2.0)
    out0 = _run(al, [(a, t) for a, t in feed if t.t_us < T0 + 600_000])
    anchor = out0.windows[-1].anchor_t_us + 4 * P  # of the next window, still open
    known = anchor + known_after_us
    caption = _text(0, known, "EXIT 12 LINE STOPPED", span=(T0 + 400_000, T0 + 400_000))
    rest = [(a, t) for a, t in feed if t.t_us >= T0 + 600_000] + [(known + 2_000, caption)]
    out = _run(al, rest)
    out.windows[:0] = out0.windows
    assert out.late == []
    (owner,) = [w for w in out.windows if 0 in w.members.get(Modality.OCR, [])]
    held = _holding(out.windows, "EXIT 12 LINE STOPPED")
    assert held == [w.window_seq for w in out.windows if w.window_seq >= owner.window_seq]


def test_an_empty_text_ends_the_hold_of_the_captions_before_it() -> None:
    al = _aligner()
    feed = _media(2.0)
    feed.append((T0 + 302_000, _text(0, T0 + 300_000, "GATE 4")))
    feed.append((T0 + 1_102_000, _text(1, T0 + 1_100_000, "")))
    out = _run(al, feed)
    held = _holding(out.windows, "GATE 4")
    assert held and all(T0 + 300_000 <= w.anchor_t_us < T0 + 1_140_000
                        for w in out.windows if w.window_seq in held)
    after = [w for w in out.windows if w.anchor_t_us > T0 + 1_140_000]
    assert after and all(w.ocr == [] for w in after)
    assert sum(1 in w.members.get(Modality.OCR, []) for w in out.windows) == 1


def test_text_older_than_the_ocr_ttl_when_it_arrives_goes_late() -> None:
    al = _aligner(ocr_ttl_ms=500)
    feed = _media(2.0)
    feed.append((T0 + 1_500_000, _text(0, T0 + 300_000, "OLD")))
    out = _run(al, feed)
    assert [x.seq for x in out.late if x.modality is Modality.OCR] == [0]
    assert _holding(out.windows, "OLD") == []


def test_a_transcript_is_the_asr_text_of_the_window_it_joins_and_exits_early() -> None:
    al = _aligner()
    feed = _media(2.0)
    # "emergency stop" said from 0.4 s to 0.9 s, recognised and published at 1.2 s
    feed.append((T0 + 1_203_000, _text(0, T0 + 1_200_000, "emergency stop", source="speech",
                                       span=(T0 + 400_000, T0 + 900_000), confidence=1.0)))
    out = _run(al, feed)
    assert out.late == []
    (owner,) = [w for w in out.windows if 0 in w.members.get(Modality.OCR, [])]
    assert owner.t_start_us <= T0 + 1_200_000 < owner.t_end_us
    assert owner.ocr == []  # not scene text
    (chunk,) = owner.audio
    assert (chunk.asr_text, chunk.asr_confidence) == ("emergency stop", 1.0)
    assert [w.window_seq for w in out.windows if any(a.asr_text for a in w.audio)] == [
        owner.window_seq]  # one utterance, one window
    router = Router(RouteSettings(), SloSettings())
    routed = router.route(owner, owner.timeline.aligned_us)
    assert (routed.route, routed.reason) == ("early_exit", "asr_confident_intent")
    neighbour = next(w for w in out.windows if w.window_seq == owner.window_seq + 1)
    assert router.route(neighbour, neighbour.timeline.aligned_us).route != "early_exit"


def test_a_transcript_without_audio_in_its_window_is_carried_as_text() -> None:
    al = _aligner(required=("video",))
    frames = [(t.t_us + 2_000, t) for t in (video(seq=i, t_us=T0 + i * P) for i in range(20))]
    frames.append((T0 + 402_000, _text(0, T0 + 400_000, "turn left", source="speech",
                                       span=(T0, T0 + 300_000))))
    out = _run(al, frames)
    (owner,) = [w for w in out.windows if 0 in w.members.get(Modality.OCR, [])]
    assert owner.audio == [] and [o.text for o in owner.ocr] == ["turn left"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.tuples(st.integers(0, 1_900_000), st.integers(0, 3_000_000),
                                st.sampled_from(["scene", "speech"])), max_size=12),
       max_wait=st.integers(0, 120))
def test_every_text_token_lands_in_one_window_or_late_however_late_it_is(
        texts: list[tuple[int, int, str]], max_wait: int) -> None:
    al = _aligner(max_wait_ms=max_wait)
    feed = _media(2.0)
    for seq, (known, delay, source) in enumerate(sorted(texts)):
        feed.append((T0 + known + delay, _text(seq, T0 + known, f"T{seq}", source=source)))
    out = _run(al, feed)
    end = T0 + 10_000_000
    out.extend(al.poll(end))
    out.extend(al.flush(end))
    settled = Counter[TokenKey]()
    for w in out.windows:
        settled.update(TokenKey("s", m, s) for m, seqs in w.members.items() for s in seqs)
    settled.update(TokenKey("s", x.modality, x.seq) for x in out.late)
    fed = Counter(TokenKey("s", t.modality, t.seq) for _, t in feed)
    assert settled == fed
    ttl = al.ocr_ttl_us
    for x in out.late:
        if x.modality is Modality.OCR:  # late only when older than the TTL on arrival
            assert x.watermark_us - x.t_us > ttl
