"""The benchmarks' output layer: human-readable renderings of their reports."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

_SIDES = ("lockstep", "baseline")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(lockstep: float | None, baseline: float | None, *, lower_is_better: bool) -> str:
    """How many times better Lockstep is (or worse), in words."""
    if not lockstep or not baseline:
        return ""
    better = baseline / lockstep if lower_is_better else lockstep / baseline
    if better >= 1.05:
        return f" ({better:.1f}x better)"
    if better <= 1 / 1.05:
        return f" ({1.0 / better:.1f}x worse)"
    return " (about the same)"


def _misaligned_cell(report: Mapping[str, Any], modality: str) -> Callable[[str], str]:
    return lambda side: _pct(report["misaligned_by_modality"][side][modality])


def render_align(report: Mapping[str, Any]) -> str:
    """The align benchmark as a table and a few ratio lines."""
    faults = report["faults"]
    audio = faults["audio_clock"]
    low, high = faults["audio_gap_ms"]
    errors = report["alignment_error_ms"]
    rows: list[tuple[str, Callable[[str], str]]] = [
        ("windows", lambda s: _count(report["windows"][s])),
        ("  without anchor", lambda s: _count(report["anchorless"][s])),
        (f"misaligned (> {report['slack_ms']:g} ms)",
         lambda s: _pct(report["misaligned_rate"][s])),
        *[(f"  {m}", _misaligned_cell(report, m)) for m in ("audio", "sensor", "ocr")],
        ("misaligned (strict)", lambda s: _pct(report["misaligned_rate_strict"][s])),
        ("error p50", lambda s: _ms(errors[s]["p50"])),
        ("error p99", lambda s: _ms(errors[s]["p99"])),
        ("partial", lambda s: _pct(report["partial_rate"][s])),
        ("late tokens", lambda s: _count(report["ledger"][s]["late"])),
        ("tokens/s", lambda s: _count(report["tokens_per_s"][s])),
    ]
    tokens = report["tokens"]
    lines = [
        f"lockstep bench align: {report['streams']} streams x {report['seconds']:g} s, "
        f"seed {report['seed']}, {tokens['delivered']:,} tokens delivered "
        f"({tokens['captured']:,} captured)",
        f"faults: video drop {faults['drop_rate'] * 100:.0f} %, audio gaps "
        f"{faults['audio_gaps_per_s']:g}/s of {low:g}-{high:g} ms, jitter sigma "
        f"{faults['jitter_ms']:g} ms, audio clock {audio['offset_ms']:+g} ms "
        f"{audio['drift_ppm']:g} ppm, delay {faults['delay_min_ms']:g} ms + "
        f"exp({faults['delay_tail_ms']:g} ms)",
        "",
        f"  {'':<18} {'lockstep':>12} {'baseline':>12}",
    ]
    lines += [f"  {label:<18} {cell('lockstep'):>12} {cell('baseline'):>12}"
              for label, cell in rows]
    mis = report["misaligned_rate"]
    tps = report["tokens_per_s"]
    lines += [
        "",
        f"  misaligned: lockstep {_pct(mis['lockstep'])} vs baseline {_pct(mis['baseline'])}"
        + _ratio(mis["lockstep"], mis["baseline"], lower_is_better=True),
        f"  error p99:  lockstep {_ms(errors['lockstep']['p99'])} vs baseline "
        f"{_ms(errors['baseline']['p99'])}"
        + _ratio(errors["lockstep"]["p99"], errors["baseline"]["p99"], lower_is_better=True),
        f"  throughput: lockstep {_count(tps['lockstep'])} vs baseline "
        f"{_count(tps['baseline'])} tokens/s"
        + _ratio(tps["lockstep"], tps["baseline"], lower_is_better=False),
    ]
    inferred = report["matched_inferred"]["lockstep"]
    if inferred:
        lines.append(f"  note: {inferred:,} lockstep matches read off window contents "
                     "(the aligner left matched_seq unset)")
    return "\n".join(lines)
