"""SLA telemetry: the Prometheus metrics of DESIGN.md and exact recent percentiles.

One :class:`Telemetry` per process, built on its own registry (no import-time
registration). Each observation goes to the Prometheus histogram and to a bounded ring of
recent samples, from which :meth:`Telemetry.snapshot` reports exact P50/P99 for the
CLI's summary.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

STAGES: Final = ("publish", "transport", "align", "route", "queue", "infer", "respond", "e2e")
#: Fine enough to resolve a 12 ms P99: 0.1 ms steps at the low end.
LATENCY_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.006,
    0.007, 0.008, 0.009, 0.010, 0.011, 0.012, 0.013, 0.015, 0.0175, 0.02, 0.025, 0.03,
    0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.0, 5.0, 10.0,
)
BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_RING = 65_536


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
    """The metrics of one process."""

    def __init__(self, stage_budget_s: float = 0.012,
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stage_budget_s = stage_budget_s
        r = self.registry
        self.stage_latency = Histogram(
            "lockstep_stage_latency_seconds", "Latency of one pipeline stage.",
            ["stage", "route", "pool"], buckets=LATENCY_BUCKETS, registry=r)
        self.e2e_latency = Histogram(
            "lockstep_e2e_latency_seconds",
            "Capture time of the newest token in a window to response produced.",
            ["route", "slo_class"], buckets=LATENCY_BUCKETS, registry=r)
        self.slo_violations = Counter(
            "lockstep_slo_violations", "Observations over their stage or e2e budget.",
            ["stage", "slo_class"], registry=r)
        self.windows = Counter("lockstep_windows", "Windows routed.", ["route"], registry=r)
        self.tokens = Counter("lockstep_tokens", "Tokens by final outcome.",
                              ["modality", "outcome"], registry=r)
        self.batch_size = Histogram("lockstep_batch_size", "Requests per engine batch.",
                                    ["pool"], buckets=BATCH_BUCKETS, registry=r)
        self.queue_depth = Gauge("lockstep_queue_depth", "Requests waiting for an engine.",
                                 ["pool"], registry=r)
        self.consumer_lag = Gauge("lockstep_consumer_lag", "Records behind the log end.",
                                  ["topic", "group"], registry=r)
        self.token_drop = Histogram(
            "lockstep_token_drop_ratio", "Share of a window's image patches marked droppable.",
            ["route"], buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0), registry=r)
        self.align_fps = Gauge(
            "lockstep_align_fps", "Frame rate over streams: effective (captured) and target "
            "(windows emitted; lower while the SLA is at risk).", ["kind"], registry=r)
        self.clock_offset = Gauge(
            "lockstep_align_clock_offset_ms", "Mean clock offset of a modality against video, "
            "configured or estimated.", ["modality"], registry=r)
        self.clock_jitter = Gauge(
            "lockstep_align_clock_jitter_ms", "Mean timestamp jitter (residual sigma) of a "
            "modality's recovered capture clock.", ["modality"], registry=r)
        self._rings: dict[str, _Ring] = {}
        self._e2e_total = 0
        self._e2e_met = 0
        self._lock = threading.Lock()

    def stage(self, stage: str, seconds: float, *, route: str = "", pool: str = "",
              slo_class: str = "") -> None:
        """Record one latency observation of a pipeline stage."""
        self.stage_latency.labels(stage, route, pool).observe(seconds)
        if seconds > self.stage_budget_s and stage not in ("infer", "e2e"):
            self.slo_violations.labels(stage, slo_class).inc()
        self._ring(stage).add(seconds)

    def e2e(self, seconds: float, *, route: str, slo_class: str, budget_s: float) -> None:
        """Record one end-to-end latency against its SLO class budget."""
        self.e2e_latency.labels(route, slo_class).observe(seconds)
        self._ring("e2e").add(seconds)
        met = seconds <= budget_s
        if not met:
            self.slo_violations.labels("e2e", slo_class).inc()
        with self._lock:
            self._e2e_total += 1
            self._e2e_met += met

    def token(self, modality: str, outcome: str, n: int = 1) -> None:
        """Count tokens by outcome: window, late, deadletter, duplicate."""
        self.tokens.labels(modality, outcome).inc(n)

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
        """Fraction of responses within their class's e2e budget (None before any)."""
        return self._e2e_met / self._e2e_total if self._e2e_total else None

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; return the bound port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)
