from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.aligner import Aligner, AlignOutput, TokenKey
from streams.settings import AlignSettings
from tests.factories import T0, audio, ocr, sensor, video
from topics.schemas import Modality, Token

pytestmark = pytest.mark.unit

HOP = 100_000
START = (T0 // HOP) * HOP  # a window boundary


def _aligner(**kw: object) -> Aligner:
    return Aligner(AlignSettings(**kw), "cabin")  # type: ignore[arg-type]


def _key(t: Token) -> TokenKey:
    return TokenKey(t.stream_id, t.modality, t.seq)


def test_window_closes_when_every_expected_modality_passed_its_end() -> None:
    al = _aligner()
    out = AlignOutput()
    for i in range(3):  # 30 fps video and 20 ms audio chunks inside window 0
        out.extend(al.add(video(seq=i, t_us=START + i * 33_333), START + i * 33_333 + 1000))
    for i in range(5):
        out.extend(al.add(audio(seq=i, t_us=START + i * 20_000), START + i * 20_000 + 1000))
    assert out.windows == []  # the next frame, due at 99.9 ms, still belongs to window 0
    out = al.add(video(seq=3, t_us=START + 99_999), START + 101_000)
    assert [w.window_seq for w in out.windows] == [START // HOP]
    window = out.windows[0]
    assert window.missing == []
    assert window.members == {Modality.VIDEO: [0, 1, 2, 3], Modality.AUDIO: [0, 1, 2, 3, 4]}
    assert window.video is not None and window.video.seq == 2  # 16.666 ms from the centre
    assert [a.seq for a in window.audio] == [0, 1, 2, 3, 4]


def test_aligner_emits_partial_window_when_audio_misses_deadline() -> None:
    al = _aligner(max_wait_ms=50)
    al.add(video(seq=0, t_us=START + 40_000), START + 41_000)  # 1 ms transport lag
    assert al.poll(START + HOP + 50_999).windows == []  # deadline: end + lag + max_wait
    out = al.poll(START + HOP + 51_000)
    assert len(out.windows) == 1
    assert out.windows[0].missing == [Modality.AUDIO]
    assert out.windows[0].partial


def test_late_token_goes_to_late_with_its_bytes() -> None:
    al = _aligner(max_wait_ms=10)
    al.add(video(seq=0, t_us=START + 10_000), START + 11_000)
    assert al.poll(START + HOP + 20_000).windows
    out = al.add(audio(seq=0, t_us=START + 20_000), START + HOP + 30_000, raw=b"raw")
    assert len(out.late) == 1 and out.late[0].value == b"raw"
    assert out.late[0].modality is Modality.AUDIO


def test_duplicate_token_is_counted_not_windowed_twice() -> None:
    al = _aligner()
    al.add(video(seq=0, t_us=START), START)
    out = al.add(video(seq=0, t_us=START), START)
    assert out.duplicates == [TokenKey("s", Modality.VIDEO, 0)]


def test_token_from_the_far_future_is_rejected() -> None:
    al = _aligner(max_future_ms=1000)
    out = al.add(video(t_us=START + 2_000_000), START)
    assert out.rejected and "future" in out.rejected[0].reason


def test_sensor_and_audio_beyond_tolerance_are_missing_not_matched() -> None:
    al = _aligner(tolerance_ms=5, required=("video",))
    al.add(video(seq=0, t_us=START + 50_000), START)
    al.add(sensor(seq=0, t_us=START + 80_000), START)
    al.add(audio(seq=0, t_us=START + 0, duration_us=20_000), START)
    window = al.flush(START).windows[0]
    assert window.modalities[Modality.SENSOR].present is False
    assert window.modalities[Modality.SENSOR].skew_us == 30_000
    assert window.modalities[Modality.AUDIO].skew_us == 30_000
    assert set(window.missing) == {Modality.AUDIO, Modality.SENSOR}


def test_sparse_ocr_is_carried_but_never_waited_for() -> None:
    al = _aligner(required=("video",))
    al.add(ocr(seq=0, t_us=START + 10_000), START)
    al.add(video(seq=0, t_us=START + 50_000), START)
    out = al.add(video(seq=1, t_us=START + HOP + 10_000), START)
    assert [w.window_seq for w in out.windows] == [START // HOP]
    assert out.windows[0].missing == [] and out.windows[0].ocr[0].text == "EXIT"


def test_open_windows_per_stream_are_bounded() -> None:
    al = _aligner(max_open_windows=3, max_wait_ms=10_000)
    emitted = []
    for i in range(10):
        emitted += al.add(video(seq=i, t_us=START + i * HOP), START).windows
    assert al.open_windows <= 3
    assert [w.window_seq for w in emitted] == [START // HOP + i for i in range(len(emitted))]


def test_forget_drops_a_stream() -> None:
    al = _aligner()
    al.add(video(stream="a"), START)
    al.forget(["a"])
    assert al.open_windows == 0


# -- properties over generated streams -----------------------------------------------------

PERIODS = {Modality.VIDEO: 33_333, Modality.AUDIO: 20_000, Modality.OCR: 250_000,
           Modality.SENSOR: 10_000}
MAKERS = {Modality.VIDEO: video, Modality.AUDIO: audio, Modality.OCR: ocr,
          Modality.SENSOR: sensor}


@st.composite
def deliveries(draw: st.DrawFn) -> list[tuple[int, Token]]:
    """(arrival µs, token) in arrival order, with jitter, drops, reorder, dups and skew."""
    out: list[tuple[int, Token]] = []
    for stream in draw(st.sampled_from([["a"], ["a", "b"]])):
        skew = draw(st.integers(-20_000, 20_000))
        for modality, period in PERIODS.items():
            if draw(st.integers(0, 9)) == 0:
                continue  # a dead modality
            n = draw(st.integers(0, 400_000 // period))
            for seq in range(n):
                if draw(st.integers(0, 19)) == 0:
                    continue  # dropped
                jitter = draw(st.integers(-5_000, 5_000))
                t = START + seq * period + max(0, jitter + (skew if modality is
                                                            Modality.AUDIO else 0))
                token = MAKERS[modality](stream=stream, seq=seq, t_us=t)  # type: ignore[operator]
                delay = draw(st.integers(0, 80_000))
                out.append((t + delay, token))
                if draw(st.integers(0, 29)) == 0:
                    out.append((t + delay + draw(st.integers(0, 50_000)), token))  # duplicate
    out.sort(key=lambda x: x[0])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feed=deliveries(), max_wait=st.integers(0, 120), tol=st.integers(1, 30))
def test_every_token_lands_in_exactly_one_outcome(
        feed: list[tuple[int, Token]], max_wait: int, tol: int) -> None:
    al = _aligner(max_wait_ms=max_wait, tolerance_ms=tol, max_open_windows=8)
    out = AlignOutput()
    for arrival, token in feed:
        out.extend(al.poll(arrival))
        assert al.overdue(arrival) == []  # no window waits past its deadline
        out.extend(al.add(token, arrival))
    end = (feed[-1][0] if feed else START) + 1_000_000
    out.extend(al.poll(end))
    out.extend(al.flush(end))
    assert al.open_windows == 0

    settled = Counter[TokenKey]()
    for w in out.windows:
        for m, seqs in w.members.items():
            settled.update(TokenKey(w.stream_id, m, s) for s in seqs)
    settled.update(TokenKey(x.stream_id, x.modality, x.seq) for x in out.late)
    settled.update(r.key for r in out.rejected)
    fed = Counter(_key(t) for _, t in feed)
    assert set(settled) == set(fed)
    assert all(n == 1 for n in settled.values())
    assert len(out.duplicates) == sum(fed.values()) - len(fed)

    by_stream: dict[str, list[int]] = {}
    for w in out.windows:
        by_stream.setdefault(w.stream_id, []).append(w.window_seq)
        assert w.t_end_us - w.t_start_us == HOP
        tokens = [w.video, *w.audio, *w.ocr, *w.sensor]
        assert all(w.t_start_us <= t.t_us < w.t_end_us for t in tokens if t is not None)
        for m, state in w.modalities.items():
            if state.present and m in (Modality.AUDIO, Modality.SENSOR):
                assert state.skew_us is not None and state.skew_us <= tol * 1000
    for seqs in by_stream.values():
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))


def test_a_straggler_after_eviction_is_late_not_a_second_window() -> None:
    al = _aligner(max_wait_ms=10)
    al.add(video(seq=0, t_us=START + 10_000), START + 11_000)
    assert al.poll(START + HOP + 30_000).windows
    al.poll(START + 120_000_000)  # idle long enough to be evicted
    assert al.open_windows == 0
    out = al.add(audio(seq=0, t_us=START + 20_000), START + 121_000_000)
    assert len(out.late) == 1 and out.windows == []
