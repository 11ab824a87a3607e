"""The batching benchmark's table (``lockstep bench batching`` without ``--json``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.bench.cells import spread_cell, table
from lockstep.bench.machine import machine_line

ROWS = (("SLO attainment", "slo_attainment", "pct"),
        ("  high priority", "slo_attainment_high", "pct"),
        ("latency p50", "p50_ms", "ms"), ("latency p99", "p99_ms", "ms"),
        ("items/s", "items_per_s", "rate"),
        ("  / capacity", "items_per_capacity", "pct"),
        ("expired (shed)", "expired", "n"), ("failed", "failed", "n"),
        ("unanswered", "unanswered", "n"),
        ("replay late p99", "lateness_p99_ms", "ms"),
        ("  max", "lateness_max_ms", "ms"))


def render_batching(report: Mapping[str, Any], *, markdown: bool = False) -> str:
    """Policies side by side (median and min-max of the repetitions), ratios, verdict."""
    cal = report["calibration"]
    lat = cal["batch_latency_p95_ms"]
    cap = cal["capacity_items_per_s"]
    seeds = report["seeds"]
    lines = [
        f"lockstep bench batching: {len(seeds)} repetitions (seeds "
        f"{', '.join(map(str, seeds))}) of {report['seconds']:g} s traces, "
        f"{spread_cell(report['requests'], 'n')} requests each, on the {report['engine']} "
        f"engine; policies interleaved",
        f"calibration: {cal['runs']} runs, capacity {spread_cell(cap, 'rate')} items/s "
        f"({'stable' if cal['stable'] else 'UNSTABLE'}: within "
        f"{cal['stable_within'] * 100:.0f} % required); trace sized from P95 "
        f"{', '.join(f'{v:.1f} ms at {k}' for k, v in lat.items())} "
        f"= {cal['capacity_used']:,.0f} items/s; load {report['load']:g} + bursts of "
        f"{report['trace']['burst_size']:g} x {report['max_batch']} every "
        f"~{report['trace']['burst_every_s']:g} s; max queue delay "
        f"{report['max_queue_delay_ms']:g} ms",
        f"machine: {machine_line(report['machine'])}",
        "",
    ]
    policies = report["policies"]
    rows = [[label, *(spread_cell(report[key][p], kind) for p in policies)]
            for label, key, kind in ROWS]
    lines += table(["", *policies], rows, markdown=markdown)
    ratios = report["ratios"]
    if ratios:
        lines += ["", f"lockstep vs fifo: attainment "
                      f"{spread_cell(ratios['attainment_minus_fifo'], 'pts')} points "
                      f"(high priority {spread_cell(ratios['attainment_high_minus_fifo'], 'pts')})"
                      f", items/s {spread_cell(ratios['items_per_s_vs_fifo'], 'x')}"]
    lines += ["", f"verdict: {report['verdict']['text']}"]
    return "\n".join(lines)
