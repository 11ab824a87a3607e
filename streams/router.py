"""Routing of aligned windows to engine pools (the ``route`` stage).

Pure: :meth:`Router.route` takes a window and the wall-clock time and returns the request.
A window with every expected modality goes the ``full`` route, one with missing modalities
the ``partial`` route; both go to the configured pool. Priority blends how confident the
present modalities are (the semantic term) with how much of the SLO budget is already spent
(the SLA-risk term): ``a * semantic + (1 - a) * sla_risk``.
"""

from __future__ import annotations

from streams.settings import RouteSettings, SloSettings
from topics.schemas import Request, Window

FULL = "full"
PARTIAL = "partial"


class Router:
    """Turns windows into requests for a pool."""

    def __init__(self, route: RouteSettings, slo: SloSettings) -> None:
        self._route = route
        self._slo = slo

    def route(self, window: Window, now_us: int) -> Request:
        """Route one window.

        Args:
            window: An aligned window.
            now_us: Wall-clock time of routing.
        """
        budget_us = int(self._slo.budget_ms(window.slo_class) * 1000)
        deadline = window.timeline.capture_us + budget_us
        spent = now_us - window.timeline.capture_us
        sla_risk = min(1.0, max(0.0, spent / budget_us))
        confs = [s.confidence for s in window.modalities.values()
                 if s.present and s.confidence is not None]
        semantic = sum(confs) / len(confs) if confs else 0.0
        a = self._route.semantic_weight
        timeline = window.timeline.model_copy(update={"routed_us": now_us})
        return Request(
            window=window.model_copy(update={"timeline": timeline}),
            route=PARTIAL if window.missing else FULL,
            pool=self._route.pool,
            priority=min(1.0, max(0.0, a * semantic + (1 - a) * sla_risk)),
            deadline_us=deadline,
        )
