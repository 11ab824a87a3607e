"""Driving a batching policy against an engine in real time.

The :class:`Dispatcher` admits requests into its policy's bounded queue, polls the policy
whenever something changes (an arrival, a finished batch, the wake time the policy asked
for), runs the batches it forms on the engine, feeds the measured batch latency back into
the policy's latency model and hands every outcome — answered, failed or expired — to a
sink. The worker agent and ``lockstep bench batching`` both use it, so the bench measures
the code that serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from lockstep.engines.base import (
    Engine,
    InferenceResult,
    ItemFailure,
    ItemResult,
    WorkItem,
    probe_request,
)
from lockstep.engines.batching.latency import LatencyModel
from lockstep.engines.batching.policy import Batch, BatchPolicy, Pending, SchedulerConfig
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.schemas import Request

log = logging.getLogger(__name__)
H = TypeVar("H")


@dataclass(frozen=True)
class Outcome(Generic[H]):
    """What became of one request.

    ``result`` is None when the request was shed (expired) before reaching the engine.
    """

    handle: H
    request: Request
    result: ItemResult | None
    item: WorkItem | None
    dequeued_us: int
    inferred_us: int

    @property
    def status(self) -> str:
        """``ok``, ``expired`` or ``failed``."""
        if self.result is None:
            return "expired"
        return "failed" if isinstance(self.result, ItemFailure) else "ok"


Sink = Callable[[list[Outcome[H]]], Awaitable[None]]


class Dispatcher(Generic[H]):
    """Runs one pool's queue: admission with backpressure, dispatch, feedback, outcomes."""

    def __init__(self, engine: Engine, policy: BatchPolicy[H], clock_us: Callable[[], int],
                 sink: Sink[H], *, telemetry: Telemetry | None = None, pool: str = "",
                 max_inflight: int = 1) -> None:
        self.engine = engine
        self.policy = policy
        self.clock_us = clock_us
        self.sink = sink
        self.telemetry = telemetry
        self.pool = pool
        self.max_inflight = max(1, max_inflight)
        self._inflight: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._failure: BaseException | None = None

    @property
    def full(self) -> bool:
        """Whether admission must wait (the caller pauses its input meanwhile)."""
        return self.policy.full

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing running."""
        return self.policy.depth == 0 and not self._inflight

    async def wait_space(self) -> None:
        """Return once the queue has drained to half its bound."""
        while self.policy.full or not self._space.is_set():
            self._space.clear()
            await self._space.wait()

    def admit(self, handle: H, request: Request) -> None:
        """Queue a request (call :meth:`wait_space` first when :attr:`full`)."""
        self.policy.admit(handle, request, self.clock_us())
        self._gauge()
        self._changed.set()

    async def run(self) -> None:
        """Dispatch until cancelled; raises the first engine or sink failure."""
        try:
            while True:
                self._raise_if_failed()
                # Cleared before the poll, never after: an admission or a finished batch
                # from here on (during the expired answers' send, say) wakes the wait below.
                self._changed.clear()
                now = self.clock_us()
                decision = self.policy.poll(now, self.max_inflight - len(self._inflight))
                if decision.expired:
                    await self._expire(decision.expired, now)
                if decision.batch is not None:
                    self._start(decision.batch, now)
                    continue
                self._gauge()
                timeout = None if decision.wake_us is None else max(
                    0.0, (decision.wake_us - self.clock_us()) / 1e6)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout)
        finally:
            for task in list(self._inflight):
                task.cancel()

    def withdraw(self, drop: Callable[[H], bool]) -> list[Request]:
        """Take queued requests (whose handle ``drop`` selects) back, unanswered."""
        taken = self.policy.withdraw(drop)
        if taken:
            self._after_dequeue()
            self._changed.set()
        return [p.request for p in taken]

    async def settle(self, timeout_s: float) -> bool:
        """Wait for the batches running now to hand their outcomes to the sink.

        Returns:
            Whether they all did within ``timeout_s``.
        """
        if not self._inflight:
            return True
        _, running = await asyncio.wait(list(self._inflight), timeout=timeout_s)
        return not running

    async def drain(self, poll_s: float = 0.005) -> None:
        """Return once nothing is queued or running (for benches and tests)."""
        while not self.idle:
            self._raise_if_failed()
            await asyncio.sleep(poll_s)
        self._raise_if_failed()

    def _start(self, batch: Batch[H], now_us: int) -> None:
        self._observe_queue(batch.members, now_us)
        if self.telemetry is not None:
            self.telemetry.batch_size.labels(self.pool).observe(len(batch.items))
            if batch.level:
                self.telemetry.degraded.labels(self.pool, str(batch.level)).inc(
                    len(batch.items))
        task = asyncio.ensure_future(self._run_batch(batch, now_us))
        self._inflight.add(task)
        task.add_done_callback(self._finished)
        self._after_dequeue()

    async def _run_batch(self, batch: Batch[H], dequeued_us: int) -> None:
        results = await self.engine.infer(batch.items)
        inferred = self.clock_us()
        self.policy.latency.observe(len(batch.items), inferred - dequeued_us, batch.level)
        await self.sink([Outcome(p.handle, p.request, r, item, dequeued_us, inferred)
                         for p, item, r in zip(batch.members, batch.items, results,
                                               strict=True)])
        self._count(results)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
        self._changed.set()

    async def _expire(self, expired: list[Pending[H]], now_us: int) -> None:
        self._observe_queue(expired, now_us)
        await self.sink([Outcome(p.handle, p.request, None, None, now_us, now_us)
                         for p in expired])
        if self.telemetry is not None:
            self.telemetry.requests.labels(self.pool, "expired").inc(len(expired))
        self._after_dequeue()

    def _observe_queue(self, members: list[Pending[H]], now_us: int) -> None:
        """The ``queue`` stage: routed → dispatched or shed."""
        if self.telemetry is None:
            return
        for p in members:
            self.telemetry.stage(
                "queue", max(0, now_us - p.request.window.timeline.routed_us) / 1e6,
                route=p.request.route, pool=self.pool, slo_class=p.request.window.slo_class)

    def _after_dequeue(self) -> None:
        if self.policy.depth <= self.policy.config.max_queue // 2:
            self._space.set()
        self._gauge()

    def _count(self, results: list[ItemResult]) -> None:
        if self.telemetry is None:
            return
        ok = sum(isinstance(r, InferenceResult) for r in results)
        self.telemetry.requests.labels(self.pool, "ok").inc(ok)
        if len(results) - ok:
            self.telemetry.requests.labels(self.pool, "failed").inc(len(results) - ok)

    def _gauge(self) -> None:
        if self.telemetry is not None:
            self.telemetry.queue_depth.labels(self.pool).set(self.policy.depth)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure


async def warm_up(engine: Engine, latency: LatencyModel, config: SchedulerConfig,
                  rounds: int = 3) -> None:
    """Time the engine on batches of 1, 2, 4 … ``max_batch`` at each degradation level.

    The timings seed the latency model; they are kept out of the ``infer`` metrics.
    """
    sizes = sorted({min(2**k, config.max_batch) for k in range(13)
                    if 2**k <= 2 * config.max_batch})
    request = probe_request()
    # A cold or contended machine may be slow at first: warming up must not crash the role.
    telemetry, engine.telemetry = engine.telemetry, None
    timeout_s, engine.timeout_s = engine.timeout_s, max(engine.timeout_s, 60.0)
    try:
        await _time_sizes(engine, latency, config, request, sizes, rounds)
    finally:
        engine.telemetry, engine.timeout_s = telemetry, timeout_s


async def _time_sizes(engine: Engine, latency: LatencyModel, config: SchedulerConfig,
                      request: Request, sizes: list[int], rounds: int) -> None:
    for level in config.levels:
        tokens = config.tokens_at(level)
        for size in sizes:
            items = [WorkItem(request, max_new_tokens=tokens, reduce_vision=level > 0,
                              level=level)] * size
            await engine.infer(items)  # the first call of a shape allocates; not timed
            for _ in range(rounds):
                begin = time.perf_counter()
                await engine.infer(items)
                latency.observe(size, int((time.perf_counter() - begin) * 1e6), level)
