"""The pipeline as separate ``lockstep run`` processes: started, killed, restarted, reaped.

Each :class:`RoleProcess` is one ``lockstep run --roles ROLES`` (a
:class:`~lockstep.agents.children.Child`) with its own log file and Kafka client id
(``chaos-<name>``, so a consumer group's members can be told apart). :class:`Pipeline`
supervises them like an orchestrator would: a process that exits without having been
killed on purpose is a crash, recorded with its status and log tail, and started again.
Every process is reaped on the way out, whatever happened.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from lockstep.agents.children import Child, lockstep_argv, without_settings
from lockstep.chaos.scenarios import Processes

log = logging.getLogger(__name__)

#: How often the supervisor looks at the processes.
_SUPERVISE_S = 0.5


@dataclass(frozen=True)
class Crash:
    """A role process that exited without being killed on purpose."""

    process: str
    status: int
    log_tail: str


class RoleProcess(Child):
    """One ``lockstep run --roles ROLES`` process, started again after each kill."""

    def __init__(self, name: str, roles: str, env: Mapping[str, str], log_path: Path,
                 log_level: str = "warning") -> None:
        self.roles = roles
        self.client_id = f"chaos-{name}"
        # The console script, not ``python -m lockstep``: -m puts the working directory
        # first on the path, where a folder named lockstep (the default data dir under
        # /tmp, say) would shadow the package.
        super().__init__(
            name, [*lockstep_argv(), "--log-level", log_level, "run",
                   "--roles", roles, "--metrics-port", "0"],
            without_settings({**env, "LOCKSTEP_KAFKA__CLIENT_ID": self.client_id}), log_path)

    def rss_kb(self) -> int | None:
        """Resident set size now, in kB (None while down)."""
        rss = self.rss_bytes()
        return None if rss is None else rss // 1024


class Pipeline:
    """Role processes, supervised: crashes are recorded and the process restarted."""

    def __init__(self, processes: Sequence[Processes], env: Mapping[str, str],
                 log_dir: Path, log_level: str = "warning") -> None:
        self.processes: list[RoleProcess] = []
        for spec in processes:
            for i in range(spec.count):
                name = f"{spec.roles.replace(':', '-').replace(',', '+')}-{i + 1}"
                self.processes.append(RoleProcess(name, spec.roles, env,
                                                  log_dir / f"{name}.log", log_level))
        self.crashes: list[Crash] = []

    def of(self, roles: str) -> list[RoleProcess]:
        """The processes running exactly ``roles``."""
        return [p for p in self.processes if p.roles == roles]

    def start(self) -> None:
        """Start every process."""
        for proc in self.processes:
            proc.start()
            log.info("started %s (pid %s)", proc.name, proc.pid)

    def check(self) -> None:
        """Record and restart every process that exited without being killed on purpose."""
        for proc in self.processes:
            status = proc.returncode
            if status is not None and not proc.held_down:
                tail = proc.tail()
                self.crashes.append(Crash(proc.name, status, tail))
                log.warning("%s exited with status %d on its own; restarting it\n%s",
                            proc.name, status, tail[-600:])
                proc.start()

    async def supervise(self) -> None:
        """Check the processes until cancelled."""
        while True:
            self.check()
            await asyncio.sleep(_SUPERVISE_S)

    async def stop(self, timeout_s: float = 20.0) -> dict[str, int | None]:
        """SIGTERM every process at once; SIGKILL what is still up after ``timeout_s``.

        Returns:
            Each process's exit status.
        """
        statuses = await asyncio.gather(*(p.stop(timeout_s) for p in self.processes))
        return {p.name: s for p, s in zip(self.processes, statuses, strict=True)}


@asynccontextmanager
async def running(pipeline: Pipeline) -> AsyncIterator[Pipeline]:
    """Start and supervise ``pipeline`` for the block; always stop and reap it."""
    pipeline.start()
    supervisor = asyncio.create_task(pipeline.supervise(), name="lockstep.chaos.supervise")
    try:
        yield pipeline
    finally:
        supervisor.cancel()
        await asyncio.gather(supervisor, return_exceptions=True)
        await asyncio.shield(pipeline.stop())
