"""``lockstep`` CLI processes for integration tests: started, signalled, and always reaped.

:func:`lockstep_run` starts ``lockstep run`` with its settings from the environment only
(the caller's ``LOCKSTEP_*`` variables are dropped), sends its output to a log file for
diagnostics, and kills and reaps it on the way out, whatever happened in between.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.clirun import clean_env, lockstep_path

#: How long a process may take to exit after SIGKILL before the test gives up on it.
_REAP_S = 10.0


class LockstepProcess:
    """A running ``lockstep`` command and the file its stdout and stderr go to."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self._proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        """The process id."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status, or None while the process runs."""
        return self._proc.poll()

    def kill(self) -> int:
        """SIGKILL the process (no shutdown, no commit) and reap it; return its status."""
        self._proc.kill()
        return self._proc.wait(timeout=_REAP_S)

    async def terminate(self, timeout_s: float) -> int:
        """Send SIGTERM and wait up to ``timeout_s`` for the exit status.

        Raises:
            subprocess.TimeoutExpired: The process is still running after ``timeout_s``.
        """
        self._proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self._proc.wait, timeout_s)

    def output_tail(self, chars: int = 4000) -> str:
        """The last ``chars`` characters the process wrote, for assertion messages."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.log.name} (pid {self.pid}, status {self.returncode}) ---\n" \
               f"{text[-chars:]}"


@contextmanager
def lockstep_run(args: list[str], env: Mapping[str, str], log: Path
                 ) -> Iterator[LockstepProcess]:
    """Run ``lockstep *args`` for the duration of the block; kill and reap it on exit.

    Args:
        args: The command line after ``lockstep``.
        env: ``LOCKSTEP_*`` settings of the process (the caller's are not inherited).
        log: File that receives the process's stdout and stderr.
    """
    # O_APPEND: the child writes at the end however far the test has read.
    with log.open("ab") as out, subprocess.Popen(
            [lockstep_path(), *args], stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, env=clean_env(env)) as proc:
        try:
            yield LockstepProcess(proc, log)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=_REAP_S)
