"""Perception beside the media: how recognised text is stamped, numbered and measured."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from lockstep.media.perception import PerceptionMetrics, TextSink
from lockstep.media.recognizers import TextBox
from lockstep.topics.schemas import OcrToken, Token

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000_000


def _sink() -> tuple[TextSink, list[OcrToken]]:
    sent: list[OcrToken] = []

    def publish(token: Token) -> None:
        assert isinstance(token, OcrToken)
        sent.append(token)

    return TextSink("cam", publish), sent


def test_text_is_stamped_when_it_became_known_and_says_what_frame_it_was_read_in() -> None:
    sink, sent = _sink()
    sink.media(T0 + 1_000_000)  # the newest media sent when the reading came back
    boxes = (TextBox("LINE STOPPED", (0.1, 0.7, 0.5, 0.1), 0.99),
             TextBox("GATE 4", (0.1, 0.8, 0.2, 0.1), 0.95))
    assert sink.scene(T0 + 400_000, boxes) == 2
    assert [(t.seq, t.t_us, t.text, t.source, t.span_us) for t in sent] == [
        (0, T0 + 1_000_000, "LINE STOPPED", "scene", (T0 + 400_000, T0 + 400_000)),
        (1, T0 + 1_000_000, "GATE 4", "scene", (T0 + 400_000, T0 + 400_000))]


def test_captions_that_vanish_publish_one_empty_text_and_then_nothing() -> None:
    sink, sent = _sink()
    assert sink.scene(T0, ()) == 0  # nothing was showing: nothing to clear
    sink.scene(T0 + 1_000_000, (TextBox("EXIT", (0.1, 0.7, 0.2, 0.1), 0.9),))
    assert sink.scene(T0 + 2_000_000, ()) == 1
    assert sink.scene(T0 + 3_000_000, ()) == 0
    assert [(t.text, t.confidence) for t in sent] == [("EXIT", 0.9), ("", 0.0)]


def test_an_utterance_is_one_speech_token_spanning_what_was_said() -> None:
    sink, sent = _sink()
    sink.media(T0 + 2_600_000)
    sink.speech(T0 + 1_000_000, T0 + 2_300_000, "emergency stop", 1.0)
    sink.media(T0 + 2_500_000)  # an older chunk reported late never moves time back
    sink.scene(T0 + 2_400_000, (TextBox("EXIT", (0.1, 0.7, 0.2, 0.1), 0.9),))
    (speech, scene) = sent
    assert (speech.source, speech.text, speech.confidence) == ("speech", "emergency stop", 1.0)
    assert speech.span_us == (T0 + 1_000_000, T0 + 2_300_000)
    assert speech.t_us == T0 + 2_600_000  # known then
    assert scene.t_us == speech.t_us + 1  # a later result is never stamped at or before
    assert (speech.seq, scene.seq) == (0, 1)


def test_results_known_after_the_media_ended_still_come_in_order() -> None:
    sink, sent = _sink()
    sink.media(T0 + 7_000_000)
    sink.scene(T0 + 6_400_000, (TextBox("TEMP", (0.1, 0.7, 0.2, 0.1), 0.9),))
    sink.scene(T0 + 6_960_000, ())  # the captions went; nothing newer was sent meanwhile
    assert [(t.text, t.t_us) for t in sent] == [("TEMP", T0 + 7_000_000),
                                                ("", T0 + 7_000_001)]


def test_perception_lag_and_skipped_work_are_metrics_and_in_the_summary() -> None:
    registry = CollectorRegistry()
    metrics = PerceptionMetrics(registry)
    for lag in (0.2, 0.3, 0.4):
        metrics.observe("ocr", lag, tokens=1)
    metrics.observe("asr", 0.5, tokens=1)
    metrics.skip("ocr", 12)
    metrics.skip("asr")
    summary = metrics.summary()
    assert summary["ocr"] == {"runs": 3, "tokens": 3, "skipped": 12, "dropped": 0, "failed": 0,
                              "lag_p50_ms": 300.0, "lag_p99_ms": 398.0, "lag_max_ms": 400.0}
    assert summary["asr"]["skipped"] == 1 and summary["asr"]["lag_p50_ms"] == 500.0
    value = registry.get_sample_value
    assert value("lockstep_perception_lag_seconds_count", {"modality": "ocr"}) == 3
    assert value("lockstep_perception_skipped_total", {"modality": "ocr"}) == 12
    assert value("lockstep_perception_runs_total", {"modality": "asr"}) == 1
