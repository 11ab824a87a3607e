"""Replayed media: the wire mark, windows that carry it, budgets, and what publish refuses."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from lockstep.config.settings import AlignSettings, RouteSettings, SloSettings
from lockstep.errors import ConfigError
from lockstep.producer.checks import CaptureSpan, judge_capture, summary_lines
from lockstep.streams.align.aligner import Aligner
from lockstep.streams.route.router import Router
from lockstep.telemetry.metrics import Telemetry
from lockstep.telemetry.slo import SloMonitor
from lockstep.topics.codec import HEADER_SIZE, decode, encode
from lockstep.topics.schemas import Timeline, Token, VideoToken, Window
from tests.factories import T0, audio, request, sensor, video

pytestmark = pytest.mark.unit

P = 33_333  # 30 fps
S = 1_000_000
BUDGET_US = 120_000


def _replayed(token: Token) -> Token:
    return token.model_copy(update={"replay": True})


def _keys(value: bytes) -> set[str]:
    return set(msgpack.unpackb(value[HEADER_SIZE:]))


def test_a_live_token_is_sent_without_the_replay_key_and_a_replayed_one_with_it() -> None:
    live = video(seq=3)
    assert "replay" not in _keys(encode(live))  # an older aligner reads it as before
    assert decode(encode(live)) == live and live.replay is False
    again = _replayed(live)
    assert "replay" in _keys(encode(again))
    assert decode(encode(again)) == again and again.replay is True


def _windows(tokens: list[Token], lag_us: int) -> list[Window]:
    aligner = Aligner(AlignSettings(estimate_offsets=False), "cabin")
    windows: list[Window] = []
    for token in sorted(tokens, key=lambda t: t.t_us):
        windows += aligner.add(token, token.t_us + lag_us).windows
    return windows + aligner.flush(tokens[-1].t_us + lag_us).windows


def _media() -> list[Token]:
    return [*(video(seq=i, t_us=T0 + i * P) for i in range(4)),
            *(audio(seq=j, t_us=T0 + j * 20_000) for j in range(6)),
            *(sensor(seq=k, t_us=T0 + k * 10_000) for k in range(12))]


def test_windows_of_replayed_tokens_carry_the_mark_through_the_wire() -> None:
    replayed = _windows([_replayed(t) for t in _media()], lag_us=3 * 86_400 * S)
    live = _windows(_media(), lag_us=1_000)
    assert len(replayed) == len(live) >= 3
    assert all(w.replay for w in replayed) and not any(w.replay for w in live)
    for window in replayed:
        assert all(a.replay for a in window.audio)  # the cut chunk keeps the mark
        assert decode(encode(window)) == window
    assert [w.window_seq for w in replayed] == [w.window_seq for w in live]


def _window(*, replay: bool, capture_us: int, ingest_us: int) -> Window:
    noise = np.clip(np.random.default_rng(1).normal(128, 40, (48, 64)), 0, 255)
    frame = VideoToken(stream_id="s", seq=1, t_us=capture_us, format="gray8", width=64,
                       height=48, replay=replay,
                       data=noise.astype(np.uint8).tobytes())
    return request(window_seq=1, video=frame, replay=replay,
                   timeline=Timeline(capture_us=capture_us, ingest_us=ingest_us)).window


def test_a_replayed_window_has_its_budget_from_when_align_received_it() -> None:
    now = T0 + 10 * 86_400 * S
    router = Router(RouteSettings(), SloSettings())
    replay = router.route(_window(replay=True, capture_us=T0, ingest_us=now - 2_000), now)
    live = router.route(_window(replay=False, capture_us=now - 2_000, ingest_us=now - 1_000),
                        now)
    assert replay.request is not None and live.request is not None
    assert replay.request.deadline_us == live.request.deadline_us == now - 2_000 + BUDGET_US
    assert replay.request.window.replay and not live.request.window.replay
    assert replay.route == live.route  # its frame is as fresh as it would be live
    assert replay.confidence == live.confidence


def test_replayed_windows_are_counted_apart_from_the_live_slo_figures() -> None:
    slo = SloSettings()
    t = Telemetry()
    t.watch(SloMonitor(slo), {c: slo.budget_tree(c) for c in slo.classes})
    t.replay(slo_class="cabin", status="expired")
    t.replay(slo_class="cabin", status="ok")
    value = t.registry.get_sample_value
    assert value("lockstep_replay_windows_total", {"slo_class": "cabin", "status": "ok"}) == 1
    assert value("lockstep_replay_windows_total",
                 {"slo_class": "cabin", "status": "expired"}) == 1
    assert value("lockstep_e2e_expired_total", {"slo_class": "cabin"}) == 0
    assert t.slo_attainment() is None


def _judge(*spans: CaptureSpan, fast: bool = False, anchored: bool = True
           ) -> tuple[frozenset[str], str]:
    plan = judge_capture(spans, now_us=T0, fast=fast, anchored=anchored,
                         max_future_us=5 * S, budget_us=lambda sid: BUDGET_US)
    return plan.replay, plan.reason


def test_capture_times_from_the_future_are_refused_in_one_line_saying_how_to_fix_it() -> None:
    with pytest.raises(ConfigError) as info:
        _judge(CaptureSpan("cam", T0 + 43 * 86_400 * S, T0 + 43 * 86_400 * S + 2 * S))
    message = str(info.value)
    assert message.startswith("cam: capture times would run 43.0 days ahead of the clock")
    assert "more than 5 s in the future" in message and "\n" not in message
    assert "an instant in the past" in message
    with pytest.raises(ConfigError, match=r"20 s ahead.*publish --realtime"):
        _judge(CaptureSpan("cam", T0, T0 + 20 * S), fast=True)  # --fast runs ahead


def test_fast_or_old_media_is_a_replay_and_fresh_media_is_live() -> None:
    assert _judge(CaptureSpan("a", T0, T0 + 4 * S), fast=True) == (
        frozenset({"a"}), "published faster than captured (--fast)")
    assert _judge(CaptureSpan("a", T0 - 3 * 86_400 * S, None), CaptureSpan("b", T0, None)) == (
        frozenset({"a"}), "captured up to 3.0 days before publishing")
    assert _judge(CaptureSpan("a", T0 - BUDGET_US // 2, None)) == (frozenset(), "")
    assert _judge(CaptureSpan("a", T0 - 9 * S, None), anchored=False) == (frozenset(), "")
    assert _judge(CaptureSpan("a", T0 + 4 * S, None)) == (frozenset(), "")  # within the limit


def test_the_human_summary_says_what_was_refused_and_what_is_a_replay() -> None:
    lines = summary_lines({"replay": ["cab-1"], "replay_reason": "captured up to 3.0 days "
                           "before publishing", "refused": 1234})
    assert lines == [
        "replay: cab-1 captured up to 3.0 days before publishing: windows answered, kept out "
        "of the live SLO figures (lockstep_replay_windows_total)",
        "REFUSED 1,234 tokens before sending: align would dead-letter them (see the delivery "
        "errors)"]
