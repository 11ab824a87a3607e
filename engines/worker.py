"""The inference worker of one pool (the ``queue`` → ``infer`` stages).

Takes a batch of requests (the agent collects it with ``max_batch`` / ``max_wait``), runs
the engine once on it and turns the results into responses carrying the stage timeline.
The clock is passed in, so the worker is tested without Kafka or real time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engines.base import Engine
from streams.telemetry import Telemetry
from topics.schemas import Request, Response


class Worker:
    """Runs batches of requests through an engine."""

    def __init__(self, engine: Engine, telemetry: Telemetry, pool: str,
                 clock_us: Callable[[], int]) -> None:
        self.engine = engine
        self.telemetry = telemetry
        self.pool = pool
        self._clock_us = clock_us

    async def process(self, batch: Sequence[Request]) -> list[Response]:
        """Infer one batch and build one response per request, in order.

        Raises:
            EngineError: The engine failed on the batch (the caller decides to retry
                or dead-letter it).
        """
        if not batch:
            return []
        dequeued = self._clock_us()
        self.telemetry.batch_size.labels(self.pool).observe(len(batch))
        for request in batch:
            queued = dequeued - request.window.timeline.routed_us
            self.telemetry.stage("queue", queued / 1e6, route=request.route, pool=self.pool,
                                 slo_class=request.window.slo_class)
        results = await self.engine.infer(batch)
        inferred = self._clock_us()
        responses = []
        for request, result in zip(batch, results, strict=True):
            window = request.window
            timeline = window.timeline.model_copy(
                update={"dequeued_us": dequeued, "inferred_us": inferred})
            responses.append(Response(
                stream_id=window.stream_id, window_seq=window.window_seq, route=request.route,
                pool=request.pool, engine=self.engine.name, slo_class=window.slo_class,
                output=result.output, scores=result.scores, missing=window.missing,
                deadline_us=request.deadline_us, timeline=timeline, reason=request.reason,
            ))
        return responses
