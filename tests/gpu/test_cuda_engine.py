"""GPU check: the cpu engine's Qwen2.5-VL on CUDA, latency per batch size.

Not collected by the default test run (tests/gpu is outside ``testpaths``); run it where a
GPU is lent: ``python -m pytest -m gpu tests/gpu -s``.
"""

from __future__ import annotations

import statistics
import time

import pytest

from lockstep.config.worker import CpuEngineSettings
from lockstep.engines.base import InferenceResult, WorkItem, probe_request
from lockstep.engines.cpu import CpuEngine

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


async def test_cpu_engine_model_runs_on_cuda_and_batching_pays() -> None:
    medians: dict[int, float] = {}
    async with CpuEngine(CpuEngineSettings(device="cuda"), max_batch=32) as engine:
        assert engine.device == "cuda"
        for size in (1, 2, 4, 8, 16, 32):
            items = [WorkItem(probe_request(), max_new_tokens=16)] * size
            await engine.infer(items)  # first call of a shape
            times = []
            for _ in range(5):
                begin = time.perf_counter()
                results = await engine.infer(items)
                times.append(time.perf_counter() - begin)
            assert all(isinstance(r, InferenceResult) and r.tokens > 0 for r in results)
            medians[size] = statistics.median(times) * 1000
    print(f"\n{torch.cuda.get_device_name(0)}: median ms per batch")  # noqa: T201
    for size, ms in medians.items():
        print(f"  batch {size:>2}: {ms:7.2f} ms  ({size / ms * 1000:8.0f} items/s)")  # noqa: T201
    assert medians[32] / 32 < medians[1]  # per-item cost falls with the batch
