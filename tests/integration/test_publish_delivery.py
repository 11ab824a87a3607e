"""Publishing through broker outages: acknowledgements are counted, failures reported.

Each test owns an Apache Kafka broker (function scope) that it SIGTERMs or SIGKILLs and
restarts on the same log dir, then reads ``media.*`` back: every acknowledged token is
there, the acknowledged count is what Kafka holds, and what was not delivered is said.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.admin import admin_client, ensure_topics
from lockstep.kafka.logfilter import CLIENT_LOGGERS, route_client_logs
from lockstep.kafka.retry import OutageLog
from lockstep.media.patternclip import GroundTruth, SynthSpec, write_media
from lockstep.producer.publisher import Publisher
from lockstep.producer.realtime import publish_synthetic
from lockstep.producer.synthetic import SyntheticConfig, SyntheticStream
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode
from lockstep.topics.keys import TokenKey
from tests.clirun import lockstep as cli
from tests.kafka.restartable import RestartableKafka

pytestmark = pytest.mark.integration

PARTITIONS = 4
OUTAGE_AT_S = 3.0
DOWN_S = 3.0


@pytest.fixture
def broker() -> Iterator[RestartableKafka]:
    """A broker of this test's own, with the media topics, that it may take down."""
    with RestartableKafka() as kafka:
        specs = [catalog.TopicSpec(t, PARTITIONS, 1, group="media")
                 for t in catalog.MEDIA.values()]
        ensure_topics(admin_client({"bootstrap.servers": kafka.bootstrap}), specs)
        yield kafka


@pytest.fixture
def client_logs() -> Iterator[None]:
    """Puts the client loggers back as they were after a test that routes them.

    Route them in the test itself: pytest attaches its capture handler to the loggers
    that do not propagate when a phase starts, around any filter of ours.
    """
    saved = {name: (lg.level, lg.propagate, list(lg.handlers))
             for name in CLIENT_LOGGERS for lg in [logging.getLogger(name)]}
    yield
    for name, (level, propagate, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers[:] = handlers


def _kafka(bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap)


async def _keys_in_kafka(bootstrap: str, prefix: str) -> set[TokenKey]:
    """Distinct keys of the tokens of streams ``prefix*`` in ``media.*``, read to the end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    keys: set[TokenKey] = set()
    try:
        parts = [TopicPartition(t, p) for t in catalog.MEDIA.values() for p in range(PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in parts]
            if all(pos >= ends[tp] for pos, tp in zip(positions, parts, strict=True)):
                return keys
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    token = decode(record.value)
                    if token.stream_id.startswith(prefix):
                        keys.add(TokenKey(token.stream_id, token.modality, token.seq))
    finally:
        await consumer.stop()
    raise AssertionError("media topics not read to their end within 60 s")


async def _kill_once_tokens_arrive(broker: RestartableKafka) -> None:
    """SIGKILL the broker half a second after the first token reached ``media.*``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in catalog.MEDIA.values() for p in range(PARTITIONS)]
        deadline = time.monotonic() + 60.0
        while not sum((await consumer.end_offsets(parts)).values()):
            assert time.monotonic() < deadline, "no token arrived within 60 s"
            await asyncio.sleep(0.1)
    finally:
        await consumer.stop()
    await asyncio.sleep(0.5)
    await asyncio.to_thread(broker.kill)


def _synthetic_tokens(streams: int, seconds: float) -> Counter[str]:
    """Tokens per modality that ``streams`` synthetic streams capture whole in ``seconds``."""
    start_us = 1_800_000_000_000_000
    tokens = SyntheticStream("x", start_us, SyntheticConfig()).due(
        start_us + round(seconds * 1e6), whole=True)
    return Counter({m: streams * n for m, n in Counter(t.modality.value for t in tokens).items()})


def _by_modality(keys: set[TokenKey]) -> Counter[str]:
    return Counter(key.modality.value for key in keys)


class _Records(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _log_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(name)]


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
async def test_synthetic_publish_acknowledges_every_token_across_a_broker_restart(
        broker: RestartableKafka, hard: bool, client_logs: None,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    route_client_logs()
    # What reaches the root logger's handlers (the console): pytest's own capture handler
    # also sits on loggers an earlier test left non-propagating, ahead of the rate limit.
    console = _Records()
    logging.getLogger().addHandler(console)
    prefix = f"restart-{secrets.token_hex(3)}-"
    outage = asyncio.create_task(broker.outage(OUTAGE_AT_S, DOWN_S, hard=hard))
    try:
        report = await publish_synthetic(_kafka(broker.bootstrap), [f"{prefix}a", f"{prefix}b"],
                                         12.0, Telemetry(), outage_log_s=5.0)
        down = await outage
    finally:
        logging.getLogger().removeHandler(console)
    in_kafka = await _keys_in_kafka(broker.bootstrap, prefix)

    sent = sum(report.sent.values())
    summary = (f"sent {sent}, acked {len(report.keys)}, failed {len(report.failed)}, "
               f"retries {report.retries}, in kafka {len(in_kafka)}, "
               f"outage {down.seconds:.1f} s")
    assert report.ok and not report.failed, summary
    assert report.sent == _synthetic_tokens(2, 12.0), summary  # none skipped while blocked
    assert sent == len(report.keys), summary
    assert in_kafka == report.keys, summary
    assert _by_modality(in_kafka) == report.by_modality == report.sent
    # one line per interval while down, one when back: not one per record or retry
    outage_lines = _log_lines(caplog, OutageLog.__module__)
    assert any("unreachable for" in line for line in outage_lines), summary
    assert any("reachable again" in line for line in outage_lines), summary
    assert len(outage_lines) <= (down.seconds or 0) / 5.0 + 3, outage_lines
    client_lines = [r.getMessage() for r in console.records if r.name.startswith("aiokafka")]
    assert len(client_lines) <= 40, client_lines


async def test_synthetic_publish_on_librdkafka_acknowledges_every_token_across_a_broker_kill(
        broker: RestartableKafka) -> None:
    prefix = f"rdkafka-{secrets.token_hex(3)}-"
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, producer_client="librdkafka")
    outage = asyncio.create_task(broker.outage(OUTAGE_AT_S, DOWN_S, hard=True))
    report = await publish_synthetic(kafka, [f"{prefix}a", f"{prefix}b"], 12.0, Telemetry())
    down = await outage
    in_kafka = await _keys_in_kafka(broker.bootstrap, prefix)
    summary = (f"sent {sum(report.sent.values())}, acked {len(report.keys)}, failed "
               f"{len(report.failed)}, retries {report.retries}, outage {down.seconds:.1f} s")
    assert report.ok and not report.failed, summary
    assert report.sent == _synthetic_tokens(2, 12.0), summary
    assert in_kafka == report.keys, summary  # acknowledged is written, and nothing else


async def test_synthetic_publish_resends_tokens_whose_attempt_expired_in_the_outage(
        broker: RestartableKafka) -> None:
    prefix = f"resend-{secrets.token_hex(3)}-"
    # a 24 s delivery timeout gives each attempt 6 s: the outage outlasts the first attempt
    outage = asyncio.create_task(broker.outage(OUTAGE_AT_S, 6.0, hard=True))
    report = await publish_synthetic(_kafka(broker.bootstrap), [f"{prefix}a"], 12.0,
                                     Telemetry(), delivery_timeout_s=24.0)
    down = await outage
    in_kafka = await _keys_in_kafka(broker.bootstrap, prefix)

    summary = (f"sent {sum(report.sent.values())}, acked {len(report.keys)}, failed "
               f"{len(report.failed)}, retries {report.retries}, outage {down.seconds:.1f} s")
    assert (down.seconds or 0) > 6.0, summary
    assert report.retries > 0, summary
    assert report.ok, summary
    assert report.keys == in_kafka, summary


async def test_tokens_the_broker_never_acknowledged_are_reported_failed(
        broker: RestartableKafka) -> None:
    prefix = f"gone-{secrets.token_hex(3)}-"
    outage = asyncio.create_task(broker.outage(2.0, None, hard=True))
    began = time.monotonic()
    report = await publish_synthetic(_kafka(broker.bootstrap), [f"{prefix}a"], 5.0,
                                     Telemetry(), delivery_timeout_s=4.0)
    took = time.monotonic() - began
    await outage
    await asyncio.to_thread(broker.start)
    in_kafka = await _keys_in_kafka(broker.bootstrap, prefix)

    sent = sum(report.sent.values())
    summary = (f"sent {sent}, acked {len(report.keys)}, failed {len(report.failed)}, "
               f"in kafka {len(in_kafka)}, took {took:.1f} s")
    assert not report.ok, summary
    assert report.keys and report.failed, summary
    assert len(report.keys) + len(report.failed) == sent, summary
    assert report.keys.isdisjoint(report.failed)
    assert report.keys <= in_kafka <= report.keys | set(report.failed), summary
    assert report.errors and "within 4 s" in report.errors[0], report.errors
    assert "failed" in report.line() and f"/{report.failed_by_modality['audio']:,}" \
        in report.line(), report.line()
    # given up on within the delivery timeout plus one attempt, not left hanging
    assert took < 5.0 + 4.0 + 1.0 + 6.0, summary


async def test_publish_waits_for_a_broker_that_is_down_at_start(
        broker: RestartableKafka, client_logs: None,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    route_client_logs()
    await asyncio.to_thread(broker.terminate)
    prefix = f"late-{secrets.token_hex(3)}-"

    async def bring_back() -> None:
        await asyncio.sleep(3.0)
        await asyncio.to_thread(broker.start)

    back = asyncio.create_task(bring_back())
    report = await publish_synthetic(_kafka(broker.bootstrap), [f"{prefix}a"], 2.0,
                                     Telemetry(), outage_log_s=4.0)
    await back
    assert report.ok and report.keys == await _keys_in_kafka(broker.bootstrap, prefix)
    lines = _log_lines(caplog, OutageLog.__module__)
    assert any("unreachable" in line for line in lines), lines
    assert len(lines) <= 5, lines


def _publish_with_publisher(bootstrap: str, prefix: str, seconds: float
                            ) -> tuple[Publisher, int]:
    """Publish two synthetic streams through :class:`Publisher` (confluent-kafka)."""
    publisher = Publisher(_kafka(bootstrap), track_keys=True)
    start_us = time.time_ns() // 1000
    sources = [SyntheticStream(f"{prefix}{s}", start_us, SyntheticConfig()) for s in "ab"]
    begin = time.monotonic()
    while time.monotonic() - begin < seconds:
        for source in sources:
            for token in source.due(time.time_ns() // 1000):
                publisher.publish(token)
        time.sleep(0.005)
    return publisher, publisher.close()


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
async def test_confluent_publisher_acknowledges_every_token_across_a_broker_restart(
        broker: RestartableKafka, hard: bool) -> None:
    prefix = f"conf-{secrets.token_hex(3)}-"
    outage = asyncio.create_task(broker.outage(OUTAGE_AT_S, DOWN_S, hard=hard))
    publisher, undelivered = await asyncio.to_thread(
        _publish_with_publisher, broker.bootstrap, prefix, 12.0)
    down = await outage
    in_kafka = await _keys_in_kafka(broker.bootstrap, prefix)

    stats = publisher.stats()
    acked = publisher.acknowledged_keys()
    summary = (f"{stats.line()}, undelivered {undelivered}, in kafka {len(in_kafka)}, "
               f"outage {down.seconds:.1f} s, errors {stats.errors}")
    assert undelivered == 0 and stats.ok, summary
    assert stats.sent == stats.acked and not publisher.failed_keys(), summary
    assert acked == in_kafka, summary
    assert _by_modality(in_kafka) == stats.acked


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> GroundTruth:
    return write_media(tmp_path_factory.mktemp("media"), SynthSpec(seconds=8.0, width=160,
                                                                   height=120))


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
async def test_publish_cli_delivers_a_whole_file_across_a_broker_restart(
        broker: RestartableKafka, hard: bool, media: GroundTruth) -> None:
    sid = f"file-{secrets.token_hex(3)}"
    outage = asyncio.create_task(broker.outage(2.0, DOWN_S, hard=hard))
    result = await asyncio.to_thread(
        cli, "publish", str(media.media), "--stream", sid, "--bootstrap", broker.bootstrap,
        "--realtime", "--sidecar-sensor", str(media.sensor), "--json", timeout=180)
    await outage
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    in_kafka = await _keys_in_kafka(broker.bootstrap, sid)
    expected = {"video": 8 * 30, "audio": media.audio_chunks(), "sensor": media.sensor_lines}
    assert report["ok"] and report["tokens_by_modality"] == expected, report
    assert {m: d["acked"] for m, d in report["delivery"].items()} == expected, report
    assert _by_modality(in_kafka) == expected
    assert len(result.stderr.splitlines()) <= 12, result.stderr[-3000:]


@pytest.mark.parametrize("mode", ["synthetic", "media"])
async def test_publish_cli_exits_1_saying_what_failed_when_the_broker_stays_down(
        broker: RestartableKafka, mode: str, media: GroundTruth, tmp_path: Path) -> None:
    sid = f"down-{secrets.token_hex(3)}"
    source = (["--synthetic", "--prefix", sid, "--seconds", "5"] if mode == "synthetic"
              else [str(media.media), "--stream", sid, "--realtime", "--seconds", "5"])
    outage = asyncio.create_task(_kill_once_tokens_arrive(broker))
    result = await asyncio.to_thread(
        cli, "publish", *source, "--bootstrap", broker.bootstrap, "--delivery-timeout", "4",
        "--json", timeout=120)
    await outage
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    errors = [line for line in result.stderr.splitlines() if line.startswith("lockstep: error")]
    assert len(errors) == 1 and "tokens sent/acked/failed: video " in errors[0], result.stderr
    assert report["ok"] is False and report["failed"] > 0 and report["acked"] > 0, report
    delivery = report["delivery"]
    assert all(d["sent"] == d["acked"] + d["failed"] for d in delivery.values()), delivery
    for modality, d in delivery.items():
        assert f"{modality} {d['sent']:,}/{d['acked']:,}/{d['failed']:,}" in errors[0]
    # the outage is said once per interval, the client's own errors are held back
    assert len(result.stderr.splitlines()) <= 15, result.stderr[-3000:]
