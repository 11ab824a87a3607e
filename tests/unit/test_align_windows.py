"""Windows the aligner emits are bounded in length and always pass their own schema."""

from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lockstep.config.settings import AlignSettings
from lockstep.producer.synthetic import SyntheticConfig, SyntheticStream
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.topics.keys import HOP_BASE, TokenKey
from lockstep.topics.schemas import Modality, Token, Window
from tests.factories import T0, audio, sensor, video

pytestmark = pytest.mark.unit

P = 33_333  # 30 fps


def _run(al: Aligner, feed: list[tuple[int, Token]], *, poll: bool = True) -> AlignOutput:
    out = AlignOutput()
    for arrival, token in feed:
        if poll:
            out.extend(al.poll(arrival))
        out.extend(al.add(token, arrival))
    end = (feed[-1][0] if feed else T0) + 60_000_000
    out.extend(al.poll(end))
    out.extend(al.flush(end))
    return out


def _revalidates(window: Window) -> bool:
    try:
        Window.model_validate(window.model_dump())
    except ValidationError:
        return False
    return True


def _video_gap_feed(gap_us: int) -> list[tuple[int, Token]]:
    """3 s of a synthetic stream, then video stops for ``gap_us`` while the rest goes on."""
    source = SyntheticStream("cam-1", T0, SyntheticConfig(width=16, height=12))
    tokens = source.due(T0 + 3_000_000)
    later = source.due(T0 + 3_000_000 + gap_us + 3_000_000)
    tokens += [t for t in later if t.modality is not Modality.VIDEO
               or not T0 + 3_000_000 < t.t_us < T0 + 3_000_000 + gap_us]
    return [(t.t_us + 5_000, t) for t in sorted(tokens, key=lambda t: t.t_us)]


@pytest.mark.parametrize("catching_up", [False, True])
def test_an_eleven_second_video_gap_is_split_into_windows_that_fit_the_schema(
        catching_up: bool) -> None:
    al = Aligner(AlignSettings(), "cabin")
    al.catching_up = catching_up  # windows close on watermarks only: the gap is one stretch
    feed = _video_gap_feed(11_000_000)
    out = _run(al, feed, poll=False)
    assert out.windows and all(_revalidates(w) for w in out.windows)
    assert max(w.t_end_us - w.t_start_us for w in out.windows) <= 1_000_000
    assert any(w.window_seq >= HOP_BASE for w in out.windows)  # the gap: hop windows
    assert sum(len(s) for w in out.windows for s in w.members.values()) == len(feed)


def test_a_window_around_a_lone_frame_is_cut_to_max_window() -> None:
    al = Aligner(AlignSettings(required=("video",), max_window_ms=200), "cabin")
    frames = [video(seq=0, t_us=T0), video(seq=300, t_us=T0 + 300 * P)]  # 10 s apart
    out = _run(al, [(t.t_us + 1000, t) for t in frames])
    assert [w.window_seq for w in out.windows if w.window_seq < HOP_BASE] == [0, 300]
    assert all(w.t_end_us - w.t_start_us <= 200_000 for w in out.windows)
    assert all(w.t_start_us <= w.anchor_t_us < w.t_end_us for w in out.windows)


def test_max_window_must_be_longer_than_a_hop() -> None:
    with pytest.raises(ValidationError, match="max_window_ms"):
        AlignSettings(hop_ms=500, max_window_ms=400)


# -- property: whatever the gaps, every window fits ----------------------------------------

@st.composite
def gappy_feeds(draw: st.DrawFn) -> list[tuple[int, Token]]:
    """(arrival, token) of one or two streams whose modalities stop for up to 12 s."""
    out: list[tuple[int, Token]] = []
    for stream in draw(st.sampled_from([["a"], ["a", "b"]])):
        for modality, period in ((Modality.VIDEO, 4 * P), (Modality.AUDIO, 200_000),
                                 (Modality.SENSOR, 250_000)):
            if draw(st.integers(0, 4)) == 0:
                continue  # the stream does not send it
            seq, t = 0, 0
            for _ in range(draw(st.integers(1, 3))):
                for _ in range(draw(st.integers(1, 6))):  # a stretch of captures
                    jitter = draw(st.integers(-8_000, 8_000))
                    stamp = T0 + t + max(0, jitter)
                    if modality is Modality.VIDEO:
                        token: Token = video(stream=stream, seq=seq, t_us=stamp)
                    elif modality is Modality.AUDIO:
                        token = audio(stream=stream, seq=seq, t_us=stamp, duration_us=period)
                    else:
                        token = sensor(stream=stream, seq=seq, t_us=stamp)
                    out.append((stamp + draw(st.integers(0, 80_000)), token))
                    seq, t = seq + 1, t + period
                gap = draw(st.integers(0, 12_000_000)) // period  # captures not sent
                seq, t = seq + gap, t + gap * period
    out.sort(key=lambda x: x[0])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feed=gappy_feeds(), catching_up=st.booleans(), poll=st.booleans(),
       max_window=st.sampled_from([300, 1000, 10_000]))
def test_every_emitted_window_revalidates_and_spans_at_most_max_window(
        feed: list[tuple[int, Token]], catching_up: bool, poll: bool, max_window: int) -> None:
    al = Aligner(AlignSettings(max_window_ms=max_window, max_wait_ms=30), "cabin")
    al.catching_up = catching_up
    out = _run(al, feed, poll=poll)
    for w in out.windows:
        assert w.t_end_us - w.t_start_us <= max_window * 1000
        assert _revalidates(w), (w.window_seq, w.t_end_us - w.t_start_us)
    settled = Counter(TokenKey(w.stream_id, m, s) for w in out.windows
                      for m, seqs in w.members.items() for s in seqs)
    settled.update(TokenKey(x.stream_id, x.modality, x.seq) for x in out.late)
    settled.update(r.key for r in out.rejected)
    assert settled == Counter(TokenKey(t.stream_id, t.modality, t.seq) for _, t in feed)
    by_stream: dict[str, list[Window]] = {}
    for w in out.windows:
        by_stream.setdefault(w.stream_id, []).append(w)
    for windows in by_stream.values():
        assert all(a.t_end_us <= b.t_start_us for a, b in pairwise(windows))
        assert len({w.window_seq for w in windows}) == len(windows)
