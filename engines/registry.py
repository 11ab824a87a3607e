"""Choosing an engine by name (``worker.engine``)."""

from __future__ import annotations

from engines.base import Engine
from engines.reference import ReferenceEngine
from streams.settings import WorkerSettings
from streams.telemetry import Telemetry


def create_engine(settings: WorkerSettings, telemetry: Telemetry | None = None) -> Engine:
    """Build the engine a worker's settings name (not started)."""
    timeout_s = settings.infer_timeout_ms / 1000.0
    return ReferenceEngine(timeout_s=timeout_s, telemetry=telemetry, pool=settings.pool)
