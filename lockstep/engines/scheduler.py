"""Deadline- and priority-aware dynamic batching (the ``queue`` stage), as pure policies.

A policy holds the admission queue of one pool and decides, each time it is polled with the
current time and the engine's free slots, which requests to shed and which batch to
dispatch. Nothing here reads a clock or touches Kafka; :mod:`lockstep.engines.dispatcher` drives a
policy against a real engine, and the bench drives the three below on the same trace.

:class:`DeadlineScheduler` (Lockstep's):

- Order: earliest *virtual* deadline first, where a request's priority moves its deadline
  forward by up to ``priority_lead_us``; equal deadlines go to the higher priority, then to
  the earlier arrival.
- Dispatch when the batch is full, when the most urgent request's slack falls below the
  engine's expected latency for a batch one larger than now (P95, from
  :class:`~lockstep.engines.latency.LatencyModel`) plus a margin, when the oldest request has
  waited ``max_queue_delay_us``, when a request to be batched is within the margin of its
  ``queue`` stage budget (counted from route's receipt, when the worker sets one), or at
  once when the engine is free and, at the arrival rate of about the last second, not even
  one more request is expected before the batch would be due, or
  the engine serving batches of the queued size would be busy at most half the time
  (batching saves engine time only where it is short).
- Batch formation: among the candidates "the first n requests that finish in time in a
  batch of n" at each degradation level (fewer output tokens, fewer vision tokens), take
  the one that strands the fewest requests (left out and unable to finish even in the
  next batch), then the one that serves the most; a degraded batch shares its level's token
  budget by uncertainty (``entropy * (1 - confidence)``, at least one token each).
- Shedding: a request that cannot finish in time even alone at the most degraded level is
  returned as expired (the worker answers it with status ``expired``), never dropped.

:class:`FifoBatcher` is the Triton-style baseline (arrival order, dispatch when full or
after a fixed max queue delay, no shedding); :class:`SingleBatcher` dispatches each request
alone, in arrival order.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import numpy as np

from lockstep.engines.base import WorkItem
from lockstep.engines.latency import LatencyModel
from lockstep.streams.worker_settings import WorkerSettings
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


class _Queue(Generic[H]):
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


class DeadlineScheduler(_Queue[H]):
    """Lockstep's policy: EDF with priority lead, latency-model dispatch, degrade, shed."""

    name = "lockstep"
    #: Time constant of the arrival-rate estimate, µs: arrivals count with weight
    #: ``exp(-age / RATE_HORIZON_US)``.
    RATE_HORIZON_US = 1_000_000
    #: Arrivals seen before the rate is trusted.
    MIN_GAPS = 8
    #: Engine busy share below which a free engine serves what is queued at once.
    LIGHT_LOAD = 0.5

    def __init__(self, config: SchedulerConfig, latency: LatencyModel | None = None) -> None:
        super().__init__(config, latency)
        # Arrivals counted with a weight decaying over RATE_HORIZON_US (their weight at the
        # last arrival): a rate over time, not an average of gaps. Requests come in bursts
        # (a consumer's fetch admits tens at once, then nothing until the next fetch), so
        # an average over the last few gaps mostly saw the burst's microseconds and took a
        # load the engine kept up with for one worth waiting for company.
        self._weight = 0.0
        self._first_arrival_us: int | None = None
        self._last_arrival_us: int | None = None
        self._gaps = 0

    def admit(self, handle: H, request: Request, now_us: int) -> None:
        """Queue a request in virtual-deadline order."""
        last = self._last_arrival_us
        if last is None:
            self._first_arrival_us = now_us
        else:
            self._gaps += 1
            self._weight *= math.exp(-max(0, now_us - last) / self.RATE_HORIZON_US)
        self._weight += 1.0
        self._last_arrival_us = max(now_us, last or now_us)
        lead = int(request.priority * self.config.priority_lead_us)
        order = (request.deadline_us - lead, -request.priority, next(self._arrivals))
        bisect.insort(self._queue, self._pending(handle, request, now_us, order),
                      key=lambda p: p.order)

    def poll(self, now_us: int, free_slots: int) -> Decision[H]:
        """Shed hopeless requests; dispatch a batch if a trigger fires."""
        cfg = self.config
        expired = self._shed(now_us) if cfg.shed else []
        queue = self._queue
        if not queue:
            return Decision(None, expired, None)
        wake = self._earliest_expiry()
        if free_slots <= 0:
            return Decision(None, expired, wake)
        n = min(len(queue), cfg.max_batch)
        head_deadline = min(p.request.deadline_us for p in queue[:n])
        oldest = min(p.arrived_us for p in queue)
        grow = self.latency.expected_us(min(n + 1, cfg.max_batch)) + cfg.margin_us
        due = min(head_deadline - grow, oldest + cfg.max_queue_delay_us)
        if cfg.queue_budget_us is not None:
            # Company is worth waiting for only within the queue stage's own budget: it
            # began at route's receipt, and the hop here has used part of it already.
            routed = min(p.request.window.timeline.routed_us for p in queue[:n])
            due = min(due, routed + cfg.queue_budget_us - cfg.margin_us)
        if n < cfg.max_batch and now_us < due and not self._go_now(n, due - now_us, now_us):
            return Decision(None, expired, due if wake is None else min(due, wake))
        batch = self._form(now_us)
        return Decision(batch, expired, None)

    def _go_now(self, n: int, slack_us: int, now_us: int) -> bool:
        """Whether waiting for company cannot pay, with the engine free and ``n`` queued.

        It cannot when fewer than one arrival is expected before the batch is due, and it
        need not when the engine, serving batches of ``n`` at the recent arrival rate, would
        be busy at most :attr:`LIGHT_LOAD` of the time: batching then saves engine time
        nobody is short of, and the wait is pure latency. Under load the queue fills while
        the engine runs, so batches still grow where they must.
        """
        if self._gaps < self.MIN_GAPS:
            return False  # unknown rate: assume company comes
        gap_us = self.mean_gap_us(now_us)
        if slack_us < gap_us:
            return True
        return self.latency.expected_us(n) <= self.LIGHT_LOAD * n * gap_us

    def mean_gap_us(self, now_us: int) -> float:
        """The mean time between arrivals over about the last :attr:`RATE_HORIZON_US`.

        The decayed arrival count over the time it covers (the horizon, or the time since
        the first arrival while that is shorter); infinite before any arrival.
        """
        first, last = self._first_arrival_us, self._last_arrival_us
        if first is None or last is None:
            return math.inf
        tau = self.RATE_HORIZON_US
        weight = self._weight * math.exp(-max(0, now_us - last) / tau)
        covered = tau * -math.expm1(-max(1, now_us - first) / tau)
        return covered / weight

    def _alone_us(self) -> int:
        """The fastest a request can still be served: alone, at the most degraded level."""
        return self.latency.expected_us(1, self.config.levels[-1])

    def _shed(self, now_us: int) -> list[Pending[H]]:
        alone = self._alone_us()
        keep: list[Pending[H]] = []
        expired: list[Pending[H]] = []
        for p in self._queue:
            (expired if p.request.deadline_us < now_us + alone else keep).append(p)
        if expired:
            self._queue = keep
        return expired

    def _earliest_expiry(self) -> int | None:
        if not self.config.shed or not self._queue:
            return None
        return min(p.request.deadline_us for p in self._queue) - self._alone_us() + 1

    def _form(self, now_us: int) -> Batch[H]:
        cfg = self.config
        queue = self._queue
        reachable = min(len(queue), cfg.max_batch)
        level, members = self._choose(now_us)
        if not members:  # nothing can make it (shedding off): serve the most urgent anyway
            members, level = queue[:reachable], 0
        chosen = {id(p) for p in members}
        self._queue = [p for p in queue if id(p) not in chosen]
        if level == 0:
            return self._full_service(members)
        cap = cfg.tokens_at(level)
        tokens = share_budget([p.uncertainty for p in members], cap * len(members), cap)
        items = [WorkItem(p.request, max_new_tokens=t, reduce_vision=True, level=level)
                 for p, t in zip(members, tokens, strict=True)]
        return Batch(items, members, level, self.latency.expected_us(len(members), level))

    def _choose(self, now_us: int) -> tuple[int, list[Pending[H]]]:
        """The (level, members) that loses the fewest requests, then serves the most.

        Candidates, per level and batch size ``n``: the first ``n`` requests in order that
        finish in time in a batch of ``n``. A candidate *loses* the requests it leaves out
        that could not finish even in the batch after it (alone, at the most degraded
        level); losses and service are weighted by ``1 + priority``. Ties go to less
        degradation, then to the smaller (faster) batch.
        """
        cfg = self.config
        queue = self._queue
        deadlines = np.fromiter((p.request.deadline_us for p in queue), np.int64, len(queue))
        weights = np.fromiter((1.0 + p.request.priority for p in queue), np.float64,
                              len(queue))
        after = self._alone_us() + cfg.margin_us
        levels = list(cfg.levels)
        sizes = min(len(queue), cfg.max_batch)
        # Every candidate at once (a few array operations a call, not a few per candidate:
        # the worker forms hundreds of batches a second): row (level, n - 1) of each array.
        expected = np.array([[self.latency.expected_us(k, level) for k in range(1, sizes + 1)]
                             for level in levels], np.int64)
        fits = deadlines >= (now_us + expected + cfg.margin_us)[:, :, None]
        order = np.cumsum(fits, axis=2)
        took = fits & (order <= np.arange(1, sizes + 1)[None, :, None])
        count = took.sum(axis=2)
        done = now_us + np.take_along_axis(expected, np.maximum(count, 1) - 1, axis=1)
        stranded = ~took & (deadlines < (done + after)[:, :, None])
        lost = np.where(stranded, weights, 0.0).sum(axis=2).ravel()
        served = np.where(took, weights, 0.0).sum(axis=2).ravel()
        # The first candidate, in (level, n) order, that loses least and then serves most.
        fewest = np.flatnonzero(lost == lost.min())
        best = int(fewest[np.argmax(served[fewest])])
        level_index, n_index = divmod(best, sizes)
        return levels[level_index], [queue[i] for i in np.flatnonzero(took[level_index, n_index])]

    def _finish(self, n: int, level: int) -> int:
        return self.latency.expected_us(n, level) + self.config.margin_us


class FifoBatcher(_Queue[H]):
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


def make_policy(name: str, config: SchedulerConfig,
                latency: LatencyModel | None = None) -> BatchPolicy[H]:
    """The policy called ``name``: ``lockstep``, ``fifo`` or ``batch1``."""
    policies: dict[str, type[_Queue[H]]] = {
        "lockstep": DeadlineScheduler, "fifo": FifoBatcher, "batch1": SingleBatcher}
    try:
        return policies[name](config, latency)  # type: ignore[return-value]
    except KeyError:
        raise ValueError(f"unknown batching policy {name!r}; choose from "
                         f"{', '.join(policies)}") from None
