"""The ``cpu`` engine: a vision-language model run with torch + transformers.

Qwen2.5-VL is the reference architecture (the one the ``trtllm`` engine serves on GPU).
With ``worker.cpu.model_dir`` it loads a local Hugging Face checkpoint (weights, tokenizer,
processor; nothing is downloaded); without, it builds the tiny offline model of
:mod:`lockstep.engines.tinyqwen`. Despite the name it runs on CUDA when asked (``device``), which
the GPU check uses.

A batch runs as one ``generate`` call with left padding; each item's output is cut to its
own token budget (the scheduler's degraded levels give smaller budgets, and the batch
decodes only as many steps as its largest budget).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from lockstep.config.worker import CpuEngineSettings
from lockstep.engines.base import (
    Capabilities,
    Engine,
    InferenceResult,
    ItemResult,
    WorkItem,
    probe_request,
)
from lockstep.engines.prompt import build_prompt
from lockstep.errors import EngineUnavailable, install_hint

INSTALL_HINT = f"{install_hint('cpu')} (torch, torchvision, transformers, pillow)"


class CpuEngine(Engine):
    """Qwen2.5-VL through transformers' ``generate``."""

    name = "cpu"

    def __init__(self, settings: CpuEngineSettings | None = None, *, max_batch: int = 16,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings or CpuEngineSettings()
        self._max_batch = max_batch
        self._model: Any = None
        self._processor: Any = None
        self._torch: Any = None
        self.device = "cpu"
        self._lock = threading.Lock()
        self._suppress: list[int] = []

    @property
    def capabilities(self) -> Capabilities:
        """Static batches up to ``max_batch``; honours token budgets and reduced vision."""
        return Capabilities(max_batch=self._max_batch, degradable=True)

    async def _start(self) -> None:
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise EngineUnavailable(f"the cpu engine needs torch and transformers: "
                                    f"{INSTALL_HINT}") from exc
        self._torch = torch
        want = self.settings.device
        if want == "cuda" and not torch.cuda.is_available():
            raise EngineUnavailable("worker.cpu.device is cuda but torch sees no GPU")
        self.device = "cuda" if want == "cuda" or (
            want == "auto" and torch.cuda.is_available()) else "cpu"
        if self.settings.threads:
            torch.set_num_threads(self.settings.threads)
        if self.settings.model_dir is None:
            from lockstep.engines import tinyqwen
            model, processor = tinyqwen.build(self.settings.seed)
        else:
            path = str(self.settings.model_dir)
            try:
                processor = transformers.AutoProcessor.from_pretrained(
                    path, local_files_only=True, max_pixels=self.settings.max_pixels)
                model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
                    path, local_files_only=True, dtype="auto").eval()
            except (OSError, ValueError) as exc:
                raise EngineUnavailable(f"cannot load a model from {path}: {exc}") from exc
            processor.tokenizer.padding_side = "left"
        self._model = model.to(self.device)
        self._processor = processor
        # Structural tokens (vision markers, turn markers, padding) are never an answer.
        tokenizer = processor.tokenizer
        eos = model.generation_config.eos_token_id
        self._suppress = sorted({i for i in tokenizer.all_special_ids if i != eos})
        self._generate([WorkItem(probe_request(), max_new_tokens=2)])  # first call compiles

    async def _close(self) -> None:
        self._model = self._processor = None

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        return await asyncio.to_thread(self._generate, batch)

    def _generate(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        torch, processor = self._torch, self._processor
        prompts = [build_prompt(item, self.settings.max_pixels) for item in batch]
        texts = [processor.apply_chat_template(p.messages(), add_generation_prompt=True,
                                               tokenize=False) for p in prompts]
        images = [img for p in prompts for img in p.images]
        inputs = processor(text=texts, images=images or None, return_tensors="pt",
                           padding=True).to(self.device)
        steps = max(item.max_new_tokens for item in batch)
        with self._lock, torch.inference_mode():
            out = self._model.generate(**inputs, max_new_tokens=steps, do_sample=False,
                                       suppress_tokens=self._suppress)
        prompt_len = inputs["input_ids"].shape[1]
        generated = out[:, prompt_len:].tolist()
        eos = self._model.generation_config.eos_token_id
        pad = self._model.generation_config.pad_token_id
        results: list[ItemResult] = []
        for item, prompt, ids in zip(batch, prompts, generated, strict=True):
            ids = ids[:item.max_new_tokens]
            if eos in ids:
                ids = ids[:ids.index(eos)]
            ids = [i for i in ids if i != pad]
            text = processor.tokenizer.decode(ids, skip_special_tokens=True)
            results.append(InferenceResult(
                output=text, tokens=len(ids),
                scores={"tokens": float(len(ids)), "images": float(len(prompt.images)),
                        "prompt_tokens": float(prompt_len)}))
        return results
