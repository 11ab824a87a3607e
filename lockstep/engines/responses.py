"""Turning a request's outcome into its response (the end of the ``infer`` stage).

Pure: the outcome carries the stage times the dispatcher measured, so responses are built
and tested without Kafka or a clock.
"""

from __future__ import annotations

from typing import Any

from lockstep.engines.base import InferenceResult
from lockstep.engines.batching.dispatcher import Outcome
from lockstep.topics.schemas import Response


def build_response(outcome: Outcome[Any], engine: str) -> Response:
    """The response to an answered or expired request.

    Raises:
        ValueError: The outcome is a failure (those are dead-lettered, not answered).
    """
    request = outcome.request
    window = request.window
    timeline = window.timeline.model_copy(
        update={"dequeued_us": outcome.dequeued_us, "inferred_us": outcome.inferred_us})
    common: dict[str, Any] = dict(
        stream_id=window.stream_id, window_seq=window.window_seq, route=request.route,
        pool=request.pool, engine=engine, slo_class=window.slo_class, missing=window.missing,
        deadline_us=request.deadline_us, timeline=timeline)
    result = outcome.result
    if result is None:
        late_ms = (outcome.dequeued_us - request.deadline_us) / 1000.0
        detail = ("deadline passed" if late_ms >= 0 else
                  f"cannot finish within the {-late_ms:.1f} ms left before the deadline")
        return Response(**common, output="", scores={}, status="expired",
                        reason=request.reason, detail=detail)
    if not isinstance(result, InferenceResult):
        raise ValueError(f"a failed item has no response: {result.reason}")
    item = outcome.item
    return Response(**common, output=result.output, scores=result.scores,
                    reason=request.reason, degraded=item.level if item else 0,
                    max_new_tokens=item.max_new_tokens if item else 0)
