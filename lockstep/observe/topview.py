"""How ``lockstep top`` draws one frame: rich tables, rates and sparklines.

Pure rendering: the figures come in (:class:`lockstep.observe.metrics.Summary` and
:class:`Extras`), a rich renderable goes out. Latencies beyond the last bucket read
"≥ 10 s"; a sparkline is the history of the value next to it, one character per refresh.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from lockstep.observe.breakdown import PoolRow, RouteRow
from lockstep.observe.metrics import Summary, latency_text

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Target:
    """One ``/metrics`` URL and whether it answered this refresh."""

    url: str
    up: bool


@dataclass(frozen=True)
class Extras:
    """What a frame shows beyond the summary."""

    targets: Sequence[Target] = ()
    pools: Sequence[PoolRow] = ()
    routes: Sequence[RouteRow] = ()
    dead_letters: Sequence[tuple[str, str, float]] = ()
    #: Seconds the figures cover (0: totals since the processes started).
    span_s: float = 0.0
    #: Per second over the span: ``tokens`` (settled), ``responses``, ``published``.
    rates: Mapping[str, float] = field(default_factory=dict)
    #: The history of shown values, one per refresh (``stage:infer``, ``class:cabin``,
    #: ``pool:vl``, ``route:full``, ``tokens``, ``responses``).
    trends: Mapping[str, Sequence[float | None]] = field(default_factory=dict)


def sparkline(values: Sequence[float | None], *, log: bool = False) -> str:
    """One character per value, scaled between the smallest and the largest (gaps blank)."""
    def scale(v: float) -> float:
        return math.log10(max(v, 1e-6)) if log else v

    known = [scale(v) for v in values if v is not None]
    if not known:
        return " " * len(values)
    # Rates and shares from zero, so that noise stays flat; latencies on a log scale.
    lo, hi = min(known) if log else min(0.0, *known), max(known)
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif hi == lo:
            out.append(SPARK[0] if not log and hi == 0 else SPARK[3])
        else:
            out.append(SPARK[round((scale(v) - lo) / (hi - lo) * (len(SPARK) - 1))])
    return "".join(out)


def _ms(value: float | None, saturated: bool = False) -> str:
    return latency_text(value, saturated)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}/s"


def header(extras: Extras, sources: Sequence[str]) -> Text:
    """Which targets answered: ``targets 2/3 up · metrics from A, B · down: C (why)``."""
    if not extras.targets:
        return Text("metrics from " + ", ".join(sources), style="dim")
    up = [t.url for t in extras.targets if t.up]
    down = [t for t in extras.targets if not t.up]
    text = Text(f"targets {len(up)}/{len(extras.targets)} up",
                style="bold green" if not down else "bold yellow" if up else "bold red")
    if up:
        text.append(" · metrics from " + ", ".join(up))
    if down:
        text.append(" · down: " + ", ".join(t.url for t in down), style="red")
    return text


def throughput(extras: Extras) -> Text:
    """Tokens and responses per second over the span, with their trend."""
    if extras.span_s <= 0:
        return Text("throughput: needs two scrapes (without --once it shows rates)",
                    style="dim")
    text = Text(f"throughput over {extras.span_s:.0f} s: ")
    for key, name in (("tokens", "tokens settled"), ("responses", "responses"),
                      ("published", "published")):
        if key in extras.rates:
            text.append(f"{name} {_rate(extras.rates[key])} ", style="bold")
            if extras.trends.get(key):
                text.append(sparkline(extras.trends[key]) + "  ", style="cyan")
    return text


def _trend(extras: Extras, key: str, *, log: bool = False) -> str:
    return sparkline(extras.trends.get(key, ()), log=log)


def render(summary: Summary, *, title: str, errors: Sequence[str] = (),
           sources: Sequence[str] = (), extras: Extras | None = None) -> Group:
    """The view of one summary as rich tables (``sources``: the URLs it was read from)."""
    extras = extras or Extras()
    trends = bool(extras.trends)
    parts: list[Table | Text] = []
    if extras.targets or sources:
        parts.append(header(extras, sources))
    if extras.targets:
        parts.append(throughput(extras))
    stages = Table(title=title, title_justify="left", expand=False)
    for column in ("stage", "count", "p50 ms", "p99 ms", "budget ms", "",
                   *(["p99 trend"] if trends else [])):
        stages.add_column(column, justify="left" if column in ("stage", "", "p99 trend")
                          else "right")
    for row in summary.stages:
        status = Text("over", style="bold red") if row.over else Text("ok", style="green")
        stages.add_row(row.stage, f"{row.count:.0f}", _ms(row.p50_ms),
                       _ms(row.p99_ms, row.p99_saturated), _ms(row.budget_ms),
                       status if row.p99_ms is not None else "",
                       *([_trend(extras, f"stage:{row.stage}", log=True)] if trends else []))
    parts.append(stages)
    parts.append(_classes(summary, extras))
    if extras.pools:
        parts.append(_pools(extras))
    if extras.routes:
        parts.append(_routes(extras))
    parts.append(_side(summary, extras))
    parts.extend(Text(e, style="red") for e in errors)
    return Group(*parts)


def _classes(summary: Summary, extras: Extras) -> Table:
    trends = bool(extras.trends)
    classes = Table(title="SLO classes", title_justify="left")
    for column in ("class", "responses", "expired", "within budget", "e2e p99 ms", "budget ms",
                   "mode", "breaches", *(["within trend"] if trends else [])):
        classes.add_column(column, justify="left" if column in ("class", "mode", "within trend")
                           else "right")
    for c in summary.classes:
        attained = "-" if c.attainment is None else f"{c.attainment * 100:.1f}%"
        mode = Text("degraded", style="bold yellow") if c.degraded else Text("normal")
        classes.add_row(c.slo_class, f"{c.responses:.0f}", f"{c.expired:.0f}", attained,
                        _ms(c.p99_ms, c.p99_saturated), f"{c.budget_ms:.0f}", mode,
                        f"{c.breaches:.0f}",
                        *([_trend(extras, f"class:{c.slo_class}")] if trends else []))
    return classes


def _pools(extras: Extras) -> Table:
    trends, span = bool(extras.trends), extras.span_s
    pools = Table(title="pools", title_justify="left")
    for column in ("pool", "requests/s" if span else "requests", "by status", "queue",
                   "mean batch", "queue p99 ms", "infer p99 ms",
                   *(["queue trend"] if trends else [])):
        pools.add_column(column, justify="left" if column in ("pool", "by status",
                                                               "queue trend") else "right")
    for p in extras.pools:
        total = sum(p.requests.values())
        bound = "" if p.queue_capacity is None else f"/{p.queue_capacity:.0f}"
        pools.add_row(
            p.pool, _rate(total / span) if span else f"{total:.0f}",
            ", ".join(f"{s} {n:.0f}" for s, n in p.requests.items()) or "-",
            "-" if p.queue_depth is None else f"{p.queue_depth:.0f}{bound}",
            "-" if p.batch_mean is None else f"{p.batch_mean:.1f}",
            _ms(p.queue.p99_ms, p.queue.saturated), _ms(p.infer.p99_ms, p.infer.saturated),
            *([_trend(extras, f"pool:{p.pool}")] if trends else []))
    return pools


def _routes(extras: Extras) -> Table:
    trends = bool(extras.trends)
    routes = Table(title="latency per route", title_justify="left")
    for column in ("route", "answers", "e2e p50 ms", "e2e p99 ms", "answers within budget",
                   *(["e2e p99 trend"] if trends else [])):
        routes.add_column(column, justify="left" if column in ("route", "e2e p99 trend")
                          else "right")
    for r in extras.routes:
        routes.add_row(r.route, f"{r.e2e.count:.0f}", _ms(r.e2e.p50_ms),
                       _ms(r.e2e.p99_ms, r.e2e.saturated),
                       "-" if r.within is None else f"{r.within * 100:.1f}%",
                       *([_trend(extras, f"route:{r.route}", log=True)] if trends else []))
    return routes


def _side(summary: Summary, extras: Extras) -> Table:
    side = Table(title="windows per route · ledger · lag · dead letters", title_justify="left",
                 show_header=False)
    side.add_column("what")
    side.add_column("value", justify="right")
    for route, n in summary.routes.items():
        side.add_row(f"route {route}", f"{n / extras.span_s:.1f}/s" if extras.span_s
                     else f"{n:.0f}")
    for modality, outcomes in summary.ledger.items():
        side.add_row(f"tokens {modality}",
                     ", ".join(f"{o} {n:.0f}" for o, n in sorted(outcomes.items())))
    for (topic, group), n in summary.lag.items():
        side.add_row(escape(f"lag {topic} [{group}]"), f"{n:.0f}")
    for stage, error, n in extras.dead_letters:
        side.add_row(f"dead letters {stage} {error}", f"{n:.0f}")
    if not extras.pools:
        for pool, mean in summary.batch.items():
            side.add_row(f"mean batch {pool}", f"{mean:.1f}")
    return side
