import base64
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from PIL import Image

from lockstep.config.worker import OpenAISettings, TrtllmSettings, WorkerSettings
from lockstep.engines.base import InferenceResult, ItemFailure, WorkItem
from lockstep.engines.cpu import CpuEngine
from lockstep.engines.openai import OpenAIEngine
from lockstep.engines.prompt import build_prompt, decode_frame, fit, openai_messages
from lockstep.engines.registry import create_engine, resolve
from lockstep.engines.trtllm import TrtllmEngine, trtllm_input
from lockstep.errors import EngineUnavailable, ServerUnavailable
from lockstep.topics.schemas import Modality, VideoToken
from tests.factories import T0, audio, ocr, request, sensor, video

pytestmark = pytest.mark.unit


def _jpeg(width: int = 64, height: int = 48) -> VideoToken:
    rgb = np.zeros((height, width, 3), np.uint8)
    rgb[:, : width // 2] = (255, 0, 0)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG")
    return VideoToken(stream_id="s", seq=0, t_us=T0, format="jpeg", width=width,
                      height=height, data=buf.getvalue())


def _rich_request(seq: int = 1, **kw: Any) -> Any:
    speech = audio(seq=0).model_copy(update={"asr_text": "open the door",
                                             "asr_confidence": 0.91})
    return request(seq, video=video(width=64, height=48), audio=[speech],
                   ocr=[ocr(text="EXIT")], sensor=[sensor(value=2.5)],
                   missing=[Modality.SENSOR], **kw)


def test_prompt_carries_every_signal_with_its_confidence_and_what_is_missing() -> None:
    prompt = build_prompt(WorkItem(_rich_request()))
    assert len(prompt.images) == 1 and prompt.images[0].shape == (48, 64, 3)
    assert "Speech (confidence 0.91): open the door" in prompt.text
    assert "On-screen text (confidence 0.90): EXIT" in prompt.text
    assert "Sensor imu" in prompt.text and "Missing: sensor." in prompt.text
    user = prompt.messages()[1]["content"]
    assert user[0] == {"type": "image"} and user[-1]["type"] == "text"


def test_prompt_reduces_vision_tokens_for_degraded_items_and_skips_frames_on_text_routes() -> None:
    full = build_prompt(WorkItem(request(video=video(width=640, height=480))), 224 * 224)
    low = build_prompt(WorkItem(request(video=video(width=640, height=480)),
                                reduce_vision=True), 224 * 224)
    assert full.images[0].size // 3 <= 224 * 224
    assert low.images[0].size <= full.images[0].size // 3
    text = build_prompt(WorkItem(request(video=video(), route="text_only")))
    assert text.images == []


def test_compressed_frames_decode_and_corrupt_ones_are_named_in_the_prompt() -> None:
    rgb = decode_frame(_jpeg())
    assert rgb.shape == (48, 64, 3) and rgb[0, 0, 0] > 200 and rgb[0, -1, 0] < 50
    broken = _jpeg().model_copy(update={"data": b"\xff\xd8 not really a jpeg"})
    prompt = build_prompt(WorkItem(request(video=broken)))
    assert prompt.images == [] and "frame unusable: corrupt jpeg frame" in prompt.text


def test_fit_keeps_the_aspect_ratio_under_the_pixel_budget() -> None:
    out = fit(np.zeros((480, 640, 3), np.uint8), 100 * 100)
    assert out.shape[0] * out.shape[1] <= 100 * 100
    assert abs(out.shape[1] / out.shape[0] - 640 / 480) < 0.05


def test_openai_messages_inline_the_frame_as_a_png_data_url() -> None:
    [_, user] = openai_messages(build_prompt(WorkItem(_rich_request())))
    url = user["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    png = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert png.size == (64, 48)


class _Tokenizer:
    def apply_chat_template(self, messages: list[dict[str, Any]], **kw: Any) -> str:
        return json.dumps(messages)


def test_trtllm_input_is_the_chat_template_plus_pil_images() -> None:
    prompt = build_prompt(WorkItem(_rich_request()))
    payload = trtllm_input(prompt, _Tokenizer())
    assert json.loads(payload["prompt"])[1]["content"][0] == {"type": "image"}
    [image] = payload["multi_modal_data"]["image"]
    assert image.size == (64, 48)
    assert trtllm_input(build_prompt(WorkItem(request())), _Tokenizer()).keys() == {"prompt"}


async def test_trtllm_engine_says_how_to_get_tensorrt_llm_when_it_is_missing() -> None:
    engine = TrtllmEngine(TrtllmSettings(model="/models/qwen2.5-vl"))
    with pytest.raises(EngineUnavailable, match="TensorRT-LLM release image"):
        await engine.start()


def test_registry_resolves_auto_to_the_cpu_engine_only_with_a_checkpoint(tmp_path: Path) -> None:
    assert resolve("auto") == "reference"  # torch is installed, but no model_dir is set
    assert resolve("auto", WorkerSettings(cpu={"model_dir": tmp_path})) == "cpu"
    assert create_engine(WorkerSettings(engine="reference")).name == "reference"
    assert create_engine(WorkerSettings(engine="openai")).name == "openai"


@pytest.fixture
async def chat_server() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A local OpenAI-compatible server: echoes the request; 400 for 'reject', 503 for 'down'."""
    seen: list[dict[str, Any]] = []

    async def completions(req: web.Request) -> web.Response:
        body = await req.json()
        seen.append({"body": body, "auth": req.headers.get("Authorization")})
        text = body["messages"][1]["content"][-1]["text"]
        if "reject" in text:
            return web.json_response({"error": "bad image"}, status=400)
        if "down" in text:
            return web.json_response({"error": "overloaded"}, status=503)
        images = sum(c["type"] == "image_url" for c in body["messages"][1]["content"])
        return web.json_response({
            "choices": [{"message": {"role": "assistant",
                                     "content": f"saw {images} image(s)"}}],
            "usage": {"completion_tokens": body["max_tokens"]}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1", seen
    finally:
        await runner.cleanup()


async def test_openai_engine_answers_each_item_and_fails_a_rejected_one_alone(
        chat_server: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = chat_server
    settings = OpenAISettings(base_url=url, model="qwen-vl", api_key="sk-test")  # type: ignore[arg-type]
    async with OpenAIEngine(settings) as engine:
        results = await engine.infer([
            WorkItem(_rich_request(1), max_new_tokens=7),
            WorkItem(request(2, stream="reject")),
            WorkItem(request(3, route="text_only"), max_new_tokens=3)])
    ok1, bad, ok3 = results
    assert isinstance(ok1, InferenceResult) and ok1.output == "saw 1 image(s)" and ok1.tokens == 7
    assert isinstance(bad, ItemFailure) and "400" in bad.reason
    assert isinstance(ok3, InferenceResult) and ok3.output == "saw 0 image(s)"
    assert {s["auth"] for s in seen} == {"Bearer sk-test"}
    assert {s["body"]["model"] for s in seen} == {"qwen-vl"}


async def test_openai_engine_server_errors_are_retriable(
        chat_server: tuple[str, list[dict[str, Any]]]) -> None:
    url, _ = chat_server
    async with OpenAIEngine(OpenAISettings(base_url=url)) as engine:
        with pytest.raises(ServerUnavailable) as info:
            await engine.infer([WorkItem(request(1, stream="down"))])
    assert info.value.retriable
    async with OpenAIEngine(OpenAISettings(base_url="http://127.0.0.1:9/v1")) as engine:
        with pytest.raises(ServerUnavailable):
            await engine.infer([WorkItem(request(1))])


@pytest.fixture(scope="module")
async def cpu_engine() -> AsyncIterator[CpuEngine]:
    async with CpuEngine(max_batch=8) as engine:
        yield engine


async def test_cpu_engine_runs_qwen2_5_vl_generate_per_item_with_each_token_budget(
        cpu_engine: CpuEngine) -> None:
    items = [WorkItem(_rich_request(1), max_new_tokens=6),
             WorkItem(request(2, video=_jpeg()), max_new_tokens=2, reduce_vision=True, level=2),
             WorkItem(request(3, route="text_only"), max_new_tokens=4)]
    results = await cpu_engine.infer(items)
    assert all(isinstance(r, InferenceResult) for r in results)
    tokens = [r.tokens for r in results if isinstance(r, InferenceResult)]
    assert tokens[0] <= 6 and tokens[1] <= 2 and tokens[2] <= 4 and max(tokens) > 0
    scores = [r.scores for r in results if isinstance(r, InferenceResult)]
    assert [s["images"] for s in scores] == [1.0, 1.0, 0.0]


async def test_cpu_engine_is_deterministic(cpu_engine: CpuEngine) -> None:
    items = [WorkItem(_rich_request(1), max_new_tokens=5)]
    [first], [second] = await cpu_engine.infer(items), await cpu_engine.infer(items)
    assert isinstance(first, InferenceResult) and isinstance(second, InferenceResult)
    assert (first.output, first.tokens) == (second.output, second.tokens)


async def test_cpu_engine_without_weights_in_model_dir_is_a_clear_error(tmp_path: Any) -> None:
    from lockstep.config.worker import CpuEngineSettings
    engine = CpuEngine(CpuEngineSettings(model_dir=tmp_path))
    with pytest.raises(EngineUnavailable, match=f"cannot load a model from {tmp_path}"):
        await engine.start()
