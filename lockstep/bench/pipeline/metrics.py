"""The roles' ``/metrics`` read by the bench: scrapes, diffs, and the figures of a span.

A span (a ramp step, an overload second) is the difference between two scrapes of every
role, merged: histograms and counters subtract, so only what happened in between counts.
SLO attainment over a span is the share of answered requests within their class's e2e
budget, with shed (expired) requests counted as misses, as everywhere in Lockstep.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.config.settings import SloSettings
from lockstep.observe.metrics import Scrape, fetch, merge, parse, summarize


async def scrape(urls: Mapping[str, str], timeout_s: float = 5.0) -> dict[str, Scrape]:
    """One scrape of each role's ``/metrics``, by role label (fetched concurrently)."""
    texts = await asyncio.gather(*(asyncio.to_thread(fetch, url, timeout_s)
                                   for url in urls.values()))
    return {label: parse(text) for label, text in zip(urls, texts, strict=True)}


def diff(after: Mapping[str, Scrape], before: Mapping[str, Scrape]) -> Scrape:
    """What every role observed between two scrapes, merged."""
    return merge(after[label] - before[label] for label in after if label in before)


@dataclass(frozen=True)
class SpanFigures:
    """SLO and stage figures of one span."""

    #: Requests answered (any status but expired) and shed.
    answered: float
    expired: float
    #: Share of answered + shed within budget (None without any).
    attainment: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    #: Per stage: count, P50 and P99 (ms) and the stage's budget.
    stages: dict[str, dict[str, float | None]]
    windows: float
    #: Tokens by outcome (window, late, deadletter, duplicate, replayed…).
    tokens: dict[str, float]

    def as_json(self) -> dict[str, Any]:
        """JSON form (rounded)."""
        return {"answered": self.answered, "expired": self.expired,
                "attainment": _r(self.attainment, 5), "e2e_p50_ms": _r(self.e2e_p50_ms, 2),
                "e2e_p99_ms": _r(self.e2e_p99_ms, 2), "windows": self.windows,
                "tokens": self.tokens, "stages": self.stages}


def figures(span: Scrape, slo: SloSettings) -> SpanFigures:
    """Attainment, e2e and per-stage quantiles, windows and token outcomes of a span."""
    summary = summarize(span, slo)
    answered = sum(c.responses for c in summary.classes)
    expired = sum(c.expired for c in summary.classes)
    met = sum((c.attainment or 0.0) * (c.responses + c.expired) for c in summary.classes)
    total = answered + expired
    stages = {row.stage: {"count": row.count, "p50_ms": _r(row.p50_ms, 3),
                          "p99_ms": _r(row.p99_ms, 3), "budget_ms": row.budget_ms}
              for row in summary.stages}
    e2e = stages.get("e2e", {})
    outcomes: dict[str, float] = {}
    for by_outcome in summary.ledger.values():
        for outcome, n in by_outcome.items():
            outcomes[outcome] = outcomes.get(outcome, 0.0) + n
    return SpanFigures(
        answered=answered, expired=expired, attainment=met / total if total else None,
        e2e_p50_ms=e2e.get("p50_ms"), e2e_p99_ms=e2e.get("p99_ms"), stages=stages,
        windows=sum(summary.routes.values()), tokens=outcomes)


def e2e_count(scrapes: Mapping[str, Scrape]) -> float:
    """Requests answered or shed so far, over every role (for "is it still moving?")."""
    merged = merge(scrapes.values())
    answered = sum(h.total for h in merged.histogram("lockstep_e2e_latency_seconds").values())
    return answered + sum(merged.values("lockstep_e2e_expired_total").values())


def degraded(scrapes: Mapping[str, Scrape]) -> list[str]:
    """The SLO classes some role runs in degraded mode now (after a breach)."""
    merged = merge(scrapes.values())
    return sorted(c for (c,), v in merged.values("lockstep_slo_degraded", ("slo_class",)).items()
                  if v > 0)


def per_second(series: Sequence[tuple[float, Mapping[str, Scrape]]], slo: SloSettings
               ) -> list[tuple[float, SpanFigures]]:
    """Figures of each interval between consecutive ``(t, scrape)`` samples, at its end."""
    return [(t1, figures(diff(s1, s0), slo))
            for (_, s0), (t1, s1) in itertools.pairwise(series)]


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
