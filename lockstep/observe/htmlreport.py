"""``lockstep report``: a single-file HTML SLA report from a run's metrics.

Input is one or more ``/metrics`` texts merged as for ``lockstep top`` (several roles), or
scrapes over time (:mod:`lockstep.observe.timeseries`: sampled live, a scrape log, or the demo's
periodic snapshots), which add a time axis: per-interval P99 per stage, attainment per
class, throughput, queue depth and the breach timeline. The page also holds, per stage, the
latency distribution as an inline SVG plot, SLO attainment per class, per pool and per
route breakdowns, dead letters by stage and error, the token ledger and consumer lag; per
stream figures and dead-letter reasons when given what an observer of the output topics
read (:class:`RunDetail`, the demo's ledger). Sections a scrape has nothing for are left
out or say so in one line. Nothing is fetched when the page is opened: no scripts, no
external styles or fonts.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lockstep.config.settings import SloSettings
from lockstep.errors import ConfigError
from lockstep.observe.breakdown import (
    StreamRow,
    dead_letter_reasons,
    dead_letter_rows,
    has_ledger,
    points,
    pool_rows,
    route_rows,
    stream_rows,
)
from lockstep.observe.htmlseries import series_section
from lockstep.observe.ledger import Ledger
from lockstep.observe.metrics import StageRow, Summary, latency_text, summarize
from lockstep.observe.timeseries import Run, TimedScrape, build_run
from lockstep.topics.schemas import SloEvent

_W, _H, _PAD_L, _PAD_B, _PAD_T = 560, 180, 44, 26, 40
_LO, _HI = 5e-5, 10.0  # the axis: 50 µs to 10 s
_CHAR_W = 6.2  # about one character of the 10 px labels
_STYLE = """
body{font:14px/1.4 "DejaVu Sans",system-ui,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 12px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.5em 0;max-width:100%}
td,th{padding:3px 10px;border-bottom:1px solid #eee;overflow-wrap:anywhere}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums;
white-space:nowrap}.over{color:#b00;font-weight:600}.ok{color:#070}
.plots{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0 0 8px;border:1px solid #e3e3e3;padding:4px;width:min-content}
figure svg{display:block}figcaption{font-size:12px;color:#555}
.key{white-space:nowrap;margin-right:8px}.key i{display:inline-block;width:10px;height:10px;
margin-right:3px}p.note{color:#555}
"""


@dataclass(frozen=True)
class RunDetail:
    """What an observer of the output topics knows beyond the metrics (the demo's ledger)."""

    streams: Sequence[StreamRow] = ()
    #: The most frequent (stage, error, reason, count) of the dead letters read.
    dead_letters: Sequence[tuple[str, str, str, int]] = ()
    #: ``slo.events`` records of the run (breaches raised, re-announced and cleared).
    events: Sequence[SloEvent] = ()

    @classmethod
    def of_ledger(cls, ledger: Ledger, slo: SloSettings,
                  events: Sequence[SloEvent] = ()) -> RunDetail:
        """Per-stream figures and dead-letter reasons from what an observer read."""
        return cls(stream_rows(ledger, slo), dead_letter_reasons(ledger.dead_letters),
                   tuple(events))


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
    for value_ms, saturated, colour, dash, name, y in (
            (row.budget_ms, False, "#000", ' stroke-dasharray="4 3"', "budget", 10),
            (row.p99_ms, row.p99_saturated, "#d33", "", "P99", 22),
            (row.p50_ms, row.hist.saturated(0.5), "#2a7", "", "P50", 34)):
        if value_ms is None:
            continue
        x = _x(value_ms / 1e3)
        label = (f"{name} {latency_text(value_ms, True)}" if saturated
                 else f"{name} {value_ms:.1f} ms")
        # Right of the line, or left of it where the label would leave the plot.
        fits = x + 3 + len(label) * _CHAR_W <= _W - 2
        tx, anchor = (x + 3, "start") if fits else (x - 3, "end")
        parts.append(f'<line x1="{x:.1f}" y1="{y - 8}" x2="{x:.1f}" y2="{base}" '
                     f'stroke="{colour}" stroke-width="1.5"{dash}/><text x="{tx:.1f}" '
                     f'y="{y}" font-size="10" fill="{colour}" text-anchor="{anchor}">'
                     f'{html.escape(label)}</text>')
    parts.append(f'<text x="4" y="{_PAD_T + 8}" font-size="10" fill="#555">n={row.count:.0f}'
                 f'</text></svg>')
    return "".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]],
           numeric: Sequence[bool] | None = None, cls: str = "") -> str:
    numeric = numeric or [False] * len(headers)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td{" class=n" if numeric[i] else ""}>{cell}</td>'
                         for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f'<table{f" class={cls}" if cls else ""}><tr>{head}</tr>{body}</table>'


def _ms(value: float | None, saturated: bool = False) -> str:
    return html.escape(latency_text(value, saturated))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}%"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _stages(summary: Summary) -> list[str]:
    out = ["<h2>Stages: latency against budget</h2>", _table(
        ["stage", "count", "P50 ms", "P99 ms", "budget ms", "P99"],
        [[html.escape(r.stage), f"{r.count:.0f}", _ms(r.p50_ms, r.hist.saturated(0.5)),
          _ms(r.p99_ms, r.p99_saturated), _ms(r.budget_ms),
          '<span class="over">over</span>' if r.over else '<span class="ok">within</span>']
         for r in summary.stages], [False, True, True, True, True, False]),
        '<div class="plots">']
    for row in summary.stages:
        out.append(f"<figure>{latency_svg(row)}<figcaption>{html.escape(row.stage)}: "
                   "observations per decade in each histogram bucket; P50, P99 and the budget "
                   "marked</figcaption></figure>")
    out.append("</div>")
    return out


def _breakdowns(run: Run, summary: Summary, slo: SloSettings, detail: RunDetail) -> list[str]:
    e = html.escape
    span = run.span
    out = []
    if summary.classes:
        out += ["<h2>SLO attainment per class</h2>", _table(
            ["class", "responses", "expired", "within e2e budget", "e2e P99 ms", "budget ms",
             "mode", "breaches"],
            [[e(c.slo_class), f"{c.responses:.0f}", f"{c.expired:.0f}", _pct(c.attainment),
              _ms(c.p99_ms, c.p99_saturated), f"{c.budget_ms:.0f}",
              "degraded" if c.degraded else "normal", f"{c.breaches:.0f}"]
             for c in summary.classes], [False, True, True, True, True, True, False, True])]
    pools = pool_rows(span)
    if pools:
        out += ["<h2>Per pool</h2>", _table(
            ["pool", "requests", "degraded", "mean batch", "queue depth (last) / bound",
             "queue P99 ms", "infer P50 ms", "infer P99 ms"],
            [[e(p.pool), e(", ".join(f"{s} {n:.0f}" for s, n in p.requests.items()) or "-"),
              _n(p.degraded), "-" if p.batch_mean is None else f"{p.batch_mean:.1f}",
              f"{_n(p.queue_depth)} / {_n(p.queue_capacity)}",
              _ms(p.queue.p99_ms, p.queue.saturated), _ms(p.infer.p50_ms),
              _ms(p.infer.p99_ms, p.infer.saturated)] for p in pools],
            [False, False, True, True, True, True, True, True])]
    routes = route_rows(span, slo)
    if routes:
        total = sum(r.windows for r in routes) or 1.0
        out += ["<h2>Routes</h2>", _table(
            ["route", "windows", "share", "answers", "e2e P50 ms", "e2e P99 ms",
             "answers within budget"],
            [[e(r.route), f"{r.windows:.0f}", f"{r.windows / total * 100:.1f}%",
              f"{r.e2e.count:.0f}", _ms(r.e2e.p50_ms), _ms(r.e2e.p99_ms, r.e2e.saturated),
              _pct(r.within)] for r in routes], [False, *([True] * 6)]),
            '<p class="note">Shed requests carry no route: attainment per class counts them.'
            "</p>"]
    out.append("<h2>Per stream</h2>")
    if detail.streams:
        out.append(_table(
            ["stream", "windows", "responses", "late tokens", "dead letters", "e2e P50 ms",
             "e2e P99 ms", "within budget"],
            [[e(s.stream_id), str(s.windows),
              e(", ".join(f"{k} {n}" for k, n in s.responses.items()) or "-"), str(s.late),
              str(s.dead_letters), _ms(s.e2e[0]), _ms(s.e2e[1]), _pct(s.within)]
             for s in detail.streams], [False, True, False, True, True, True, True, True]))
    else:
        out.append('<p class="note">Not in the metrics: a label per stream would make the '
                   "series unbounded. Per-stream figures need a ledger of the output topics, "
                   "such as <code>lockstep demo</code> keeps.</p>")
    letters = dead_letter_rows(span)
    if letters or detail.dead_letters:
        out.append("<h2>Dead letters</h2>")
    if letters:
        out.append(_table(["stage", "error", "records"],
                          [[e(s), e(err), f"{n:.0f}"] for s, err, n in letters],
                          [False, False, True]))
    if detail.dead_letters:
        out.append(_table(["stage", "error", "reason", "records"],
                          [[e(s), e(err), e(r), str(n)] for s, err, r, n in detail.dead_letters],
                          [False, False, False, True], cls="reasons"))
    out += _ledger(summary, has_ledger(span))
    if summary.lag:
        out += ["<h2>Consumer lag</h2>", _table(
            ["topic", "group", "records"],
            [[e(t), e(g), f"{n:.0f}"] for (t, g), n in summary.lag.items()],
            [False, False, True])]
    return out


def _ledger(summary: Summary, present: bool) -> list[str]:
    out = ["<h2>Token ledger</h2>"]
    if not present:
        return [*out, '<p class="note">No ledger in this scrape: tokens are counted by the '
                "align role and by producers, and these metrics come from neither.</p>"]
    out.append("<p>Every token consumed ends in exactly one of window, late or deadletter "
               "(or is counted a duplicate); <code>published</code> is what producers in these "
               "processes had acknowledged.</p>")
    outcomes = sorted({o for per in summary.ledger.values() for o in per} - {"published"})
    # Producers count ``published``; a scrape of align alone has none to show.
    published = ["published"] if any(per.get("published") for per in
                                     summary.ledger.values()) else []
    out.append(_table(["modality", *published, *outcomes, "settled"],
                      [[html.escape(m), *(f"{per.get(o, 0):.0f}" for o in published),
                        *(f"{per.get(o, 0):.0f}" for o in outcomes),
                        f"{sum(per.get(o, 0) for o in outcomes):.0f}"]
                       for m, per in summary.ledger.items()],
                      [False, *([True] * (len(published) + len(outcomes) + 1))]))
    return out


def render_html(run: Run, slo: SloSettings, *, title: str = "Lockstep SLA report",
                meta: Mapping[str, str] | None = None, detail: RunDetail | None = None) -> str:
    """The whole report of ``run`` as one HTML document."""
    e = html.escape
    detail = detail or RunDetail()
    summary = summarize(run.span, slo)
    scope = ("over the sampled span" if run.intervals
             else "totals since the processes started (one scrape)")
    info = {"generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"), **(meta or {}),
            "figures": scope}
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>"
           f"<style>{_STYLE}</style></head><body><h1>{e(title)}</h1>",
           "<p>" + " · ".join(f"{e(k)}: {e(v)}" for k, v in info.items()) + "</p>",
           series_section(run, points(run, slo), detail.events)]
    out += _stages(summary)
    out += _breakdowns(run, summary, slo, detail)
    out.append("</body></html>")
    return "\n".join(out)


def run_of(texts: Sequence[str] = (), scrapes: Sequence[TimedScrape] = ()) -> Run:
    """The run to report on: scrapes over time, or texts of one moment (several roles).

    Raises:
        ConfigError: Both or neither are given.
    """
    if bool(texts) == bool(scrapes):
        raise ConfigError("give either scrapes over time or texts of one moment, not both"
                          if texts else "no metrics to report on")
    if scrapes:
        return build_run(scrapes)
    now = time.time()
    return build_run([TimedScrape.of_text(t, at=now, source=f"#{i}")
                      for i, t in enumerate(texts)])


def write_report(path: Path, texts: Sequence[str], slo: SloSettings, *,
                 scrapes: Sequence[TimedScrape] = (), detail: RunDetail | None = None,
                 title: str = "Lockstep SLA report",
                 meta: Mapping[str, str] | None = None) -> Path:
    """Write the report to ``path``: of ``texts`` (one moment), or of ``scrapes`` over time.

    Args:
        path: The HTML file to write.
        texts: ``/metrics`` texts taken at one moment (several roles: merged).
        slo: SLO classes and budgets (budgets the metrics export take precedence).
        scrapes: Scrapes over time instead of ``texts``: they add the time axis.
        detail: What an observer of the output topics read (per stream, dead-letter
            reasons, ``slo.events``).
        title: The page's title.
        meta: ``key: value`` pairs for the page's header line.
    """
    page = render_html(run_of(texts, scrapes), slo, title=title, meta=meta, detail=detail)
    path.write_text(page, encoding="utf-8")
    return path
