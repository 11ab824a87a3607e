"""Reading Lockstep's Prometheus metrics back: scrapes, histograms, the SLA summary.

Used by ``lockstep top`` and ``lockstep report``. A :class:`Scrape` holds the ``lockstep_*``
samples of one or more ``/metrics`` texts (several roles: histograms and counters add up,
gauges take the largest value); :func:`summarize` turns one into per-stage P50/P99 against
budget, SLO attainment per class, routes, the token ledger and consumer lag. Quantiles are
interpolated within buckets the way PromQL's ``histogram_quantile`` does.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from lockstep.config.settings import SloSettings
from lockstep.errors import ConfigError, ScrapeError
from lockstep.telemetry.metrics import LATENCY_BUCKETS, STAGES

Labels = frozenset[tuple[str, str]]
PREFIX = "lockstep_"


@dataclass(frozen=True)
class Hist:
    """One histogram: cumulative bucket counts by upper bound (the last is +Inf)."""

    buckets: tuple[tuple[float, float], ...]
    total: float
    sum: float

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile in the histogram's unit; None without observations."""
        if self.total <= 0:
            return None
        rank = q * self.total
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower  # beyond the last finite bound: its value is unknown
                inside = cumulative - below
                return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = le, cumulative
        return lower

    def saturated(self, q: float) -> bool:
        """The ``q`` quantile lies beyond the last finite bound (it reads as that bound)."""
        if self.total <= 0:
            return False
        finite = [c for le, c in self.buckets if not math.isinf(le)]
        return not finite or finite[-1] < q * self.total

    def share_within(self, bound: float) -> float | None:
        """Fraction of observations at or below ``bound`` (interpolated within a bucket)."""
        if self.total <= 0:
            return None
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if bound <= le:
                if math.isinf(le):
                    return below / self.total
                part = (bound - lower) / (le - lower) if le > lower else 1.0
                return (below + (cumulative - below) * part) / self.total
            lower, below = le, cumulative
        return 1.0

    def bars(self) -> list[tuple[float, float, float]]:
        """Observations per bucket as (lower, upper, count), finite buckets only."""
        out, lower, below = [], 0.0, 0.0
        for le, cumulative in self.buckets:
            if math.isinf(le):
                break
            out.append((lower, le, cumulative - below))
            lower, below = le, cumulative
        return out

    def with_unanswered(self, n: float) -> Hist:
        """This histogram plus ``n`` observations of unbounded latency (shed requests).

        They land in the ``+Inf`` bucket: they count against every budget, and a P99 they
        reach reads as the largest finite bound.
        """
        if n <= 0:
            return self
        bounds = dict(self.buckets)
        bounds[math.inf] = bounds.get(math.inf, self.total) + n
        return Hist(tuple(sorted(bounds.items())), self.total + n, self.sum)

    def __add__(self, other: Hist) -> Hist:
        return _combine(self, other, 1.0)

    def __sub__(self, other: Hist) -> Hist:
        return _combine(self, other, -1.0)


def _combine(a: Hist, b: Hist, sign: float) -> Hist:
    counts: dict[float, float] = dict(a.buckets)
    for le, c in b.buckets:
        counts[le] = counts.get(le, 0.0) + sign * c
    return Hist(tuple(sorted(counts.items())), a.total + sign * b.total, a.sum + sign * b.sum)


@dataclass
class Scrape:
    """The ``lockstep_*`` samples of one or more scrapes."""

    histograms: dict[str, dict[Labels, Hist]] = field(default_factory=dict)
    counters: dict[str, dict[Labels, float]] = field(default_factory=dict)
    gauges: dict[str, dict[Labels, float]] = field(default_factory=dict)

    def histogram(self, name: str, by: Sequence[str] = (),
                  where: Mapping[str, str] | None = None) -> dict[tuple[str, ...], Hist]:
        """Histograms of ``name`` summed over every label but ``by``, filtered by ``where``."""
        out: dict[tuple[str, ...], Hist] = {}
        for labels, hist in self.histograms.get(name, {}).items():
            d = dict(labels)
            if where and any(d.get(k) != v for k, v in where.items()):
                continue
            key = tuple(d.get(k, "") for k in by)
            out[key] = out[key] + hist if key in out else hist
        return out

    def values(self, name: str, by: Sequence[str] = (), *,
               where: Mapping[str, str] | None = None) -> dict[tuple[str, ...], float]:
        """Counter values summed, or gauge values maxed, over every label but ``by``."""
        is_gauge = name in self.gauges
        source = self.gauges.get(name) or self.counters.get(name, {})
        out: dict[tuple[str, ...], float] = {}
        for labels, value in source.items():
            d = dict(labels)
            if where and any(d.get(k) != v for k, v in where.items()):
                continue
            key = tuple(d.get(k, "") for k in by)
            if key not in out:
                out[key] = value
            else:
                out[key] = max(out[key], value) if is_gauge else out[key] + value
        return out

    def __sub__(self, earlier: Scrape) -> Scrape:
        """What was observed between ``earlier`` and this scrape (gauges as they are now)."""
        hists = {name: {labels: h - earlier.histograms.get(name, {}).get(
            labels, Hist((), 0.0, 0.0)) for labels, h in series.items()}
            for name, series in self.histograms.items()}
        counters = {name: {labels: v - earlier.counters.get(name, {}).get(labels, 0.0)
                           for labels, v in series.items()}
                    for name, series in self.counters.items()}
        return Scrape(hists, counters, dict(self.gauges))


def parse(text: str) -> Scrape:
    """Parse one Prometheus text exposition, keeping the ``lockstep_*`` families.

    Raises:
        ConfigError: The text is not a Prometheus exposition.
    """
    scrape = Scrape()
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ConfigError(f"not Prometheus metrics text: {exc}") from exc
    for family in families:
        if not family.name.startswith(PREFIX) or family.name.endswith("_created"):
            continue
        if family.type == "histogram":
            series: dict[Labels, dict[str, object]] = {}
            for s in family.samples:
                labels = frozenset((k, v) for k, v in s.labels.items() if k != "le")
                entry = series.setdefault(labels, {"buckets": {}, "count": 0.0, "sum": 0.0})
                if s.name.endswith("_bucket"):
                    entry["buckets"][float(s.labels["le"])] = s.value  # type: ignore[index]
                elif s.name.endswith("_count"):
                    entry["count"] = s.value
                elif s.name.endswith("_sum"):
                    entry["sum"] = s.value
            scrape.histograms[family.name] = {
                labels: Hist(tuple(sorted(e["buckets"].items())),  # type: ignore[attr-defined]
                             float(e["count"]), float(e["sum"]))  # type: ignore[arg-type]
                for labels, e in series.items()}
        elif family.type in ("counter", "gauge"):
            # Counters by their sample name (``..._total``), as PromQL names them.
            target = scrape.counters if family.type == "counter" else scrape.gauges
            for s in family.samples:
                if not s.name.endswith("_created"):
                    target.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return scrape


def merge(scrapes: Iterable[Scrape]) -> Scrape:
    """Combine the scrapes of several processes (histograms and counters add, gauges max)."""
    out = Scrape()
    for scrape in scrapes:
        for name, hs in scrape.histograms.items():
            target = out.histograms.setdefault(name, {})
            for labels, h in hs.items():
                target[labels] = target[labels] + h if labels in target else h
        for name, cs in scrape.counters.items():
            counters = out.counters.setdefault(name, {})
            for labels, v in cs.items():
                counters[labels] = counters.get(labels, 0.0) + v
        for name, gs in scrape.gauges.items():
            gauges = out.gauges.setdefault(name, {})
            for labels, v in gs.items():
                gauges[labels] = max(gauges.get(labels, v), v)
    return out


def fetch(url: str, timeout_s: float = 5.0) -> str:
    """The text of a ``/metrics`` URL.

    Raises:
        ScrapeError: The endpoint did not answer.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return str(answer.read().decode())
    except (urllib.error.URLError, OSError) as exc:
        raise ScrapeError(f"cannot scrape {url}: {exc}") from exc


@dataclass(frozen=True)
class StageRow:
    """One stage's latency against its budget (milliseconds)."""

    stage: str
    count: float
    p50_ms: float | None
    p99_ms: float | None
    budget_ms: float | None
    hist: Hist
    #: The P99 is beyond the last finite bucket: at least that, not that.
    p99_saturated: bool = False

    @property
    def over(self) -> bool:
        """The P99 is over budget."""
        return self.p99_ms is not None and self.budget_ms is not None and (
            self.p99_ms > self.budget_ms)


@dataclass(frozen=True)
class ClassRow:
    """One SLO class: responses, e2e attainment and P99 against its budget."""

    slo_class: str
    responses: float
    #: Requests shed unanswered; they count as missed.
    expired: float
    attainment: float | None
    p99_ms: float | None
    budget_ms: float
    degraded: bool
    breaches: float
    #: The e2e P99 is beyond the last finite bucket (shed requests, or answers over 10 s).
    p99_saturated: bool = False


@dataclass(frozen=True)
class Summary:
    """What ``top`` shows and ``report`` renders."""

    stages: list[StageRow]
    classes: list[ClassRow]
    routes: dict[str, float]
    ledger: dict[str, dict[str, float]]
    lag: dict[tuple[str, str], float]
    batch: dict[str, float]


def summarize(scrape: Scrape, slo: SloSettings) -> Summary:
    """Per-stage P50/P99 against budget, attainment per class, routes, ledger and lag."""
    budgets = scrape.values("lockstep_slo_budget_seconds", ("stage", "slo_class"))
    seen = {c for (c,) in scrape.histogram("lockstep_e2e_latency_seconds", ("slo_class",))}
    seen |= {c for (c,) in scrape.histogram("lockstep_stage_latency_seconds", ("slo_class",))}
    seen = {c for c in seen if c} or {slo.default_class}

    def budget_ms(stage: str, slo_class: str | None = None) -> float:
        """The budget in one class, or the tightest over the classes seen."""
        return min(budgets[(stage, c)] * 1e3 if (stage, c) in budgets
                   else slo.stage_budget_ms(stage, c) for c in ([slo_class] if slo_class else seen))

    expired = scrape.values("lockstep_e2e_expired_total", ("slo_class",))
    shed_total = sum(expired.values())
    hists = scrape.histogram("lockstep_stage_latency_seconds", ("stage",))
    e2e = scrape.histogram("lockstep_e2e_latency_seconds").get(())
    if e2e is not None or shed_total > 0:
        # A shed request is an e2e observation that never ended: it counts as over budget.
        hists[("e2e",)] = (e2e or _EMPTY).with_unanswered(shed_total)
    order = {s: i for i, s in enumerate(STAGES)}
    stages = []
    for (stage,), h in sorted(hists.items(), key=lambda kv: order.get(kv[0][0], len(order))):
        stages.append(StageRow(stage, h.total, _ms(h.quantile(0.5)), _ms(h.quantile(0.99)),
                               budget_ms(stage), h, h.saturated(0.99)))
    degraded = scrape.values("lockstep_slo_degraded", ("slo_class",))
    breaches = scrape.values("lockstep_slo_breaches_total", ("slo_class",))
    answered = scrape.histogram("lockstep_e2e_latency_seconds", ("slo_class",))
    classes = []
    for slo_class in sorted({c for (c,) in answered}
                            | {c for (c,), n in expired.items() if n > 0}):
        budget = budget_ms("e2e", slo_class)
        shed = expired.get((slo_class,), 0.0)
        h = answered.get((slo_class,), _EMPTY)
        # Attainment and P99 over every request, the shed ones as missed.
        both = h.with_unanswered(shed)
        classes.append(ClassRow(slo_class, h.total, shed, both.share_within(budget / 1e3),
                                _ms(both.quantile(0.99)), budget,
                                degraded.get((slo_class,), 0.0) > 0,
                                breaches.get((slo_class,), 0.0), both.saturated(0.99)))
    ledger: dict[str, dict[str, float]] = {}
    for (modality, outcome), n in sorted(
            scrape.values("lockstep_tokens_total", ("modality", "outcome")).items()):
        ledger.setdefault(modality, {})[outcome] = n
    batch = {pool: h.sum / h.total for (pool,), h in
             scrape.histogram("lockstep_batch_size", ("pool",)).items() if h.total > 0}
    return Summary(
        stages=stages, classes=classes,
        routes={r: n for (r,), n in sorted(scrape.values("lockstep_windows_total",
                                                         ("route",)).items())},
        ledger=ledger,
        lag={(t, g): n for (t, g), n in sorted(scrape.values(
            "lockstep_consumer_lag", ("topic", "group")).items())},
        batch=batch)


#: A latency histogram without observations (the exporter's buckets).
_EMPTY = Hist(tuple((b, 0.0) for b in (*LATENCY_BUCKETS, math.inf)), 0.0, 0.0)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


#: The largest finite latency bucket bound, in milliseconds.
LAST_BOUND_MS: float = LATENCY_BUCKETS[-1] * 1e3


def latency_text(ms: float | None, saturated: bool = False, *, unit: bool = False) -> str:
    """A latency for people: ``-`` when unknown, ``≥ 10 s`` when beyond the last bucket.

    Args:
        ms: The latency in milliseconds.
        saturated: It was read from beyond the last finite bucket bound.
        unit: Append `` ms`` (for labels; table columns name the unit in their header).
    """
    if ms is None:
        return "-"
    if saturated:
        return f"≥ {LAST_BOUND_MS / 1e3:g} s"
    return f"{ms:.2f} ms" if unit else f"{ms:.2f}"
