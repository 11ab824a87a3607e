"""Breakdowns of the SLA figures: per pool, per route, per stream, per interval.

Pools and routes come from the metrics' labels. Streams do not (a label per stream would
make the series unbounded): their figures come from what an observer read from the output
topics, a :class:`lockstep.observe.ledger.Ledger`, which the demo has and a scrape does not.
Intervals come from scrapes over time (:mod:`lockstep.observe.timeseries`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockstep.config.settings import SloSettings
from lockstep.observe.ledger import Ledger
from lockstep.observe.metrics import Hist, Scrape, summarize
from lockstep.observe.timeseries import Run
from lockstep.topics.schemas import DeadLetter

#: Token outcomes that settle a consumed token (``published`` is the producers' count).
SETTLED = ("window", "late", "deadletter")


@dataclass(frozen=True)
class Quantiles:
    """P50 and P99 of one histogram in milliseconds (``saturated``: P99 beyond 10 s)."""

    count: float
    p50_ms: float | None
    p99_ms: float | None
    saturated: bool

    @classmethod
    def of(cls, hist: Hist | None) -> Quantiles:
        """The quantiles of ``hist`` (none without observations)."""
        if hist is None or hist.total <= 0:
            return cls(0.0, None, None, False)
        p50, p99 = hist.quantile(0.5), hist.quantile(0.99)
        return cls(hist.total, None if p50 is None else p50 * 1e3,
                   None if p99 is None else p99 * 1e3, hist.saturated(0.99))


@dataclass(frozen=True)
class PoolRow:
    """One engine pool: requests by status, its queue and its latencies."""

    pool: str
    requests: dict[str, float]
    degraded: float
    batch_mean: float | None
    queue_depth: float | None
    queue_capacity: float | None
    queue: Quantiles
    infer: Quantiles


@dataclass(frozen=True)
class RouteRow:
    """One route: windows routed, answers and their e2e latency against the class budget."""

    route: str
    windows: float
    e2e: Quantiles
    #: Share of the route's answers within their class budget (shed requests carry no
    #: route, so they are not in it: see the class table for attainment).
    within: float | None


def pool_rows(scrape: Scrape) -> list[PoolRow]:
    """Every pool named by a worker metric, in name order."""
    requests: dict[str, dict[str, float]] = defaultdict(dict)
    for (pool, status), n in scrape.values("lockstep_requests_total", ("pool", "status")).items():
        requests[pool][status] = n
    degraded = scrape.values("lockstep_requests_degraded_total", ("pool",))
    batches = scrape.histogram("lockstep_batch_size", ("pool",))
    depth = scrape.values("lockstep_queue_depth", ("pool",))
    capacity = scrape.values("lockstep_queue_capacity", ("pool",))
    stages = scrape.histogram("lockstep_stage_latency_seconds", ("pool", "stage"))
    pools = ({p for (p,) in depth} | {p for (p,) in capacity} | {p for (p,) in batches}
             | set(requests) | {p for p, s in stages if s in ("queue", "infer")}) - {""}
    rows = []
    for pool in sorted(pools):
        batch = batches.get((pool,))
        rows.append(PoolRow(
            pool, dict(sorted(requests.get(pool, {}).items())), degraded.get((pool,), 0.0),
            batch.sum / batch.total if batch is not None and batch.total > 0 else None,
            depth.get((pool,)), capacity.get((pool,)),
            Quantiles.of(stages.get((pool, "queue"))), Quantiles.of(stages.get((pool, "infer")))))
    return rows


def route_rows(scrape: Scrape, slo: SloSettings) -> list[RouteRow]:
    """Every route that windows took or answers carry, in name order."""
    windows = {r: n for (r,), n in scrape.values("lockstep_windows_total", ("route",)).items()}
    answered = scrape.histogram("lockstep_e2e_latency_seconds", ("route", "slo_class"))
    budgets = scrape.values("lockstep_slo_budget_seconds", ("stage", "slo_class"))
    rows = []
    for route in sorted((set(windows) | {r for r, _ in answered}) - {""}):
        per_class = {c: h for (r, c), h in answered.items() if r == route}
        hists = list(per_class.values())
        merged = sum(hists[1:], hists[0]) if hists else None
        met = sum((h.share_within(budgets.get(("e2e", c), slo.budget_ms(c) / 1e3)) or 0.0)
                  * h.total for c, h in per_class.items())
        total = sum(h.total for h in hists)
        rows.append(RouteRow(route, windows.get(route, 0.0), Quantiles.of(merged),
                             met / total if total else None))
    return rows


def dead_letter_rows(scrape: Scrape) -> list[tuple[str, str, float]]:
    """Dead letters by (stage, error), most first; zero rows left out."""
    counts = scrape.values("lockstep_dead_letters_total", ("stage", "error"))
    return sorted(((s, e, n) for (s, e), n in counts.items() if n > 0),
                  key=lambda row: (-row[2], row[0], row[1]))


def responses(scrape: Scrape) -> float:
    """Requests answered or shed (the denominator of attainment)."""
    answered = sum(h.total for h in scrape.histogram("lockstep_e2e_latency_seconds").values())
    return answered + sum(scrape.values("lockstep_e2e_expired_total").values())


def tokens(scrape: Scrape, outcomes: Iterable[str] = SETTLED) -> float:
    """Tokens counted with one of ``outcomes``."""
    wanted = set(outcomes)
    return sum(n for (o,), n in scrape.values("lockstep_tokens_total", ("outcome",)).items()
               if o in wanted)


def has_ledger(scrape: Scrape) -> bool:
    """The scrape counts tokens (an align process, or a producer): a ledger to show."""
    return any(n > 0 for n in scrape.values("lockstep_tokens_total", ("outcome",)).values())


@dataclass(frozen=True)
class Point:
    """The figures of one interval between two rounds of scrapes."""

    start: float
    end: float
    #: Per stage: P99 (ms), whether it is beyond the last bucket, and the observations.
    stages: dict[str, Quantiles]
    budgets_ms: dict[str, float | None]
    #: Per SLO class: share within budget of the requests answered or shed in the interval.
    attainment: dict[str, float | None]
    responses_per_s: float
    tokens_per_s: float
    dead_letters: float
    #: Breaches raised in the interval, by (stage, class).
    breaches: dict[tuple[str, str], float]
    #: Classes in degraded mode at the interval's end.
    degraded: tuple[str, ...]
    queue_depth: dict[str, float]


def points(run: Run, slo: SloSettings) -> list[Point]:
    """The figures of every interval of ``run``."""
    out = []
    for interval in run.intervals:
        s, seconds = interval.scrape, interval.seconds
        summary = summarize(s, slo)
        out.append(Point(
            interval.start, interval.end,
            stages={r.stage: Quantiles(r.count, r.p50_ms, r.p99_ms, r.p99_saturated)
                    for r in summary.stages},
            budgets_ms={r.stage: r.budget_ms for r in summary.stages},
            attainment={c.slo_class: c.attainment for c in summary.classes},
            responses_per_s=responses(s) / seconds, tokens_per_s=tokens(s) / seconds,
            dead_letters=sum(n for *_, n in dead_letter_rows(s)),
            breaches={(k[0], k[1]): n for k, n in s.values(
                "lockstep_slo_breaches_total", ("stage", "slo_class")).items() if n > 0},
            degraded=tuple(sorted(c for (c,), v in s.values(
                "lockstep_slo_degraded", ("slo_class",)).items() if v > 0)),
            queue_depth={p: v for (p,), v in s.values("lockstep_queue_depth", ("pool",)).items()}))
    return out


@dataclass(frozen=True)
class StreamRow:
    """One stream as the observer saw it on the output topics."""

    stream_id: str
    windows: int
    responses: Mapping[str, int]
    late: int
    dead_letters: int
    e2e: tuple[float | None, float | None]
    #: Responses with status ok within the stream's class budget, over all responses.
    within: float | None


def stream_rows(ledger: Ledger, slo: SloSettings) -> list[StreamRow]:
    """Per stream: windows, responses by status, late tokens, dead letters and e2e."""
    windows = Counter(sid for sid, _ in ledger.windows)
    late = Counter(t.stream_id for t in ledger.late)
    dead = Counter(_stream_of(d) for d in ledger.dead_letters)
    by_stream: dict[str, list[tuple[str, float | None, float]]] = defaultdict(list)
    for (sid, _), r in ledger.responses.items():
        t = r.timeline
        e2e = (t.responded_us - t.capture_us) / 1e3 if t.responded_us and t.capture_us else None
        by_stream[sid].append((r.status, e2e, slo.budget_ms(r.slo_class)))
    rows = []
    for sid in sorted(set(windows) | set(by_stream) | set(late) | (set(dead) - {""})):
        answers = by_stream.get(sid, [])
        ok = sorted(e for status, e, _ in answers if status == "ok" and e is not None)
        met = sum(1 for status, e, b in answers if status == "ok" and e is not None and e <= b)
        rows.append(StreamRow(
            sid, windows.get(sid, 0), dict(sorted(Counter(a[0] for a in answers).items())),
            late.get(sid, 0), dead.get(sid, 0), (_rank(ok, 0.5), _rank(ok, 0.99)),
            met / len(answers) if answers else None))
    return rows


def dead_letter_reasons(letters: Iterable[DeadLetter], limit: int = 20
                        ) -> list[tuple[str, str, str, int]]:
    """The most frequent (stage, error, reason) of dead letters, with their counts."""
    counts = Counter((d.stage, d.error, d.reason) for d in letters)
    return [(s, e, r, n) for (s, e, r), n in counts.most_common(limit)]


def _stream_of(letter: DeadLetter) -> str:
    return letter.key.decode(errors="replace") if letter.key else ""


def _rank(ordered: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of sorted values."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
