"""Whether a run met its SLA, and if not, why: the demo's last word.

Pure: :func:`sla_verdict` takes what the run measured (attainment, shed and late counts,
per-stage P99s against their budgets, the machine's load) and returns a
:class:`Verdict` whose ``reasons`` name what was not met, so "OK" is never printed over
a run whose responses mostly missed their budget.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MachineLoad:
    """The machine around a run: cores, and the 1-minute load average at its ends."""

    cores: int
    load_before: float
    load_after: float

    @classmethod
    def now(cls, before: float | None = None) -> MachineLoad:
        """The current load; ``before`` is the reading taken when the run started."""
        load = os.getloadavg()[0]
        return cls(os.cpu_count() or 1, before if before is not None else load, load)

    @property
    def busy(self) -> bool:
        """More runnable work than cores during the run (other programs compete)."""
        return max(self.load_before, self.load_after) > self.cores


@dataclass(frozen=True)
class Verdict:
    """The SLA verdict of a run."""

    met: bool
    attainment: float | None
    objective: float
    answered: int
    shed: int
    late_tokens: int
    reasons: tuple[str, ...] = field(default_factory=tuple)

    def line(self, budget_ms: float, slo_class: str) -> str:
        """One line: met or not, the figures, and why not."""
        share = "no responses" if self.attainment is None else (
            f"{self.attainment * 100:.1f} % of {self.answered + self.shed} windows answered "
            f"within {budget_ms:.0f} ms")
        head = (f"SLA {'met' if self.met else 'NOT met'} ({slo_class}): {share} "
                f"(objective {self.objective * 100:.0f} %), {self.shed} shed, "
                f"{self.late_tokens} late tokens")
        return head if self.met else f"{head}; why: {'; '.join(self.reasons)}"


def sla_verdict(*, attainment: float | None, objective: float, answered: int, shed: int,
                late_tokens: int, published: int, stage_p99_ms: Mapping[str, float],
                stage_budget_ms: Mapping[str, float], machine: MachineLoad,
                ledger_closed: bool) -> Verdict:
    """Judge a run.

    Args:
        attainment: Share of windows answered within budget, shed ones counting as misses.
        objective: The share the SLA asks for (``slo.objective``).
        answered: Responses with an answer (status ok).
        shed: Responses shed (status expired).
        late_tokens: Tokens that missed their window (or were stale).
        published: Tokens published.
        stage_p99_ms: P99 per pipeline stage.
        stage_budget_ms: P99 budget per stage.
        machine: The machine's load around the run.
        ledger_closed: Every token accounted for and every window answered.
    """
    reasons: list[str] = []
    if attainment is None:
        reasons.append("no window was answered")
    elif attainment < objective:
        reasons.append(f"{attainment * 100:.1f} % within budget, below the "
                       f"{objective * 100:.0f} % objective")
    # Shed windows count as misses in the attainment already: they explain a miss.
    if shed and reasons:
        reasons.append(f"{shed} windows shed (expired) because their deadline could not be met")
    over = [f"{stage} {p99:.1f} ms (budget {stage_budget_ms[stage]:.0f})"
            for stage, p99 in stage_p99_ms.items()
            if stage in stage_budget_ms and stage not in ("e2e", "publish")
            and p99 > stage_budget_ms[stage]]
    if over and reasons:
        reasons.append("stage P99 over budget: " + ", ".join(over))
    if published and late_tokens > 0.01 * published:
        reasons.append(f"{late_tokens} of {published} tokens late ({late_tokens / published:.1%})")
    if not ledger_closed:
        reasons.append("the ledger did not close: tokens unaccounted for or windows "
                       "unanswered when the drain timed out")
    met = not reasons
    if not met and machine.busy:
        load = max(machine.load_before, machine.load_after)
        reasons.append(f"the machine was busy: load {load:.1f} on {machine.cores} cores "
                       "(other programs competed; try an idle machine or fewer streams)")
    return Verdict(met, attainment, objective, answered, shed, late_tokens, tuple(reasons))
