"""``lockstep bench align``: Lockstep's aligner against a naive grid, on faulty feeds.

Each repetition generates the seeded chaos feed of its own seed
(:mod:`lockstep.bench.faults`) and runs both aligners over it in arrival order, with
``now_us`` the arrival time, ``timing_runs`` times each, interleaved (L B B L L B …) so
that a change in the machine's load hits both alike. The first run's windows are scored
against the ground truth (:mod:`lockstep.bench.score`); the timed figure of a repetition is
the median of its runs. Only the operators' ``add`` / ``poll`` / ``flush`` calls are timed.
The feed itself (tens of thousands of tokens) is moved out of the garbage collector's view
first: a collection inside a timed call would otherwise spend its time walking the
benchmark's input.

Throughput is reported three ways: tokens per wall second of the operator's calls; tokens
per CPU second (the wall time scaled by the share of the run this thread was on a CPU,
which a busy machine lowers); and tokens per unit of the reference workload
(:func:`lockstep.bench.machine.reference_workload`, timed before each repetition), the
figure to compare across machines.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from lockstep.bench.align_summary import align_report
from lockstep.bench.baseline import GridAligner, GridWindow
from lockstep.bench.faults import FaultSpec, generate
from lockstep.bench.machine import MachineWatch
from lockstep.bench.score import SCORED, Score, Truth, pairing_from_window, score
from lockstep.config.settings import AlignSettings
from lockstep.streams.align.aligner import Aligner
from lockstep.topics.schemas import Modality, Token, Window

SIDES = ("lockstep", "baseline")


@dataclass(frozen=True)
class AlignBenchOptions:
    """What the benchmark runs."""

    streams: int = 4
    seconds: float = 20.0
    #: Seed of the first repetition (then seed + 1, …).
    seed: int = 7
    faults: FaultSpec = field(default_factory=FaultSpec)
    #: Repetitions, one seed each.
    repeats: int = 3
    #: Timed runs of each operator per repetition (interleaved); the median counts.
    timing_runs: int = 3
    #: A pairing counts as misaligned only when it is this much worse than the ideal one.
    slack_ms: float = 2.0


@dataclass
class Run:
    """One pass of an operator over the feed."""

    windows: list[Any] = field(default_factory=list)
    late: int = 0
    duplicates: int = 0
    rejected: int = 0
    #: Wall seconds inside the operator's calls.
    seconds: float = 0.0
    #: Share of the whole pass this thread spent on a CPU (1.0 on an idle machine).
    cpu_share: float = 1.0


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

    wall0, cpu0 = clock(), time.thread_time()
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
    wall, cpu = clock() - wall0, time.thread_time() - cpu0
    run.cpu_share = min(1.0, cpu / wall) if wall > 0 else 1.0
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


def interleaved(makers: dict[str, Callable[[], Run]], runs: int) -> dict[str, list[Run]]:
    """Run each maker ``runs`` times, alternating which goes first (A B, B A, A B …)."""
    out: dict[str, list[Run]] = {name: [] for name in makers}
    names = list(makers)
    for i in range(max(1, runs)):
        for name in names if i % 2 == 0 else names[::-1]:
            out[name].append(makers[name]())
    return out


def run_align_bench(options: AlignBenchOptions, settings: AlignSettings | None = None,
                    slo_class: str = "cabin") -> dict[str, Any]:
    """Run every repetition, score and time both aligners; the report (JSON-ready)."""
    align = settings or AlignSettings()
    reps = []
    with MachineWatch() as watch:
        for r in range(max(1, options.repeats)):
            reference = statistics.median(watch.reference())
            reps.append(repetition(replace(options, seed=options.seed + r), align, slo_class,
                                   reference))
    return align_report(options, align, reps, watch.report())


def repetition(options: AlignBenchOptions, align: AlignSettings, slo_class: str,
               reference: float) -> dict[str, Any]:
    """One seed: the feed, both aligners timed (interleaved) and scored; flat figures."""
    chaos = generate(options.faults, options.streams, options.seconds, options.seed)
    truth = Truth(chaos.truth)
    required = [Modality(m) for m in align.required]
    with frozen_heap():
        runs = interleaved({
            "lockstep": lambda: drive(Aligner(align, slo_class), chaos.feed),
            "baseline": lambda: drive(GridAligner(required=required), chaos.feed),
        }, options.timing_runs)
    lockstep_windows: list[Window] = runs["lockstep"][0].windows
    grid_windows: list[GridWindow] = runs["baseline"][0].windows
    slack, tolerance = int(options.slack_ms * 1000), int(align.tolerance_ms * 1000)
    scores = {
        "lockstep": score([pairing_from_window(w) for w in lockstep_windows], truth, slack,
                          tolerance),
        "baseline": score([w.pairing() for w in grid_windows], truth, slack, tolerance),
    }
    members = {
        "lockstep": sum(len(s) for w in lockstep_windows for s in w.members.values()),
        "baseline": sum(len(s) for w in grid_windows for s in w.members.values()),
    }
    delivered = len(chaos.feed)
    out: dict[str, Any] = {
        "seed": options.seed, "reference_units_per_cpu_s": reference,
        "tokens": {"captured": len(chaos.truth), "delivered": delivered,
                   "dropped": {str(m): sum(1 for key, cap in chaos.truth.items()
                                           if key[1] == m and not cap.delivered)
                               for m in Modality},
                   "redelivered": delivered - sum(c.delivered for c in chaos.truth.values())},
    }
    for side in SIDES:
        out[side] = figures(scores[side], runs[side], members[side], delivered, reference)
    return out


def figures(s: Score, runs: list[Run], members: int, delivered: int,
            reference: float) -> dict[str, Any]:
    """The flat figures of one aligner in one repetition."""
    first = runs[0]
    seconds = statistics.median(r.seconds for r in runs)
    cpu_seconds = statistics.median(r.seconds * r.cpu_share for r in runs)
    per_cpu = delivered / cpu_seconds if cpu_seconds else None
    accounted = members + first.late + first.duplicates + first.rejected
    out: dict[str, Any] = {
        "windows": s.windows, "anchorless": s.anchorless,
        "misaligned_rate": s.rate(s.misaligned),
        "misaligned_rate_strict": s.rate(s.misaligned_strict),
        "partial_rate": s.rate(s.partial, s.windows),
        "error_p50_ms": s.error_ms(50), "error_p99_ms": s.error_ms(99),
        "matches": len(s.errors()), "matched_inferred": s.inferred,
        "late": first.late,
        "ledger": {"in_windows": members, "late": first.late, "duplicates": first.duplicates,
                   "rejected": first.rejected, "unaccounted": delivered - accounted},
        "operator_seconds": seconds,
        "cpu_share": statistics.median(r.cpu_share for r in runs),
        "tokens_per_s": delivered / seconds if seconds else None,
        "tokens_per_cpu_s": per_cpu,
        "tokens_per_reference_unit": per_cpu / reference if per_cpu and reference else None,
    }
    for m in SCORED:
        out[f"misaligned_{m}"] = s.rate(s.misaligned_by_modality[m])
        out[f"error_p50_ms_{m}"] = s.error_ms(50, m)
        out[f"error_p99_ms_{m}"] = s.error_ms(99, m)
    return out
