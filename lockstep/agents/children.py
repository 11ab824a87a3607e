"""Lockstep commands as child processes: started, stopped, killed, started again, reaped.

A :class:`Child` is one command (``lockstep run --roles …`` mostly; also ``publish`` and
``demo``) in a session of its own, its output appended to a log file across restarts, so
an orchestrator's view of a role is complete: ``lockstep chaos`` kills and restarts roles
through it, ``lockstep bench pipeline`` starts its roles and producers with it, and the
integration tests run theirs the same way. :func:`cpu_seconds` and :func:`rss_bytes` read
what ``/proc`` says about any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Self

from lockstep.errors import ProcessError
from lockstep.kafka.apache.node import with_parent

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: How long a process may take to exit after SIGKILL.
_REAP_S = 10.0
_METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)")


def lockstep_argv() -> list[str]:
    """How to start the ``lockstep`` CLI from here (the console script, else ``-m``)."""
    script = shutil.which("lockstep")
    return [script] if script else [sys.executable, "-m", "lockstep"]


def without_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its ``LOCKSTEP_*`` settings, plus ``env``."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    return {**inherited, **(env or {})}


class Child:
    """One command run as a child process, in a session of its own; restartable.

    Args:
        name: How logs and errors name it.
        argv: The command line.
        env: Its whole environment.
        log: The file its output is appended to (every incarnation's).
        keep_stdout: Keep stdout apart (in ``<log>.stdout``, :attr:`stdout`): the command
            prints a report there; its stderr alone goes to ``log``.

    The process is made to die with the thread that starts it, where Linux's setpriv
    exists (:func:`~lockstep.kafka.apache.node.with_parent`): a launcher killed outright
    leaves no role behind. Start children from the main thread.
    """

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path,
                 *, keep_stdout: bool = False) -> None:
        self.name = name
        self.argv = with_parent(list(argv))
        self.env = dict(env)
        self.log = log
        self._stdout_path = log.with_name(log.name + ".stdout") if keep_stdout else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._files: list[IO[bytes]] = []
        #: True while the process is down on purpose (stopped or killed, not started again).
        self.held_down = False
        self.starts = 0
        self.kills = 0

    @property
    def pid(self) -> int | None:
        """The process id while it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def returncode(self) -> int | None:
        """The exit status of the current incarnation (None while it runs or before)."""
        return None if self._proc is None else self._proc.poll()

    @property
    def running(self) -> bool:
        """Started and not exited."""
        return self.pid is not None

    @property
    def stdout(self) -> bytes:
        """What the last incarnation printed on stdout (``keep_stdout``; else empty)."""
        if self._stdout_path is None:
            return b""
        try:
            return self._stdout_path.read_bytes()
        except OSError:
            return b""

    def start(self) -> Self:
        """Start the process (again); nothing happens while it runs."""
        if self.running:
            return self
        self._close()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND: the child writes at the end, however far a reader has got.
        log = self.log.open("ab")
        self._files = [log]
        stdout: IO[bytes] = log
        if self._stdout_path is not None:
            stdout = self._stdout_path.open("wb")
            self._files.append(stdout)
        self._proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=log, env=self.env,
            start_new_session=True)
        self.held_down = False
        self.starts += 1
        return self

    def kill(self) -> int | None:
        """SIGKILL the process (no shutdown, no commit) and reap it; it stays down.

        Returns:
            Its exit status (None if it was never started).
        """
        self.held_down = True
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
            self.kills += 1
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_REAP_S)
        self._close()
        return proc.poll()

    def signal_stop(self) -> None:
        """Send SIGTERM (a graceful stop: commit, leave the group) without waiting."""
        self.held_down = True
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGTERM)

    def reap(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the exit, then SIGKILL; return the exit status."""
        proc = self._proc
        if proc is None:
            return None
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait(timeout=_REAP_S)
        self._close()
        return status

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the exit status. Idempotent."""
        self.signal_stop()
        return await asyncio.to_thread(self.reap, timeout_s)

    async def wait(self, timeout_s: float) -> int:
        """Wait for the exit; return the exit status.

        Raises:
            ProcessError: The process did not exit within ``timeout_s``.
        """
        proc = self._proc
        if proc is None:
            raise ProcessError(f"{self.name} is not started")
        try:
            return await asyncio.to_thread(proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            raise ProcessError(f"{self.name} did not finish within {timeout_s:.0f} s: "
                               f"{self.last_lines()}") from None

    async def wait_for_line(self, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str]:
        """The first line of the log matching ``pattern`` (this incarnation's or before).

        Raises:
            ProcessError: The process exited, or wrote no such line, within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            match = pattern.search(self.tail(chars=1 << 20))
            if match:
                return match
            if not self.running:
                raise ProcessError(f"{self.name} exited with status {self.returncode}: "
                                   f"{self.last_lines()}")
            if time.monotonic() > deadline:
                raise ProcessError(f"{self.name} wrote no {pattern.pattern!r} within "
                                   f"{timeout_s:.0f} s: {self.last_lines()}")
            await asyncio.sleep(0.05)

    async def metrics_url(self, timeout_s: float = 60.0) -> str:
        """The ``/metrics`` URL a ``lockstep run`` process prints at start."""
        return (await self.wait_for_line(_METRICS_LINE, timeout_s)).group(1)

    def tail(self, chars: int = 2000) -> str:
        """The end of what the process wrote (every incarnation)."""
        try:
            with self.log.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def last_lines(self, lines: int = 5) -> str:
        """The last lines written, joined on one line (for error messages)."""
        return " | ".join(self.tail().strip().splitlines()[-lines:]) or "(no output)"

    def log_lines(self) -> int:
        """Lines the process wrote (every incarnation)."""
        try:
            with self.log.open("rb") as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def rss_bytes(self) -> int | None:
        """Resident memory now (None while down)."""
        pid = self.pid
        return None if pid is None else rss_bytes(pid)

    def cpu_seconds(self) -> float | None:
        """CPU seconds of the current incarnation so far (None while down)."""
        pid = self.pid
        return None if pid is None else cpu_seconds(pid)

    def _close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []


def parse_stat(text: str) -> tuple[int, float] | None:
    """``(ppid, cpu seconds)`` from the text of ``/proc/<pid>/stat``.

    The command name (2nd field) may hold spaces and parentheses: fields are counted
    after its closing parenthesis. utime and stime are fields 14 and 15.
    """
    end = text.rfind(")")
    if end < 0:
        return None
    rest = text[end + 2:].split()
    if len(rest) < 13:
        return None
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (its own, not its children's)."""
    try:
        parsed = parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None
    return None if parsed is None else parsed[1]


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` in bytes (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * _PAGE if len(fields) > 1 else None
