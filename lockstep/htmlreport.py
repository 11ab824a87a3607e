"""``lockstep report``: a single-file HTML SLA report from a run's metrics.

Input is one or more ``/metrics`` texts (saved scrapes or live URLs, merged as for
``lockstep top``). The page holds, per stage, the latency distribution as an inline SVG
plot (observations per decade in each histogram bucket, on a log time axis, with P50, P99
and the budget marked), SLO attainment per class, routes, the token ledger and consumer lag.
Nothing is fetched when the page is opened: no scripts, no external styles or fonts.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from lockstep.metrics_view import StageRow, Summary, merge, parse, summarize
from lockstep.streams.settings import SloSettings

_W, _H, _PAD_L, _PAD_B, _PAD_T = 560, 180, 44, 26, 40
_LO, _HI = 5e-5, 10.0  # the axis: 50 µs to 10 s
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:3px 10px;border-bottom:1px solid #eee}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
.over{color:#b00;font-weight:600}.ok{color:#070}.plots{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;border:1px solid #e3e3e3;padding:4px}figcaption{font-size:12px;color:#555}
"""


def _x(seconds: float) -> float:
    s = min(max(seconds, _LO), _HI)
    return _PAD_L + (math.log10(s) - math.log10(_LO)) / (
        math.log10(_HI) - math.log10(_LO)) * (_W - _PAD_L - 20)


def latency_svg(row: StageRow) -> str:
    """One stage's latency distribution as an inline SVG."""
    # Height is observations per decade, so that buckets of unequal width compare.
    # The first bucket, from 0, is drawn as one octave wide.
    bars = [(lo or hi / 2, hi, n, n / math.log10(hi / (lo or hi / 2)))
            for lo, hi, n in row.hist.bars() if hi > 0]
    peak = max((d for *_, d in bars), default=0.0) or 1.0
    base = _H - _PAD_B
    parts = [f'<svg class="latency-plot" data-stage="{html.escape(row.stage)}" '
             f'xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
             f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{html.escape(row.stage)} '
             f'latency distribution">',
             f'<line x1="{_PAD_L}" y1="{base}" x2="{_W - 20}" y2="{base}" stroke="#999"/>']
    for lo, hi, n, density in bars:
        if n <= 0:
            continue
        x0, x1 = _x(lo), _x(hi)
        h = (base - _PAD_T) * density / peak
        parts.append(f'<rect x="{x0:.1f}" y="{base - h:.1f}" width="{max(1.0, x1 - x0 - 1):.1f}"'
                     f' height="{h:.1f}" fill="#5b8ff9"><title>up to {hi * 1e3:g} ms: '
                     f'{n:.0f}</title></rect>')
    for tick, label in ((1e-4, "0.1ms"), (1e-3, "1ms"), (1e-2, "10ms"), (0.1, "100ms"),
                        (1.0, "1s"), (10.0, "10s")):
        x = _x(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" '
                     f'stroke="#999"/><text x="{x:.1f}" y="{base + 16}" font-size="10" '
                     f'text-anchor="middle" fill="#555">{label}</text>')
    for value_ms, colour, dash, name, y in (
            (row.budget_ms, "#000", ' stroke-dasharray="4 3"', "budget", 10),
            (row.p99_ms, "#d33", "", "P99", 22), (row.p50_ms, "#2a7", "", "P50", 34)):
        if value_ms is None:
            continue
        x = _x(value_ms / 1e3)
        parts.append(f'<line x1="{x:.1f}" y1="{y - 8}" x2="{x:.1f}" y2="{base}" '
                     f'stroke="{colour}" stroke-width="1.5"{dash}/><text x="{x + 3:.1f}" '
                     f'y="{y}" font-size="10" fill="{colour}">{name} {value_ms:.1f} ms</text>')
    parts.append(f'<text x="4" y="{_PAD_T + 8}" font-size="10" fill="#555">n={row.count:.0f}'
                 f'</text></svg>')
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]],
           numeric: Sequence[bool] | None = None) -> str:
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td{" class=n" if numeric[i] else ""}>{cell}</td>'
                         for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_html(summary: Summary, *, title: str = "Lockstep SLA report",
                meta: Mapping[str, str] | None = None) -> str:
    """The whole report as one HTML document."""
    e = html.escape
    info = {"generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"), **(meta or {})}
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>"
           f"<style>{_STYLE}</style></head><body><h1>{e(title)}</h1>",
           "<p>" + " · ".join(f"{e(k)}: {e(v)}" for k, v in info.items()) + "</p>",
           "<h2>Stages: latency against budget</h2>"]
    out.append(_table(
        ["stage", "count", "P50 ms", "P99 ms", "budget ms", "P99"],
        [[e(r.stage), f"{r.count:.0f}", _ms(r.p50_ms), _ms(r.p99_ms), _ms(r.budget_ms),
          '<span class="over">over</span>' if r.over else '<span class="ok">within</span>']
         for r in summary.stages], [False, True, True, True, True, False]))
    out.append('<div class="plots">')
    for row in summary.stages:
        out.append(f"<figure>{latency_svg(row)}<figcaption>{e(row.stage)}: observations per "
                   "decade in each histogram bucket; P50, P99 and the budget marked"
                   "</figcaption></figure>")
    out.append("</div><h2>SLO attainment per class</h2>")
    out.append(_table(
        ["class", "responses", "expired", "within e2e budget", "e2e P99 ms", "budget ms",
         "mode", "breaches"],
        [[e(c.slo_class), f"{c.responses:.0f}", f"{c.expired:.0f}",
          "-" if c.attainment is None else f"{c.attainment * 100:.2f}%", _ms(c.p99_ms),
          f"{c.budget_ms:.0f}", "degraded" if c.degraded else "normal", f"{c.breaches:.0f}"]
         for c in summary.classes], [False, True, True, True, True, True, False, True]))
    total = sum(summary.routes.values()) or 1.0
    out.append("<h2>Routes</h2>")
    out.append(_table(["route", "windows", "share"],
                      [[e(r), f"{n:.0f}", f"{n / total * 100:.1f}%"]
                       for r, n in summary.routes.items()], [False, True, True]))
    out.append("<h2>Token ledger</h2><p>Every token consumed ends in exactly one of window, "
               "late or deadletter (or is counted a duplicate); <code>published</code> is "
               "what producers in these processes had acknowledged.</p>")
    outcomes = sorted({o for per in summary.ledger.values() for o in per} - {"published"})
    out.append(_table(["modality", "published", *outcomes, "settled"],
                      [[e(m), f"{per.get('published', 0):.0f}",
                        *(f"{per.get(o, 0):.0f}" for o in outcomes),
                        f"{sum(per.get(o, 0) for o in outcomes):.0f}"]
                       for m, per in summary.ledger.items()],
                      [False, *([True] * (len(outcomes) + 2))]))
    if summary.lag:
        out.append("<h2>Consumer lag</h2>")
        out.append(_table(["topic", "group", "records"],
                          [[e(t), e(g), f"{n:.0f}"] for (t, g), n in summary.lag.items()],
                          [False, False, True]))
    out.append("</body></html>")
    return "\n".join(out)


def write_report(path: Path, texts: Sequence[str], slo: SloSettings, *,
                 title: str = "Lockstep SLA report",
                 meta: Mapping[str, str] | None = None) -> Path:
    """Write the report of one or more ``/metrics`` texts to ``path``."""
    summary = summarize(merge(parse(t) for t in texts), slo)
    path.write_text(render_html(summary, title=title, meta=meta), encoding="utf-8")
    return path
