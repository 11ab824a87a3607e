"""Batching policies (the ``queue`` stage): the interface, its types, and the baselines.

A policy holds the admission queue of one pool and decides, each time it is polled with the
current time and the engine's free slots, which requests to shed and which batch to
dispatch (:class:`BatchPolicy`). Nothing here reads a clock or touches Kafka;
:mod:`lockstep.engines.batching.dispatcher` drives a policy against a real engine, and the bench
drives every policy on the same trace.

- :class:`SchedulerConfig`: the knobs (``worker`` settings); :class:`Pending`,
  :class:`Batch` and :class:`Decision`: what a policy holds and returns;
  :class:`PolicyQueue`: the queue, its bound and the latency model, shared by every policy.
- :class:`FifoBatcher` is the Triton-style baseline (arrival order, dispatch when full or
  after a fixed max queue delay, no shedding); :class:`SingleBatcher` dispatches each
  request alone, in arrival order. Lockstep's own policy is
  :class:`~lockstep.engines.batching.scheduler.DeadlineScheduler`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from lockstep.config.worker import WorkerSettings
from lockstep.engines.base import WorkItem
from lockstep.engines.batching.latency import LatencyModel
from lockstep.topics.schemas import Request

H = TypeVar("H")


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of a batching policy (see ``worker`` settings)."""

    max_batch: int = 16
    #: Admission bound: the worker stops fetching (pauses partitions) at this depth.
    max_queue: int = 256
    #: Dispatch once the oldest queued request has waited this long.
    max_queue_delay_us: int = 20_000
    #: Safety margin on top of the expected batch latency.
    margin_us: int = 3_000
    #: How far a priority of 1.0 moves a request's deadline forward in the order.
    priority_lead_us: int = 10_000
    #: Output tokens at full service.
    full_tokens: int = 32
    #: Token budget of each degradation level, as a fraction of ``full_tokens``.
    token_fractions: tuple[float, ...] = (1.0, 0.5, 0.25)
    degrade: bool = True
    shed: bool = True
    #: The ``queue`` stage's P99 budget, µs, when the requests carry route's receipt time
    #: (``timeline.routed_us``) on the scheduler's clock: a request is not held for company
    #: past ``routed_us + queue_budget_us - margin_us``. None: no such bound (a trace).
    queue_budget_us: int | None = None

    @classmethod
    def from_settings(cls, settings: WorkerSettings, max_batch: int, *,
                      queue_budget_ms: float | None = None) -> SchedulerConfig:
        """The knobs of the worker settings, ``max_batch`` capped by the engine's."""
        return cls(
            max_batch=max_batch, max_queue=settings.max_queue,
            max_queue_delay_us=int(settings.max_wait_ms * 1000),
            margin_us=int(settings.margin_ms * 1000),
            priority_lead_us=int(settings.priority_lead_ms * 1000),
            full_tokens=settings.max_new_tokens, token_fractions=settings.degrade_fractions,
            degrade=settings.degrade, shed=settings.shed,
            queue_budget_us=None if queue_budget_ms is None else int(queue_budget_ms * 1000))

    @property
    def levels(self) -> range:
        """The degradation levels a policy may use (full service alone without degrading)."""
        return range(len(self.token_fractions)) if self.degrade else range(1)

    def tokens_at(self, level: int) -> int:
        """Output tokens per item at a degradation level."""
        return max(1, round(self.full_tokens * self.token_fractions[level]))


@dataclass(slots=True)
class Pending(Generic[H]):
    """A queued request and the handle the caller acknowledges once it is answered."""

    handle: H
    request: Request
    arrived_us: int
    order: tuple[int, float, int]
    uncertainty: float


@dataclass(frozen=True)
class Batch(Generic[H]):
    """A batch to run: work items and their handles, in the same order."""

    items: list[WorkItem]
    members: list[Pending[H]]
    level: int
    expected_us: int


@dataclass(frozen=True)
class Decision(Generic[H]):
    """What to do now: a batch to dispatch (or None), requests to shed, when to poll again."""

    batch: Batch[H] | None = None
    expired: list[Pending[H]] = field(default_factory=list)
    #: Poll again at this time even if nothing arrives (None: only on arrival).
    wake_us: int | None = None


class BatchPolicy(Protocol[H]):
    """The interface the dispatcher drives."""

    name: str
    config: SchedulerConfig
    latency: LatencyModel

    def admit(self, handle: H, request: Request, now_us: int) -> None:
        """Queue a request (the caller keeps the depth under ``max_queue``)."""

    def poll(self, now_us: int, free_slots: int) -> Decision[H]:
        """Decide what to shed and dispatch now."""

    @property
    def depth(self) -> int:
        """Requests waiting."""

    @property
    def full(self) -> bool:
        """Whether admission must stop (backpressure)."""

    def withdraw(self, drop: Callable[[H], bool]) -> list[Pending[H]]:
        """Take the queued requests whose handle ``drop`` selects out of the queue."""


def uncertainty(request: Request) -> float:
    """``H(c) * (1 - c)`` of the gate's confidence ``c`` (binary entropy, bits)."""
    c = request.confidence.get("gate")
    if c is None:
        present = [s.confidence for s in request.window.modalities.values()
                   if s.present and s.confidence is not None]
        c = sum(present) / len(present) if present else 0.5
    if c <= 0.0 or c >= 1.0:
        return 0.0 if c >= 1.0 else 1.0
    entropy = -(c * math.log2(c) + (1.0 - c) * math.log2(1.0 - c))
    return entropy * (1.0 - c)


def share_budget(weights: Sequence[float], total: int, cap: int) -> list[int]:
    """Split ``total`` tokens in proportion to ``weights``: at least 1 and at most ``cap`` each.

    Equal shares when every weight is zero.
    """
    n = len(weights)
    mass = sum(weights)
    if mass <= 0.0:
        return [max(1, min(cap, total // max(n, 1)))] * n
    return [max(1, min(cap, round(total * w / mass))) for w in weights]


class PolicyQueue(Generic[H]):
    """Shared bookkeeping: the queue, its bound and the latency model."""

    name = "policy"

    def __init__(self, config: SchedulerConfig, latency: LatencyModel | None = None) -> None:
        self.config = config
        self.latency = latency or LatencyModel(token_fractions=config.token_fractions)
        self._queue: list[Pending[H]] = []
        self._arrivals = itertools.count()

    @property
    def depth(self) -> int:
        """Requests waiting."""
        return len(self._queue)

    @property
    def full(self) -> bool:
        """Whether admission must stop (backpressure)."""
        return len(self._queue) >= self.config.max_queue

    def withdraw(self, drop: Callable[[H], bool]) -> list[Pending[H]]:
        """Take the queued requests whose handle ``drop`` selects out of the queue.

        The others keep their order. (A worker gives back the requests of partitions it
        no longer owns: their next owner reads them again.)
        """
        kept: list[Pending[H]] = []
        taken: list[Pending[H]] = []
        for p in self._queue:
            (taken if drop(p.handle) else kept).append(p)
        self._queue = kept
        return taken

    def _pending(self, handle: H, request: Request, now_us: int,
                 order: tuple[int, float, int]) -> Pending[H]:
        return Pending(handle, request, now_us, order, uncertainty(request))

    def _full_service(self, members: list[Pending[H]]) -> Batch[H]:
        tokens = self.config.tokens_at(0)
        items = [WorkItem(p.request, max_new_tokens=tokens) for p in members]
        return Batch(items, members, 0, self.latency.expected_us(len(members)))


class FifoBatcher(PolicyQueue[H]):
    """Triton-style: arrival order, dispatch when full or after a fixed max queue delay."""

    name = "fifo"

    def admit(self, handle: H, request: Request, now_us: int) -> None:
        """Queue a request at the back."""
        self._queue.append(self._pending(handle, request, now_us, (0, 0.0, 0)))

    def poll(self, now_us: int, free_slots: int) -> Decision[H]:
        """Dispatch the head of the queue when full or when it has waited long enough."""
        if not self._queue:
            return Decision()
        due = self._queue[0].arrived_us + self.config.max_queue_delay_us
        if free_slots <= 0 or (len(self._queue) < self.config.max_batch and now_us < due):
            return Decision(None, [], due if free_slots > 0 else None)
        members = self._queue[:self.config.max_batch]
        del self._queue[:self.config.max_batch]
        return Decision(self._full_service(members))


class SingleBatcher(FifoBatcher[H]):
    """Batch size 1, arrival order, no waiting."""

    name = "batch1"

    def poll(self, now_us: int, free_slots: int) -> Decision[H]:
        """Dispatch the oldest request alone whenever the engine is free."""
        if not self._queue or free_slots <= 0:
            return Decision()
        return Decision(self._full_service([self._queue.pop(0)]))
