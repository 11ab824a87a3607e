"""Settings of the service-level objectives (``LOCKSTEP_SLO__…``): classes, budgets, breaches.

Re-exported by :mod:`lockstep.config.settings`. Budgets per class and stage, and when a
breach is raised, cleared and held (:mod:`lockstep.telemetry.slo`).
"""

from __future__ import annotations

import fnmatch
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from lockstep.config.section import Section


class SloClass(Section):
    """An SLO class: end-to-end budget and the frame rate it was set for."""

    e2e_ms: Annotated[float, Field(gt=0.0)]
    fps: Annotated[float, Field(gt=0.0)]
    drop_frames: bool = True


def _default_slo_classes() -> dict[str, SloClass]:
    return {
        "cabin": SloClass(e2e_ms=120.0, fps=30.0),
        "surgical": SloClass(e2e_ms=80.0, fps=60.0, drop_frames=False),
        "ar": SloClass(e2e_ms=200.0, fps=25.0),
    }


class BreachSettings(Section):
    """Breach detection and degraded mode (see lockstep.telemetry.slo)."""

    #: The sliding window the P99 is taken over, and how often it is evaluated.
    window_ms: Annotated[float, Field(gt=0.0)] = 5_000.0
    evaluate_ms: Annotated[float, Field(gt=0.0)] = 250.0
    #: Fewer samples in the window than this hold the verdict (no evidence either way).
    min_samples: Annotated[int, Field(ge=1)] = 20
    #: Consecutive evaluations over budget that raise a breach, and under
    #: ``recover_ratio`` x budget that clear it (between the two nothing changes).
    breach_after: Annotated[int, Field(ge=1)] = 4
    recover_after: Annotated[int, Field(ge=1)] = 3
    recover_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.8
    #: When the median of the samples since the last evaluation (at least ``min_samples``)
    #: is over this many times the budget, most of what runs now misses, not a tail: the
    #: breach is raised at that evaluation, without waiting for ``breach_after`` of them.
    breach_at_once_ratio: Annotated[float, Field(gt=0.0)] = 1.0
    #: A breach lasts at least ``hold_ms``; one raised again within the hold after its
    #: recovery holds twice as long as the last (up to ``hold_max_ms``), so a load that
    #: only fits in degraded mode does not flap between the modes.
    hold_ms: Annotated[float, Field(ge=0.0)] = 5_000.0
    hold_max_ms: Annotated[float, Field(ge=0.0)] = 30_000.0
    #: Stages whose breach switches their class to its degraded mode (others only report).
    degrade_on: tuple[str, ...] = ("e2e",)
    #: Degraded mode: windows that would take the full route take this partial route, and
    #: the aligner keeps one window per ``degraded_stride`` frames (classes that may drop them).
    degraded_route: Literal["text_only", "vision_only"] = "text_only"
    degraded_stride: Annotated[int, Field(ge=1, le=64)] = 2
    #: A breach not re-announced for this long is forgotten (its process may have died).
    ttl_ms: Annotated[float, Field(gt=0.0)] = 30_000.0


#: The stages an e2e latency is made of (``publish`` overlaps ``transport``).
E2E_STAGES = ("transport", "align", "route", "queue", "infer", "respond")


class SloSettings(Section):
    """SLO classes and the per-stage budget tree (stages other than inference: 12 ms P99)."""

    classes: dict[str, SloClass] = Field(default_factory=_default_slo_classes)
    default_class: str = "cabin"
    #: Share of windows that must be answered within their class's e2e budget (shed ones
    #: count as misses): the SLA the demo's verdict and the burn-rate alerts hold a run to.
    objective: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.99
    stage_p99_ms: Annotated[float, Field(gt=0.0)] = 12.0
    #: Per-stage P99 budgets that replace ``stage_p99_ms`` (``infer`` defaults to what the
    #: class's e2e budget leaves after the other stages of :data:`E2E_STAGES`).
    stages_ms: dict[str, Annotated[float, Field(gt=0.0)]] = Field(default_factory=dict)
    breach: BreachSettings = Field(default_factory=BreachSettings)
    #: The class each stream declares: stream-id glob pattern → class, first match wins
    #: (``{"or-*" = "surgical", "hud-*" = "ar"}``); other streams take ``default_class``.
    streams: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _merge_classes(cls, data: Any) -> Any:
        """Given classes add to the built-in ones; a built-in one given in part keeps the rest.

        ``LOCKSTEP_SLO__CLASSES__CABIN__E2E_MS=150`` changes cabin's budget alone, and a
        class ``warehouse`` given in full joins cabin, surgical and ar.
        """
        if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
            return data
        merged: dict[str, Any] = {name: c.model_dump() for name, c in
                                  _default_slo_classes().items()}
        for name, given in data["classes"].items():
            if isinstance(given, dict) and name in merged:
                merged[name] = {**merged[name], **given}
            else:
                merged[name] = given
        return {**data, "classes": merged}

    @model_validator(mode="after")
    def _default_exists(self) -> SloSettings:
        if self.default_class not in self.classes:
            raise ValueError(f"slo.default_class {self.default_class!r} is not in slo.classes")
        unknown = sorted(set(self.streams.values()) - set(self.classes))
        if unknown:
            raise ValueError(f"slo.streams names classes not in slo.classes: {unknown}")
        for name in self.classes:
            if self.stage_budget_ms("infer", name) <= 0:
                raise ValueError(f"slo class {name!r}: the stage budgets exceed its e2e budget")
        return self

    def class_of(self, stream_id: str) -> str:
        """The SLO class ``stream_id`` declares through ``slo.streams`` (or the default)."""
        for pattern, slo_class in self.streams.items():
            if fnmatch.fnmatchcase(stream_id, pattern):
                return slo_class
        return self.default_class

    def budget_ms(self, slo_class: str) -> float:
        """The e2e budget of a class, falling back to the default class."""
        return self.classes.get(slo_class, self.classes[self.default_class]).e2e_ms

    def stage_budget_ms(self, stage: str, slo_class: str) -> float:
        """The P99 budget of one stage in a class (``e2e``: the class's budget)."""
        if stage == "e2e":
            return self.budget_ms(slo_class)
        if stage in self.stages_ms:
            return self.stages_ms[stage]
        if stage == "infer":
            others = sum(self.stage_budget_ms(s, slo_class) for s in E2E_STAGES if s != "infer")
            return self.budget_ms(slo_class) - others
        return self.stage_p99_ms

    def budget_tree(self, slo_class: str) -> dict[str, float]:
        """The e2e budget of a class and the P99 budget of each stage it is made of."""
        return {s: self.stage_budget_ms(s, slo_class) for s in ("e2e", "publish", *E2E_STAGES)}
