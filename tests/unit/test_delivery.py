"""Delivery bookkeeping: outage lines per interval, retries, and what counts as delivered."""

from __future__ import annotations

import asyncio
import gc
import logging
import pickle
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NodeNotReadyError,
    NotLeaderForPartitionError,
)

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.retry import OutageLog
from lockstep.kafka.sender import Outgoing, RetryingSender
from lockstep.producer.delivery import DeliveryStats, PublishReport, delivery_line
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import Modality

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _outage(clock: Clock, interval_s: float = 10.0) -> OutageLog:
    return OutageLog("127.0.0.1:9092", interval_s=interval_s, stall_s=2.0, clock=clock,
                     logger=logging.getLogger("test.outage"))


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.outage"]


def test_an_outage_is_logged_once_per_interval_not_per_record(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    outage = _outage(clock)
    waiting = 0
    for _ in range(120):  # 30 s of checks every 0.25 s, 40 more records waiting at each
        waiting += 40
        outage.check(waiting)
        clock.now += 0.25
    outage.progress()
    lines = _lines(caplog)
    assert len(lines) == 4, lines
    assert lines[0] == "broker 127.0.0.1:9092 unreachable for 2 s; 360 tokens waiting"
    assert lines[1] == "broker 127.0.0.1:9092 unreachable for 12 s; 1,960 tokens waiting"
    assert lines[3] == "broker 127.0.0.1:9092 reachable again after 30 s"
    assert outage.outages == 1 and outage.down_for is None


def test_an_idle_producer_is_not_an_outage(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    outage = _outage(clock)
    clock.now += 60.0
    assert not outage.check(0)
    assert not outage.check(5)  # records just sent after a quiet minute
    clock.now += 1.0
    outage.progress()
    assert not outage.check(0)
    assert _lines(caplog) == [] and outage.outages == 0


def test_a_connection_error_while_idle_is_not_an_outage(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    outage = _outage(clock)
    outage.trouble("Disconnected: connection closed by peer")  # an idle connection closed
    clock.now += 30.0
    assert not outage.check(0)
    assert not outage.check(3)
    clock.now += 0.5
    outage.progress()
    assert _lines(caplog) == [] and outage.outages == 0


def test_failing_to_connect_is_an_outage_once_it_lasts(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    outage = _outage(clock)
    outage.trouble("cannot bootstrap: connection refused")
    assert not outage.check(0, connecting=True)
    clock.now += 2.5
    assert outage.check(0, connecting=True)
    assert _lines(caplog) == ["broker 127.0.0.1:9092 unreachable for 2 s; 0 tokens waiting "
                              "(cannot bootstrap: connection refused)"]
    assert outage.down_for == pytest.approx(2.5)


def test_delivery_line_counts_each_modality_in_order() -> None:
    line = delivery_line({"audio": 1200, "video": 720, "bad": 3}, {"audio": 1150, "video": 720},
                         {"audio": 50, "bad": 3})
    assert line == ("tokens sent/acked/failed: video 720/720/0, audio 1,200/1,150/50, "
                    "bad 3/0/3")
    assert delivery_line({}, {}, {}) == "tokens sent/acked/failed: none"


def test_a_report_with_a_failed_or_unsettled_token_is_not_ok() -> None:
    key = TokenKey("cam", Modality.AUDIO, 7)
    report = PublishReport(keys={TokenKey("cam", Modality.VIDEO, 0)},
                           by_modality=Counter(video=1), sent=Counter(video=1))
    assert report.ok
    report.sent["audio"] += 1
    assert not report.ok  # sent, never settled
    report.failed[key] = "not acknowledged within 120 s"
    assert not report.ok and report.failed_by_modality == {"audio": 1}
    assert report.line() == "tokens sent/acked/failed: video 1/1/0, audio 1/0/1"
    stats = DeliveryStats({"video": 3}, {"video": 2}, {}, 10, ())
    assert stats.in_flight == 1 and not stats.ok


class ScriptedProducer(AIOKafkaProducer):  # type: ignore[misc]
    """Answers the n-th send with the n-th outcome (None: acknowledged)."""

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.outcomes = outcomes
        self.sends: list[bytes] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, topic: str, value: Any = None, key: Any = None,
                   **_: Any) -> asyncio.Future[Any]:
        self.sends.append(value)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)
        return future


class ScriptedSender(RetryingSender):
    def __init__(self, producer: ScriptedProducer, timeout_s: float) -> None:
        self.acked: list[Outgoing] = []
        self.failed: list[tuple[Outgoing, str]] = []
        super().__init__(KafkaSettings(bootstrap_servers="127.0.0.1:9"),
                         on_ack=self.acked.append,
                         on_fail=lambda item, why: self.failed.append((item, why)),
                         outage=OutageLog("127.0.0.1:9"), delivery_timeout_s=timeout_s,
                         backoff_s=(0.01, 0.02))
        self.fake = producer

    def _make(self) -> AIOKafkaProducer:
        return self.fake


async def _send_one(outcomes: list[BaseException | None], timeout_s: float = 5.0
                    ) -> ScriptedSender:
    sender = ScriptedSender(ScriptedProducer(outcomes), timeout_s)
    await sender.start()
    try:
        await sender.send(Outgoing("media.video", b"v", b"cam", "video",
                                   TokenKey("cam", Modality.VIDEO, 0)))
        await sender.drain()
    finally:
        await sender.stop()
    return sender


async def test_a_retriable_failure_is_sent_again_until_acknowledged() -> None:
    sender = await _send_one([NodeNotReadyError(), NotLeaderForPartitionError(),
                              KafkaTimeoutError(), None])
    assert len(sender.fake.sends) == 4 and sender.retries == 3
    assert [item.attempts for item in sender.acked] == [4] and not sender.failed
    assert sender.waiting == 0


async def test_a_failure_no_retry_fixes_is_reported_at_once() -> None:
    sender = await _send_one([MessageSizeTooLargeError(), None])
    assert len(sender.fake.sends) == 1 and not sender.acked
    [(item, why)] = sender.failed
    assert item.token == TokenKey("cam", Modality.VIDEO, 0)
    assert why == "[Error 10] MessageSizeTooLargeError"


async def test_retries_stop_at_the_delivery_timeout_and_say_so() -> None:
    sender = await _send_one([NodeNotReadyError()] * 1000, timeout_s=0.2)
    assert not sender.acked and 2 < len(sender.fake.sends) < 30
    [(_, why)] = sender.failed
    assert why.startswith("not acknowledged within 0.2 s (NodeNotReadyError")


def test_a_publish_report_crosses_processes_with_its_keys_packed_as_seqs() -> None:
    report = PublishReport(bad_records=1, seconds=2.5, retries=3, bytes_sent=99)
    for stream in ("a", "b"):
        for modality in (Modality.VIDEO, Modality.AUDIO):
            for seq in (0, 1, 5, 2**40):
                report.keys.add(TokenKey(stream, modality, seq))
                report.by_modality[modality.value] += 1
    report.failed[TokenKey("a", Modality.OCR, 3)] = "timed out"
    report.note("timed out")
    report.count_sent(TokenKey("a", Modality.OCR, 3), 10)

    blob = pickle.dumps(report)
    back = pickle.loads(blob)

    assert back == report and isinstance(back.by_modality, Counter)
    # The keys travel as arrays of seqs per (stream, modality), not one object each.
    _, (state,) = report.__reduce__()
    assert set(state["keys"]) == {(s, m) for s in "ab" for m in ("video", "audio")}
    assert all(isinstance(seqs, bytes) for seqs in state["keys"].values())
    assert pickle.loads(pickle.dumps(PublishReport())) == PublishReport()


def test_a_publish_report_keeps_its_keys_without_an_object_each() -> None:
    report = PublishReport()
    report.keys.add(TokenKey("cam", Modality.VIDEO, 0))  # the group's containers
    gc.collect()
    before = len(gc.get_objects())
    for seq in range(1, 20_001):
        report.keys.add(TokenKey("cam", Modality.VIDEO, seq))

    # The cyclic collector's full passes walk what is tracked: 20k key objects made them
    # long enough to hold a publisher's sends.
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert len(report.keys) == 20_001 and TokenKey("cam", Modality.VIDEO, 777) in report.keys
