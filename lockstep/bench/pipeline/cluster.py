"""The broker, the topics and the role processes of one pipeline bench run.

Without a bootstrap the bench starts the embedded broker (tansu) itself; with one it uses
that cluster and creates only the topics that are missing. Each role runs as its own
``lockstep run --roles ROLE --metrics-port 0`` process, in consumer groups of this run
alone (``LOCKSTEP_APP_ID=bench-<run>``, new groups at the log end), with the reference
engine; the caller's other ``LOCKSTEP_*`` settings and ``--config`` pass through.
Producers are ``lockstep publish --synthetic`` processes. Every process's output goes to a
log file in a directory of the run's, removed when the cluster stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep.agents.children import Child, cpu_seconds, lockstep_argv
from lockstep.config.settings import Settings
from lockstep.errors import ProcessError
from lockstep.kafka.embedded import EmbeddedBroker

log = logging.getLogger(__name__)
_RUNNING = re.compile(r"running \S+ in groups")


@dataclass
class Cluster:
    """A broker, the catalog's topics and one process per role."""

    settings: Settings
    config: Path | None = None
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    roles: dict[str, Child] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    broker: EmbeddedBroker | None = None
    broker_pid: int | None = None
    log_dir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="lockstep-bench-")))

    @property
    def embedded(self) -> bool:
        """The bench started the broker itself."""
        return self.broker is not None

    @property
    def pools(self) -> list[str]:
        """The pools the route sends to, one worker process each."""
        return list(dict.fromkeys(self.settings.route.pools.values()))

    def env(self) -> dict[str, str]:
        """The environment of every child: the caller's, with this run's settings on top."""
        kafka = self.settings.kafka
        env = dict(os.environ)
        env.update({
            "LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": kafka.require_bootstrap(),
            "LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": str(kafka.fetch_max_wait_ms),
            "LOCKSTEP_KAFKA__NEW_GROUP_OFFSET": "latest",
            "LOCKSTEP_TOPICS__MEDIA_PARTITIONS": str(self.settings.topics.media_partitions),
            "LOCKSTEP_TOPICS__PIPELINE_PARTITIONS": str(self.settings.topics.pipeline_partitions),
            "LOCKSTEP_APP_ID": f"bench-{self.run_id}",
            "LOCKSTEP_WORKER__ENGINE": "reference",
        })
        if self.config is not None:
            env["LOCKSTEP_CONFIG"] = str(self.config)
        return env

    async def start(self, ready_timeout_s: float = 90.0) -> None:
        """Start the broker (if none is given), create the topics, start every role.

        Raises:
            ProcessError: A role exited or did not report itself running in time.
        """
        from lockstep.agents.runner import prepare_topics

        if not self.settings.kafka.bootstrap_servers:
            self.broker = await asyncio.to_thread(EmbeddedBroker().start)
            self.broker_pid = self.broker.pid
            kafka = self.broker.client_settings(self.settings.kafka)
            # One process per role reads all of a topic's partitions: on the embedded
            # broker (whose work grows with the partitions in each fetch) one is enough.
            topics = self.settings.topics.model_copy(update={"media_partitions": 1,
                                                             "pipeline_partitions": 1})
            self.settings = self.settings.model_copy(update={"kafka": kafka, "topics": topics})
        await prepare_topics(self.settings, create=True)
        env = self.env()
        base = lockstep_argv()
        for role in ["align", "route", *(f"worker:{p}" for p in self.pools)]:
            self.roles[role] = Child(
                role, [*base, "run", "--roles", role, "--metrics-port", "0"], env,
                self.log_dir / f"{role.replace(':', '-')}.log").start()
        for role, child in self.roles.items():
            self.urls[role] = await child.metrics_url(ready_timeout_s)
            await child.wait_for_line(_RUNNING, ready_timeout_s)

    def check_alive(self) -> None:
        """Raise if a role has exited.

        Raises:
            ProcessError: A role process is no longer running.
        """
        for role, child in self.roles.items():
            if not child.running:
                raise ProcessError(f"role {role} exited: {child.last_lines()}")

    def cpu(self) -> dict[str, float | None]:
        """CPU seconds so far of each role (and the embedded broker, as ``broker``)."""
        out = {role: child.cpu_seconds() for role, child in self.roles.items()}
        if self.broker_pid is not None:
            out["broker"] = cpu_seconds(self.broker_pid)
        return out

    def pids(self) -> dict[str, int]:
        """Process ids of the roles (and the embedded broker)."""
        out = {role: pid for role, child in self.roles.items()
               if (pid := child.pid) is not None}
        if self.broker_pid is not None:
            out["broker"] = self.broker_pid
        return out

    async def stop_roles(self) -> None:
        """Stop every role (SIGTERM: they commit and leave their groups)."""
        await asyncio.gather(*(child.stop() for child in self.roles.values()))

    async def stop(self) -> None:
        """Stop the roles and the embedded broker, remove the logs; idempotent."""
        try:
            await self.stop_roles()
        finally:
            if self.broker is not None:
                await asyncio.to_thread(self.broker.stop)
                self.broker = None
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def producer(self, label: str, streams: int, seconds: float, prefix: str) -> Child:
        """A ``lockstep publish --synthetic`` process (not started)."""
        argv = [*lockstep_argv(), "publish", "--synthetic", "--streams", str(streams),
                "--seconds", f"{seconds:g}", "--prefix", prefix, "--json",
                "--delivery-timeout", "30", "--no-progress"]
        return Child(label, argv, self.env(), self.log_dir / f"{label.replace(' ', '-')}.log",
                     keep_stdout=True)


def publish_summary(child: Child) -> dict[str, Any]:
    """The JSON summary a finished ``lockstep publish --json`` printed ({} if none)."""
    with contextlib.suppress(ValueError):
        lines = child.stdout.decode(errors="replace").strip().splitlines()
        if lines:
            parsed = json.loads(lines[-1])
            if isinstance(parsed, dict):
                return parsed
    return {}
