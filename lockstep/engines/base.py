"""The engine interface.

An engine takes a batch of :class:`WorkItem` (a request plus the compute budget the
scheduler granted it) and returns one result per item: an :class:`InferenceResult`, or an
:class:`ItemFailure` for an item it could not process, so one bad item never fails the
batch. The public :meth:`Engine.infer` owns the timeout, the ``infer`` latency metric, the
per-item fallback and the mapping of failures to :class:`~lockstep.errors.EngineError`;
engines implement :meth:`Engine._infer`. Lifecycles are explicit: ``async with engine:`` or
``await engine.start()`` … ``await engine.close()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Self

import numpy as np

from lockstep.errors import EngineError, EngineTimeout
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.schemas import Modality, ModalityState, Request, Timeline, VideoToken, Window

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; the worker sizes and schedules batches from it."""

    #: Largest batch the engine accepts in one call.
    max_batch: int = 16
    #: The engine batches concurrent calls itself (TensorRT-LLM's in-flight batcher),
    #: so the worker may keep several batches in flight.
    inflight_batching: bool = False
    #: The engine honours a per-item priority.
    priority: bool = False
    #: The engine can stream tokens as they are generated.
    streaming: bool = False
    #: The engine honours ``max_new_tokens`` and ``reduce_vision`` (degraded service).
    degradable: bool = False


@dataclass(frozen=True)
class WorkItem:
    """A request and the budget the scheduler granted it."""

    request: Request
    #: Output tokens the engine may generate for this item (at least one).
    max_new_tokens: int = 32
    #: Degraded service: the engine should spend fewer vision tokens (dropping the patches
    #: the request marks as uniform, or downscaling the frame).
    reduce_vision: bool = False
    #: The degradation level the scheduler chose (0 = full service).
    level: int = 0


@dataclass(frozen=True)
class InferenceResult:
    """An engine's answer for one item."""

    output: str
    scores: dict[str, float]
    #: Output tokens generated (0 for engines that do not generate).
    tokens: int = 0
    #: Seconds this item spent in the engine (the batch's time when it ran in a batch).
    infer_s: float = 0.0


@dataclass(frozen=True)
class ItemFailure:
    """The engine could not process this item on its own; it will be dead-lettered."""

    reason: str


ItemResult = InferenceResult | ItemFailure


class Engine(ABC):
    """Base of every inference engine."""

    #: The engine's name, as reported in responses and metrics.
    name: str = "engine"

    def __init__(self, *, timeout_s: float = 2.0, telemetry: Telemetry | None = None,
                 pool: str = "") -> None:
        self.timeout_s = timeout_s
        self.telemetry = telemetry
        self.pool = pool
        self._started = False

    @property
    def capabilities(self) -> Capabilities:
        """What this engine can do (override to declare more)."""
        return Capabilities()

    async def start(self) -> None:
        """Load the model; idempotent."""
        if not self._started:
            await self._start()
            self._started = True

    async def close(self) -> None:
        """Release the model; idempotent."""
        if self._started:
            self._started = False
            await self._close()

    async def infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        """Run one batch; return one result per item, in order.

        When the engine fails on a batch of several items with a non-retriable error, each
        item is retried alone, and the ones that still fail come back as
        :class:`ItemFailure` (a poison item must not take its batch down with it).

        Raises:
            EngineTimeout: The batch took longer than ``timeout_s`` (retriable).
            EngineError: The engine failed in a way a retry may fix (``retriable``), or is
                not started.
        """
        if not self._started:
            raise EngineError(f"engine {self.name} is not started")
        if not batch:
            return []
        try:
            return await self._timed(batch)
        except EngineError as error:
            if error.retriable:
                raise
            if len(batch) == 1:
                return [ItemFailure(str(error))]
            log.warning("%s failed on a batch of %d, retrying one by one: %s",
                        self.name, len(batch), error, extra={"pool": self.pool})
        results: list[ItemResult] = []
        for item in batch:
            try:
                results.extend(await self._timed([item]))
            except EngineError as error:
                if error.retriable:
                    raise
                results.append(ItemFailure(str(error)))
        return results

    async def _timed(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        begin = time.perf_counter()
        try:
            results = await asyncio.wait_for(self._infer(batch), self.timeout_s)
        except TimeoutError:
            raise EngineTimeout(
                f"{self.name} took longer than {self.timeout_s:.3f} s on {len(batch)} items"
            ) from None
        except EngineError:
            raise
        except (RuntimeError, ValueError, ArithmeticError, MemoryError, TypeError) as exc:
            raise EngineError(f"{self.name} failed on {len(batch)} items: {exc!r}") from exc
        if len(results) != len(batch):
            raise EngineError(f"{self.name} returned {len(results)} results for {len(batch)}")
        elapsed = time.perf_counter() - begin
        timed: list[ItemResult] = [
            replace(r, infer_s=elapsed) if isinstance(r, InferenceResult) and not r.infer_s
            else r for r in results]
        if self.telemetry is not None:
            for item, result in zip(batch, timed, strict=True):
                if isinstance(result, InferenceResult):
                    self.telemetry.stage("infer", result.infer_s, route=item.request.route,
                                         pool=self.pool,
                                         slo_class=item.request.window.slo_class)
        return timed

    async def _start(self) -> None:  # noqa: B027 - optional hook
        """Load weights, warm up. Default: nothing to do."""

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Default: nothing to do."""

    @abstractmethod
    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        """Run the model on a batch; one result per item, in order."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def probe_request(width: int = 128, height: int = 96) -> Request:
    """A full-route request with a noise frame, for warming engines up and timing them."""
    t0 = 1_700_000_000_000_000
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    frame = VideoToken(stream_id="probe", seq=0, t_us=t0, format="rgb24", width=width,
                       height=height, data=pixels.tobytes())
    window = Window(stream_id="probe", window_seq=0, t_start_us=t0, t_end_us=t0 + 33_000,
                    anchor_t_us=t0, slo_class="probe",
                    modalities={Modality.VIDEO: ModalityState(present=True, confidence=1.0)},
                    missing=[], members={Modality.VIDEO: [0]}, video=frame,
                    timeline=Timeline(capture_us=t0))
    return Request(window=window, route="full", pool="probe", priority=0.0,
                   deadline_us=t0 + 1_000_000)
