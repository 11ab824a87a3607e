"""The pipeline as separate ``lockstep run`` processes: started, killed, restarted, reaped.

Each :class:`RoleProcess` is one ``python -m lockstep run --roles ROLES`` with its own log
file and Kafka client id (``chaos-<name>``, so a consumer group's members can be told
apart). :class:`Pipeline` supervises them like an orchestrator would: a process that exits
without having been killed on purpose is a crash, recorded with its status and log tail,
and started again. Every process is reaped on the way out, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lockstep.chaos.scenarios import Processes
from lockstep.kafka.apache.node import with_parent

log = logging.getLogger(__name__)

#: How long a process may take to exit after SIGKILL.
_REAP_S = 10.0
#: How often the supervisor looks at the processes.
_SUPERVISE_S = 0.5


@dataclass(frozen=True)
class Crash:
    """A role process that exited without being killed on purpose."""

    process: str
    status: int
    log_tail: str


def rss_kb(pid: int) -> int | None:
    """A process's resident set size (``VmRSS`` in ``/proc/PID/status``), None if gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return parse_vmrss(text)


def parse_vmrss(status: str) -> int | None:
    """The ``VmRSS`` line of a ``/proc/PID/status`` text, in kB (None if absent)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


class RoleProcess:
    """One ``lockstep run --roles ROLES`` process, started again after each kill."""

    def __init__(self, name: str, roles: str, env: Mapping[str, str], log_path: Path,
                 log_level: str = "warning") -> None:
        self.name = name
        self.log_level = log_level
        self.roles = roles
        self.client_id = f"chaos-{name}"
        self.log_path = log_path
        self._env = {**{k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")},
                     **env, "LOCKSTEP_KAFKA__CLIENT_ID": self.client_id}
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        #: True while the process is down on purpose (killed, not yet restarted).
        self.held_down = False
        self.kills = 0
        self.starts = 0

    @property
    def pid(self) -> int | None:
        """The process id while it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def returncode(self) -> int | None:
        """The exit status of the current incarnation (None while it runs)."""
        return None if self._proc is None else self._proc.poll()

    def start(self) -> None:
        """Start (again); the log file is appended to."""
        if self.pid is not None:
            return
        self._close_log()
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            with_parent([sys.executable, "-m", "lockstep", "--log-level", self.log_level,
                         "run", "--roles", self.roles, "--metrics-port", "0"]),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=self._env, start_new_session=True)
        self.held_down = False
        self.starts += 1
        log.info("started %s (pid %d)", self.name, self._proc.pid)

    def kill(self) -> None:
        """SIGKILL the process (no shutdown, no commit) and reap it; it stays down."""
        self.held_down = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self.kills += 1
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=_REAP_S)

    def signal_stop(self) -> None:
        """Send SIGTERM (a graceful stop: commit, leave the group) without waiting."""
        self.held_down = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)

    def reap(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the exit, then SIGKILL; return the exit status."""
        proc = self._proc
        if proc is None:
            return None
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not stop in %.0f s; killing it", self.name, proc.pid,
                        timeout_s)
            proc.kill()
            status = proc.wait(timeout=_REAP_S)
        self._close_log()
        return status

    def rss_kb(self) -> int | None:
        """Resident set size now (None while down)."""
        pid = self.pid
        return None if pid is None else rss_kb(pid)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of what the process wrote (all incarnations)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def log_lines(self) -> int:
        """Lines the process wrote (all incarnations)."""
        try:
            with self.log_path.open("rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


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

    def check(self) -> None:
        """Record and restart every process that exited without being killed on purpose."""
        for proc in self.processes:
            status = proc.returncode
            if status is not None and not proc.held_down:
                tail = proc.log_tail()
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
        for proc in self.processes:
            proc.signal_stop()
        statuses = await asyncio.gather(*(asyncio.to_thread(p.reap, timeout_s)
                                          for p in self.processes))
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
