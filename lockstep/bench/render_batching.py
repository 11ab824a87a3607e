"""The batching benchmark's table (``lockstep bench batching`` without ``--json``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.bench.batching import POLICIES


def _cell(value: float | None, kind: str) -> str:
    if value is None:
        return "-"
    return {"pct": f"{value * 100:.1f} %", "ms": f"{value:.1f} ms",
            "rate": f"{value:,.1f}", "n": f"{value:,.0f}"}[kind]


def render_batching(report: Mapping[str, Any]) -> str:
    """Policies side by side, then the ratios against the FIFO batcher."""
    rows = [("SLO attainment", "slo_attainment", "pct"),
            ("  high priority", "slo_attainment_high", "pct"),
            ("latency p50", "p50_ms", "ms"), ("latency p99", "p99_ms", "ms"),
            ("items/s", "items_per_s", "rate"), ("expired (shed)", "expired", "n"),
            ("failed", "failed", "n"), ("unanswered", "unanswered", "n")]
    lat = report["batch_latency_p95_ms"]
    lines = [
        f"lockstep bench batching: {report['requests']} requests over {report['seconds']:g} s "
        f"on the {report['engine']} engine (seed {report['seed']})",
        f"engine P95 batch latency {', '.join(f'{v:.1f} ms at {k}' for k, v in lat.items())}; "
        f"capacity {report['capacity_items_per_s']:,.0f} items/s; load {report['load']:g} "
        f"+ bursts; max_batch {report['max_batch']}, "
        f"max queue delay {report['max_queue_delay_ms']:g} ms",
        "",
        f"{'':<18}" + "".join(f"{p:>14}" for p in POLICIES),
    ]
    for label, key, kind in rows:
        lines.append(f"{label:<18}" + "".join(f"{_cell(report[key][p], kind):>14}"
                                              for p in POLICIES))
    ratios = report["ratios"]
    if ratios["items_per_s_vs_fifo"] is not None:
        lines += ["", f"lockstep vs fifo: attainment {ratios['attainment_minus_fifo'] * 100:+.1f}"
                      f" points, items/s x{ratios['items_per_s_vs_fifo']:.2f}"]
    return "\n".join(lines)
