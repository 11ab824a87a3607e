"""Formatting figures for the benchmarks' text and Markdown output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def value(v: float | None, kind: str) -> str:
    """One number: ``pct`` (a fraction), ``ms``, ``rate``, ``n`` (a count), ``x`` (a ratio)."""
    if v is None:
        return "-"
    if kind == "pct":
        return f"{v * 100:.1f} %"
    if kind == "pts":
        return f"{v * 100:+.1f}"
    if kind == "ms":
        return f"{v:.1f} ms"
    if kind == "rate":
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"
    if kind == "x":
        return f"{v:.0f}x" if abs(v) >= 100 else f"{v:.1f}x" if abs(v) >= 10 else f"{v:.2f}x"
    if kind == "f":
        return f"{v:.3g}"
    return f"{v:,.0f}"


def bare(v: float | None, kind: str) -> str:
    """Like :func:`value`, without the unit (for the bounds of a range)."""
    text = value(v, kind)
    for unit in (" %", " ms", "x"):
        text = text.removesuffix(unit)
    return text


def spread_cell(s: Mapping[str, Any] | None, kind: str, *, ranged: bool = True) -> str:
    """``median (min-max)`` of a JSON spread; the median alone when all repetitions agree."""
    if s is None:
        return "-"
    mid = value(s["median"], kind)
    low, high = bare(s["min"], kind), bare(s["max"], kind)
    if not ranged or s["n"] < 2 or low == high:
        return mid
    return f"{mid} ({low} to {high})" if kind == "pts" else f"{mid} ({low}-{high})"


def table(header: list[str], rows: list[list[str]], *, markdown: bool = False) -> list[str]:
    """A table as lines: aligned columns for a terminal, or a Markdown table."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join("---" for _ in header) + "|"]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    out = []
    for r in [header, *rows]:
        first = f"  {r[0]:<{widths[0]}}"
        out.append(first + "".join(f"  {c:>{w}}" for c, w in zip(r[1:], widths[1:],
                                                                   strict=True)))
    return out
