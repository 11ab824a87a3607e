"""The demo's ledger in a process of its own, on the embedded broker."""

from __future__ import annotations

import os
import secrets
import time

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.agents.runner import prepare_topics
from lockstep.config.settings import KafkaSettings, load_settings
from lockstep.errors import BrokerError
from lockstep.observe.watch import WatchProcess
from lockstep.producer.delivery import PublishReport
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import LateToken, Modality

pytestmark = pytest.mark.integration


def _late(stream_id: str, seq: int) -> LateToken:
    t_us = time.time_ns() // 1000
    return LateToken(stream_id=stream_id, modality=Modality.SENSOR, seq=seq, t_us=t_us + seq,
                     watermark_us=t_us + 5_000, reason="behind the watermark", at_us=t_us + 9_000,
                     code="window_emitted")


async def _started(bootstrap: str) -> tuple[WatchProcess, str]:
    """A watch of this test's own streams, reading from the topics' ends."""
    settings = load_settings(kafka={"bootstrap_servers": bootstrap}, metrics={"enabled": False})
    await prepare_topics(settings, create=True)
    prefix = f"watch-{secrets.token_hex(3)}-"
    watch = WatchProcess(settings.kafka, prefix)
    watch.start()
    return watch, prefix


async def test_the_ledger_is_kept_in_a_child_process_and_comes_back_closed(tansu: str) -> None:
    watch, prefix = await _started(tansu)
    try:
        await watch.ready()
        assert watch._process.pid not in (None, os.getpid())
        producer = AIOKafkaProducer(bootstrap_servers=tansu)
        await producer.start()
        try:  # two tokens of ours settled as late, one of a stream it does not watch
            for stream_id, seq in ((f"{prefix}a", 1), (f"{prefix}a", 2), ("other", 3)):
                await producer.send_and_wait(catalog.LATE, encode(_late(stream_id, seq)),
                                             key=stream_id.encode())
        finally:
            await producer.stop()
        published = PublishReport()
        for seq in (1, 2):
            published.keys.add(TokenKey(f"{prefix}a", Modality.SENSOR, seq))
        ledger, drained = await watch.drain(published, timeout_s=20.0)
    finally:
        await watch.stop()

    assert drained
    assert set(ledger.late) == set(published.keys)
    assert ledger.late_codes == {"window_emitted": 2}
    assert not ledger.unaccounted() and not ledger.unanswered()
    assert not watch._process.is_alive()


async def test_a_ledger_that_does_not_close_in_time_comes_back_open(tansu: str) -> None:
    watch, prefix = await _started(tansu)
    try:
        await watch.ready()
        published = PublishReport()
        missing = TokenKey(f"{prefix}a", Modality.VIDEO, 7)
        published.keys.add(missing)
        ledger, drained = await watch.drain(published, timeout_s=0.5)
    finally:
        await watch.stop()

    assert not drained
    assert ledger.unaccounted() == {missing}


async def test_an_observer_that_cannot_start_says_why() -> None:
    watch = WatchProcess(KafkaSettings(bootstrap_servers="127.0.0.1:9"), "x-", timeout_s=1.0)
    watch.start()
    try:
        with pytest.raises(BrokerError, match="observer did not start"):
            await watch.ready()
    finally:
        await watch.stop()
    assert not watch._process.is_alive()
