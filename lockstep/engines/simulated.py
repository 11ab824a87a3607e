"""A simulated engine: sleeps for a latency profile and answers with what it was given.

For capacity planning and for the batching bench on machines without the cpu extra: its
batch latency is ``fixed + per_item * n + per_token * max_new_tokens`` (vision tokens cost
``vision_share`` of the fixed part, saved at degraded levels), with optional log-normal
jitter. It is not selectable as a worker engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from lockstep.engines.base import Capabilities, Engine, InferenceResult, ItemResult, WorkItem


class SimulatedEngine(Engine):
    """Sleeps like a batching accelerator would take."""

    name = "simulated"

    def __init__(self, *, fixed_s: float = 0.012, per_item_s: float = 0.0015,
                 per_token_s: float = 0.0004, vision_share: float = 0.3,
                 jitter: float = 0.0, max_batch: int = 64, seed: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fixed_s, self.per_item_s, self.per_token_s = fixed_s, per_item_s, per_token_s
        self.vision_share, self.jitter = vision_share, jitter
        self._max_batch = max_batch
        self._rng = np.random.default_rng(seed)
        self.batches: list[int] = []

    @property
    def capabilities(self) -> Capabilities:
        """Static batches up to ``max_batch``; degradable."""
        return Capabilities(max_batch=self._max_batch, degradable=True)

    def latency_s(self, batch: Sequence[WorkItem]) -> float:
        """The batch's latency before jitter."""
        fixed = self.fixed_s
        if all(item.reduce_vision for item in batch):
            fixed -= self.fixed_s * self.vision_share * 0.75  # a quarter of the vision tokens
        steps = max(item.max_new_tokens for item in batch)
        return fixed + self.per_item_s * len(batch) + self.per_token_s * steps

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        self.batches.append(len(batch))
        delay = self.latency_s(batch)
        if self.jitter:
            delay *= float(self._rng.lognormal(0.0, self.jitter))
        await asyncio.sleep(delay)
        return [InferenceResult(output=_name(i), scores={}, tokens=i.max_new_tokens)
                for i in batch]


def _name(item: WorkItem) -> str:
    window = item.request.window
    return f"{window.stream_id}#{window.window_seq}"
