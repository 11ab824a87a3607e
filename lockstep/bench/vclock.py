"""A virtual-time event loop: timers fire at once, in order, as if the time had passed.

For the simulated engine, whose batches are ``asyncio.sleep`` calls: a trace replayed on
this loop takes milliseconds instead of seconds and gives the same result on any machine,
however loaded (the ranking of batching policies in the unit tests, ``bench batching
--virtual-clock``). Only code that reads time through ``loop.time()`` and waits through
the loop's timers sees virtual time; real I/O still works, but a wait for I/O alone
(no timer due) blocks in real time as usual.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _AdvancingSelector(selectors.DefaultSelector):
    """Polls without blocking; when nothing is ready, advances the loop's clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer pending: only I/O can wake the loop
            return super().select(None)
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` moves only when it would otherwise sleep."""

    def __init__(self, start_s: float = 1_000.0) -> None:
        selector = _AdvancingSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = start_s

    def time(self) -> float:
        """Virtual seconds."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self._now += max(0.0, seconds)


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualClockLoop`, then close it."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
