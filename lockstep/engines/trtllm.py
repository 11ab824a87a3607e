"""The ``trtllm`` engine: TensorRT-LLM's LLM API (PyTorch backend) on a GPU.

Each item goes in with its own ``generate_async`` call, so TensorRT-LLM's in-flight batcher
does the batching; the worker may keep several batches in flight (``max_inflight``). Inputs
are built by :mod:`lockstep.engines.prompt` (shared with the cpu engine): the frame as an image,
ASR, OCR and sensor readings as text, in the model's chat template. The item's token budget
becomes ``max_tokens``; its priority is passed where the installed version accepts one.

TensorRT-LLM is imported lazily: it is not on PyPI in a usable form and needs NVIDIA's
release image (docs/engines.md). Without it, :meth:`start` raises
:class:`~lockstep.errors.EngineUnavailable` with that hint.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

from lockstep.config.worker import TrtllmSettings
from lockstep.engines.base import Capabilities, Engine, InferenceResult, ItemResult, WorkItem
from lockstep.engines.prompt import Prompt, build_prompt
from lockstep.errors import EngineUnavailable

INSTALL_HINT = ("TensorRT-LLM is not installed: run the worker in NVIDIA's TensorRT-LLM "
                "release image (nvcr.io/nvidia/tensorrt-llm/release) with "
                "the Lockstep checkout installed on top (pip install .); see docs/engines.md")


class TrtllmEngine(Engine):
    """A vision-language model served by TensorRT-LLM's in-flight batcher."""

    name = "trtllm"

    def __init__(self, settings: TrtllmSettings, *, max_pixels: int = 448 * 448,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.max_pixels = max_pixels
        self._llm: Any = None
        self._sampling: Any = None
        self._tokenizer: Any = None
        self._takes_priority = False

    @property
    def capabilities(self) -> Capabilities:
        """In-flight batching up to the engine's ``max_batch_size``; priorities if supported."""
        return Capabilities(max_batch=self.settings.max_batch_size, inflight_batching=True,
                            priority=self._takes_priority, streaming=True, degradable=True)

    async def _start(self) -> None:
        if not self.settings.model:
            raise EngineUnavailable("worker.trtllm.model is not set (a model directory)")
        try:
            from tensorrt_llm import LLM, SamplingParams
            from tensorrt_llm.llmapi import KvCacheConfig
        except ImportError as exc:
            raise EngineUnavailable(INSTALL_HINT) from exc
        s = self.settings
        self._sampling = SamplingParams
        self._llm = await asyncio.to_thread(
            LLM, model=s.model, tensor_parallel_size=s.tensor_parallel_size,
            max_batch_size=s.max_batch_size, max_num_tokens=s.max_num_tokens,
            kv_cache_config=KvCacheConfig(
                free_gpu_memory_fraction=s.kv_cache_free_gpu_memory_fraction,
                enable_block_reuse=s.enable_block_reuse))
        self._tokenizer = self._llm.tokenizer
        self._takes_priority = "priority" in inspect.signature(
            self._llm.generate_async).parameters

    async def _close(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        return list(await asyncio.gather(*(self._one(item) for item in batch)))

    async def _one(self, item: WorkItem) -> ItemResult:
        prompt = build_prompt(item, self.max_pixels)
        kwargs: dict[str, Any] = {}
        if self._takes_priority:
            kwargs["priority"] = item.request.priority
        started = asyncio.get_running_loop().time()
        output = await self._llm.generate_async(
            trtllm_input(prompt, self._tokenizer),
            self._sampling(max_tokens=item.max_new_tokens, temperature=0.0), **kwargs)
        completion = output.outputs[0]
        return InferenceResult(
            output=completion.text, tokens=len(completion.token_ids),
            scores={"tokens": float(len(completion.token_ids))},
            infer_s=asyncio.get_running_loop().time() - started)


def trtllm_input(prompt: Prompt, tokenizer: Any) -> dict[str, Any]:
    """The LLM API's multimodal prompt: chat-templated text plus the PIL images.

    Raises:
        EngineUnavailable: Pillow is missing (images are handed over as PIL images).
    """
    text = tokenizer.apply_chat_template(prompt.messages(), add_generation_prompt=True,
                                         tokenize=False)
    if not prompt.images:
        return {"prompt": text}
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - Pillow ships in the release image
        raise EngineUnavailable("the trtllm engine needs Pillow for images") from exc
    return {"prompt": text,
            "multi_modal_data": {"image": [Image.fromarray(img) for img in prompt.images]}}
