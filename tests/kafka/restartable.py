"""A broker that tests may take down and bring back on the same log dir and port.

:class:`RestartableKafka` adds :meth:`~RestartableKafka.terminate` (SIGTERM, data kept) to
:class:`~tests.kafka.apache_kafka.ApacheKafka` (whose ``kill`` is the SIGKILL, data kept),
and :meth:`~RestartableKafka.outage`, which takes it down, waits, and starts it again.
Use one per test (function scope): never take the shared session broker down.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from dataclasses import dataclass

from tests.kafka.apache_kafka import ApacheKafka


@dataclass(frozen=True)
class Outage:
    """When the broker went down and came back (monotonic seconds)."""

    down_at: float
    up_at: float | None

    @property
    def seconds(self) -> float | None:
        """How long the broker was unreachable, if it came back."""
        return None if self.up_at is None else self.up_at - self.down_at


class RestartableKafka(ApacheKafka):
    """An Apache Kafka broker with a graceful stop that keeps its data."""

    def terminate(self) -> None:
        """SIGTERM the broker and wait for it to exit, keeping its data for :meth:`start`."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self._stop_timeout)
        self._kill_process()

    def take_down(self, *, hard: bool) -> None:
        """SIGKILL (``hard``) or SIGTERM the broker; its data stays."""
        if hard:
            self.kill()
        else:
            self.terminate()

    async def outage(self, after_s: float, down_s: float | None, *, hard: bool) -> Outage:
        """After ``after_s``, take the broker down; start it again ``down_s`` later.

        ``down_s`` None leaves it down. The restart blocks a thread, not the loop.
        """
        await asyncio.sleep(after_s)
        await asyncio.to_thread(self.take_down, hard=hard)
        down_at = time.monotonic()
        if down_s is None:
            return Outage(down_at, None)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.start)
        return Outage(down_at, time.monotonic())
