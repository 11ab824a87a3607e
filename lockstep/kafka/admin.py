"""Idempotent creation and verification of the topic catalog through the Kafka admin API.

The functions here block (confluent-kafka's AdminClient); call them from a thread in
async code (``asyncio.to_thread``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError, TopicMismatchError
from lockstep.kafka.logfilter import LIBRDKAFKA
from lockstep.topics.catalog import TopicSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicState:
    """A topic as the cluster reports it, compared with its spec.

    ``problems`` break the catalog (a role must not start on them); ``warnings`` do not
    (more partitions than the catalog on a topic that is not co-partitioned).
    """

    spec: TopicSpec
    exists: bool
    partitions: int | None
    configs: Mapping[str, str] | None = None
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass
class EnsureReport:
    """What :func:`ensure_topics` did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    states: list[TopicState] = field(default_factory=list)


def admin_client(config: Mapping[str, str]) -> AdminClient:
    """An AdminClient for librdkafka connection options (see KafkaSettings.confluent_config).

    Its log lines go through Python logging (rate-limited by
    :func:`lockstep.kafka.logfilter.route_client_logs`), not straight to stderr.
    """
    return AdminClient(dict(config), logger=logging.getLogger(LIBRDKAFKA))


def ensure_topics(
    admin: AdminClient, specs: Iterable[TopicSpec], timeout_s: float = 15.0
) -> EnsureReport:
    """Create the missing topics of the catalog, then verify all of them.

    Topics that already exist are left as they are (a partition count is never changed
    behind an operator's back); a mismatch is reported by :func:`verify_topics`.

    Raises:
        BrokerError: The cluster could not be reached or refused a creation.
        TopicMismatchError: Topics exist with a layout that breaks the catalog.
    """
    specs = list(specs)
    existing = _partition_counts(admin, timeout_s)
    report = EnsureReport()
    missing = [s for s in specs if s.name not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.configs))
             for s in missing],
            operation_timeout=timeout_s,
            request_timeout=timeout_s,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout_s)
                report.created.append(name)
                log.info("created topic", extra={"topic": name})
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"creating topic {name} failed: {exc.args[0].str()}") from exc
                report.existing.append(name)
    report.existing.extend(s.name for s in specs if s.name in existing)
    if report.created:  # a created topic shows in metadata a moment after the reply
        wait_for_partitions(admin, report.created, timeout_s)
    report.states = verify_topics(admin, specs, timeout_s)
    return report


def verify_topics(
    admin: AdminClient, specs: Iterable[TopicSpec], timeout_s: float = 15.0, *, strict: bool = True
) -> list[TopicState]:
    """Compare the cluster with the catalog (see :func:`compare`); log every warning.

    Args:
        admin: The admin client.
        specs: The catalog.
        timeout_s: Per-request timeout.
        strict: Raise on problems; otherwise only report them in the states.

    Raises:
        TopicMismatchError: ``strict`` and a topic is missing or mis-partitioned.
    """
    specs = list(specs)
    counts = _partition_counts(admin, timeout_s)
    configs = _configs(admin, [s.name for s in specs if s.name in counts], timeout_s)
    states = compare(specs, counts, configs)
    for state in states:
        for warning in state.warnings:
            log.warning("topic %s %s", state.spec.name, warning,
                        extra={"topic": state.spec.name})
    broken = [s for s in states if s.problems]
    if strict and broken:
        detail = "; ".join(f"{s.spec.name}: {', '.join(s.problems)}" for s in broken)
        raise TopicMismatchError(f"topics do not match the catalog: {detail}")
    return states


def compare(specs: Iterable[TopicSpec], counts: Mapping[str, int],
            configs: Mapping[str, Mapping[str, str]] | None = None) -> list[TopicState]:
    """Judge the cluster's partition counts against the catalog.

    A missing topic, or fewer partitions than the catalog, is a problem. More partitions
    is a warning on a topic of its own (its consumers use them all), and a problem on a
    co-partitioned one (``media.*``: every topic of the group must have the catalog's
    count, or one align task would no longer see every modality of a stream).

    Args:
        specs: The catalog.
        counts: Partition count of each topic that exists.
        configs: Configs of each topic that exists, where known.
    """
    specs = list(specs)
    groups: dict[str, dict[str, int]] = {}
    for spec in specs:
        if spec.group and spec.name in counts:
            groups.setdefault(spec.group, {})[spec.name] = counts[spec.name]
    states = []
    for spec in specs:
        problems, warnings = [], []
        count = counts.get(spec.name)
        if count is None:
            problems.append("missing")
        elif count < spec.partitions or (count > spec.partitions and spec.group):
            problems.append(f"has {count} partitions, catalog says {spec.partitions}")
        elif count > spec.partitions:
            warnings.append(f"has {count} partitions, more than the catalog's "
                            f"{spec.partitions} (kept: partitions never shrink)")
        members = groups.get(spec.group or "", {})
        if spec.group and len(set(members.values())) > 1:
            layout = ", ".join(f"{n}={c}" for n, c in sorted(members.items()))
            problems.append(f"{spec.group} topics are not co-partitioned ({layout})")
        states.append(TopicState(spec, count is not None, count, (configs or {}).get(spec.name),
                                 tuple(problems), tuple(warnings)))
    return states


def wait_for_partitions(
    admin: AdminClient, names: Iterable[str], timeout_s: float = 15.0
) -> dict[str, int]:
    """Partition counts of ``names``, waiting for freshly created topics to appear.

    Raises:
        BrokerError: A topic is still unknown after ``timeout_s``.
    """
    names = list(names)
    deadline = time.monotonic() + timeout_s
    while True:
        counts = _partition_counts(admin, timeout_s)
        missing = sorted(n for n in names if n not in counts)
        if not missing:
            return {n: counts[n] for n in names}
        if time.monotonic() > deadline:
            raise BrokerError(f"topics {', '.join(missing)} do not exist")
        time.sleep(0.2)


def _partition_counts(admin: AdminClient, timeout_s: float) -> dict[str, int]:
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerError(f"cannot read cluster metadata: {exc.args[0].str()}") from exc
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None
    }


def _configs(
    admin: AdminClient, names: list[str], timeout_s: float
) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource("topic", n) for n in names])
    out: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=timeout_s)
        except KafkaException as exc:  # brokers may not support DescribeConfigs
            log.warning("describe configs failed: %s", exc.args[0].str(),
                        extra={"topic": resource.name})
            continue
        out[resource.name] = {e.name: e.value for e in entries.values() if e.value is not None}
    return out


def delete_topics(kafka: KafkaSettings, topics: list[str]) -> None:
    """Delete topics (a bench's own; waits for the cluster's answer).

    Raises:
        BrokerError: The cluster did not delete them (or did not answer in time).
    """
    admin = admin_client(kafka.confluent_config())
    try:
        for future in admin.delete_topics(topics, operation_timeout=10).values():
            future.result(timeout=15)
    except (KafkaException, TimeoutError) as exc:
        raise BrokerError(f"cannot delete topics {', '.join(topics)}: {exc}") from None


def wait_served(admin: AdminClient, specs: Iterable[TopicSpec], timeout_s: float = 30.0
                ) -> None:
    """Wait until every partition's leader answers for it (after the topics were created).

    Raises:
        BrokerError: Some partition is not served after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    todo = [TopicPartition(s.name, p) for s in specs for p in range(s.partitions)]
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    while True:
        # Each leader answers for its partitions once it has taken the new topics in.
        futures = admin.list_offsets({tp: latest for tp in todo}, request_timeout=5)
        failed = []
        for tp, future in futures.items():
            try:
                future.result()
            except KafkaException:
                failed.append(tp)
        if not failed:
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"partitions not served {timeout_s:.0f} s after creation: "
                              f"{', '.join(sorted({tp.topic for tp in failed}))}")
        todo = failed
        time.sleep(0.2)
