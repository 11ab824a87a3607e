"""The align bench's report: every figure's median and spread over the repetitions."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from lockstep.bench.score import SCORED
from lockstep.bench.stats import divide, spread_json
from lockstep.config.settings import AlignSettings

if TYPE_CHECKING:
    from lockstep.bench.align import AlignBenchOptions

SIDES = ("lockstep", "baseline")
#: Figures reported per aligner, as spreads over the repetitions.
FIGURES = ("windows", "anchorless", "misaligned_rate", "misaligned_rate_strict",
           "partial_rate", "late", "operator_seconds", "cpu_share", "tokens_per_s",
           "tokens_per_cpu_s", "tokens_per_reference_unit", "matched_inferred")


def align_report(options: AlignBenchOptions, align: AlignSettings, reps: list[dict[str, Any]],
                 machine: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: ``{figure: {side: spread}}``, ratios, ledger totals, repetitions."""

    def per_side(key: str) -> dict[str, Any]:
        return {side: spread_json(rep[side][key] for rep in reps) for side in SIDES}

    def ratio(key: str, num: str, den: str) -> dict[str, Any] | None:
        return spread_json(divide(rep[num][key], rep[den][key]) for rep in reps)

    out: dict[str, Any] = {figure: per_side(figure) for figure in FIGURES}
    out.update({
        "seed": options.seed,
        "seeds": [rep["seed"] for rep in reps],
        "repeats": len(reps),
        "timing_runs": options.timing_runs,
        "slack_ms": options.slack_ms,
        "streams": options.streams,
        "seconds": options.seconds,
        "faults": asdict(options.faults),
        "align_settings": align.model_dump(mode="json"),
        "tokens": {
            "captured": spread_json(rep["tokens"]["captured"] for rep in reps),
            "delivered": spread_json(rep["tokens"]["delivered"] for rep in reps),
            "dropped": {m: sum(rep["tokens"]["dropped"][m] for rep in reps)
                        for m in reps[0]["tokens"]["dropped"]},
            "redelivered": sum(rep["tokens"]["redelivered"] for rep in reps),
        },
        "misaligned_by_modality": {side: {str(m): spread_json(
            rep[side][f"misaligned_{m}"] for rep in reps) for m in SCORED} for side in SIDES},
        "alignment_error_ms": {side: {
            "p50": spread_json(rep[side]["error_p50_ms"] for rep in reps),
            "p99": spread_json(rep[side]["error_p99_ms"] for rep in reps),
            "matches": sum(rep[side]["matches"] for rep in reps),
            "by_modality": {str(m): {
                "p50": spread_json(rep[side][f"error_p50_ms_{m}"] for rep in reps),
                "p99": spread_json(rep[side][f"error_p99_ms_{m}"] for rep in reps)}
                for m in SCORED}} for side in SIDES},
        # Totals over the repetitions: unaccounted must be 0 for both.
        "ledger": {side: {k: sum(rep[side]["ledger"][k] for rep in reps)
                          for k in reps[0][side]["ledger"]} for side in SIDES},
        "ratios": {
            "misaligned_baseline_over_lockstep": ratio("misaligned_rate", "baseline",
                                                       "lockstep"),
            "error_p99_baseline_over_lockstep": ratio("error_p99_ms", "baseline", "lockstep"),
            "throughput_lockstep_over_baseline": ratio("tokens_per_cpu_s", "lockstep",
                                                       "baseline"),
        },
        "repetitions": reps,
        "machine": machine,
    })
    return out
