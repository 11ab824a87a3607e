"""Settings of the inference worker and its engines (``LOCKSTEP_WORKER__…``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from lockstep.config.section import Section

Ms = Annotated[float, Field(ge=0.0)]
PoolName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_\-]{0,31}$")]
#: A built-in engine, an engine plugin's entry-point name (group ``lockstep.engines``), or
#: ``package.module:Class`` (docs/engines.md, "Engine plugins").
EngineName = Annotated[str, Field(
    pattern=r"^(auto|cpu|trtllm|openai|reference|[a-z][a-z0-9_\-]{0,63}"
            r"|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")]
BUILT_IN_ENGINES = ("auto", "cpu", "trtllm", "openai", "reference")


class CpuEngineSettings(Section):
    """The torch + transformers vision-language engine (Qwen2.5-VL architecture)."""

    #: A local Hugging Face model directory (weights, tokenizer, processor). Unset: a tiny
    #: Qwen2.5-VL with deterministic random weights, built offline (its answers are noise:
    #: ``engine=auto`` never picks it, ``engine=cpu`` runs it with a warning).
    model_dir: Path | None = None
    #: ``auto`` takes CUDA when torch sees a GPU.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: Torch intra-op threads (0: torch's default).
    threads: Annotated[int, Field(ge=0, le=256)] = 0
    #: Frames are resized to fit this many pixels before the vision encoder.
    max_pixels: Annotated[int, Field(ge=56 * 56)] = 224 * 224
    seed: int = 0


class TrtllmSettings(Section):
    """TensorRT-LLM's LLM API (PyTorch backend); see docs/engines.md."""

    #: A Hugging Face model directory or a TensorRT-LLM engine/checkpoint directory.
    model: str = ""
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    max_batch_size: Annotated[int, Field(ge=1)] = 64
    max_num_tokens: Annotated[int, Field(ge=1)] = 8192
    #: Share of free GPU memory the KV cache may take.
    kv_cache_free_gpu_memory_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 0.8
    enable_block_reuse: bool = True


class OpenAISettings(Section):
    """An OpenAI-compatible chat endpoint (``trtllm-serve``, vLLM)."""

    base_url: str = "http://localhost:8000/v1"
    model: str = "Qwen/Qwen2.5-VL-7B-Instruct"
    #: A secret: never printed, not even in a settings error.
    api_key: SecretStr | None = None
    #: Concurrent requests to the server (it batches them itself).
    max_concurrency: Annotated[int, Field(ge=1, le=1024)] = 32


class WorkerSettings(Section):
    """The batching inference worker of one pool (docs/engines.md)."""

    pool: PoolName = "vl"
    #: ``auto``: trtllm where TensorRT-LLM and a GPU are present and ``trtllm.model`` is set,
    #: else cpu where torch and transformers are installed and ``cpu.model_dir`` is set, else
    #: the numpy reference engine (never a random-weights model).
    engine: EngineName = "auto"
    #: Options handed to a plugin engine's constructor as ``options`` (strings).
    engine_options: dict[str, str] = Field(default_factory=dict)
    #: ``lockstep`` (deadline/priority aware), ``fifo`` (fixed max queue delay) or ``batch1``.
    policy: Literal["lockstep", "fifo", "batch1"] = "lockstep"
    max_batch: Annotated[int, Field(ge=1, le=4096)] = 16
    #: Admission bound; the worker pauses its partitions when the queue holds this many.
    max_queue: Annotated[int, Field(ge=1, le=1_000_000)] = 256
    #: Longest a request waits for a batch to fill.
    max_wait_ms: Ms = 10.0
    #: Safety margin on top of the engine's expected P95 batch latency.
    margin_ms: Ms = 3.0
    #: How far a priority of 1.0 moves a request forward in deadline order.
    priority_lead_ms: Ms = 10.0
    #: Output tokens at full service.
    max_new_tokens: Annotated[int, Field(ge=1, le=4096)] = 16
    #: Token budget of each degradation level as a fraction of ``max_new_tokens``
    #: (level 0 is full service; levels above it also spend fewer vision tokens).
    degrade_fractions: tuple[float, ...] = (1.0, 0.5, 0.25)
    degrade: bool = True
    shed: bool = True
    #: Batches in flight at once (engines with in-flight batching take more than one).
    max_inflight: Annotated[int, Field(ge=1, le=1024)] = 1
    #: Time a few batches of each size at start so the latency model starts warm.
    warmup: bool = True
    infer_timeout_ms: Annotated[float, Field(gt=0.0)] = 2_000.0
    cpu: CpuEngineSettings = Field(default_factory=CpuEngineSettings)
    trtllm: TrtllmSettings = Field(default_factory=TrtllmSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)

    @model_validator(mode="after")
    def _levels(self) -> WorkerSettings:
        fractions = self.degrade_fractions
        if not fractions or fractions[0] != 1.0 or any(
                not 0.0 < b < a for a, b in itertools.pairwise(fractions)):
            raise ValueError("worker.degrade_fractions must start at 1.0 and decrease "
                             "strictly, staying above 0")
        return self
