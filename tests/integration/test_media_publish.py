"""`lockstep publish SOURCE` and `lockstep subscribe` on the real Apache Kafka broker."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import cast

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.agents.app import ROLES
from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.config.settings import Settings, load_settings
from lockstep.media.patternclip import GroundTruth, SynthSpec, write_media
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode
from lockstep.topics.schemas import AudioToken, OcrToken, SensorToken, Token, VideoToken
from tests.clirun import lockstep as _cli

pytestmark = pytest.mark.integration


T0 = 1_768_464_000_000_000  # the files' creation_time: in the past, so --anchor file is taken


def _settings(bootstrap: str, **overrides: object) -> Settings:
    return load_settings(kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
                                "fetch_max_wait_ms": 10},
                         app_id="lockstep-media-test", metrics={"enabled": False},
                         **overrides)  # type: ignore[arg-type]


async def _media_records(settings: Settings, stream_id: str, expect: int,
                         timeout_s: float) -> list[object]:
    """Every token of ``stream_id`` on the media topics (stops once ``expect`` arrived)."""
    consumer = AIOKafkaConsumer(**settings.kafka.aiokafka_options(), group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    found: list[object] = []
    try:
        parts = [TopicPartition(t, p) for t in catalog.MEDIA.values()
                 for p in range(settings.topics.media_partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(found) < expect:
            batches = await consumer.getmany(timeout_ms=200)
            found.extend(decode(r.value) for records in batches.values() for r in records
                         if r.key == stream_id.encode())
    finally:
        await consumer.stop()
    return found


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> GroundTruth:
    return write_media(tmp_path_factory.mktemp("media"),
                       SynthSpec(seconds=2.0, start="2026-01-15T08:00:00Z"))


async def test_a_published_file_arrives_whole_at_its_pts(apache_kafka: str,
                                                         media: GroundTruth) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    sid = f"media-{secrets.token_hex(3)}"
    result = await asyncio.to_thread(
        _cli, "publish", str(media.media), "--stream", sid, "--bootstrap", apache_kafka,
        "--fast", "--anchor", "file", "--sidecar-ocr", str(media.ocr),
        "--sidecar-sensor", str(media.sensor), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    expected = {"video": 60, "audio": media.audio_chunks(), "ocr": len(media.captions),
                "sensor": media.sensor_lines}
    assert report["tokens_by_modality"] == expected and report["ok"] is True
    assert report["acked"] == sum(expected.values()) and report["failed"] == 0
    assert report["delivery"] == {m: {"sent": n, "acked": n, "failed": 0}
                                  for m, n in expected.items()}

    # Every token, and at the end a copy of the last video, audio and sensor token marked
    # final (the stream has ended: align waits for no more of them).
    records = cast(list[Token], await _media_records(settings, sid,
                                                     sum(expected.values()) + 3, 30.0))
    ends = [t for t in records if t.final]
    tokens = [t for t in records if not t.final]
    assert sorted(t.modality.value for t in ends) == ["audio", "sensor", "video"]
    for end in ends:
        assert end.seq == max(t.seq for t in tokens if t.modality is end.modality)
    assert Counter(type(t).__name__ for t in tokens) == {
        "VideoToken": 60, "AudioToken": expected["audio"], "OcrToken": expected["ocr"],
        "SensorToken": expected["sensor"]}
    period_us = 1e6 / media.spec.fps
    frames = sorted((t for t in tokens if isinstance(t, VideoToken)), key=lambda t: t.seq)
    for frame, pts in zip(frames, media.frame_times_s, strict=True):
        assert abs(frame.t_us - (T0 + float(pts) * 1e6)) < period_us
    chunks = sorted((t for t in tokens if isinstance(t, AudioToken)), key=lambda t: t.seq)
    assert [c.t_us - T0 for c in chunks] == [20_000 * i for i in range(len(chunks))]
    ocr = sorted((t for t in tokens if isinstance(t, OcrToken)), key=lambda t: t.seq)
    assert [(t.t_us - T0, t.text) for t in ocr] == [
        (round(s * 1e6), text) for s, text in media.captions]
    sensors = [t for t in tokens if isinstance(t, SensorToken)]
    assert sorted(t.t_us - T0 for t in sensors) == [
        20_000 * k for k in range(media.sensor_lines)]


async def test_bad_input_publishes_nothing_or_says_what_was_sent(
        apache_kafka: str, media: GroundTruth, tmp_path: Path) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    bad_sidecar = tmp_path / "bad.jsonl"
    bad_sidecar.write_text('{"t_s": 0.1, "text": "EXIT", "bbox": [0, 0, 1, 1]}\n')
    sid = f"bad-{secrets.token_hex(3)}"
    rejected = await asyncio.to_thread(
        _cli, "publish", str(media.media), "--stream", sid, "--bootstrap", apache_kafka,
        "--fast", "--sidecar-ocr", str(bad_sidecar))
    assert rejected.returncode == 1
    assert "line 1: confidence: missing field" in rejected.stderr and not rejected.stdout
    assert await _media_records(settings, sid, 1, timeout_s=3.0) == []

    cut = tmp_path / "cut.mp4"
    cut.write_bytes(media.media.read_bytes()[:len(media.media.read_bytes()) // 2])
    half = f"half-{secrets.token_hex(3)}"
    partial = await asyncio.to_thread(
        _cli, "publish", str(cut), "--stream", half, "--bootstrap", apache_kafka, "--fast",
        "--json")
    assert partial.returncode == 1
    assert "publishing incomplete" in partial.stderr
    report = json.loads(partial.stdout)
    stream = report["streams"][half]
    assert stream["complete"] is False and "cut.mp4" in stream["error"]
    sent = report["tokens_published"]
    assert 0 < sent < 160 and report["acked"] == sent
    assert len(await _media_records(settings, half, sent, timeout_s=30.0)) == sent


async def test_subscribe_prints_the_responses_of_a_published_file(
        apache_kafka: str, media: GroundTruth) -> None:
    # What subscribe prints, not how fast a shared machine is: a budget no stall reaches,
    # so no window is shed or sampled down (the SLO's own tests are elsewhere).
    settings = _settings(apache_kafka,
                         slo={"classes": {"cabin": {"e2e_ms": 10_000.0, "fps": 30.0}}})
    await prepare_topics(settings, create=True)
    roles = await start_roles(settings, ROLES, Telemetry(), worker_pools=["vl", "text"])
    sid = f"sub-{secrets.token_hex(3)}"
    try:
        assert await roles.wait_assigned()
        published = await asyncio.to_thread(
            _cli, "publish", str(media.media), "--stream", sid, "--bootstrap", apache_kafka,
            "--realtime", "--sidecar-sensor", str(media.sensor), "--json")
        assert published.returncode == 0, published.stderr[-3000:]
        shown = await asyncio.to_thread(
            _cli, "subscribe", "--bootstrap", apache_kafka, "--from-beginning",
            "--stream", sid, "--jsonl", "--timeout", "8", "--max", "40")
    finally:
        await roles.stop()
    assert shown.returncode == 0, shown.stderr[-3000:]
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert len(lines) >= 5, shown.stdout[-2000:]
    assert {line["stream_id"] for line in lines} == {sid}
    assert len({line["window_seq"] for line in lines}) == len(lines)
    assert any(line["status"] == "ok" and line["output"] for line in lines)
    for line in lines:
        assert 0 < line["e2e_ms"] <= line["received_ms"] < 60_000
