"""Align failover: a SIGKILLed ``lockstep run --roles align`` loses no token.

The align role commits a media offset only after the window (or late record) that settles
the token is acknowledged by the broker, so the next process of the group replays every
token the killed one had not settled. Replays may write a window twice (at-least-once);
the ledger identifies windows by ``(stream_id, window_seq)`` and counts the repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, TopicPartition
from confluent_kafka.admin import AdminClient

from lockstep.agents.children import Child
from lockstep.agents.runner import prepare_topics
from lockstep.config.settings import Settings, load_settings
from lockstep.observe.ledger import Ledger
from lockstep.observe.observer import Observer
from lockstep.producer.delivery import PublishReport
from lockstep.producer.realtime import publish_synthetic
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from tests.integration.procs import lockstep_run

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)

ALIGN = ["--log-level", "info", "run", "--roles", "align", "--create-topics"]
SESSION_TIMEOUT_MS = 6000
STREAMS = 3
PUBLISH_S = 8.0
KILL_AFTER_S = 3.0
#: A cold start: interpreter and Faust imports, the group join, the session's media backlog.
START_S = 60.0
#: After publishing: the dead member's session timeout, the rejoin, then the replay.
DRAIN_S = 60.0


@pytest.fixture
def _leave_no_backlog(apache_kafka: str) -> Iterator[None]:
    """Afterwards, delete the records of the topics the align role reads and writes.

    Groups created later in the session start at the earliest offset: this test's thousands
    of tokens and windows would otherwise be their backlog.
    """
    yield
    admin = AdminClient({"bootstrap.servers": apache_kafka})
    topics = admin.list_topics(timeout=10).topics
    ends = [TopicPartition(name, p, OFFSET_END)
            for name in (*catalog.MEDIA.values(), catalog.ALIGNED, catalog.LATE,
                         catalog.DEADLETTER) if name in topics
            for p in topics[name].partitions]
    if ends:
        for future in admin.delete_records(ends, request_timeout=30).values():
            future.result(timeout=30)


def _settings(bootstrap: str, app_id: str) -> Settings:
    return load_settings(kafka={"bootstrap_servers": bootstrap,
                                "session_timeout_ms": SESSION_TIMEOUT_MS,
                                "fetch_max_wait_ms": 10},
                         app_id=app_id, metrics={"enabled": False})


def _env(bootstrap: str, app_id: str, data_dir: Path) -> dict[str, str]:
    return {
        "LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LOCKSTEP_APP_ID": app_id,
        "LOCKSTEP_WORKER__ENGINE": "reference",
        "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": "10",
        "LOCKSTEP_KAFKA__NEW_GROUP_OFFSET": "earliest",
        # The replay of the backlog is what this test is about: nothing is shed as stale.
        "LOCKSTEP_ALIGN__STALE_AFTER_BUDGETS": "0",
        "LOCKSTEP_METRICS__ENABLED": "false",
        "LOCKSTEP_DATA_DIR": str(data_dir),
    }


def _wall_us() -> int:
    return time.time_ns() // 1000


def _windows_of(ledger: Ledger, stream_ids: set[str]) -> int:
    return sum(1 for sid, _ in ledger.windows if sid in stream_ids)


async def _wait_until(observer: Observer, done: Callable[[], bool], timeout_s: float,
                      process: Child) -> bool:
    """Wait for ``done()`` on each change the observer reads; fail at once if ``process`` exits.

    Returns:
        False if ``done()`` is still false after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        observer.changed.clear()  # before the check, so a change during it is not lost
        if done():
            return True
        assert process.returncode is None, f"lockstep run exited\n{process.tail()}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(observer.changed.wait(), timeout=min(0.25, remaining))


@pytest.mark.usefixtures("_leave_no_backlog")
async def test_killed_align_process_loses_no_token_when_a_second_one_takes_over(
        apache_kafka: str, tmp_path: Path) -> None:
    run_id = secrets.token_hex(3)
    app_id = f"failover-{run_id}"
    prefix = f"fo-{run_id}-"
    warm_up = f"{prefix}warmup"
    stream_ids = [f"{prefix}cam{i}" for i in range(STREAMS)]
    main = set(stream_ids)
    settings = _settings(apache_kafka, app_id)
    env = _env(apache_kafka, app_id, tmp_path / "faust")
    await prepare_topics(settings, create=True)
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(prefix))
    await observer.start()
    ledger = observer.ledger
    publishing: asyncio.Task[PublishReport] | None = None
    try:
        with lockstep_run(ALIGN, env, tmp_path / "first.log") as first:
            # A new group reads from the earliest offsets: the warm-up tokens are consumed
            # whenever the join completes, and their windows prove the process consumes.
            await publish_synthetic(settings.kafka, [warm_up], 0.5, Telemetry())
            assert await _wait_until(observer, lambda: _windows_of(ledger, {warm_up}) > 0,
                                     START_S, first), \
                f"no warm-up window in {START_S}s\n{first.tail()}"

            publishing = asyncio.create_task(
                publish_synthetic(settings.kafka, stream_ids, PUBLISH_S, Telemetry()))
            await asyncio.sleep(KILL_AFTER_S)
            assert await _wait_until(observer, lambda: _windows_of(ledger, main) > 0, 10.0,
                                     first), f"no window before the kill\n{first.tail()}"
            assert not publishing.done(), "publishing ended before the kill"
            windows_before_kill = _windows_of(ledger, main)
            killed_at_us = _wall_us()
            first.kill()

        with lockstep_run(ALIGN, env, tmp_path / "second.log") as second:
            published = await publishing
            settled = await _wait_until(observer, lambda: not ledger.unaccounted(published.keys),
                                        DRAIN_S, second)
            second_status = await second.stop(timeout_s=30.0)
    finally:
        if publishing is not None and not publishing.done():
            publishing.cancel()
            await asyncio.gather(publishing, return_exceptions=True)
        await observer.stop()

    diagnostics = f"{first.tail()}\n{second.tail()}"
    unaccounted = ledger.unaccounted(published.keys)
    duplicates = ledger.duplicates["window"]
    late = len(ledger.late & published.keys)
    after_kill = [w for w in ledger.windows.values()
                  if w.stream_id in main and w.aligned_us > killed_at_us]
    summary = (f"{len(published.keys)} tokens, {_windows_of(ledger, main)} windows "
               f"({windows_before_kill} before the kill, {len(after_kill)} aligned after it), "
               f"{duplicates} duplicate windows replayed, {late} late tokens "
               f"{dict(ledger.late_codes)}")
    log.info("align failover: %s", summary)

    assert settled and not unaccounted, (
        f"{len(unaccounted)} tokens unaccounted, e.g. {sorted(unaccounted, key=repr)[:5]}; "
        f"{summary}\n{diagnostics}")
    assert windows_before_kill > 0, summary
    # The replay is read as a backlog, topic by topic: windows must wait for every modality
    # rather than send the modalities read last to `late`.
    assert late <= 0.02 * len(published.keys), summary
    assert after_kill, f"the second process aligned no window; {summary}\n{diagnostics}"
    assert any(w.t_start_us > killed_at_us for w in after_kill), (
        f"no window of tokens captured after the kill; {summary}")
    assert {w.stream_id for w in after_kill} == main, summary
    assert second_status == 0, f"SIGTERM exit status {second_status}\n{second.tail()}"
