"""Child processes of the bench and what ``/proc`` says about them.

:class:`Child` runs a command (``lockstep run``, ``lockstep publish``), keeps its stderr
lines (a role prints its metrics URL there), and stops it with SIGTERM, then SIGKILL.
:func:`cpu_seconds` and :func:`rss_bytes` read a process's CPU time and resident memory
from ``/proc/<pid>/stat`` and ``/proc/<pid>/statm`` (None where unreadable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockstep.errors import BenchProcessError

log = logging.getLogger(__name__)
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)")


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
    """Resident memory of ``pid`` in bytes."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * _PAGE if len(fields) > 1 else None


def children_named(parent: int, name: str) -> list[int]:
    """Pids of ``parent``'s child processes whose command name contains ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        parsed = parse_stat(text)
        if parsed is not None and parsed[0] == parent and name in text[:text.rfind(")")]:
            found.append(int(entry.name))
    return found


@dataclass
class Child:
    """One child process: its command line, its stderr lines, its exit."""

    label: str
    argv: Sequence[str]
    env: Mapping[str, str]
    proc: asyncio.subprocess.Process | None = None
    stdout: bytes = b""
    lines: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None
    _out: asyncio.Task[bytes] | None = None

    @property
    def pid(self) -> int:
        """The process id (the process must be started)."""
        if self.proc is None:
            raise BenchProcessError(f"{self.label} is not started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        """Started and not exited."""
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> Child:
        """Start the process (stdin closed; stdout kept; stderr read line by line)."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, env=dict(self.env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        self._reader = asyncio.ensure_future(self._read_stderr())
        assert self.proc.stdout is not None
        self._out = asyncio.ensure_future(self.proc.stdout.read())
        return self

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self.lines.append(text)
            if len(self.lines) > 400:
                del self.lines[:200]

    async def wait_for_line(self, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str]:
        """The first stderr line matching ``pattern``.

        Raises:
            BenchProcessError: The process exited or printed no such line in time.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            for text in self.lines:
                match = pattern.search(text)
                if match:
                    return match
            if not self.running:
                raise BenchProcessError(f"{self.label} exited with code "
                                        f"{self.proc and self.proc.returncode}: {self.tail()}")
            if asyncio.get_running_loop().time() > deadline:
                raise BenchProcessError(f"{self.label} printed no {pattern.pattern!r} within "
                                        f"{timeout_s:.0f} s: {self.tail()}")
            await asyncio.sleep(0.05)

    async def metrics_url(self, timeout_s: float = 60.0) -> str:
        """The ``/metrics`` URL a ``lockstep run`` process prints at start."""
        return (await self.wait_for_line(_METRICS_LINE, timeout_s)).group(1)

    async def wait(self, timeout_s: float | None = None) -> int:
        """Wait for the exit; return the exit code (stdout is then in :attr:`stdout`).

        Raises:
            BenchProcessError: The process did not exit within ``timeout_s``.
        """
        assert self.proc is not None
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            raise BenchProcessError(f"{self.label} did not finish within {timeout_s:.0f} s: "
                                    f"{self.tail()}") from None
        if self._out is not None:
            self.stdout = await self._out
        if self._reader is not None:
            await self._reader
        return code

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; idempotent."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                log.warning("%s did not stop on SIGTERM; killing it", self.label)
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        for task in (self._reader, self._out):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._out is not None and self._out.done() and not self._out.cancelled():
            self.stdout = self._out.result()

    def tail(self, lines: int = 5) -> str:
        """The last stderr lines, joined (for error messages)."""
        return " | ".join(self.lines[-lines:]) or "(no output)"
