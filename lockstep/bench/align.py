"""``lockstep bench align``: Lockstep's aligner against a naive grid, on one faulty feed.

One seeded chaos feed (:mod:`lockstep.streams.chaos`) goes through both aligners in arrival order,
with ``now_us`` the arrival time. Each output is scored against the ground truth
(:mod:`lockstep.bench.score`), and each operator is timed alone: only its ``add`` / ``poll``
/ ``flush`` calls, best of ``repeats`` runs over the same feed. The feed itself (tens of
thousands of tokens) is moved out of the garbage collector's view first: a collection inside
a timed call would otherwise spend its time walking the benchmark's input.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from lockstep.bench.baseline import GridAligner, GridWindow
from lockstep.bench.score import SCORED, Score, Truth, pairing_from_window, score
from lockstep.streams.aligner import Aligner
from lockstep.streams.chaos import ChaosFeed, FaultSpec, generate
from lockstep.streams.settings import AlignSettings
from lockstep.topics.schemas import Modality, Token, Window


@dataclass(frozen=True)
class AlignBenchOptions:
    """What the benchmark runs."""

    streams: int = 4
    seconds: float = 20.0
    seed: int = 7
    faults: FaultSpec = field(default_factory=FaultSpec)
    repeats: int = 3
    #: A pairing counts as misaligned only when it is this much worse than the ideal one.
    slack_ms: float = 2.0


@dataclass
class Run:
    """One pass of an operator over the feed."""

    windows: list[Any] = field(default_factory=list)
    late: int = 0
    duplicates: int = 0
    rejected: int = 0
    seconds: float = 0.0


class _Output(Protocol):
    @property
    def windows(self) -> Sequence[Any]: ...


class _Operator(Protocol):
    def add(self, token: Token, now_us: int) -> _Output: ...
    def poll(self, now_us: int) -> _Output: ...
    def flush(self, now_us: int) -> _Output: ...


def drive(operator: _Operator, feed: Sequence[tuple[int, Token]]) -> Run:
    """Feed tokens in arrival order (``poll`` before each ``add``), then ``flush``.

    Only the operator's calls are timed. Their outputs are tallied at once rather than kept:
    holding two output objects per token would make the garbage collector's passes, which
    run inside the timed calls, grow with the feed.
    """
    run = Run()
    clock = time.perf_counter

    def tally(out: _Output) -> None:
        run.windows += out.windows
        run.late += len(getattr(out, "late", ()))
        run.duplicates += len(getattr(out, "duplicates", ()))
        run.rejected += len(getattr(out, "rejected", ()))

    for now_us, token in feed:
        start = clock()
        polled = operator.poll(now_us)
        added = operator.add(token, now_us)
        run.seconds += clock() - start
        tally(polled)
        tally(added)
    start = clock()
    flushed = operator.flush(feed[-1][0] if feed else 0)
    run.seconds += clock() - start
    tally(flushed)
    return run


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what is allocated so far out of the garbage collector's passes, for a while."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def best_of(repeats: int, once: Callable[[], Run]) -> Run:
    """Run ``repeats`` times; keep the first run's output and the fastest time."""
    runs = [once() for _ in range(max(1, repeats))]
    first = runs[0]
    first.seconds = min(r.seconds for r in runs)
    return first


def run_align_bench(options: AlignBenchOptions, settings: AlignSettings | None = None,
                    slo_class: str = "cabin") -> dict[str, Any]:
    """Generate the feed, run both aligners, score them; return the report (JSON-ready)."""
    align = settings or AlignSettings()
    chaos = generate(options.faults, options.streams, options.seconds, options.seed)
    truth = Truth(chaos.truth)
    with frozen_heap():
        lockstep = best_of(options.repeats, lambda: drive(Aligner(align, slo_class), chaos.feed))
        baseline = best_of(options.repeats, lambda: drive(
            GridAligner(required=[Modality(m) for m in align.required]), chaos.feed))
    lockstep_windows: list[Window] = lockstep.windows
    grid_windows: list[GridWindow] = baseline.windows
    slack = int(options.slack_ms * 1000)
    scores = {
        "lockstep": score([pairing_from_window(w) for w in lockstep_windows], truth, slack,
                          int(align.tolerance_ms * 1000)),
        "baseline": score([w.pairing() for w in grid_windows], truth, slack,
                          int(align.tolerance_ms * 1000)),
    }
    members = {
        "lockstep": sum(len(s) for w in lockstep_windows for s in w.members.values()),
        "baseline": sum(len(s) for w in grid_windows for s in w.members.values()),
    }
    return _report(options, align, chaos, scores, {"lockstep": lockstep, "baseline": baseline},
                   members)


def _report(options: AlignBenchOptions, align: AlignSettings, chaos: ChaosFeed,
            scores: dict[str, Score], runs: dict[str, Run],
            members: dict[str, int]) -> dict[str, Any]:
    delivered = len(chaos.feed)
    dropped = Counter(str(key[1]) for key, cap in chaos.truth.items() if not cap.delivered)

    def per(fn: Callable[[str], Any]) -> dict[str, Any]:
        return {name: fn(name) for name in ("lockstep", "baseline")}

    def ledger(name: str) -> dict[str, int]:
        run = runs[name]
        accounted = members[name] + run.late + run.duplicates + run.rejected
        return {"in_windows": members[name], "late": run.late, "duplicates": run.duplicates,
                "rejected": run.rejected, "unaccounted": delivered - accounted}

    return {
        "seed": options.seed,
        "slack_ms": options.slack_ms,
        "streams": options.streams,
        "seconds": options.seconds,
        "faults": asdict(options.faults),
        "align_settings": align.model_dump(mode="json"),
        "tokens": {
            "captured": len(chaos.truth),
            "delivered": delivered,
            "dropped": {str(m): dropped.get(str(m), 0) for m in Modality},
            "redelivered": delivered - sum(cap.delivered for cap in chaos.truth.values()),
        },
        "windows": per(lambda n: scores[n].windows),
        "anchorless": per(lambda n: scores[n].anchorless),
        "misaligned_rate": per(lambda n: scores[n].rate(scores[n].misaligned)),
        "misaligned_rate_strict": per(lambda n: scores[n].rate(scores[n].misaligned_strict)),
        "misaligned_by_modality": per(lambda n: {
            str(m): scores[n].rate(c) for m, c in scores[n].misaligned_by_modality.items()}),
        "alignment_error_ms": per(lambda n: {
            "p50": scores[n].error_ms(50), "p99": scores[n].error_ms(99),
            "matches": len(scores[n].errors()),
            "by_modality": {str(m): {"p50": scores[n].error_ms(50, m),
                                     "p99": scores[n].error_ms(99, m)} for m in SCORED}}),
        "partial_rate": per(lambda n: scores[n].rate(scores[n].partial, scores[n].windows)),
        "matched_inferred": per(lambda n: scores[n].inferred),
        "ledger": per(ledger),
        "operator_seconds": per(lambda n: runs[n].seconds),
        "tokens_per_s": per(lambda n: delivered / runs[n].seconds if runs[n].seconds else None),
    }

