"""A Lockstep engine plugin: answers each window with its stream, window and members."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockstep.engines.base import Capabilities, Engine, InferenceResult, ItemResult, WorkItem


class EchoEngine(Engine):
    """Echoes what each window holds, prefixed with the ``prefix`` option."""

    name = "echo"

    def __init__(self, *, max_batch: int, options: dict[str, str], **common: Any) -> None:
        super().__init__(**common)
        self._max_batch = max_batch
        self._prefix = options.get("prefix", "echo")

    @property
    def capabilities(self) -> Capabilities:
        """Any batch up to ``max_batch``."""
        return Capabilities(max_batch=self._max_batch)

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        out: list[ItemResult] = []
        for item in batch:
            window = item.request.window
            members = ",".join(f"{m.value}:{len(s)}" for m, s in sorted(window.members.items()))
            out.append(InferenceResult(
                f"{self._prefix} {window.stream_id} #{window.window_seq} {members}",
                {"members": float(sum(len(s) for s in window.members.values()))}))
        return out
