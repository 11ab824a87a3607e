"""`lockstep publish --synthetic` as a user runs it, on the real Apache Kafka broker."""

from __future__ import annotations

import asyncio
import json
import secrets
import time

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.agents.runner import prepare_topics
from lockstep.config.settings import Settings, load_settings
from lockstep.producer.realtime import publish_synthetic
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode
from lockstep.topics.payloads import check_encoded, pixels
from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, VideoToken
from tests.clirun import lockstep as cli

pytestmark = pytest.mark.integration

PERIOD_US = {"video": 1e6 / 30, "audio": 20_000.0, "ocr": 500_000.0, "sensor": 20_000.0}


def _settings(bootstrap: str) -> Settings:
    return load_settings(kafka={"bootstrap_servers": bootstrap}, metrics={"enabled": False})


async def _tokens(settings: Settings, stream_ids: set[str], timeout_s: float = 3.0
                  ) -> list[object]:
    """Every token of ``stream_ids`` on the media topics (reads until quiet for 1 s)."""
    consumer = AIOKafkaConsumer(**settings.kafka.aiokafka_options(), group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    found: list[object] = []
    keys = {sid.encode() for sid in stream_ids}
    try:
        parts = [TopicPartition(t, p) for t in catalog.MEDIA.values()
                 for p in range(settings.topics.media_partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < timeout_s:
            batches = await consumer.getmany(timeout_ms=200)
            if batches:
                quiet_since = time.monotonic()
            found.extend(decode(r.value) for records in batches.values() for r in records
                         if r.key in keys)
    finally:
        await consumer.stop()
    return found


async def _publish(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = await asyncio.to_thread(cli, "publish", "--synthetic", "--bootstrap", bootstrap,
                                     *args, timeout=120)
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize(("fmt", "width", "height"), [("jpeg", 160, 120), ("rgb24", 96, 54)])
async def test_synthetic_publish_sends_the_given_streams_at_the_given_size_and_format(
        apache_kafka: str, fmt: str, width: int, height: int) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    ids = {f"cab-{secrets.token_hex(3)}", f"gate-{secrets.token_hex(3)}"}
    code, out, err = await _publish(
        apache_kafka, *(a for sid in sorted(ids) for a in ("--stream", sid)), "--width",
        str(width), "--height", str(height), "--format", fmt, "--seconds", "1", "--json")
    assert code == 0, err[-3000:]
    report = json.loads(out)
    assert report["ok"] and set(report["streams"]) == ids, report
    assert report["video"] == {"format": fmt, "width": width, "height": height, "fps": 30.0}
    tokens = await _tokens(settings, ids)
    frames = [t for t in tokens if isinstance(t, VideoToken)]
    assert {t.stream_id for t in tokens} == ids  # type: ignore[attr-defined]
    assert len(tokens) == report["tokens_published"] == report["acked"]
    assert len(frames) == report["tokens_by_modality"]["video"] >= 2 * 25
    for frame in frames:
        assert (frame.format, frame.width, frame.height) == (fmt, width, height)
        assert not frame.replay  # published live, at the wall clock
        if fmt == "rgb24":
            image = pixels(frame)
            assert image is not None and image.shape == (height, width, 3)
        else:
            assert frame.data[:2] == b"\xff\xd8" and check_encoded(frame) is None


async def test_synthetic_publish_prints_a_summary_for_people_and_shows_progress(
        apache_kafka: str) -> None:
    await prepare_topics(_settings(apache_kafka), create=True)
    sid = f"human-{secrets.token_hex(3)}"
    code, out, err = await _publish(apache_kafka, "--stream", sid, "--seconds", "2",
                                    "--progress")
    assert code == 0, err[-3000:]
    assert not out.startswith("{"), out
    lines = out.splitlines()
    assert lines[0].startswith("published ") and "tokens) on 1 stream(s) in " in lines[0]
    assert any(line.split()[:2] == [sid, "synthetic"] and line.endswith("complete")
               for line in lines), out
    assert any(line.startswith("acknowledged ") and ", failed 0," in line for line in lines)
    assert "video 64x48 gray8 at 30 fps" in out
    assert f"seq from the capture clock (continues across runs under the same ids): {sid} video "\
        in out
    progress = [p for p in err.replace("\r", "\n").splitlines() if "tok/s" in p]
    assert len(progress) >= 3, err[-2000:]  # every half second, and at the end
    assert progress[-1].startswith("[####################] 100% ")
    assert "1/1 streams done" in progress[-1]


async def test_a_rerun_under_the_same_stream_id_continues_seq_from_the_capture_clock(
        apache_kafka: str) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    sid = f"again-{secrets.token_hex(3)}"
    runs = []
    for _ in range(2):
        code, out, err = await _publish(apache_kafka, "--stream", sid, "--seconds", "1",
                                        "--json")
        assert code == 0, err[-3000:]
        runs.append(json.loads(out)["seq"][sid])
    for modality, (_first, last) in runs[0].items():
        assert runs[1][modality][0] > last, (modality, runs)
    tokens = await _tokens(settings, {sid})
    for modality in Modality:
        seqs = [t.seq for t in tokens if t.modality is modality]  # type: ignore[attr-defined]
        assert seqs and len(seqs) == len(set(seqs)), modality  # no seq sent twice
        first, second = runs[0][modality.value], runs[1][modality.value]
        assert sorted(seqs) == [*range(first[0], first[1] + 1), *range(second[0], second[1] + 1)]
    for token in tokens:
        period = PERIOD_US[token.modality.value]  # type: ignore[attr-defined]
        assert token.seq == round(token.t_us / period)  # type: ignore[attr-defined]


async def test_a_stream_id_the_wire_refuses_is_one_line_exit_2_and_nothing_is_sent(
        apache_kafka: str) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    tag = secrets.token_hex(3)
    code, out, err = await _publish(apache_kafka, "--stream", f"cab {tag}", "--seconds", "1")
    assert code == 2 and not out
    assert err.splitlines() == [f"lockstep: error: stream id 'cab {tag}' is not valid: use "
                                "1-128 ASCII letters, digits and . _ : @ / - "
                                "(docs/wire-format.md §4)"]
    code, out, err = await _publish(apache_kafka, "--prefix", f"my cams {tag} ")
    assert code == 2 and len(err.splitlines()) == 1 and "is not valid" in err
    code, out, err = await _publish(apache_kafka, "--stream", f"cab-{tag}", "--fast")
    assert (code, err.strip()) == (2, "lockstep: error: --fast applies to media SOURCEs, not "
                                      "to --synthetic")
    assert await _tokens(settings, {f"cab {tag}", f"cab-{tag}", f"my cams {tag} cam0"},
                         timeout_s=1.5) == []


async def test_a_held_run_publishes_past_its_seconds_and_ends_each_modality_once(
        apache_kafka: str) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    sid = f"held-{secrets.token_hex(3)}"
    began = time.monotonic()

    def hold() -> float | None:  # "go on" for 2 s, then until 1 s later
        return None if time.monotonic() - began < 2.0 else began + 3.0

    report = await publish_synthetic(settings.kafka, [sid], 1.0, Telemetry(), hold=hold)
    assert report.ok and report.seconds >= 3.0, report.line()
    tokens = await _tokens(settings, {sid})
    by_modality: dict[str, list[int]] = {}
    finals: dict[str, list[int]] = {}
    for t in tokens:
        assert isinstance(t, VideoToken | AudioToken | OcrToken | SensorToken)
        by_modality.setdefault(t.modality.value, []).append(t.seq)
        if t.final:
            finals.setdefault(t.modality.value, []).append(t.seq)
    # Captured over the whole held run, and each modality's last token alone says so.
    assert len(by_modality["video"]) >= 2.9 * 30, len(by_modality["video"])
    assert finals == {m: [max(seqs)] for m, seqs in by_modality.items()}, finals
