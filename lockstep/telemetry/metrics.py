"""SLA telemetry: the Prometheus metrics of docs/observability.md and exact recent percentiles.

One :class:`Telemetry` per process, built on its own registry (no import-time
registration). Each observation goes to the Prometheus histogram and to a bounded ring of
recent samples, from which :meth:`Telemetry.snapshot` reports exact P50/P99 for the
CLI's summary, and, once :meth:`Telemetry.watch` is called, to the SLO breach detector
(:mod:`lockstep.telemetry.slo`).
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from lockstep.config.settings import SloSettings
from lockstep.errors import ConfigError
from lockstep.telemetry.slo import SloMonitor

STAGES: Final = ("publish", "transport", "align", "route", "queue", "infer", "respond", "e2e")
#: Fine enough to resolve a 12 ms P99 (1 ms steps around it), sub-millisecond ones (0.1 ms
#: steps below 0.5 ms) and seconds; every SLO class's default e2e budget is a bound.
LATENCY_BUCKETS: Final = (
    0.00005, 0.0001, 0.0002, 0.0003, 0.0004, 0.0005, 0.0006, 0.0008, 0.001, 0.0015, 0.002,
    0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.010, 0.011, 0.012, 0.013, 0.015,
    0.0175, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.12, 0.15, 0.2,
    0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0,
)
BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: The e2e latency a shed request counts with in breach detection: it got no answer, so
#: its latency is unbounded; the largest bucket bound stands for "over every budget".
SHED_LATENCY_S: Final = LATENCY_BUCKETS[-1]
_RING = 65_536


def monotonic_us() -> int:
    """The clock the SLO monitor's samples are taken on (monotonic, in microseconds)."""
    return time.monotonic_ns() // 1000


@dataclass(frozen=True)
class StageStats:
    """Exact statistics over the recent samples of one stage (milliseconds)."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class _Ring:
    def __init__(self, size: int = _RING) -> None:
        self._buf = np.zeros(size, dtype=np.float64)
        self._n = 0

    def add(self, value: float) -> None:
        self._buf[self._n % len(self._buf)] = value
        self._n += 1

    def stats(self) -> StageStats:
        data = self._buf[: min(self._n, len(self._buf))]
        if not len(data):
            return StageStats(0, 0.0, 0.0, 0.0)
        p50, p99 = np.percentile(data, [50, 99])
        return StageStats(self._n, float(p50) * 1e3, float(p99) * 1e3, float(data.max()) * 1e3)


class Telemetry:
    """The metrics of one process.

    Observations without an SLO class count for the default class (``slo.default_class``,
    given to :meth:`watch`), so every series carries a class that alerts can match on.
    """

    def __init__(self, stage_budget_s: float = 0.012,
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stage_budget_s = stage_budget_s
        self.default_class = SloSettings.model_fields["default_class"].default
        r = self.registry
        self.stage_latency = Histogram(
            "lockstep_stage_latency_seconds", "Latency of one pipeline stage.",
            ["stage", "route", "pool", "slo_class"], buckets=LATENCY_BUCKETS, registry=r)
        self.e2e_latency = Histogram(
            "lockstep_e2e_latency_seconds",
            "Capture time of the newest token in a window to response produced.",
            ["route", "slo_class"], buckets=LATENCY_BUCKETS, registry=r)
        self.slo_violations = Counter(
            "lockstep_slo_violations", "Observations over their stage or e2e budget.",
            ["stage", "slo_class"], registry=r)
        self.windows = Counter("lockstep_windows", "Windows routed.", ["route"], registry=r)
        self.duplicates = Counter(
            "lockstep_duplicates", "Second copies of a window or request, not acted on.",
            ["stage"], registry=r)
        self.tokens = Counter("lockstep_tokens", "Tokens by final outcome.",
                              ["modality", "outcome"], registry=r)
        self.batch_size = Histogram("lockstep_batch_size", "Requests per engine batch.",
                                    ["pool"], buckets=BATCH_BUCKETS, registry=r)
        self.queue_depth = Gauge("lockstep_queue_depth", "Requests waiting for an engine.",
                                 ["pool"], registry=r)
        self.queue_capacity = Gauge(
            "lockstep_queue_capacity", "Bound of a pool's admission queue (worker.max_queue): "
            "the worker stops fetching when lockstep_queue_depth reaches it.", ["pool"],
            registry=r)
        self.dead_letters = Counter(
            "lockstep_dead_letters", "Records dead-lettered, by the stage that rejected them "
            "and the kind of error (DecodeError, SchemaError, BadInput).", ["stage", "error"],
            registry=r)
        self.requests = Counter(
            "lockstep_requests", "Requests answered by a worker, by status (ok, expired: "
            "shed because it could no longer meet its deadline, failed: dead-lettered).",
            ["pool", "status"], registry=r)
        self.degraded = Counter(
            "lockstep_requests_degraded", "Requests served degraded (fewer output and vision "
            "tokens) to meet their deadline, by level.", ["pool", "level"], registry=r)
        self.consumer_lag = Gauge(
            "lockstep_consumer_lag", "Records between a group's committed offsets and the "
            "log end, summed over a topic's partitions (from the admin API).",
            ["topic", "group"], registry=r)
        self.e2e_expired = Counter(
            "lockstep_e2e_expired", "Requests shed unanswered (they count against the e2e "
            "SLO: the denominator of attainment is lockstep_e2e_latency_seconds_count plus "
            "this).", ["slo_class"], registry=r)
        self.replay_windows = Counter(
            "lockstep_replay_windows", "Windows of replayed media answered, by status: kept "
            "out of the e2e latency, attainment, expired and breach figures, which are about "
            "live media.", ["slo_class", "status"], registry=r)
        self.slo_breaches = Counter(
            "lockstep_slo_breaches", "Breaches raised: a stage's sliding-window P99 over its "
            "budget for consecutive evaluations (re-announcements not counted).",
            ["stage", "slo_class"], registry=r)
        self.slo_degraded = Gauge(
            "lockstep_slo_degraded", "1 while an SLO class runs in its degraded mode.",
            ["slo_class"], registry=r)
        self.slo_budget = Gauge(
            "lockstep_slo_budget_seconds", "P99 budget of each stage (and e2e) per SLO class.",
            ["stage", "slo_class"], registry=r)
        self.token_drop = Histogram(
            "lockstep_token_drop_ratio", "Share of a window's image patches marked droppable.",
            ["route"], buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0), registry=r)
        self.align_fps = Gauge(
            "lockstep_align_fps", "Frame rate over streams: effective (captured) and target "
            "(windows emitted; lower while the SLA is at risk).", ["kind"], registry=r)
        self.align_streams = Gauge(
            "lockstep_align_streams", "Streams whose state the align role holds (bounded by "
            "align.max_streams; idle ones are evicted after align.stream_ttl_ms).",
            registry=r)
        self.clock_offset = Gauge(
            "lockstep_align_clock_offset_ms", "Mean clock offset of a modality against video, "
            "configured or estimated.", ["modality"], registry=r)
        self.clock_jitter = Gauge(
            "lockstep_align_clock_jitter_ms", "Mean timestamp jitter (residual sigma) of a "
            "modality's recovered capture clock.", ["modality"], registry=r)
        self._rings: dict[str, _Ring] = {}
        self._e2e_budget_s: dict[str, float] = {}
        self._stage_children: dict[tuple[str, str, str, str], Any] = {}
        self._token_children: dict[tuple[str, str], Any] = {}
        self._violation_children: dict[tuple[str, str], Any] = {}
        self._e2e_total = 0
        self._e2e_met = 0
        self._lock = threading.Lock()
        self._slo: SloMonitor | None = None

    def watch(self, monitor: SloMonitor, budgets: Mapping[str, Mapping[str, float]], *,
              default_class: str | None = None) -> None:
        """Feed every stage and e2e observation to ``monitor`` from now on.

        Also creates the SLO series of every class at zero (violations and breaches per
        stage, shed requests, degraded mode), so that rates and ratios over them exist
        before the first miss.

        Args:
            monitor: The breach detector.
            budgets: Per SLO class, the P99 budget of each stage in milliseconds (exported
                as ``lockstep_slo_budget_seconds`` for dashboards and ``lockstep top``).
            default_class: The class of observations that name none (``slo.default_class``).
        """
        self._slo = monitor
        if default_class is not None:
            self.default_class = default_class
        for slo_class, tree in budgets.items():
            self.e2e_expired.labels(slo_class)
            self.slo_degraded.labels(slo_class)
            for stage, ms in tree.items():
                self.slo_budget.labels(stage, slo_class).set(ms / 1000.0)
                self.slo_violations.labels(stage, slo_class)
                self.slo_breaches.labels(stage, slo_class)
            if "e2e" in tree:
                self._e2e_budget_s[slo_class] = tree["e2e"] / 1000.0

    def stage(self, stage: str, seconds: float, *, route: str = "", pool: str = "",
              slo_class: str = "") -> None:
        """Record one latency observation of a pipeline stage (no class: the default)."""
        slo_class = slo_class or self.default_class
        key = (stage, route, pool, slo_class)
        child = self._stage_children.get(key)
        if child is None:  # label lookups cost more than the observation: bind once
            child = self._stage_children[key] = self.stage_latency.labels(*key)
        child.observe(seconds)
        if seconds > self.stage_budget_s and stage not in ("infer", "e2e"):
            self._violation(stage, slo_class).inc()
        self._ring(stage).add(seconds)
        if self._slo is not None:
            self._slo.observe(stage, slo_class, seconds, monotonic_us())

    def stages(self, stage: str, seconds: Sequence[float]) -> None:
        """Record many observations of one stage of the default class (a batch's transport).

        The same series as :meth:`stage` once per value, with one lookup and one lock a
        batch: the per-record stages run once per token.
        """
        if not seconds:
            return
        slo_class = self.default_class
        key = (stage, "", "", slo_class)
        child = self._stage_children.get(key)
        if child is None:
            child = self._stage_children[key] = self.stage_latency.labels(*key)
        observe, ring, budget = child.observe, self._ring(stage), self.stage_budget_s
        over = 0
        for value in seconds:
            observe(value)
            ring.add(value)
            over += value > budget
        if over and stage not in ("infer", "e2e"):
            self._violation(stage, slo_class).inc(over)
        if self._slo is not None:
            self._slo.observe_many(stage, slo_class, seconds, monotonic_us())

    def _violation(self, stage: str, slo_class: str) -> Any:
        child = self._violation_children.get((stage, slo_class))
        if child is None:
            child = self._violation_children[(stage, slo_class)] = self.slo_violations.labels(
                stage, slo_class)
        return child

    def e2e(self, seconds: float, *, route: str, slo_class: str, budget_s: float) -> None:
        """Record one end-to-end latency against its SLO class budget."""
        slo_class = slo_class or self.default_class
        self.e2e_latency.labels(route, slo_class).observe(seconds)
        self._ring("e2e").add(seconds)
        if self._slo is not None:
            self._slo.observe("e2e", slo_class, seconds, monotonic_us())
        met = seconds <= budget_s
        if not met:
            self.slo_violations.labels("e2e", slo_class).inc()
        with self._lock:
            self._e2e_total += 1
            self._e2e_met += met

    def expired(self, *, slo_class: str) -> None:
        """Count a request shed unanswered as a missed end-to-end SLO.

        It counts against attainment (here and in ``lockstep_slo_violations_total``) and,
        as an e2e sample of :data:`SHED_LATENCY_S`, in breach detection.
        """
        slo_class = slo_class or self.default_class
        self.slo_violations.labels("e2e", slo_class).inc()
        self.e2e_expired.labels(slo_class).inc()
        if self._slo is not None:
            self._slo.observe("e2e", slo_class, SHED_LATENCY_S, monotonic_us())
        with self._lock:
            self._e2e_total += 1

    def replay(self, *, slo_class: str, status: str) -> None:
        """Count an answered window of replayed media (instead of :meth:`e2e`, :meth:`expired`).

        Its capture time says nothing about the live pipeline's latency.
        """
        self.replay_windows.labels(slo_class or self.default_class, status).inc()

    def set_queue_capacity(self, pool: str, capacity: int) -> None:
        """Export the bound of ``pool``'s admission queue (alerts compare the depth with it)."""
        self.queue_capacity.labels(pool).set(capacity)

    def dead_letter(self, stage: str, error: str) -> None:
        """Count one dead-lettered record by stage and error kind (``type(error).__name__``)."""
        self.dead_letters.labels(stage, error).inc()

    def token(self, modality: str, outcome: str, n: int = 1) -> None:
        """Count tokens by outcome: window, late, deadletter, duplicate."""
        child = self._token_children.get((modality, outcome))
        if child is None:
            child = self._token_children[(modality, outcome)] = self.tokens.labels(
                modality, outcome)
        child.inc(n)

    def _ring(self, stage: str) -> _Ring:
        ring = self._rings.get(stage)
        if ring is None:
            with self._lock:
                ring = self._rings.setdefault(stage, _Ring())
        return ring

    def stage_stats(self) -> Mapping[str, StageStats]:
        """Exact P50/P99 of the recent samples of every stage seen, in DESIGN order."""
        order = {s: i for i, s in enumerate(STAGES)}
        return {s: self._rings[s].stats()
                for s in sorted(self._rings, key=lambda s: order.get(s, len(order)))}

    def slo_attainment(self) -> float | None:
        """Fraction of requests answered within their class's e2e budget (None before any).

        Shed requests count as missed.
        """
        with self._lock:
            return self._e2e_met / self._e2e_total if self._e2e_total else None

    def serve(self, host: str, port: int | None) -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; return the bound port.

        Args:
            host: The address to bind (``127.0.0.1``: this host only; ``0.0.0.0``: all).
            port: The port; 0 or None takes any free one.

        Raises:
            ConfigError: The port is taken, or the address is not this host's.
        """
        try:
            server, _thread = start_http_server(port or 0, addr=host, registry=self.registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"metrics port {port} is in use (set --metrics-port or "
                                  "LOCKSTEP_METRICS__PORT, 0 = any)") from None
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc} "
                              "(set LOCKSTEP_METRICS__HOST)") from None
        return int(server.server_port)
