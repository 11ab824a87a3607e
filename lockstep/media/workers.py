"""Work handed to a child process without waiting for it (perception for ``lockstep publish``).

A :class:`Worker` runs a :class:`Task` in a child process that by default only gets the
CPU the rest of the machine leaves idle (``SCHED_IDLE`` where the OS has it, else nice 19),
so a slow recogniser holds neither the publishing thread, nor its interpreter lock, nor its
share of the CPU: on a busy machine perception falls behind and skips work instead.

:meth:`Worker.offer` writes the job into a pipe from the caller's own thread, without
blocking and without waking any other thread of the caller: when the pipe has no room (the
child is far behind) the job is dropped. The child drains its pipe before each job and
applies its policy to what waits:

- ``latest``: only the newest job is done, the others are skipped (frames: the picture
  now matters, not the one from a second ago);
- ``fifo``: jobs in order; when more than ``capacity`` wait, all but the newest are
  dropped and the task is told (a gap), so it starts afresh on current data;
- ``lossless`` (either policy): the caller waits for room instead and the child does
  every job in order (publishing faster than real time, where nothing waits on a clock).

Results, and how many jobs were skipped, come back on one thread of the parent, which hands
them to ``on_result`` and ``on_skip``. The child is a fresh interpreter (``python -m
lockstep.media.workers``): unlike ``multiprocessing``'s spawn it never imports the parent's
main module, so a script calling the API needs no ``__main__`` guard.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from lockstep.errors import LockstepError, MediaError

log = logging.getLogger(__name__)

#: What a task is told when jobs before this point were dropped.
GAP = "gap"
Policy = Literal["latest", "fifo"]
_HEADER = struct.Struct("<I")
#: Pipe size asked for (Linux): room for seconds of audio and several frames.
_PIPE_BYTES = 1 << 20
#: Room kept free in the pipe beyond a job (the kernel stores writes in pages).
_SLACK = 8192
#: How long a killed child may take to exit before it is left to the OS.
_KILLED_WAIT_S = 30.0


class Task(Protocol):
    """What a child process runs: one job at a time, results as plain picklable values."""

    def handle(self, job: Any) -> list[Any]:
        """Results of one job (often none)."""

    def gap(self) -> list[Any]:
        """Jobs were dropped before this point: start afresh."""

    def finish(self) -> list[Any]:
        """No more jobs: the results still held back."""


@dataclass(frozen=True)
class Plan:
    """What the child builds and how it treats the jobs waiting in its pipe."""

    factory: Callable[[], Task]
    policy: Policy
    capacity: int
    lossless: bool
    background: bool


@dataclass(frozen=True)
class Dropped:
    """Jobs the child skipped (``latest``) or dropped with a backlog (``fifo``: a gap)."""

    jobs: int
    gap: bool = False


def _write(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, _HEADER.pack(len(data)) + data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 0.05)


def _read(fd: int) -> Any:
    """One message; EOFError when the other side has gone."""
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    return pickle.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _background() -> None:
    """Take only idle CPU: ``SCHED_IDLE`` (Linux), else the lowest nice priority."""
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is not None:
        try:
            os.sched_setscheduler(0, idle, os.sched_param(0))
            return
        except OSError:
            pass
    if hasattr(os, "nice"):
        os.nice(19)


def _foreground(pid: int) -> None:
    """Give a background child the normal CPU priority back, where the OS lets us."""
    other = getattr(os, "SCHED_OTHER", None)
    if other is not None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(pid, other, os.sched_param(0))
    if hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 0)


def _child(argv: Sequence[str]) -> None:
    """The child's loop: build the task, say ready (or why not), work through the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it (Ctrl-C reaches both)
    jobs, results = int(argv[0]), int(argv[1])
    try:
        plan: Plan = _read(jobs)
        task = plan.factory()
    except (LockstepError, ImportError, OSError, RuntimeError, ValueError) as exc:
        _write(results, ("error", str(exc)))
        return
    if plan.background:  # the models are loaded before any media flows
        _background()
    _write(results, ("ready", []))
    waiting: deque[Any] = deque()
    ended = False
    while waiting or not ended:
        try:
            if not waiting:
                waiting.append(_read(jobs))
            while not ended and select.select([jobs], [], [], 0)[0]:  # drain what is there
                waiting.append(_read(jobs))
                ended = waiting[-1] is None
        except EOFError:  # the parent is gone
            return
        if waiting and waiting[-1] is None:
            ended = True
            waiting.pop()
        out: list[Any] = []
        if not plan.lossless and waiting:
            if plan.policy == "latest" and len(waiting) > 1:
                out.append(Dropped(len(waiting) - 1))
                waiting = deque([waiting[-1]])
            elif plan.policy == "fifo" and len(waiting) > plan.capacity:
                out.append(Dropped(len(waiting) - 1, gap=True))
                waiting = deque([waiting[-1]])
                out += task.gap()
        if waiting:
            out += task.handle(waiting.popleft())
        if out:
            _write(results, ("results", out))
    _write(results, ("closed", task.finish()))


class Worker:
    """The parent's side of one child process running a task.

    Args:
        name: For logs and errors (``ocr-cam-1``).
        factory: Builds the task in the child; picklable (a class and its settings).
        on_result: Called with each result, on the receiver thread.
        policy: ``latest`` or ``fifo`` (see the module).
        capacity: Jobs that may wait (``fifo``) before the backlog is dropped.
        lossless: Offering waits for room, and the child does every job.
        background: The child gets only idle CPU (else the same priority as the parent).
        on_skip: Called with the number of jobs skipped or dropped, on either thread.
    """

    def __init__(self, name: str, factory: Callable[[], Task], on_result: Callable[[Any], None],
                 *, policy: Policy = "latest", capacity: int = 1, lossless: bool = False,
                 background: bool = True, on_skip: Callable[[int], None] | None = None) -> None:
        self.name = name
        self.skipped = 0
        self.gaps = 0
        self.error: str | None = None
        self._plan = Plan(factory, policy, max(1, capacity), lossless, background)
        self._on_result = on_result
        self._on_skip = on_skip
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._dead = False
        self._closing = False
        self._process: subprocess.Popen[bytes] | None = None
        self._jobs = -1
        self._results = -1
        self._room = 0
        self._receiver: threading.Thread | None = None

    def start(self) -> None:
        """Start the child (it loads its models meanwhile; see :meth:`wait_ready`)."""
        jobs_in, self._jobs = os.pipe()
        self._results, results_out = os.pipe()
        self._room = _pipe_size(self._jobs)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # where ``lockstep`` is importable
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "lockstep.media.workers", str(jobs_in), str(results_out)],
                pass_fds=(jobs_in, results_out), stdin=subprocess.DEVNULL, env=env)
        finally:
            os.close(jobs_in)  # the child's ends: EOF on either side once the other is gone
            os.close(results_out)
        _write(self._jobs, self._plan)
        os.set_blocking(self._jobs, self._plan.lossless)

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until the child has built its task, then take its results.

        Raises:
            MediaError: It could not build the task, exited, or took longer than
                ``timeout_s``.
        """
        problem: str | None = None
        if not select.select([self._results], [], [], timeout_s)[0]:
            problem = f"the recogniser did not start within {timeout_s:.0f} s"
        else:
            try:
                kind, detail = _read(self._results)
            except EOFError:
                problem = f"the recogniser exited while starting (exit code {self._exit_code()})"
            else:
                problem = detail if kind == "error" else None
        if problem is not None:
            self._dead = True
            self._stop_process()
            raise MediaError(f"{self.name}: {problem}")
        self._receiver = threading.Thread(target=self._receive, name=f"{self.name}-results",
                                          daemon=True)
        self._receiver.start()

    def offer(self, job: Any) -> bool:
        """Hand a job over without waiting (unless lossless); False: dropped or refused."""
        if self._dead or self._closing:
            return False
        data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        message = _HEADER.pack(len(data)) + data
        try:
            if self._plan.lossless:
                _write_all(self._jobs, message)
                return True
            if len(message) + _SLACK > self._room - _queued(self._jobs):
                self._skip(1)  # the child is far behind: the pipe is full
                return False
            _write_all(self._jobs, message)  # all of it fits: one write, no wait
        except OSError:
            self._died("its input closed")
            return False
        return True

    def close(self, timeout_s: float) -> bool:
        """Let the child finish what it holds, for at most ``timeout_s``; True if it did."""
        self._closing = True
        drained = False
        if self._receiver is not None and not self._dead:
            if self._process is not None and self._plan.background:
                _foreground(self._process.pid)  # no media left to make way for
            try:
                os.set_blocking(self._jobs, True)
                _write(self._jobs, None)  # no more jobs
            except OSError:
                pass
            drained = self._closed.wait(timeout_s)
        self._stop_process()
        if self._receiver is not None:
            self._receiver.join(1.0)
        return drained

    def _skip(self, n: int) -> None:
        with self._lock:
            self.skipped += n
        if self._on_skip is not None:
            self._on_skip(n)

    def _receive(self) -> None:
        try:
            while True:
                try:
                    kind, results = _read(self._results)
                except (EOFError, OSError):
                    self._died(f"it exited (code {self._exit_code()})")
                    return
                for result in results:
                    if isinstance(result, Dropped):
                        self.gaps += result.gap
                        self._skip(result.jobs)
                    else:
                        self._on_result(result)
                if kind == "closed":
                    self._closed.set()
                    return
        finally:
            self._close_results()

    def _died(self, why: str) -> None:
        if self._dead:
            return
        self._dead = True
        if not self._closing:
            self.error = f"{self.name} stopped: {why}"
            log.warning("%s; the media goes on without it", self.error,
                        extra={"stage": "publish"})

    def _exit_code(self) -> int | None:
        if self._process is None:
            return None
        try:
            return self._process.wait(1.0)
        except subprocess.TimeoutExpired:
            return None

    def _stop_process(self) -> None:
        process = self._process
        if process is None:
            return
        if self._jobs >= 0:
            with contextlib.suppress(OSError):
                os.close(self._jobs)
            self._jobs = -1
        try:
            process.wait(0.5)
        except subprocess.TimeoutExpired:
            # Dying takes CPU too (unmapping the models): an idle-priority child on a busy
            # host gets the normal priority back first, or it can take longer than any wait.
            _foreground(process.pid)
            process.kill()
            try:
                process.wait(_KILLED_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) still exiting %.0f s after SIGKILL; left to the OS",
                            self.name, process.pid, _KILLED_WAIT_S, extra={"stage": "publish"})
        self._process = None
        if self._receiver is None:  # else it closes them once the child's end is gone
            self._close_results()

    def _close_results(self) -> None:
        if self._results >= 0:
            with contextlib.suppress(OSError):
                os.close(self._results)
            self._results = -1


def _pipe_size(fd: int) -> int:
    """Grow the pipe where the OS allows it; return its size in bytes."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        size: int = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        return size
    except (ImportError, AttributeError, OSError):
        return 65_536


def _queued(fd: int) -> int:
    """Bytes written to a pipe and not read yet."""
    try:
        import fcntl
        import termios

        return int(_HEADER.unpack(fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0])
    except (ImportError, OSError):
        return 0


if __name__ == "__main__":
    # Run from the module proper, so that what the child pickles names its real module.
    from lockstep.media import workers

    workers._child(sys.argv[1:])
