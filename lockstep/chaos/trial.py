"""Running one chaos scenario end to end, on brokers of its own.

:func:`run_scenario` starts Apache Kafka (one node or a three-node cluster), creates the
topics, starts the pipeline as separate ``lockstep run`` processes, waits until every
consumer group has joined, publishes the live synthetic streams, strikes the fault, waits
for the ledger to close, and reads the outcome back from the topics. Brokers and
processes are stopped whatever happens; the logs are kept when the scenario fails.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lockstep.agents.runner import groups_of
from lockstep.chaos.outcome import Outcome, answer_wait_s, recovery_s
from lockstep.chaos.procs import Pipeline, running
from lockstep.chaos.readback import TopicReadback
from lockstep.chaos.scenarios import Flood, KillRole, Scenario
from lockstep.chaos.strike import Brokers, Strike, strike, wait_evicted
from lockstep.config.settings import Settings, load_settings
from lockstep.errors import LockstepError
from lockstep.kafka.admin import admin_client, ensure_topics, wait_served
from lockstep.kafka.apache import DEFAULT_POM, ApacheKafka, KafkaCluster
from lockstep.kafka.groups import wait_joined
from lockstep.kafka.readback import partition_of
from lockstep.producer.realtime import publish_synthetic
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.catalog import catalog
from lockstep.topics.keys import TokenKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChaosOptions:
    """How scenarios run (the ``lockstep chaos`` flags).

    Attributes:
        streams: Live synthetic streams.
        seconds: Publishing time of every scenario (None: each scenario's own).
        session_timeout_ms: The roles' consumer session timeout.
        startup_s: How long the processes may take to join their groups.
        drain_s: How long the ledger may take to close after publishing.
        classpath: Kafka broker jars (None: Maven on ``pom``).
        pom: The pom pinning the Kafka jars.
        work_dir: Where scenario directories go (None: the system temp dir).
        keep: Keep every scenario's directory (logs), not only those of failures.
        role_log_level: The role processes' ``--log-level``.
    """

    streams: int = 4
    seconds: float | None = None
    session_timeout_ms: int = 6000
    startup_s: float = 120.0
    drain_s: float = 90.0
    classpath: str | None = None
    pom: Path = DEFAULT_POM
    work_dir: Path | None = None
    keep: bool = False
    role_log_level: str = "warning"


def live_stream_ids(prefix: str, count: int, partitions: int) -> list[str]:
    """``count`` stream ids, the i-th on partition ``i % partitions`` (murmur2)."""
    ids: list[str] = []
    for i in range(count):
        n = 0
        while partition_of((sid := f"{prefix}{i}-{n}").encode(), partitions) != i % partitions:
            n += 1
        ids.append(sid)
    return ids


def role_env(scenario: Scenario, options: ChaosOptions, bootstrap: str, run_id: str,
             work_dir: Path, secret: str) -> dict[str, str]:
    """The ``LOCKSTEP_*`` settings of every role process (and of the runner's clients).

    ``secret`` is set as the SASL password and the OpenAI key (unused on a plaintext
    broker with the reference engine): it must never appear in any output.
    """
    env = {
        "LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LOCKSTEP_APP_ID": f"chaos-{run_id}",
        "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": str(options.session_timeout_ms),
        "LOCKSTEP_WORKER__ENGINE": "reference",
        "LOCKSTEP_METRICS__HOST": "127.0.0.1",
        "LOCKSTEP_DATA_DIR": str(work_dir / "data"),
        "LOCKSTEP_KAFKA__SASL_PASSWORD": secret,
        "LOCKSTEP_WORKER__OPENAI__API_KEY": secret,
    }
    if scenario.brokers > 1:
        env["LOCKSTEP_TOPICS__REPLICATION_FACTOR"] = str(min(3, scenario.brokers))
        env["LOCKSTEP_TOPICS__MIN_INSYNC_REPLICAS"] = str(min(3, scenario.brokers) - 1)
    if isinstance(scenario.fault, Flood):
        env["LOCKSTEP_ALIGN__STREAM_TTL_MS"] = str(scenario.fault.stream_ttl_ms)
    return {**env, **scenario.settings}


def expected_members(settings: Settings, scenario: Scenario) -> dict[str, int]:
    """Members each consumer group has when every process has joined."""
    members: Counter[str] = Counter()
    for spec in scenario.processes:
        for group in groups_of(settings, spec.roles):
            members[group] += spec.count
    return dict(members)


def _brokers(scenario: Scenario, options: ChaosOptions, work_dir: Path) -> Brokers:
    if scenario.brokers > 1:
        return KafkaCluster(scenario.brokers, pom=options.pom, classpath=options.classpath,
                            base_dir=work_dir, log_level="WARN")
    return ApacheKafka(pom=options.pom, classpath=options.classpath, base_dir=work_dir,
                       log_level="WARN")


def _create_topics(settings: Settings, timeout_s: float = 30.0) -> None:
    """Create the catalog and wait until every partition's leader answers for it.

    Raises:
        BrokerError: Some partition is not served after ``timeout_s``.
    """
    admin = admin_client(settings.kafka.confluent_config())
    specs = catalog(settings.topics, settings.kafka.max_record_bytes)
    ensure_topics(admin, specs)
    wait_served(admin, specs, timeout_s)


async def run_scenario(scenario: Scenario, options: ChaosOptions) -> Outcome:
    """Run ``scenario`` on brokers of its own; never raises for a failed run (see ``error``)."""
    scenario = scenario.scaled(options.seconds)
    outcome = Outcome(scenario.name)
    began = time.monotonic()
    run_id = secrets.token_hex(3)
    work_dir = Path(tempfile.mkdtemp(prefix=f"lockstep-chaos-{scenario.name}-",
                                     dir=options.work_dir))
    brokers = _brokers(scenario, options, work_dir)
    try:
        await asyncio.to_thread(brokers.start)
        env = role_env(scenario, options, brokers.bootstrap, run_id, work_dir,
                       secret=f"chaos-secret-{secrets.token_hex(8)}")
        await _run(scenario, options, brokers, env, work_dir, run_id, outcome)
    except LockstepError as error:
        outcome.error = str(error).splitlines()[0]
        log.warning("%s did not run: %s", scenario.name, error)
    finally:
        await asyncio.shield(asyncio.to_thread(brokers.stop))
        outcome.wall_s = time.monotonic() - began
        logged = await asyncio.to_thread(lambda: any(work_dir.glob("*.log")))
        if options.keep or (not outcome.ok and logged):
            outcome.logs = str(work_dir)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    return outcome


async def _run(scenario: Scenario, options: ChaosOptions, brokers: Brokers,
               env: Mapping[str, str], work_dir: Path, run_id: str, outcome: Outcome) -> None:
    settings = load_settings(environ=env)
    await asyncio.to_thread(_create_topics, settings)
    live = live_stream_ids(f"chaos-{run_id}-cam", options.streams,
                           settings.topics.media_partitions)
    readback = TopicReadback(settings.kafka)
    await readback.start()
    pipeline = Pipeline(scenario.processes, env, work_dir, options.role_log_level)
    done: Strike | None = None
    try:
        async with running(pipeline):
            await wait_joined(settings, expected_members(settings, scenario), options.startup_s)
            started_us = time.time_ns() // 1000
            striking = asyncio.create_task(strike(
                scenario, settings, brokers, pipeline, live, started_us,
                prefix=f"chaos-{run_id}-flood-"))

            def hold() -> float | None:
                """Publish on until ``after_s`` past the end of the fault."""
                if not striking.done():
                    return None
                if striking.cancelled() or striking.exception() is not None:
                    return 0.0
                return striking.result().done_at + scenario.after_s

            publishing = asyncio.create_task(publish_synthetic(
                settings.kafka, live, scenario.seconds, Telemetry(), hold=hold))
            try:
                published = await publishing
                done = await striking
            finally:
                for task in (publishing, striking):
                    task.cancel()
                await asyncio.gather(publishing, striking, return_exceptions=True)
            expected = set(published.keys) | done.tokens
            outcome.drained = await _drain(readback, expected, done, options.drain_s)
            if isinstance(scenario.fault, Flood):
                # Eviction comes a TTL after the flood's last token was read, and the
                # heap is trimmed once the stream count stops falling.
                wait = done.done_at + scenario.fault.stream_ttl_ms / 1000 + 3.0
                await asyncio.sleep(max(0.0, wait - time.monotonic()))
                if not await wait_evicted(pipeline.of("align"), len(live), timeout_s=120.0,
                                          settle_s=5.0):
                    log.warning("flood: align still holds streams; RSS read anyway")
            outcome.rss = await done.finish(pipeline)
            pipeline.check()
    finally:
        if done is not None:
            await done.finish(pipeline)
        await readback.stop()
    _account(outcome, readback, expected, done, live)
    outcome.not_delivered = len(published.failed) + done.not_delivered
    outcome.crashes = [f"{c.process} exited {c.status}" for c in pipeline.crashes]
    outcome.log_lines = {p.name: p.log_lines() for p in pipeline.processes}
    secret = env["LOCKSTEP_KAFKA__SASL_PASSWORD"]
    outcome.secret_seen_in = [p.name for p in pipeline.processes if secret in p.tail(10**8)]
    if isinstance(scenario.fault, KillRole):
        outcome.recovery_limit_s = options.session_timeout_ms / 1000 + 5.0


async def _drain(readback: TopicReadback, expected: set[TokenKey], done: Strike,
                 timeout_s: float) -> bool:
    """Read the outputs until every token is settled and every window answered."""
    deadline = time.monotonic() + timeout_s
    hostile = dict(done.hostile)
    while True:
        await readback.catch_up(timeout_s=max(5.0, deadline - time.monotonic()))
        hostile = {src: sent for src, sent in hostile.items()
                   if not readback.accounted(src, sent.token)}
        if readback.settled(expected) and not hostile:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)


def _account(outcome: Outcome, readback: TopicReadback, expected: set[TokenKey],
             done: Strike, live: list[str]) -> None:
    ledger = readback.ledger
    lost = readback.lost(expected)
    outcome.fault = done.what
    outcome.fault_us = done.at_us
    outcome.published = len(expected)
    outcome.windows = len(ledger.windows)
    outcome.late = len(ledger.late)
    outcome.dead_letters = len(ledger.dead_letters)
    outcome.lost = len(lost)
    outcome.lost_examples = [f"{k.stream_id}/{k.modality.value}#{k.seq}"
                             for k in sorted(lost, key=repr)[:3]]
    outcome.conflicts = sum(ledger.conflicts.values())
    outcome.conflict_examples = readback.conflict_examples[:3]
    twice = readback.settled_twice
    outcome.settled_twice = len(twice)
    outcome.settled_twice_examples = [
        f"{k.stream_id}/{k.modality.value}#{k.seq} in {' and '.join(readback.twice[k])}"
        for k in sorted(twice, key=repr)[:3]]
    outcome.duplicates = sum(ledger.duplicates.values()) + len(readback.repeated_late)
    outcome.unanswered = len(ledger.unanswered())
    outcome.statuses = Counter(r.status for r in ledger.responses.values())
    first, outcome.not_recovered = recovery_s(done.at_us, live, ledger.windows,
                                              readback.response_at_ms)
    outcome.answer_wait_s = answer_wait_s(done.at_us, ledger.windows, readback.window_at_ms,
                                          readback.response_at_ms)
    outcome.recovery_s = None if first is None else max(first, outcome.answer_wait_s or 0.0)
    outcome.window_recovery_s, _ = recovery_s(done.at_us, live, ledger.windows,
                                              readback.window_at_ms)
    outcome.hostile_sent = len(done.hostile)
    for src, sent in done.hostile.items():
        if src in readback.dead_sources:
            continue
        token = sent.token
        # A token read past its staleness budget is shed to late before it is checked:
        # accounted for, never aligned. One in a window, or nowhere, is a failure.
        if token is not None and token not in expected and token not in ledger.in_windows \
                and token in ledger.late:
            outcome.hostile_late[sent.kind] += 1
        else:
            outcome.hostile_missed[sent.kind] += 1
