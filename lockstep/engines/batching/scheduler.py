"""Deadline- and priority-aware dynamic batching (the ``queue`` stage), as pure policies.

A policy holds the admission queue of one pool and decides, each time it is polled with the
current time and the engine's free slots, which requests to shed and which batch to
dispatch (:mod:`lockstep.engines.batching.policy`: the interface, the types and the baselines).
Nothing here reads a clock or touches Kafka; :mod:`lockstep.engines.batching.dispatcher` drives a
policy against a real engine, and the bench drives the three policies on the same trace.

:class:`DeadlineScheduler` (Lockstep's):

- Order: earliest *virtual* deadline first, where a request's priority moves its deadline
  forward by up to ``priority_lead_us``; equal deadlines go to the higher priority, then to
  the earlier arrival.
- Dispatch when the batch is full, when the most urgent request's slack falls below the
  engine's expected latency for a batch one larger than now (P95, from
  :class:`~lockstep.engines.batching.latency.LatencyModel`) plus a margin, when the oldest request
  has waited ``max_queue_delay_us``, when a request to be batched is within the margin of its
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

:func:`make_policy` names the three: ``lockstep`` (this one), ``fifo``
(:class:`~lockstep.engines.batching.policy.FifoBatcher`, the Triton-style baseline) and ``batch1``
(:class:`~lockstep.engines.batching.policy.SingleBatcher`).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from lockstep.engines.base import WorkItem
from lockstep.engines.batching.latency import LatencyModel
from lockstep.engines.batching.policy import (
    Batch,
    BatchPolicy,
    Decision,
    FifoBatcher,
    H,
    Pending,
    PolicyQueue,
    SchedulerConfig,
    SingleBatcher,
    share_budget,
)
from lockstep.topics.schemas import Request


class DeadlineScheduler(PolicyQueue[H]):
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


def make_policy(name: str, config: SchedulerConfig,
                latency: LatencyModel | None = None) -> BatchPolicy[H]:
    """The policy called ``name``: ``lockstep``, ``fifo`` or ``batch1``."""
    policies: dict[str, type[PolicyQueue[H]]] = {
        "lockstep": DeadlineScheduler, "fifo": FifoBatcher, "batch1": SingleBatcher}
    try:
        return policies[name](config, latency)  # type: ignore[return-value]
    except KeyError:
        raise ValueError(f"unknown batching policy {name!r}; choose from "
                         f"{', '.join(policies)}") from None
