"""The engine interface.

The public :meth:`Engine.infer` owns the timeout, the ``infer`` latency metric and the
mapping of failures to :class:`~lockstep.errors.EngineError`; engines implement
:meth:`Engine._infer`. Lifecycles are explicit: ``async with engine:`` or
``await engine.start()`` … ``await engine.close()``.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from lockstep.errors import EngineError, EngineTimeout
from streams.telemetry import Telemetry
from topics.schemas import Request


@dataclass(frozen=True)
class InferenceResult:
    """An engine's answer for one request."""

    output: str
    scores: dict[str, float]


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

    async def infer(self, batch: Sequence[Request]) -> list[InferenceResult]:
        """Run one batch; return one result per request, in order.

        Raises:
            EngineTimeout: The batch took longer than ``timeout_s``.
            EngineError: The engine failed or returned the wrong number of results.
        """
        if not self._started:
            raise EngineError(f"engine {self.name} is not started")
        if not batch:
            return []
        begin = time.perf_counter()
        try:
            results = await asyncio.wait_for(self._infer(batch), self.timeout_s)
        except TimeoutError:
            raise EngineTimeout(
                f"{self.name} took longer than {self.timeout_s:.3f} s on {len(batch)} requests"
            ) from None
        except EngineError:
            raise
        except (RuntimeError, ValueError, ArithmeticError, MemoryError) as exc:
            raise EngineError(f"{self.name} failed on {len(batch)} requests: {exc!r}") from exc
        if len(results) != len(batch):
            raise EngineError(f"{self.name} returned {len(results)} results for {len(batch)}")
        if self.telemetry is not None:
            elapsed = time.perf_counter() - begin
            for request in batch:
                self.telemetry.stage("infer", elapsed, route=request.route, pool=self.pool)
        return results

    async def _start(self) -> None:  # noqa: B027 - optional hook
        """Load weights, warm up. Default: nothing to do."""

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Default: nothing to do."""

    @abstractmethod
    async def _infer(self, batch: Sequence[Request]) -> list[InferenceResult]:
        """Run the model on a batch."""

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
