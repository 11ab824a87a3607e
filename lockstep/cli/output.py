"""The CLI's output layer: human-readable renderings of reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.kafka.admin import TopicState


def render_demo(report: Mapping[str, Any]) -> str:
    """The demo's summary as a few aligned lines."""
    ledger = report["ledger"]
    by_mod = ", ".join(f"{m} {n}" for m, n in report["tokens_by_modality"].items())
    routes = ", ".join(f"{r} {n}" for r, n in report["routes"].items()) or "none"
    lines = [
        f"Lockstep demo: {report['streams']} streams for {report['seconds']} s on "
        f"{report['broker']} ({report['bootstrap']})",
        "",
        f"  tokens published   {report['tokens_published']} ({by_mod})"
        + (f" + {report['bad_records_published']} bad records"
           if report["bad_records_published"] else ""),
        f"  ledger             {ledger['in_windows']} in windows, {ledger['late']} late, "
        f"{ledger['dead_letters']} dead-lettered, {ledger['unaccounted']} unaccounted",
        f"  windows            {report['windows']} ({report['windows_partial']} partial); "
        f"routes: {routes}",
        "  reasons            " + (", ".join(f"{k} {n}" for k, n in report["reasons"].items())
                                   or "none"),
        f"  responses          {report['responses']} ("
        + ", ".join(f"{k} {n}" for k, n in report.get("responses_by_status", {}).items())
        + f"; {report['windows_without_response']} windows without a response)"
        + (f" from the {report['engine']} engine" if report.get("engine") else ""),
        "",
        f"  {'stage':<10} {'p50 ms':>9} {'p99 ms':>9} {'count':>8}",
    ]
    for stage, s in report["stages"].items():
        lines.append(f"  {stage:<10} {s['p50_ms']:>9.2f} {s['p99_ms']:>9.2f} {s['count']:>8}")
    slo = report["slo"]
    attainment = slo["attainment"]
    lines += [
        "",
        f"  SLO {slo['class']}: e2e within {slo['e2e_budget_ms']:.0f} ms for "
        + (f"{attainment * 100:.1f}% of responses" if attainment is not None
           else "no responses"),
    ]
    if report.get("sample_output"):
        lines.append(f"  sample response    {report['sample_output'][:120]!r}")
    lines.append("")
    lines.append("  ledger closed: every token accounted for, every window answered"
                 if report["ok"] else
                 "  ledger INCOMPLETE: tokens unaccounted for or windows unanswered when the "
                 "drain timed out")
    verdict = report.get("verdict")
    if verdict:
        lines.append(f"  {verdict['line']}")
    return "\n".join(lines)


def render_topics(states: list[TopicState], created: list[str] | None = None) -> str:
    """A table of topics: partitions, retention, problems."""
    created_set = set(created or ())
    lines = [f"{'topic':<20} {'partitions':>10} {'retention':>12}  status"]
    for state in states:
        configs = state.configs or {}
        retention = configs.get("retention.ms", state.spec.configs.get("retention.ms", "-"))
        status = ", ".join(state.problems) or ", ".join(
            f"warning: {w}" for w in state.warnings) or (
            "created" if state.spec.name in created_set else "ok")
        partitions = "-" if state.partitions is None else str(state.partitions)
        lines.append(f"{state.spec.name:<20} {partitions:>10} {retention:>12}  {status}")
    return "\n".join(lines)
