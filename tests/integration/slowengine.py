"""Helpers shared by the integration tests that slow a worker's engine down."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest

import lockstep.agents.worker
from lockstep.config.worker import WorkerSettings
from lockstep.engines.base import ItemResult, WorkItem
from lockstep.engines.reference import ReferenceEngine
from lockstep.telemetry.metrics import Telemetry


class SlowEngine(ReferenceEngine):
    """The reference engine after an injected delay per batch (``delay_s``, changeable)."""

    delay_s = 0.0

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        await asyncio.sleep(SlowEngine.delay_s)
        return await super()._infer(batch)


def use_slow_engine(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> None:
    """Make the workers started in this process run :class:`SlowEngine` (``delay_s``)."""
    def slow(ws: WorkerSettings, telemetry: Telemetry | None = None) -> SlowEngine:
        return SlowEngine(max_batch=ws.max_batch, timeout_s=ws.infer_timeout_ms / 1000,
                          telemetry=telemetry, pool=ws.pool)

    monkeypatch.setattr(lockstep.agents.worker, "create_engine", slow)
    monkeypatch.setattr(SlowEngine, "delay_s", delay_s)


async def until(check: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait until ``check()`` holds; False if it did not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll_s)
    return True
