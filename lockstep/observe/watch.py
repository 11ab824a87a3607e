"""The demo's ledger kept in a process of its own (:class:`WatchProcess`).

The demo runs every role on one event loop, and its observer (:class:`~lockstep.observe.observer.
Observer`) reads every window, late record, dead letter and response to build the ledger.
On that loop it was the demo's bookkeeping, not the pipeline, that took a share of the one
core the roles have: about 5 % of the loop's samples at 30 streams, the fetches of the
windows it reads besides. In a child process it runs beside the roles, as a consumer
subscribed to the response topics would.

The child starts the observer at the topics' ends and says when it is ready; it is then
handed the publisher's report, waits until the ledger closes (:func:`~lockstep.observe.observer.
drain`) and sends the ledger back.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
from multiprocessing.connection import Connection
from typing import Any

from lockstep.agents.app import install_uvloop
from lockstep.agents.memory import freeze_startup_heap
from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError
from lockstep.observe.ledger import Ledger
from lockstep.observe.observer import Observer, drain
from lockstep.producer.delivery import PublishReport


class WatchProcess:
    """An observer of the streams whose ids start with ``prefix``, in a child process.

    ``start`` it before anything is published, ``ready`` it before publishing, then
    ``drain`` it with the publisher's report; ``stop`` always (it ends the child).
    """

    def __init__(self, kafka: KafkaSettings, prefix: str, *, timeout_s: float = 15.0) -> None:
        self._timeout_s = timeout_s
        context = mp.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_child, args=(child, kafka, prefix, timeout_s),
                                        name="lockstep-demo-watch", daemon=True)
        self._child_conn = child

    def start(self) -> None:
        """Start the child (it then starts its observer)."""
        self._process.start()
        self._child_conn.close()

    async def ready(self) -> None:
        """Wait until the observer reads from the topics' ends.

        Raises:
            BrokerError: It could not start (the broker or a topic is missing).
        """
        kind, body = await asyncio.to_thread(self._receive, self._timeout_s + 30.0)
        if kind != "ready":
            raise BrokerError(f"the demo's observer did not start: {body}")

    async def drain(self, published: PublishReport, timeout_s: float) -> tuple[Ledger, bool]:
        """Hand over what was published; return the ledger and whether it closed in time."""
        await asyncio.to_thread(self._conn.send, (published, timeout_s))
        kind, body = await asyncio.to_thread(self._receive, timeout_s + 30.0)
        if kind != "done":
            raise BrokerError(f"the demo's observer failed: {body}")
        ledger, drained = body
        return ledger, drained

    async def stop(self) -> None:
        """End the child (at once if it is still working) and reap it."""
        await asyncio.to_thread(self._stop)

    def _receive(self, timeout_s: float) -> tuple[str, Any]:
        if not self._conn.poll(timeout_s):
            return "error", f"no answer within {timeout_s:.0f} s"
        try:
            message: tuple[str, Any] = self._conn.recv()
        except EOFError:
            return "error", f"its process ended (exit code {self._process.exitcode})"
        return message

    def _stop(self) -> None:
        self._conn.close()  # a child still waiting for the report reads the end and exits
        if self._process.pid is None:  # never started
            return
        self._process.join(timeout=5.0)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()


def _child(conn: Connection, kafka: KafkaSettings, prefix: str, timeout_s: float) -> None:
    install_uvloop()
    freeze_startup_heap()
    try:
        asyncio.run(_watch(conn, kafka, prefix, timeout_s))
    except BaseException as error:  # say why to the parent, which is waiting for an answer
        with contextlib.suppress(OSError):  # (unless it has gone)
            conn.send(("error", f"{type(error).__name__}: {error}"))
        if not isinstance(error, EOFError):  # EOF: the parent stopped it before the drain
            raise
    finally:
        conn.close()


async def _watch(conn: Connection, kafka: KafkaSettings, prefix: str, timeout_s: float) -> None:
    observer = Observer(kafka, keep=lambda sid: sid.startswith(prefix))
    await observer.start(timeout_s)
    try:
        conn.send(("ready", None))
        published, drain_s = await asyncio.to_thread(conn.recv)
        drained = await drain(observer, published, drain_s)
    finally:
        await observer.stop()
    conn.send(("done", (observer.ledger, drained)))
