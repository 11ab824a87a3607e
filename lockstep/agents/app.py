"""The Faust app of a process, and the consumer group of each role.

Faust hosts the roles: the app's service tree starts and stops each role's consumer
(:class:`~lockstep.kafka.consumer.RoleConsumer`), runs the timers (SLO evaluation) and takes
the process down when a role crashes, so its unacknowledged records are replayed by the
next owner. The records themselves do not go through Faust's per-event stream machinery:
each role fetches batches with aiokafka under its agent and owns its commits (see
docs/bench.md for the measured difference and lockstep.streams.offsets for why).

Each role has one consumer group, whatever else the process runs: ``<app_id>-align``,
``<app_id>-route`` and ``<app_id>-worker-<pool>`` for each pool. Processes running a role
share its group and split its partitions, which is how operators scale a role.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import faust
import uvloop
from faust.app.base import BootStrategy

from lockstep.config.settings import Settings

ROLES = ("align", "route", "worker")
T = TypeVar("T")


def group_id(settings: Settings, role: str, pool: str | None = None) -> str:
    """The consumer group of one role (``worker`` takes its pool)."""
    if role == "worker":
        return f"{settings.app_id}-worker-{pool or settings.worker.pool}"
    return f"{settings.app_id}-{role}"


class _Boot(BootStrategy):
    """Start the app's services and timers; not Faust's consumer, producer or web."""

    enable_kafka_consumer = False
    enable_kafka_producer = False
    enable_web = False


class LockstepApp(faust.App):
    """A Faust app whose roles consume through their own batch consumers.

    Faust's own consumer and producer stay off: the roles bring an aiokafka consumer each
    and share the process's producer (:class:`~lockstep.kafka.outbox.Outbox`).
    """

    BootStrategy = _Boot

    async def on_start(self) -> None:
        """Finalize the app; Faust's consumer (not used) is never created."""
        self.finalize()


def install_uvloop() -> None:
    """Use uvloop for every event loop created from now on."""
    uvloop.install()


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on uvloop."""
    install_uvloop()
    return asyncio.run(coro)



def create_app(settings: Settings, name: str) -> LockstepApp:
    """Build (but do not start) the Faust app of a process named ``name``."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return LockstepApp(
        name,
        broker=[f"kafka://{h.strip()}" for h in settings.kafka.require_bootstrap().split(",")
                if h.strip()],
        topic_allow_declare=False,
        web_enabled=False,
        store="memory://",
        datadir=str(settings.data_dir / name),
        loghandlers=[],
    )
