"""The align benchmark's table (``lockstep bench align`` without ``--json``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lockstep.bench.cells import spread_cell, table
from lockstep.bench.machine import machine_line
from lockstep.bench.stats import median_of

_SIDES = ("lockstep", "baseline")


def _better(s: Mapping[str, Any] | None) -> str:
    """A ratio's spread as words ("better" when above 1)."""
    mid = median_of(s)
    if s is None or mid is None:
        return ""
    cell = spread_cell(s, "x")
    if mid >= 1.05:
        return f" ({cell} better)"
    if mid <= 1 / 1.05:
        return f" ({cell}: worse)"
    return f" ({cell}: about the same)"


def render_align(report: Mapping[str, Any], *, markdown: bool = False) -> str:
    """The align benchmark as a table (median and min-max of the repetitions) and ratios."""
    faults = report["faults"]
    audio = faults["audio_clock"]
    low, high = faults["audio_gap_ms"]
    errors = report["alignment_error_ms"]
    by_mod = report["misaligned_by_modality"]

    def side(key: str, kind: str) -> Callable[[str], str]:
        return lambda s: spread_cell(report[key][s], kind)

    def modality(m: str) -> Callable[[str], str]:
        return lambda s: spread_cell(by_mod[s][m], "pct")

    rows: list[tuple[str, Callable[[str], str]]] = [
        ("windows", side("windows", "n")),
        ("  without anchor", side("anchorless", "n")),
        (f"misaligned (> {report['slack_ms']:g} ms)", side("misaligned_rate", "pct")),
        *[(f"  {m}", modality(m)) for m in ("audio", "sensor", "ocr")],
        ("misaligned (strict)", side("misaligned_rate_strict", "pct")),
        ("error p50", lambda s: spread_cell(errors[s]["p50"], "ms")),
        ("error p99", lambda s: spread_cell(errors[s]["p99"], "ms")),
        ("partial", side("partial_rate", "pct")),
        ("late tokens", side("late", "n")),
        ("tokens/s (wall)", side("tokens_per_s", "rate")),
        ("tokens/CPU-s", side("tokens_per_cpu_s", "rate")),
        ("tokens/ref. unit", side("tokens_per_reference_unit", "f")),
    ]
    tokens = report["tokens"]
    seeds = report["seeds"]
    lines = [
        f"lockstep bench align: {len(seeds)} repetitions (seeds {', '.join(map(str, seeds))}) "
        f"of {report['streams']} streams x {report['seconds']:g} s, "
        f"{spread_cell(tokens['delivered'], 'n')} tokens delivered each; "
        f"{report['timing_runs']} timed runs per aligner and repetition, interleaved",
        f"faults: video drop {faults['drop_rate'] * 100:.0f} %, audio gaps "
        f"{faults['audio_gaps_per_s']:g}/s of {low:g}-{high:g} ms, jitter sigma "
        f"{faults['jitter_ms']:g} ms, audio clock {audio['offset_ms']:+g} ms "
        f"{audio['drift_ppm']:g} ppm, delay {faults['delay_min_ms']:g} ms + "
        f"exp({faults['delay_tail_ms']:g} ms)",
        f"machine: {machine_line(report['machine'])}",
        "",
    ]
    lines += table(["", *_SIDES], [[label, *(cell(s) for s in _SIDES)] for label, cell in rows],
                   markdown=markdown)
    mis = report["misaligned_rate"]
    ratios = report["ratios"]
    lines += [
        "",
        f"misaligned: lockstep {spread_cell(mis['lockstep'], 'pct')} vs baseline "
        f"{spread_cell(mis['baseline'], 'pct')}"
        + _better(ratios["misaligned_baseline_over_lockstep"]),
        f"error p99: lockstep {spread_cell(errors['lockstep']['p99'], 'ms')} vs baseline "
        f"{spread_cell(errors['baseline']['p99'], 'ms')}"
        + _better(ratios["error_p99_baseline_over_lockstep"]),
        f"throughput: lockstep {spread_cell(report['tokens_per_cpu_s']['lockstep'], 'rate')} "
        f"vs baseline {spread_cell(report['tokens_per_cpu_s']['baseline'], 'rate')} "
        f"tokens/CPU-s" + _better(ratios["throughput_lockstep_over_baseline"]),
    ]
    unaccounted = {s: report["ledger"][s]["unaccounted"] for s in _SIDES}
    if any(unaccounted.values()):
        lines.append(f"NOT MET: tokens unaccounted for: {unaccounted}")
    inferred = median_of(report["matched_inferred"]["lockstep"])
    if inferred:
        lines.append(f"note: {inferred:,.0f} lockstep matches per repetition read off window "
                     "contents (the aligner left matched_seq unset)")
    return "\n".join(lines)
