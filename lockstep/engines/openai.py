"""The ``openai`` engine: an OpenAI-compatible chat endpoint (``trtllm-serve``, vLLM).

One ``POST /chat/completions`` per item, concurrently (the server batches them), with the
frame inlined as a PNG data URL and the item's token budget as ``max_tokens``. A 4xx answer
fails that item alone (it is dead-lettered); a 5xx answer, a timeout or a refused
connection fails the batch as retriable, so the requests are replayed once the server is
back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from lockstep.config.worker import OpenAISettings
from lockstep.engines.base import (
    Capabilities,
    Engine,
    InferenceResult,
    ItemFailure,
    ItemResult,
    WorkItem,
)
from lockstep.engines.prompt import build_prompt, openai_messages
from lockstep.errors import ServerUnavailable


class OpenAIEngine(Engine):
    """Chat completions over HTTP."""

    name = "openai"

    def __init__(self, settings: OpenAISettings, *, max_pixels: int = 448 * 448,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.max_pixels = max_pixels
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(settings.max_concurrency)

    @property
    def capabilities(self) -> Capabilities:
        """The server batches concurrent requests itself."""
        return Capabilities(max_batch=self.settings.max_concurrency, inflight_batching=True,
                            degradable=True)

    async def _start(self) -> None:
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key is not None:
            headers["Authorization"] = f"Bearer {self.settings.api_key.get_secret_value()}"
        self._session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        return list(await asyncio.gather(*(self._one(item) for item in batch)))

    async def _one(self, item: WorkItem) -> ItemResult:
        assert self._session is not None  # started
        body = {"model": self.settings.model,
                "messages": openai_messages(build_prompt(item, self.max_pixels)),
                "max_tokens": item.max_new_tokens, "temperature": 0.0}
        url = self.settings.base_url.rstrip("/") + "/chat/completions"
        begin = time.perf_counter()
        async with self._slots:
            try:
                async with self._session.post(url, json=body) as reply:
                    if reply.status >= 500:
                        raise ServerUnavailable(f"{url} answered {reply.status}")
                    if reply.status >= 400:
                        return ItemFailure(f"{url} rejected the request: {reply.status} "
                                           f"{(await reply.text())[:200]}")
                    payload: dict[str, Any] = await reply.json()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ServerUnavailable(f"{url}: {exc!r}") from exc
        try:
            text = str(payload["choices"][0]["message"]["content"] or "")
            tokens = int(payload.get("usage", {}).get("completion_tokens", 0))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            return ItemFailure(f"malformed chat completion from {url}: {exc!r}")
        return InferenceResult(output=text, tokens=tokens, scores={"tokens": float(tokens)},
                               infer_s=time.perf_counter() - begin)
