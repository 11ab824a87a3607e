"""Starting and stopping agent roles in this process (``lockstep run`` and the demo)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import faust

from lockstep.agents import align, route, slo, worker
from lockstep.agents.lag import LagExporter
from lockstep.errors import BrokerError, ConfigError
from lockstep.streams.app import ROLES, create_app
from lockstep.streams.settings import Settings
from lockstep.streams.telemetry import Telemetry
from lockstep.topics.admin import admin_client, ensure_topics, verify_topics
from lockstep.topics.catalog import ALIGNED, MEDIA, catalog, requests_topic

log = logging.getLogger(__name__)


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


def routed_pools(settings: Settings) -> list[str]:
    """Every pool a route sends to, in configuration order."""
    return list(dict.fromkeys(settings.route.pools.values()))


async def prepare_topics(settings: Settings, *, create: bool, wait_s: float = 30.0) -> None:
    """Create (if asked) and verify the topic catalog, including this process's pools.

    Waits up to ``wait_s`` for the cluster to answer (a broker started alongside).

    Raises:
        BrokerError: The cluster did not answer in time.
        TopicMismatchError: A topic is missing or mis-partitioned.
    """
    pools = tuple(dict.fromkeys((*settings.topics.pools, *routed_pools(settings),
                                 settings.worker.pool)))
    topics = settings.topics.model_copy(update={"pools": pools})
    specs = catalog(topics, settings.kafka.max_record_bytes)
    admin = admin_client(settings.kafka.confluent_config())
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if create:
                await asyncio.to_thread(ensure_topics, admin, specs)
            else:
                await asyncio.to_thread(verify_topics, admin, specs)
            return
        except BrokerError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            log.warning("cluster not ready, retrying: %s", exc)
            await asyncio.sleep(1.0)


@dataclass
class RoleSet:
    """The running roles of this process."""

    app: faust.App
    roles: list[str]
    telemetry: Telemetry
    workers: list[worker.WorkerTask] = field(default_factory=list)
    aligners: list[align.AlignTask] = field(default_factory=list)
    routers: list[route.RouteTask] = field(default_factory=list)
    slo_task: slo.SloTask | None = None
    listener: slo.SloListener | None = None
    lag: LagExporter | None = None

    @property
    def crash_reason(self) -> BaseException | None:
        """Why the roles crashed, or None while they run."""
        return self.app.crash_reason if self.app.crashed else None

    async def wait_crashed(self, poll_s: float = 0.2) -> BaseException:
        """Return once an agent has crashed the app, with the reason."""
        # mode's Service exposes a crashed flag, not a public event to await.
        while (reason := self.crash_reason) is None:  # noqa: ASYNC110
            await asyncio.sleep(poll_s)
        return reason

    async def wait_assigned(self, timeout_s: float = 30.0) -> bool:
        """Wait until the group has assigned partitions to this process (a join takes seconds).

        Returns:
            False if nothing was assigned within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while not self.app.consumer.assignment():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def stop(self) -> None:
        """Stop consuming, flush the producer, release engines."""
        try:
            if self.lag is not None:
                await self.lag.stop()
            if self.listener is not None:
                await self.listener.stop()
            await self.app.stop()
        finally:
            for task in self.workers:
                await task.close()


async def start_roles(settings: Settings, roles: Sequence[str], telemetry: Telemetry,
                      worker_pools: Sequence[str] | None = None) -> RoleSet:
    """Build the app for ``roles``, register their agents and start consuming.

    Args:
        settings: Process settings.
        roles: Roles to run.
        telemetry: Where the agents report.
        worker_pools: Pools whose worker runs here (default: ``worker.pool`` alone).
    """
    pools = list(worker_pools or [settings.worker.pool])
    app = create_app(settings, roles, pools)
    running = RoleSet(app, list(roles), telemetry)
    running.slo_task = slo.register(app, settings, telemetry)
    if "align" in roles:
        running.aligners.append(align.register(app, settings, telemetry))
    if "route" in roles:
        running.routers.append(route.register(app, settings, telemetry))
    if "worker" in roles:
        for pool in pools:
            pool_settings = settings.model_copy(
                update={"worker": settings.worker.model_copy(update={"pool": pool})})
            running.workers.append(worker.register(app, pool_settings, telemetry))
    for task in running.workers:
        await task.start()
    if running.aligners or running.routers:
        # Where windows are made and routed, breach events switch classes to degraded mode.
        running.listener = slo.SloListener(settings, telemetry)
        await running.listener.start()
        for aligner in running.aligners:
            aligner.degraded = running.listener.degraded
        for router in running.routers:
            router.degraded = running.listener.degraded
    try:
        await app.start()
    except BaseException:
        if running.listener is not None:
            await running.listener.stop()
        raise
    consumed = [*(MEDIA.values() if "align" in roles else ()),
                *([ALIGNED] if "route" in roles else ()),
                *(requests_topic(p) for p in (pools if "worker" in roles else ()))]
    running.lag = LagExporter(settings.kafka, telemetry, app.conf.id, consumed)
    running.lag.start()
    log.info("roles started", extra={"roles": ",".join(roles), "group": app.conf.id})
    return running
