"""Starting and stopping agent roles in this process (``lockstep run`` and the demo)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from lockstep.agents.align import AlignAgent
from lockstep.agents.app import ROLES, LockstepApp, create_app, group_id
from lockstep.agents.memory import freeze_startup_heap
from lockstep.agents.route import RouteAgent
from lockstep.agents.slo import SloListener, SloTask
from lockstep.agents.worker import WorkerAgent
from lockstep.config.settings import Settings
from lockstep.errors import BrokerError, ConfigError
from lockstep.kafka.admin import admin_client, ensure_topics, verify_topics
from lockstep.kafka.clients import role_producer
from lockstep.kafka.consumer import RoleConsumer
from lockstep.kafka.lag import LagExporter
from lockstep.kafka.outbox import Outbox
from lockstep.kafka.wait import wait_for_broker
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.catalog import ALIGNED, MEDIA, catalog, requests_topic

log = logging.getLogger(__name__)

#: The GIL switch interval of a process running roles (see :func:`start_roles`).
GIL_SWITCH_S = 0.001


def parse_roles(text: str | Sequence[str]) -> list[str]:
    """Parse ``align,route,worker`` (or ``all``) into known roles, in pipeline order.

    ``worker:POOL`` names the worker role of one pool (see :func:`pools_in`).

    Raises:
        ConfigError: An unknown role is named, or none.
    """
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [n.strip().split(":", 1)[0] for n in names if n.strip()]
    if "all" in names:
        return list(ROLES)
    unknown = sorted(set(names) - set(ROLES))
    if unknown or not names:
        raise ConfigError(f"unknown roles {unknown or names}; choose from {', '.join(ROLES)}")
    return [r for r in ROLES if r in names]


def pools_in(text: str) -> list[str]:
    """The pools named by ``worker:POOL`` entries of a roles list, in order.

    Raises:
        ConfigError: A ``worker:`` entry names no pool, or another role takes a pool.
    """
    pools = []
    for entry in (e.strip() for e in text.split(",")):
        role, sep, pool = entry.partition(":")
        if not sep:
            continue
        if role != "worker" or not pool.strip():
            raise ConfigError(f"{entry!r}: only the worker role takes a pool (worker:POOL)")
        pools.append(pool.strip())
    return list(dict.fromkeys(pools))


def groups_of(settings: Settings, roles: str) -> list[str]:
    """The consumer groups a ``lockstep run --roles ROLES`` process joins."""
    pools = pools_in(roles) or [settings.worker.pool]
    names: list[str] = []
    for role in parse_roles(roles):
        if role == "worker":
            names += [group_id(settings, "worker", pool) for pool in pools]
        else:
            names.append(group_id(settings, role))
    return names


def routed_pools(settings: Settings) -> list[str]:
    """Every pool a route sends to, in configuration order."""
    return list(dict.fromkeys(settings.route.pools.values()))


async def prepare_topics(settings: Settings, *, create: bool,
                         wait_s: float | None = 30.0) -> None:
    """Create (if asked) and verify the topic catalog, including this process's pools.

    Waits for the cluster to answer (a broker started alongside, or restarting): up to
    ``wait_s`` (None: as long as it takes), one log line per interval.

    Raises:
        BrokerError: The cluster did not answer in time.
        TopicMismatchError: A topic is missing or mis-partitioned.
    """
    pools = tuple(dict.fromkeys((*settings.topics.pools, *routed_pools(settings),
                                 settings.worker.pool)))
    topics = settings.topics.model_copy(update={"pools": pools})
    specs = catalog(topics, settings.kafka.max_record_bytes)
    admin = admin_client(settings.kafka.confluent_config())
    began = time.monotonic()
    logged = -1e9
    while True:
        try:
            if create:
                await asyncio.to_thread(ensure_topics, admin, specs, 5.0)
            else:
                await asyncio.to_thread(verify_topics, admin, specs, 5.0)
            return
        except BrokerError as exc:
            waited = time.monotonic() - began
            if not exc.retriable or (wait_s is not None and waited > wait_s):
                raise
            if time.monotonic() - logged >= 10.0:
                logged = time.monotonic()
                log.warning("waiting for Kafka at %s (%.0f s): %s",
                            settings.kafka.bootstrap_servers, waited, exc)
            await asyncio.sleep(1.0)


@dataclass
class RoleSet:
    """The running roles of this process."""

    app: LockstepApp
    roles: list[str]
    telemetry: Telemetry
    outbox: Outbox
    consumers: list[RoleConsumer] = field(default_factory=list)
    workers: list[WorkerAgent] = field(default_factory=list)
    aligners: list[AlignAgent] = field(default_factory=list)
    routers: list[RouteAgent] = field(default_factory=list)
    slo_task: SloTask | None = None
    listener: SloListener | None = None
    lag: LagExporter | None = None

    @property
    def groups(self) -> list[str]:
        """The consumer groups this process is a member of."""
        return [c.group for c in self.consumers]

    @property
    def crash_reason(self) -> BaseException | None:
        """Why the roles crashed, or None while they run."""
        for service in (self.app, *self.consumers):
            if service.crashed:
                return service.crash_reason or RuntimeError(f"{service.label} crashed")
        return None

    async def wait_crashed(self, poll_s: float = 0.2) -> BaseException:
        """Return once a role has crashed, with the reason."""
        # mode's Service exposes a crashed flag, not a public event to await.
        while (reason := self.crash_reason) is None:  # noqa: ASYNC110
            await asyncio.sleep(poll_s)
        return reason

    async def wait_assigned(self, timeout_s: float = 30.0) -> bool:
        """Wait until every role's group has assigned partitions here (a join takes seconds).

        Returns:
            False if some role got nothing within ``timeout_s``.
        """
        try:
            await asyncio.wait_for(asyncio.gather(*(c.assigned.wait() for c in self.consumers)),
                                   timeout_s)
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Stop consuming (committing what is acknowledged), flush the producer, release engines."""
        try:
            if self.lag is not None:
                await self.lag.stop()
            if self.listener is not None:
                await self.listener.stop()
            await self.app.stop()
            if self.slo_task is not None:
                # Before the producer goes: the other processes clear these breaches now,
                # not after breach.ttl_ms (which still covers a process that cannot say so).
                try:
                    await self.slo_task.withdraw()
                except BrokerError as error:  # a failed producer: stop anyway
                    log.warning("breaches not withdrawn on stop: %s", error)
        finally:
            try:
                await self.outbox.stop()
            finally:
                for agent in self.workers:
                    await agent.close()


async def start_roles(settings: Settings, roles: Sequence[str], telemetry: Telemetry,
                      worker_pools: Sequence[str] | None = None, *,
                      connect_timeout_s: float | None = None) -> RoleSet:
    """Start ``roles`` in this process, each in its own consumer group.

    Args:
        settings: Process settings.
        roles: Roles to run.
        telemetry: Where the agents report.
        worker_pools: Pools whose worker runs here (default: ``worker.pool`` alone).
        connect_timeout_s: How long to wait for the cluster (None: as long as it takes).
    """
    # Engines infer in threads; with the default 5 ms GIL switch interval an engine thread
    # holds the event loop (every role's reads, timers and produces) off for up to 5 ms at
    # a time. 1 ms: 16 streams in the demo held 96.8 and 97.5 % of windows within budget,
    # against 94.4 and 95.3 % at 5 ms (two runs each, same machine).
    sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_S))
    pools = sorted(dict.fromkeys(worker_pools or [settings.worker.pool]))
    kafka = settings.kafka
    app = create_app(settings, settings.app_id)
    outbox = Outbox(role_producer(kafka), kafka.max_record_bytes,
                    bootstrap=kafka.bootstrap_servers or "")
    outbox.on_dead_letter = telemetry.dead_letter
    await wait_for_broker(outbox.start, kafka, what="producer", timeout_s=connect_timeout_s)
    running = RoleSet(app, list(roles), telemetry, outbox)
    try:
        await _build(running, settings, pools)
        await app.start()
    except BaseException:
        await running.stop()
        raise
    consumed = {c.group: c.topics for c in running.consumers}
    running.lag = LagExporter(kafka, telemetry, consumed)
    running.lag.start()
    frozen = freeze_startup_heap()
    log.info("roles started", extra={"roles": ",".join(roles), "groups": ",".join(consumed),
                                     "frozen_objects": frozen})
    return running


async def _build(running: RoleSet, settings: Settings, pools: list[str]) -> None:
    """Create the agents and their consumers, and register them on the app."""
    app, roles, telemetry, outbox = running.app, running.roles, running.telemetry, running.outbox
    running.slo_task = slo_task = SloTask(settings, telemetry, outbox, settings.app_id)
    app.timer(settings.slo.breach.evaluate_ms / 1000.0,
              name="lockstep.slo.evaluate")(slo_task.on_tick)
    kafka = settings.kafka
    reset = settings.kafka.new_group_offset
    if "align" in roles:
        aligner = AlignAgent(settings, telemetry, outbox)
        running.aligners.append(aligner)
        # Ticks at the aligner's own deadlines (AlignAgent.wake_us), and every tick_ms.
        running.consumers.append(RoleConsumer(
            kafka, group_id(settings, "align"), list(MEDIA.values()), aligner, outbox,
            new_group_reset=reset))
    if "route" in roles:
        router = RouteAgent(settings, telemetry, outbox, routed_pools(settings))
        running.routers.append(router)
        running.consumers.append(RoleConsumer(
            kafka, group_id(settings, "route"), [ALIGNED], router, outbox,
            new_group_reset=reset))
    if "worker" in roles:
        for pool in pools:
            pool_settings = settings.model_copy(
                update={"worker": settings.worker.model_copy(update={"pool": pool})})
            agent = WorkerAgent(pool_settings, telemetry, outbox)
            running.workers.append(agent)
            await agent.start()
            running.consumers.append(RoleConsumer(
                kafka, group_id(settings, "worker", pool), [requests_topic(pool)], agent,
                outbox, new_group_reset=reset,
                max_records=max(1, settings.worker.max_queue // 2)))
    if running.aligners or running.routers:
        # Where windows are made and routed, breach events switch classes to degraded mode.
        running.listener = listener = SloListener(settings, telemetry)
        await listener.start()
        for a in running.aligners:
            a.degraded = listener.degraded
        for r in running.routers:
            r.degraded = listener.degraded
    for consumer in running.consumers:
        app.add_dependency(consumer)
