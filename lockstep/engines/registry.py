"""Choosing an engine by name (``worker.engine``).

``auto`` picks the best engine this machine can run: ``trtllm`` where TensorRT-LLM is
installed and torch sees a GPU, else ``cpu`` where torch and transformers are installed,
else the numpy ``reference`` engine.
"""

from __future__ import annotations

import importlib.util
import logging

from lockstep.engines.base import Engine
from lockstep.streams.telemetry import Telemetry
from lockstep.streams.worker_settings import WorkerSettings

log = logging.getLogger(__name__)


def resolve(name: str) -> str:
    """The concrete engine ``name`` stands for (``auto`` resolved on this machine)."""
    if name != "auto":
        return name
    has = importlib.util.find_spec
    if has("tensorrt_llm") is not None and _cuda():
        return "trtllm"
    if has("torch") is not None and has("transformers") is not None:
        return "cpu"
    log.warning("worker.engine=auto: torch/transformers not installed, using the reference "
                "engine (pip install 'lockstep-stream[cpu]' for the vision-language model)")
    return "reference"


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def create_engine(settings: WorkerSettings, telemetry: Telemetry | None = None) -> Engine:
    """Build the engine a worker's settings name (not started)."""
    common = dict(timeout_s=settings.infer_timeout_ms / 1000.0, telemetry=telemetry,
                  pool=settings.pool)
    name = resolve(settings.engine)
    if name == "cpu":
        from lockstep.engines.cpu import CpuEngine
        return CpuEngine(settings.cpu, max_batch=settings.max_batch, **common)
    if name == "trtllm":
        from lockstep.engines.trtllm import TrtllmEngine
        return TrtllmEngine(settings.trtllm, max_pixels=settings.cpu.max_pixels, **common)
    if name == "openai":
        from lockstep.engines.openai import OpenAIEngine
        return OpenAIEngine(settings.openai, max_pixels=settings.cpu.max_pixels, **common)
    from lockstep.engines.reference import ReferenceEngine
    return ReferenceEngine(max_batch=settings.max_batch, **common)
