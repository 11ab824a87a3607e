"""The whole pipeline in one process against real brokers."""

from __future__ import annotations

import asyncio
import gc
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.agents.app import ROLES
from lockstep.agents.runner import prepare_topics, start_roles
from lockstep.config.settings import Settings, load_settings
from lockstep.kafka.reader import TopicReader
from lockstep.observe.observer import Observer, drain
from lockstep.producer.realtime import publish_synthetic
from lockstep.producer.synthetic import SyntheticConfig
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as, encode
from lockstep.topics.schemas import Modality, Window
from tests.factories import video

pytestmark = pytest.mark.integration


@dataclass
class Pipeline:
    """Every role running in this process, and an observer of its output."""

    settings: Settings
    prefix: str
    observer: Observer
    telemetry: Telemetry


async def _windows(settings: Settings, stream_id: str) -> list[Window]:
    """Every window of ``stream_id`` on aligned.windows."""
    windows: list[Window] = []
    async with TopicReader(settings.kafka, [catalog.ALIGNED], what="test") as reader:
        await reader.seek_to_beginning()
        async for records in reader.read_until(await reader.end_offsets(), timeout_s=30.0):
            windows += [decode_as(Window, r.value) for r in records
                        if r.key == stream_id.encode()]
    return windows


@asynccontextmanager
async def _pipeline(bootstrap: str, tag: str) -> AsyncIterator[Pipeline]:
    settings = _settings(bootstrap)
    await prepare_topics(settings, create=True)
    prefix = f"{tag}-{secrets.token_hex(3)}-"
    observer = Observer(settings.kafka, keep=lambda sid: sid.startswith(prefix))
    await observer.start()
    telemetry = Telemetry()
    roles = await start_roles(settings, ROLES, telemetry, worker_pools=["vl", "text"])
    try:
        # The started process's heap is kept out of the collector's full passes (they held
        # the event loop 50-110 ms at a time in the demo).
        assert gc.get_freeze_count() > 10_000
        assert await roles.wait_assigned()
        yield Pipeline(settings, prefix, observer, telemetry)
    finally:
        await roles.stop()
        await observer.stop()


def _settings(bootstrap: str) -> Settings:
    return load_settings(kafka={"bootstrap_servers": bootstrap, "session_timeout_ms": 6000,
                                "fetch_max_wait_ms": 10},
                         worker={"engine": "reference"}, app_id="lockstep-test",
                         metrics={"enabled": False},
                         # These tests are about the ledger and the routes, not about how
                         # fast a shared CI machine is: no window should be shed as late.
                         slo={"classes": {"cabin": {"e2e_ms": 10_000.0, "fps": 30.0}}})


async def test_every_token_is_settled_and_every_window_answered(any_broker: str) -> None:
    async with _pipeline(any_broker, "it") as p:
        settings, prefix, observer, telemetry = p.settings, p.prefix, p.observer, p.telemetry
        published = await publish_synthetic(settings.kafka, [f"{prefix}a", f"{prefix}b"], 2.5,
                                            telemetry, inject_bad=2)
        # a record of the wrong kind on a media topic must be dead-lettered too
        producer = AIOKafkaProducer(**settings.kafka.aiokafka_options())
        await producer.start()
        wrong = encode(video(stream=f"{prefix}a"))
        meta = await (await producer.send(catalog.MEDIA[Modality.AUDIO], wrong,
                                          key=f"{prefix}a".encode()))
        # and so must a token keyed other than by its stream_id
        await (await producer.send(catalog.MEDIA[Modality.VIDEO], wrong,
                                   key=f"{prefix}other".encode()))
        await producer.stop()
        published.bad_records += 2
        assert await drain(observer, published, timeout_s=30.0), "ledger did not close"

    ledger = observer.ledger
    assert ledger.unaccounted(published.keys) == set()
    assert ledger.unanswered() == set()
    assert {sid for sid, _ in ledger.responses} == {f"{prefix}a", f"{prefix}b"}
    assert len(ledger.in_windows & published.keys) > len(ledger.late & published.keys)
    reasons = sorted(d.reason for d in ledger.dead_letters)
    assert len(reasons) == 4
    assert any("is not the token's stream_id" in r for r in reasons)
    assert any("magic" in r for r in reasons) and any("version" in r for r in reasons)
    wrong_kind = [d for d in ledger.dead_letters if "does not belong on media.audio" in d.reason]
    assert len(wrong_kind) == 1
    assert (wrong_kind[0].topic, wrong_kind[0].partition, wrong_kind[0].offset) == (
        "media.audio", meta.partition, meta.offset)
    assert wrong_kind[0].value == wrong and wrong_kind[0].stage == "align"
    for response in ledger.responses.values():
        t = response.timeline
        assert t.capture_us <= t.aligned_us <= t.routed_us
        if response.status == "ok":  # through the queue and the engine
            assert t.routed_us <= t.dequeued_us <= t.inferred_us
            assert response.engine == "reference" and response.output, response
        elif response.status == "dropped":
            # A window whose every token was shed as stale (a machine stalled past the
            # budget) holds nothing to infer on: answered, with the reason, and only then.
            assert response.reason == "nothing_usable", response
            assert any(k.stream_id == response.stream_id for k in ledger.late), response
        else:
            # Shed, never silently, once its deadline could not be met: how long that takes
            # is the machine's, not the pipeline's (a stalled CI host can take 10 s).
            assert response.status == "expired" and response.detail, response
    answered = {sid for (sid, _), r in ledger.responses.items() if r.status == "ok"}
    assert answered == {f"{prefix}a", f"{prefix}b"}  # the engine answered both streams
    stats = telemetry.stage_stats()
    assert {"publish", "transport", "align", "route", "queue", "infer", "respond",
            "e2e"} <= set(stats)
    await asyncio.sleep(0)


async def test_withheld_video_and_confident_speech_take_the_partial_and_early_exit_routes(
        apache_kafka: str) -> None:
    async with _pipeline(apache_kafka, "rt") as p:
        settings, prefix, observer, telemetry = p.settings, p.prefix, p.observer, p.telemetry
        blind, speaker, normal = f"{prefix}blind", f"{prefix}speaker", f"{prefix}normal"
        published = await publish_synthetic(
            settings.kafka, [blind, speaker, normal], 2.5, telemetry, configs={
                blind: SyntheticConfig(withheld=frozenset({Modality.VIDEO})),
                speaker: SyntheticConfig(asr_text="please call the doctor",
                                         asr_confidence=0.97)})
        assert await drain(observer, published, timeout_s=30.0), "ledger did not close"

    # A window shed at route (stale on arrival, route "none") was routed nowhere.
    routed = {key: r for key, r in observer.ledger.responses.items() if r.route != "none"}
    by_stream: dict[str, Counter[tuple[str, str, str]]] = {}
    for (sid, _), r in routed.items():
        by_stream.setdefault(sid, Counter())[(r.route, r.reason, r.pool)] += 1
    assert set(by_stream[blind]) == {("text_only", "video_missing", "text")}
    # The router's rules, window by window, on what each window holds: a machine stalled
    # past the budget sheds tokens as stale, and a window is routed on what it has left.
    # The confident speech exits early wherever a window holds it, and only there; a
    # window without its frame goes text only as video_missing, and only such a window.
    windows = {(w.stream_id, w.window_seq): w for sid in (speaker, normal)
               for w in await _windows(settings, sid)}
    for (sid, seq), r in routed.items():
        if sid in (speaker, normal):
            w = windows[(sid, seq)]
            speech = any(a.asr_text for a in w.audio)
            assert (r.route == "early_exit") == speech, (r, w.audio)
            if not speech:  # (a frame that arrives too old to trust goes text only too)
                assert (r.reason == "video_missing") == (Modality.VIDEO in w.missing), (
                    r, w.missing)
    speaker_routes, normal_routes = by_stream[speaker], by_stream[normal]
    assert speaker_routes[("early_exit", "asr_confident_intent", "text")] >= 1, speaker_routes
    assert normal_routes[("full", "all_trusted", "vl")] >= 1, normal_routes
    # (the alignment gate closes on a window whose modalities are far apart in time)
    others = {("full", "all_trusted", "vl"), ("text_only", "video_missing", "text"),
              ("text_only", "video_untrusted", "text"), ("vision_only", "gate_closed", "vl")}
    assert set(speaker_routes) <= others | {("early_exit", "asr_confident_intent", "text")}
    assert set(normal_routes) <= others, normal_routes
    text_answers = [r for r in observer.ledger.responses.values() if r.pool == "text"]
    assert text_answers and all(r.output for r in text_answers if r.status == "ok")
    assert any(r.status == "ok" for r in text_answers)
