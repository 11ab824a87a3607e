"""The Python API: a consumer program reads responses with Subscriber / iter_responses."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from aiokafka import AIOKafkaProducer

import lockstep.api as api
from lockstep.agents.runner import prepare_topics
from lockstep.topics import catalog
from lockstep.topics.schemas import Timeline

pytestmark = pytest.mark.integration


def test_every_name_the_api_exports_exists() -> None:
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert not missing
    for token in (api.VideoToken, api.AudioToken, api.OcrToken, api.SensorToken):
        assert token.__module__ == "lockstep.topics.schemas"


def _response(stream: str, seq: int) -> api.Response:
    return api.Response(stream_id=stream, window_seq=seq, route="full", pool="vl",
                        engine="reference", slo_class="cabin", output=f"answer {seq}",
                        scores={}, missing=[], deadline_us=0, timeline=Timeline())


async def test_iter_responses_yields_new_responses_of_the_chosen_streams(tansu: str) -> None:
    settings = api.load_settings(kafka={"bootstrap_servers": tansu, "fetch_max_wait_ms": 5})
    await prepare_topics(settings, create=True)
    mine, other = f"api-{secrets.token_hex(3)}", f"api-{secrets.token_hex(3)}"
    got: list[api.Response] = []

    async def consume() -> None:
        async for response in api.iter_responses(settings.kafka, streams=[mine]):
            got.append(response)
            if len(got) == 2:
                return

    async with api.Subscriber(settings.kafka, streams=[mine]) as subscriber:
        producer = AIOKafkaProducer(bootstrap_servers=tansu)
        await producer.start()
        task = asyncio.create_task(consume())
        await asyncio.sleep(1.0)  # iter_responses starts at the end: let it get there
        try:
            await producer.send_and_wait(catalog.RESPONSES, b"not a response", key=mine.encode())
            for seq, stream in ((1, mine), (2, other), (3, mine)):
                await producer.send_and_wait(catalog.RESPONSES,
                                             api.encode(_response(stream, seq)),
                                             key=stream.encode())
        finally:
            await producer.stop()
        await asyncio.wait_for(task, timeout=30)
        direct = []
        async for response in subscriber:
            direct.append(response)
            if len(direct) == 2:
                break
    assert [(r.stream_id, r.window_seq) for r in got] == [(mine, 1), (mine, 3)]
    assert [r.output for r in direct] == ["answer 1", "answer 3"]
    assert subscriber.skipped == 1
