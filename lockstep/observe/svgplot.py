"""Inline SVG charts over time for the HTML report: lines per series, and a timeline strip.

Every label is placed inside its chart's view box (anchored towards the inside near an
edge), so that nothing is clipped however the values fall; the report's browser test
checks it. No scripts, no external references.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

PALETTE = ("#3b6fd8", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8a10c", "#0b7285", "#c2255c",
           "#5c940d", "#495057")
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 56, 30, 14, 30
#: Approximate width of a character of the 10 px labels (for placing them inside the box).
_CHAR_W = 6.2

Value = tuple[float, float | None]


@dataclass(frozen=True)
class Axis:
    """A y axis: its range, scale and how its ticks read."""

    lo: float
    hi: float
    log: bool
    fmt: Callable[[float], str]
    ticks: tuple[float, ...] = ()


@dataclass(frozen=True)
class Chart:
    """One chart: series of (time, value) against a y axis, with reference lines."""

    key: str
    t0: float
    t1: float
    axis: Axis
    series: Mapping[str, Sequence[Value]]
    refs: Sequence[tuple[float, str]] = ()
    #: Points drawn at the top of the axis and labelled (e.g. P99 beyond the last bucket).
    capped: Mapping[str, Sequence[float]] = field(default_factory=dict)
    capped_label: str = ""
    #: Spans of time to shade (e.g. a class in degraded mode).
    shaded: Sequence[tuple[float, float]] = ()
    width: int = 520
    height: int = 170


def colours(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per series name."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def legend(names: Sequence[str]) -> str:
    """An HTML legend for the series of a chart."""
    c = colours(names)
    return " ".join(f'<span class="key"><i style="background:{c[n]}"></i>{html.escape(n)}</span>'
                    for n in names)


def time_ticks(span_s: float) -> list[float]:
    """Round seconds for a time axis of ``span_s`` seconds (at most about six)."""
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600):
        if span_s / step <= 6:
            break
    return [i * step for i in range(int(span_s // step) + 1)]


def time_text(seconds: float) -> str:
    """A time offset for an axis: ``30 s``, ``2 min``, ``1.5 h``."""
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


def _clamp_text(x: float, text: str, width: float) -> tuple[float, str]:
    """An x and an anchor that keep ``text`` inside [0, width] near ``x``."""
    half = len(text) * _CHAR_W / 2
    if x - half < 2:
        return 2.0, "start"
    if x + half > width - 2:
        return width - 2.0, "end"
    return x, "middle"


def line_chart(chart: Chart) -> str:
    """A chart as an inline SVG element."""
    w, h, a = chart.width, chart.height, chart.axis
    span = max(chart.t1 - chart.t0, 1e-9)
    left, right, top, base = _PAD_L, w - _PAD_R, _PAD_T, h - _PAD_B

    def x(t: float) -> float:
        return left + (t - chart.t0) / span * (right - left)

    def y(v: float) -> float:
        v = min(max(v, a.lo), a.hi)
        if a.log:
            share = (math.log10(v) - math.log10(a.lo)) / (math.log10(a.hi) - math.log10(a.lo))
        else:
            share = (v - a.lo) / ((a.hi - a.lo) or 1.0)
        return base - share * (base - top)

    key = html.escape(chart.key)
    out = [f'<svg class="series-plot" data-series="{key}" xmlns="http://www.w3.org/2000/svg" '
           f'width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{key}">']
    for s0, s1 in chart.shaded:
        out.append(f'<rect class="shade" x="{x(s0):.1f}" y="{top}" '
                   f'width="{max(1.0, x(s1) - x(s0)):.1f}" height="{base - top}" '
                   'fill="#fff3bf"/>')
    out.append(f'<line x1="{left}" y1="{base}" x2="{right}" y2="{base}" stroke="#999"/>'
               f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#999"/>')
    for tick in a.ticks:
        ty = y(tick)
        out.append(f'<line x1="{left}" y1="{ty:.1f}" x2="{right}" y2="{ty:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{ty + 3:.1f}" font-size="10" text-anchor="end" '
                   f'fill="#555">{html.escape(a.fmt(tick))}</text>')
    for tick in time_ticks(span):
        tx = x(chart.t0 + tick)
        label = time_text(tick)
        lx, anchor = _clamp_text(tx, label, w)
        out.append(f'<line x1="{tx:.1f}" y1="{base}" x2="{tx:.1f}" y2="{base + 4}" '
                   f'stroke="#999"/><text x="{lx:.1f}" y="{base + 15}" font-size="10" '
                   f'text-anchor="{anchor}" fill="#555">{label}</text>')
    for value, label in chart.refs:
        ry = y(value)
        out.append(f'<line class="ref" x1="{left}" y1="{ry:.1f}" x2="{right}" y2="{ry:.1f}" '
                   f'stroke="#000" stroke-dasharray="4 3"/><text x="{right}" '
                   f'y="{max(ry - 3, top + 9):.1f}" font-size="10" text-anchor="end" '
                   f'fill="#000">{html.escape(label)}</text>')
    palette = colours(list(chart.series))
    for name, values in chart.series.items():
        colour = palette[name]
        for segment in _segments(values):
            pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in segment)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" '
                       'stroke-width="1.6"/>')
        for t, v in values:
            if v is not None:
                out.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="2" fill="{colour}">'
                           f'<title>{html.escape(name)} at {time_text(round(t - chart.t0, 1))}:'
                           f' {html.escape(a.fmt(v))}</title></circle>')
    labelled = False
    for name, times in chart.capped.items():
        colour = palette.get(name, "#b00")
        for t in times:
            out.append(f'<path class="capped" d="M{x(t) - 4:.1f},{top + 7} L{x(t) + 4:.1f},'
                       f'{top + 7} L{x(t):.1f},{top} Z" fill="{colour}"/>')
        if times and chart.capped_label and not labelled:
            lx, anchor = _clamp_text(x(times[0]), chart.capped_label, w)
            if anchor == "middle":
                lx, anchor = x(times[0]) + 6, "start"
                if lx + len(chart.capped_label) * _CHAR_W > w - 2:
                    lx, anchor = x(times[0]) - 6, "end"
            out.append(f'<text class="capped-label" x="{lx:.1f}" y="{top + 18}" '
                       f'font-size="10" text-anchor="{anchor}" fill="#b00">'
                       f'{html.escape(chart.capped_label)}</text>')
            labelled = True
    out.append("</svg>")
    return "".join(out)


def _segments(values: Sequence[Value]) -> list[list[tuple[float, float]]]:
    out: list[list[tuple[float, float]]] = [[]]
    for t, v in values:
        if v is None:
            if out[-1]:
                out.append([])
        else:
            out[-1].append((t, v))
    return [s for s in out if s]


def log_axis(values: Sequence[float], *, floor: float, ceiling: float,
             fmt: Callable[[float], str]) -> Axis:
    """A log axis over whole decades that holds ``values`` (clamped to floor..ceiling)."""
    finite = [v for v in values if v > 0]
    lo = max(floor, 10 ** math.floor(math.log10(min(finite)))) if finite else floor
    hi = min(ceiling, 10 ** math.ceil(math.log10(max(finite)))) if finite else ceiling
    if hi <= lo:
        hi = min(ceiling, lo * 10)
        lo = hi / 10
    ticks = tuple(10.0 ** e for e in range(round(math.log10(lo)), round(math.log10(hi)) + 1))
    return Axis(lo, hi, True, fmt, ticks)


def linear_axis(hi: float, fmt: Callable[[float], str], lo: float = 0.0) -> Axis:
    """A linear axis from ``lo`` to a round number at or above ``hi`` (five ticks)."""
    hi = max(hi, lo + 1e-9)
    raw = (hi - lo) / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    top = lo + step * 4
    return Axis(lo, top, False, fmt, tuple(lo + i * step for i in range(5)))


def ms_text(ms: float) -> str:
    """A millisecond tick: ``0.1 ms``, ``10 ms``, ``1 s``."""
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


@dataclass(frozen=True)
class Lane:
    """One row of a timeline: marks at times, each with a tooltip, and shaded spans."""

    label: str
    marks: Sequence[tuple[float, str]] = ()
    spans: Sequence[tuple[float, float]] = ()
    colour: str = "#c92a2a"


def timeline(key: str, lanes: Sequence[Lane], t0: float, t1: float, width: int = 1040) -> str:
    """Lanes of marks over time (breaches per stage and class, degraded spans)."""
    label_w = min(width / 2, max((len(lane.label) for lane in lanes), default=8) * _CHAR_W + 12)
    left, right, row = label_w, width - _PAD_R, 20
    height = _PAD_T + row * len(lanes) + _PAD_B
    span = max(t1 - t0, 1e-9)

    def x(t: float) -> float:
        return left + (min(max(t, t0), t1) - t0) / span * (right - left)

    out = [f'<svg class="timeline" data-series="{html.escape(key)}" '
           f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(key)}">']
    for i, lane in enumerate(lanes):
        ty = _PAD_T + i * row
        out.append(f'<text x="{left - 6}" y="{ty + 13}" font-size="10" text-anchor="end" '
                   f'fill="#333">{html.escape(lane.label)}</text><line x1="{left}" '
                   f'y1="{ty + 10}" x2="{right}" y2="{ty + 10}" stroke="#eee"/>')
        for s0, s1 in lane.spans:
            out.append(f'<rect x="{x(s0):.1f}" y="{ty + 3}" width="{max(2.0, x(s1) - x(s0)):.1f}"'
                       f' height="14" fill="#ffe066"><title>{html.escape(lane.label)}: '
                       f'{time_text(round(s0 - t0, 1))} to {time_text(round(s1 - t0, 1))}'
                       '</title></rect>')
        for t, tip in lane.marks:
            out.append(f'<circle cx="{x(t):.1f}" cy="{ty + 10}" r="5" fill="{lane.colour}">'
                       f'<title>{html.escape(tip)}</title></circle>')
    base = _PAD_T + row * len(lanes)
    out.append(f'<line x1="{left}" y1="{base}" x2="{right}" y2="{base}" stroke="#999"/>')
    for tick in time_ticks(span):
        tx = x(t0 + tick)
        label = time_text(tick)
        lx, anchor = _clamp_text(tx, label, width)
        out.append(f'<text x="{lx:.1f}" y="{base + 14}" font-size="10" text-anchor="{anchor}" '
                   f'fill="#555">{label}</text>')
    out.append("</svg>")
    return "".join(out)
