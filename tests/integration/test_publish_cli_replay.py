"""`lockstep publish` of replayed media, capture times from the future, refused tokens.

Replayed media is marked, answered and kept out of the live SLO figures; capture times from
the future are refused before anything is sent; tokens refused while publishing exit 1.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.agents.app import ROLES
from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.config.settings import Settings, load_settings
from lockstep.media.patternclip import GroundTruth, SynthSpec, write_media
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode
from lockstep.topics.schemas import Response, Window
from tests.clirun import lockstep as cli

pytestmark = pytest.mark.integration


def _settings(bootstrap: str) -> Settings:
    # latest: the broker is shared by the session's tests; their old media is not ours
    return load_settings(kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
                                "fetch_max_wait_ms": 10, "new_group_offset": "latest"},
                         app_id=f"lockstep-replay-{secrets.token_hex(3)}",
                         metrics={"enabled": False},
                         # A replayed window's budget runs from align's read: these tests
                         # are about how replays are marked and counted, not about how fast
                         # a shared machine answers one (some must be answered ok).
                         slo={"classes": {"cabin": {"e2e_ms": 10_000.0, "fps": 30.0}}})


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def old_media(tmp_path_factory: pytest.TempPathFactory) -> GroundTruth:
    """Two seconds recorded three days ago."""
    start = datetime.now(UTC) - timedelta(days=3)
    return write_media(tmp_path_factory.mktemp("old"), SynthSpec(seconds=2.0, start=_iso(start)))


@pytest.fixture(scope="module")
def future_media(tmp_path_factory: pytest.TempPathFactory) -> GroundTruth:
    """A file whose creation_time is a day from now (a camera with a wrong clock)."""
    start = datetime.now(UTC) + timedelta(days=1, hours=1)  # "1.0 days" however late it runs
    return write_media(tmp_path_factory.mktemp("future"), SynthSpec(seconds=2.0,
                                                                    start=_iso(start)))


async def _records(settings: Settings, topics: list[str], key: bytes, quiet_s: float,
                   limit_s: float = 60.0) -> list[object]:
    """Records keyed ``key`` on ``topics``, read until ``quiet_s`` pass without one."""
    consumer = AIOKafkaConsumer(**settings.kafka.aiokafka_options(), group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    found: list[object] = []
    try:
        parts = [TopicPartition(t, p) for t in topics
                 for p in (consumer.partitions_for_topic(t) or range(4))]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        began = quiet_since = time.monotonic()
        while (time.monotonic() - quiet_since < quiet_s
               and time.monotonic() - began < limit_s):
            batches = await consumer.getmany(timeout_ms=200)
            mine = [decode(r.value) for records in batches.values() for r in records
                    if r.key == key]
            if mine:
                quiet_since = time.monotonic()
            found.extend(mine)
    finally:
        await consumer.stop()
    return found


async def _publish(*args: str) -> tuple[int, str, str]:
    result = await asyncio.to_thread(cli, "publish", *args, timeout=180)
    return result.returncode, result.stdout, result.stderr


async def test_capture_times_from_the_future_are_refused_before_anything_is_published(
        apache_kafka: str, future_media: GroundTruth) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    sid = f"future-{secrets.token_hex(3)}"
    code, out, err = await _publish(str(future_media.media), "--stream", sid, "--bootstrap",
                                    apache_kafka, "--fast", "--anchor", "file")
    assert code == 2 and not out, err[-3000:]
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"lockstep: error: {sid}: capture times would run 1.0 days ahead "
                          "of the clock"), err
    assert "align dead-letters tokens more than 5 s in the future" in err
    soon = _iso(datetime.now(UTC) + timedelta(minutes=10))
    code, out, err = await _publish(str(future_media.media), "--stream", sid, "--bootstrap",
                                    apache_kafka, "--anchor", soon)
    ahead = re.search(r"capture times would run ([0-9.]+) min ahead", err)
    # the clock moves on while publish starts (a loaded machine: seconds), so 10 min or just under
    assert code == 2 and ahead and 9.0 <= float(ahead.group(1)) <= 10.0, err
    code, out, err = await _publish(str(future_media.media), "--stream", f"a b{sid}",
                                    "--bootstrap", apache_kafka)
    assert code == 2 and f"stream id 'a b{sid}' is not valid" in err, err
    assert await _records(settings, list(catalog.MEDIA.values()), sid.encode(), 1.5) == []


async def test_replayed_media_is_answered_and_kept_out_of_the_live_slo(
        apache_kafka: str, old_media: GroundTruth) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    telemetry = Telemetry()
    roles = await start_roles(settings, ROLES, telemetry, worker_pools=["vl", "text"])
    sid = f"replay-{secrets.token_hex(3)}"
    try:
        assert await roles.wait_assigned()
        code, out, err = await _publish(str(old_media.media), "--stream", sid, "--bootstrap",
                                        apache_kafka, "--fast", "--anchor", "file",
                                        "--sidecar-sensor", str(old_media.sensor), "--json")
        assert code == 0, err[-3000:]
        report = json.loads(out)
        assert report["ok"] and report["replay"] == [sid], report
        assert report["replay_reason"] == "published faster than captured (--fast)"
        responses = await _records(settings, [catalog.RESPONSES], sid.encode(), quiet_s=8.0)
        windows = await _records(settings, [catalog.ALIGNED], sid.encode(), quiet_s=0.5)
    finally:
        await roles.stop()
    assert all(isinstance(w, Window) and w.replay for w in windows), windows[:1]
    answered = {r.window_seq: r for r in responses if isinstance(r, Response)}
    assert len(answered) >= 30, len(answered)  # of 60 frames; the last wait for the stream
    assert all(r.replay for r in answered.values())
    assert any(r.status == "ok" and r.output for r in answered.values()), [
        (r.status, r.detail) for r in list(answered.values())[:5]]
    value = telemetry.registry.get_sample_value
    replayed = sum(value("lockstep_replay_windows_total", {"slo_class": "cabin", "status": s})
                   or 0.0 for s in ("ok", "expired", "dropped"))
    assert replayed >= len(answered)
    assert not value("lockstep_e2e_expired_total", {"slo_class": "cabin"})
    for route in ("full", "vision_only", "text_only", "early_exit"):
        assert not value("lockstep_e2e_latency_seconds_count",
                         {"route": route, "slo_class": "cabin"})
    assert telemetry.slo_attainment() is None


async def test_tokens_align_would_dead_letter_are_refused_and_publish_exits_1_saying_so(
        apache_kafka: str) -> None:
    settings = _settings(apache_kafka)
    await prepare_topics(settings, create=True)
    sid = f"ahead-{secrets.token_hex(3)}"
    # A source of unknown length sent --fast runs its capture times ahead of the clock.
    code, out, err = await _publish("testsrc=duration=8:size=64x48:rate=30", "--input-format",
                                    "lavfi", "--stream", sid, "--bootstrap", apache_kafka,
                                    "--fast", "--no-audio", "--json")
    assert code == 1, err[-3000:]
    report = json.loads(out)
    assert report["ok"] is False and report["replay"] == [sid]
    assert 0 < report["refused"] < report["tokens_published"] == 240, report
    assert report["acked"] == report["tokens_published"] - report["refused"]
    errors = [line for line in err.splitlines() if line.startswith("lockstep: error")]
    assert len(errors) == 1 and errors[0].startswith(
        f"lockstep: error: {report['refused']:,} of 240 tokens refused before sending, as "
        "align would dead-letter them (video: refused before sending: captured more than "
        "5 s ahead of the clock"), err[-2000:]
    records = await _records(settings, list(catalog.MEDIA.values()), sid.encode(), 1.5)
    sent = [t for t in records if not getattr(t, "final", False)]
    assert len(sent) == report["acked"]
    assert all(getattr(t, "replay", False) for t in records)
    # The source ended: its last frame sent (not one refused) is sent again, marked final.
    [end] = [t for t in records if getattr(t, "final", False)]
    assert getattr(end, "seq", None) == max(getattr(t, "seq", -1) for t in sent)
