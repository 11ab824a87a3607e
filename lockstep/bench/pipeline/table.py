"""The pipeline bench's output for people: text for a terminal, or Markdown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.bench.cells import spread_cell, table, value
from lockstep.bench.machine import machine_line
from lockstep.kafka.embedded import SLOW_AFTER_RECORDS


def _cpu_line(per_token: Mapping[str, float | None]) -> str:
    return ", ".join(f"{k} {value(v, 'f')}" for k, v in per_token.items())


def _step_rows(steps: list[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for s in steps:
        span = s.get("span", s)
        rows.append([str(s["streams"]), value(s["tokens_per_s"], "rate"),
                     value(span.get("attainment"), "pct"), value(span.get("e2e_p99_ms"), "ms"),
                     value(s.get("coverage"), "pct"),
                     "yes" if s["held"] else f"no: {s['why']}"])
    return rows


def render_pipeline(report: Mapping[str, Any], *, markdown: bool = False) -> str:
    """Ramp, capacity, half-capacity stages and CPU, the limit, overload and soak."""
    if report.get("shape") == "demo":
        return render_demo_shape(report, markdown=markdown)
    opts = report["options"]
    ratios = report["ratios"]
    lines = [
        f"lockstep bench pipeline: one process per role ({', '.join(report['roles'])}), "
        f"reference engine, {report['broker']}; steps of {opts['step_seconds']:g} s; held = "
        f"SLO attainment >= {opts['target'] * 100:g} % (shed counts as missed) and "
        f">= {opts['min_coverage'] * 100:g} % of frames answered",
        f"machine: {machine_line(report['machine'])}",
        f"warm-up {report['warmup_s']:g} s{_warm_load_line(report.get('warmup_load'))}; "
        f"idle CPU ms/s: {_cpu_line(report['idle_cpu_ms_per_s'])}",
        "",
    ]
    lines += table(["streams", "tokens/s", "attainment", "e2e p99", "answered", "held"],
                   _step_rows(report["steps"]), markdown=markdown)
    cap = report["capacity_streams"]
    runs = report.get("capacity_runs")
    confirmed = (f", held in {runs['held']} of {runs['runs']} runs at {cap} streams "
                 f"(attainment {spread_cell(runs['attainment'], 'pct')})" if runs else "")
    lines += ["", f"capacity: {cap} streams ({value(ratios['tokens_per_s_at_capacity'], 'rate')}"
                  f" tokens/s){confirmed}" if cap else
              "capacity: 0 streams (not even the smallest step held; see why above)"]
    half = report["half_capacity"]
    span = half["span"]
    lines += ["", f"at half capacity ({half['streams']} streams, attainment "
                  f"{value(span['attainment'], 'pct')}):"]
    steady = half.get("steady")
    later = steady["span"]["stages"] if steady else {}
    rows = [[stage, value(s["p50_ms"], "ms"), value(s["p99_ms"], "ms"),
             value(later.get(stage, {}).get("p99_ms"), "ms"),
             value(s["budget_ms"], "ms"), f"{s['count']:,.0f}"]
            for stage, s in span["stages"].items()]
    after = f"p99 after {steady['after_s']:g} s" if steady else "p99 after start"
    lines += table(["stage", "p50", "p99", after, "p99 budget", "count"], rows,
                   markdown=markdown)
    lines += ["", f"CPU ms per token: {_cpu_line(half['cpu_ms_per_token'])} (roles together "
                  f"{value(ratios['cpu_ms_per_token_roles_at_half'], 'f')})"]
    per_cpu = ratios.get("tokens_per_cpu_s_at_half")
    if per_cpu is not None:
        lines.append(f"tokens per CPU-second at half capacity (every process measured): "
                     f"{per_cpu:,.0f}")
    for key, client, ratio in (("passthrough_librdkafka", "librdkafka", "pipeline_vs_librdkafka"),
                               ("passthrough", "aiokafka", "pipeline_vs_passthrough")):
        raw = report.get(key)
        if not raw:
            continue
        lines += ["", f"raw consume->produce over {raw['hops']} hops ({client}, same "
                      f"broker, {raw['repetitions']} runs interleaved with the steps): "
                      f"{spread_cell(raw['records_per_s'], 'rate')} records/s, hops "
                      f"{spread_cell(raw['hop_cpu_ms_per_record'], 'f')} CPU ms per record",
                  f"pipeline at capacity / raw {client}: "
                  + (spread_cell(ratios[ratio], "x") if cap and ratio in ratios
                     else "- (no capacity)")]
    over = report.get("overload")
    if over:
        rec = over["recovery_s"]
        lines += ["", f"overload: {over['streams']} streams for {opts['overload_seconds']:g} s "
                      f"(producers done {over['overload_end_s']:g} s into the span), then "
                      f"{over['then_streams']} for {opts['recover_seconds']:g} s more: "
                      f"attainment during "
                      f"{value(over['attainment_during'], 'pct')} of "
                      f"{over['answered_during']:,.0f} windows ({over['expired_during']:,.0f} "
                      f"shed, {over['late_tokens_during']:,.0f} stale tokens to late); "
                      + ("back at target after " + f"{rec:g} s" if rec is not None
                         else "NOT back at target before the end")]
    soak = report.get("soak")
    if soak:
        growth = ", ".join(f"{r} {value(g, 'pct')}{'' if soak['rss_flat'][r] else ' NOT FLAT'}"
                           for r, g in soak["rss_growth"].items())
        lines += ["", f"soak: {soak['streams']} streams for {soak['seconds']:g} s, attainment "
                      f"{value(soak['span']['attainment'], 'pct')}; RSS growth (last quarter "
                      f"vs first): {growth}"]
    if report["broker"] == "embedded tansu":
        lines += ["", f"note: the embedded broker slows as its logs grow (past ~"
                      f"{SLOW_AFTER_RECORDS:,} records in a topic; `lockstep bench broker`): "
                      "late in a long ramp, an overload or a soak it measures the broker as "
                      "much as the pipeline. For the pipeline's figures, run on Apache Kafka "
                      "(--bootstrap)."]
    return "\n".join(lines)


def render_demo_shape(report: Mapping[str, Any], *, markdown: bool = False) -> str:
    """The one-process demo's ramp and capacity."""
    lines = [f"lockstep bench pipeline --shape demo: lockstep demo (every role in one "
             f"process), steps of {report['options']['step_seconds']:g} s",
             f"machine: {machine_line(report['machine'])}", ""]
    rows = [[str(s["streams"]), value(s["tokens_per_s"], "rate"), value(s["attainment"], "pct"),
             value(s["coverage"], "pct"), value(s["cpu_ms_per_token"], "f"),
             "yes" if s["held"] else f"no: {s['why']}"] for s in report["steps"]]
    lines += table(["streams", "tokens/s", "attainment", "answered", "CPU ms/token", "held"],
                   rows, markdown=markdown)
    lines += ["", f"capacity: {report['capacity_streams']} streams; marginal CPU "
                  f"{value(report.get('marginal_cpu_ms_per_token'), 'f')} ms per token (the "
                  "slope over the steps, start-up left out)"]
    return "\n".join(lines)


def _warm_load_line(warm: dict[str, Any] | None) -> str:
    if not warm:
        return ""
    attainment = warm["attainment"]
    held = "nothing answered" if attainment is None else f"{attainment * 100:.1f} %"
    return (f", then {warm['streams']} streams for {warm['seconds']:g} s unmeasured "
            f"({held})")
