"""The report's time axis: per-interval P99 per stage, attainment, throughput, queues, breaches.

Drawn from the intervals between rounds of scrapes (:mod:`lockstep.observe.timeseries`) and, when
the report is given them, the ``slo.events`` records of the run.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

from lockstep.observe.breakdown import Point
from lockstep.observe.metrics import LAST_BOUND_MS, latency_text
from lockstep.observe.svgplot import (
    Chart,
    Lane,
    legend,
    line_chart,
    linear_axis,
    log_axis,
    ms_text,
    time_text,
    timeline,
)
from lockstep.observe.timeseries import Run
from lockstep.telemetry.metrics import STAGES
from lockstep.topics.schemas import SloEvent

#: Attainment objective drawn on the attainment chart (the alerts' burn rates assume it).
OBJECTIVE = 0.99
SINGLE_SCRAPE = ("One scrape: no time axis. Sample running processes over time with "
                 "<code>lockstep report --url URL --every 5s --for 60s</code>, or give saved "
                 "scrapes that carry their time (a scrape log, or a "
                 "<code># lockstep-scrape at=…</code> first line; docs/observability.md).")


def clock(at: float) -> str:
    """A wall-clock time for the page (UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>"


def stage_charts(run: Run, points: Sequence[Point]) -> list[str]:
    """One chart per stage: its P99 in each interval against its budget."""
    order = {s: i for i, s in enumerate(STAGES)}
    stages = sorted({s for p in points for s in p.stages}, key=lambda s: order.get(s, 99))
    out = []
    for stage in stages:
        values = [(p.end, p.stages[stage].p99_ms if stage in p.stages else None) for p in points]
        capped = [p.end for p in points if stage in p.stages and p.stages[stage].saturated]
        budget = next((p.budgets_ms.get(stage) for p in reversed(points)
                       if p.budgets_ms.get(stage) is not None), None)
        seen = [v for _, v in values if v is not None] + ([budget] if budget else [])
        axis = log_axis(seen, floor=0.01, ceiling=LAST_BOUND_MS, fmt=ms_text)
        refs = [(budget, f"budget {ms_text(budget)}")] if budget else []
        label = f"P99 {latency_text(LAST_BOUND_MS, True)}"
        svg = line_chart(Chart(f"p99-{stage}", run.start, run.end, axis, {stage: values},
                               refs, {stage: capped} if capped else {}, label))
        worst = max((p.stages[stage] for p in points if stage in p.stages),
                    key=lambda q: (q.saturated, q.p99_ms or 0.0))
        note = "; a triangle at the top: P99 beyond the last bucket" if capped else ""
        out.append(_figure(svg, f"{html.escape(stage)}: P99 per interval (worst "
                           f"{html.escape(latency_text(worst.p99_ms, worst.saturated, unit=True))}"
                           f"){note}"))
    return out


def _degraded_spans(points: Sequence[Point], slo_class: str | None = None
                    ) -> list[tuple[float, float]]:
    spans: list[tuple[float, float]] = []
    for p in points:
        if slo_class in p.degraded if slo_class else p.degraded:
            if spans and spans[-1][1] == p.start:
                spans[-1] = (spans[-1][0], p.end)
            else:
                spans.append((p.start, p.end))
    return spans


def attainment_chart(run: Run, points: Sequence[Point]) -> str:
    """Share of requests within their class budget in each interval, per class."""
    classes = sorted({c for p in points for c in p.attainment})
    series = {c: [(p.end, _percent(p.attainment.get(c))) for p in points] for c in classes}
    axis = linear_axis(100.0, lambda v: f"{v:g} %")
    svg = line_chart(Chart("attainment", run.start, run.end, axis, series,
                           [(OBJECTIVE * 100, f"{OBJECTIVE * 100:g} %")],
                           shaded=_degraded_spans(points), width=1040))
    return _figure(svg, "SLO attainment per class and interval: answered within budget over "
                   "answered plus shed; shaded while a class ran degraded. "
                   + legend(classes))


def _percent(share: float | None) -> float | None:
    return None if share is None else share * 100


def rate_charts(run: Run, points: Sequence[Point]) -> list[str]:
    """Responses and settled tokens per second, and queue depth per pool."""
    out = []
    rates: tuple[tuple[str, str, list[float], str], ...] = (
        ("responses-per-s", "responses/s", [p.responses_per_s for p in points],
         "responses per second (answered plus shed)"),
        ("tokens-per-s", "tokens/s", [p.tokens_per_s for p in points],
         "tokens settled per second (window, late, dead letter)"))
    for key, name, rate, caption in rates:
        values: list[tuple[float, float | None]] = [
            (p.end, r) for p, r in zip(points, rate, strict=True)]
        axis = linear_axis(max(rate, default=1.0) or 1.0, _count_text)
        out.append(_figure(line_chart(Chart(key, run.start, run.end, axis, {name: values})),
                           caption))
    pools = sorted({pool for p in points for pool in p.queue_depth})
    if pools:
        series = {pool: [(p.end, p.queue_depth.get(pool)) for p in points] for pool in pools}
        top = max((v for vs in series.values() for _, v in vs if v is not None), default=1.0)
        axis = linear_axis(top or 1.0, _count_text)
        out.append(_figure(line_chart(Chart("queue-depth", run.start, run.end, axis, series)),
                           "requests waiting per pool at the end of each interval. "
                           + legend(pools)))
    return out


def _count_text(v: float) -> str:
    return f"{v / 1000:g}k" if v >= 10_000 else f"{v:g}"


def breach_section(run: Run, points: Sequence[Point], events: Sequence[SloEvent]) -> str:
    """The breach timeline: breaches per stage and class, degraded spans, slo.events."""
    lanes: dict[str, Lane] = {}
    for (stage, slo_class) in sorted({k for p in points for k in p.breaches}):
        marks = [(p.end, f"{stage} · {slo_class}: {p.breaches[(stage, slo_class)]:.0f} "
                  f"breach(es) raised by {clock(p.end)}")
                 for p in points if (stage, slo_class) in p.breaches]
        lanes[f"{stage} · {slo_class}"] = Lane(f"{stage} · {slo_class}", marks)
    for e in events:
        label = f"{e.stage} · {e.slo_class}"
        lane = lanes.get(label, Lane(label))
        tip = (f"{e.kind} {label} at {clock(e.at_us / 1e6)}: P99 {e.p99_ms:.1f} ms over "
               f"{e.samples} samples, budget {e.budget_ms:g} ms ({e.source})")
        lanes[label] = Lane(label, [*lane.marks, (e.at_us / 1e6, tip)], lane.spans,
                            lane.colour)
    for slo_class in sorted({c for p in points for c in p.degraded}):
        lanes[f"degraded · {slo_class}"] = Lane(f"degraded · {slo_class}",
                                                spans=_degraded_spans(points, slo_class))
    if not lanes:
        return "<p>No breach raised and no class degraded during the sampled span.</p>"
    t0 = min([run.start, *(e.at_us / 1e6 for e in events)])
    t1 = max([run.end, *(e.at_us / 1e6 for e in events)])
    parts = [_figure(timeline("breaches", list(lanes.values()), t0, t1),
                     "breaches raised per stage and class (a dot per interval or event), and "
                     "the spans each class ran degraded")]
    rows = [[clock(p.end), html.escape(stage), html.escape(c),
             f"{n:.0f} breach{'es' if n != 1 else ''} raised", "metrics"]
            for p in points for (stage, c), n in sorted(p.breaches.items())]
    rows += [[clock(e.at_us / 1e6), html.escape(e.stage), html.escape(e.slo_class),
              f"{e.kind}: P99 {e.p99_ms:.1f} / {e.budget_ms:g} ms", html.escape(e.source)]
             for e in events]
    rows.sort(key=lambda r: r[0])
    head = "".join(f"<th>{h}</th>" for h in ("time (UTC)", "stage", "class", "what", "from"))
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    parts.append(f"<table class=breaches><tr>{head}</tr>{body}</table>")
    return "".join(parts)


def series_section(run: Run, points: Sequence[Point], events: Sequence[SloEvent]) -> str:
    """The whole time-axis part of the report."""
    if not points:
        return f"<h2>Over time</h2><p>{SINGLE_SCRAPE}</p>"
    seconds = run.end - run.start
    out = [f"<h2>Over time</h2><p>{len(run.rounds)} scrapes from {clock(run.start)} to "
           f"{clock(run.end)} UTC ({time_text(round(seconds, 1))}); each point is one "
           "interval between scrapes.</p>",
           "<h3>P99 per stage</h3>", '<div class="plots">', *stage_charts(run, points),
           "</div>", "<h3>SLO attainment</h3>", attainment_chart(run, points),
           "<h3>Throughput and queues</h3>", '<div class="plots">', *rate_charts(run, points),
           "</div>", "<h3>Breach timeline</h3>", breach_section(run, points, events)]
    return "\n".join(out)
