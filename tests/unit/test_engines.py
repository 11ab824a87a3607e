import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from lockstep.engines import reference
from lockstep.engines.base import Engine, InferenceResult, ItemFailure, ItemResult, WorkItem
from lockstep.engines.batching.dispatcher import Dispatcher, Outcome
from lockstep.engines.batching.latency import LatencyModel, LatencyPrior
from lockstep.engines.batching.policy import SchedulerConfig
from lockstep.engines.batching.scheduler import DeadlineScheduler
from lockstep.engines.reference import ReferenceEngine, describe
from lockstep.engines.responses import build_response
from lockstep.engines.simulated import SimulatedEngine
from lockstep.errors import EngineError, EngineTimeout
from lockstep.producer.synthetic import SyntheticConfig, SyntheticStream
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.schemas import Modality, Request, Window
from tests.factories import T0, audio, ocr, request, sensor, video

pytestmark = pytest.mark.unit


def as_items(requests: Sequence[Request]) -> list[WorkItem]:
    """Full-service work items of ``requests``."""
    return [WorkItem(r) for r in requests]


class FakeEngine(SimulatedEngine):
    """A simulated engine with failure knobs: an error to raise, poison requests, a short answer."""

    name = "fake"

    def __init__(self, fail_with: Exception | None = None, poison: frozenset[int] = frozenset(),
                 drop_one: bool = False, **kw: object) -> None:
        kw.setdefault("fixed_s", 0.0)
        kw.setdefault("per_item_s", 0.0)
        kw.setdefault("per_token_s", 0.0)
        super().__init__(**kw)  # type: ignore[arg-type]
        self.fail_with, self.poison, self.drop_one = fail_with, poison, drop_one

    async def _infer(self, batch: Sequence[WorkItem]) -> list[ItemResult]:
        results = await super()._infer(batch)
        if self.fail_with is not None:
            raise self.fail_with
        if any(i.request.window.window_seq in self.poison for i in batch):
            raise ValueError("poisoned input")
        return results[:-1] if self.drop_one else results


def test_reference_engine_finds_the_tone_the_text_and_the_bright_spot() -> None:
    frame = video(width=8, height=6, seq=3)  # bright pixel at (3, 3)
    result = describe(request(video=frame, audio=[audio(seq=i, t_us=T0 + i * 20_000,
                                                        tone_hz=1000) for i in range(5)],
                              ocr=[ocr(text="EXIT")], sensor=[sensor(value=2.5)]).window)
    assert result.scores["audio_peak_hz"] == pytest.approx(1000, abs=10)
    assert result.scores["bright_x"] == pytest.approx(3 / 8)
    assert result.scores["sensor_imu_0"] == 2.5
    assert "text EXIT" in result.output and "tone 1000 Hz" in result.output


def test_reference_engine_tracks_the_synthetic_moving_square() -> None:
    stream = SyntheticStream("s", T0, SyntheticConfig(width=64, height=48))
    frames = [t for t in stream.due(T0 + 1_000_000) if t.modality is Modality.VIDEO]
    xs = [describe(request(video=f).window).scores["bright_x"] for f in frames[:10]]
    assert xs == sorted(xs) and xs[0] < xs[-1]  # the square moves right


def test_reference_engine_is_deterministic_and_names_missing_modalities() -> None:
    req = request(video=video(), missing=[Modality.AUDIO])
    assert describe(req.window) == describe(req.window)
    assert "missing audio" in describe(req.window).output


async def test_engine_reports_per_item_timings_and_infer_metrics() -> None:
    telemetry = Telemetry()
    async with ReferenceEngine(telemetry=telemetry, pool="vl") as engine:
        results = await engine.infer(as_items([request(1, video=video()), request(2)]))
    assert all(isinstance(r, InferenceResult) and r.infer_s > 0 for r in results)
    assert telemetry.stage_stats()["infer"].count == 2


async def test_reference_engine_describes_on_the_loop_letting_other_tasks_run_between_chunks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its work holds the GIL: in a thread it would take turns with the event loop instead.
    threads: list[int] = []
    turns: list[int] = []

    def recording(window: Window) -> InferenceResult:
        threads.append(threading.get_ident())
        turns.append(ticks)
        return describe(window)

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(reference, "describe", recording)
    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    async with ReferenceEngine() as engine:
        results = await engine.infer(as_items([request(i, video=video()) for i in range(20)]))
    ticking.cancel()
    assert all(isinstance(r, InferenceResult) for r in results)
    assert set(threads) == {threading.get_ident()}
    assert len(set(turns)) >= 3  # the loop turned between chunks of the batch


async def test_engine_timeout_is_retriable() -> None:
    async with FakeEngine(fixed_s=0.2, timeout_s=0.01) as engine:
        with pytest.raises(EngineTimeout) as info:
            await engine.infer(as_items([request()]))
    assert info.value.retriable


async def test_a_poison_request_fails_alone_and_its_batch_mates_are_answered() -> None:
    async with FakeEngine(poison=frozenset({2})) as engine:
        results = await engine.infer(as_items([request(1), request(2), request(3)]))
    assert isinstance(results[0], InferenceResult) and isinstance(results[2], InferenceResult)
    assert isinstance(results[1], ItemFailure) and "poisoned input" in results[1].reason
    assert engine.batches == [3, 1, 1, 1]  # the batch, then each item alone


async def test_retriable_engine_errors_fail_the_batch() -> None:
    class Flaky(EngineError):
        retriable = True

    async with FakeEngine(fail_with=Flaky("device lost")) as engine:
        with pytest.raises(Flaky):
            await engine.infer(as_items([request(1), request(2)]))


async def test_a_wrong_result_count_is_an_engine_error() -> None:
    async with FakeEngine(drop_one=True) as engine:
        results = await engine.infer(as_items([request(1), request(2)]))
    # The batch answer is unusable; alone, each item returns nothing either.
    assert all(isinstance(r, ItemFailure) and "0 results for 1" in r.reason for r in results)


async def test_engine_must_be_started() -> None:
    with pytest.raises(EngineError, match="not started"):
        await FakeEngine().infer(as_items([request()]))


def test_build_response_carries_the_timeline_and_the_degradation() -> None:
    req = request(7, video=video())
    item = WorkItem(req, max_new_tokens=4, reduce_vision=True, level=2)
    ok = build_response(Outcome(0, req, InferenceResult("hi", {}), item, T0 + 2000, T0 + 5000),
                        "cpu")
    assert (ok.status, ok.output, ok.degraded, ok.max_new_tokens) == ("ok", "hi", 2, 4)
    assert ok.timeline.dequeued_us == T0 + 2000 and ok.timeline.inferred_us == T0 + 5000
    late = build_response(Outcome(0, req, None, None, req.deadline_us - 3000,
                                  req.deadline_us - 3000), "cpu")
    assert late.status == "expired" and "3.0 ms left" in late.detail
    with pytest.raises(ValueError, match="failed item"):
        build_response(Outcome(0, req, ItemFailure("bad"), item, T0, T0), "cpu")


def _wall_us() -> int:
    return time.time_ns() // 1000


async def _dispatch(engine: Engine, requests: list[tuple[int, int]], **cfg: object,
                    ) -> tuple[list[Outcome[int]], Telemetry]:
    """Run (handle, deadline offset ms from now) requests through a dispatcher; all outcomes."""
    telemetry = Telemetry()
    outcomes: list[Outcome[int]] = []

    async def sink(batch: list[Outcome[int]]) -> None:
        outcomes.extend(batch)

    config = SchedulerConfig(**{"max_batch": 4, "max_queue_delay_us": 5000,  # type: ignore[arg-type]
                                "margin_us": 1000, **cfg})
    latency = LatencyModel(LatencyPrior(fixed_us=5000, per_item_us=500))
    dispatcher: Dispatcher[int] = Dispatcher(engine, DeadlineScheduler(config, latency),
                                             _wall_us, sink, telemetry=telemetry, pool="vl")
    runner = asyncio.ensure_future(dispatcher.run())
    now = _wall_us()
    for handle, due_ms in requests:
        dispatcher.admit(handle, request(handle, deadline_us=now + due_ms * 1000))
    await asyncio.wait_for(dispatcher.drain(), 10)
    runner.cancel()
    return outcomes, telemetry


async def test_dispatcher_answers_every_request_once_and_learns_the_engine() -> None:
    async with SimulatedEngine(fixed_s=0.004, per_item_s=0.0005, per_token_s=0.0) as engine:
        outcomes, telemetry = await _dispatch(engine, [(i, 500) for i in range(10)])
    assert sorted(o.handle for o in outcomes) == list(range(10))
    assert all(o.status == "ok" for o in outcomes)
    assert max(engine.batches) == 4  # batched up to max_batch
    assert telemetry.requests.labels("vl", "ok")._value.get() == 10


async def test_withdrawn_requests_go_unanswered_and_settle_waits_for_the_running_batch() -> None:
    outcomes: list[Outcome[int]] = []

    async def sink(batch: list[Outcome[int]]) -> None:
        outcomes.extend(batch)

    async with SimulatedEngine(fixed_s=0.05, per_item_s=0.0, per_token_s=0.0) as engine:
        config = SchedulerConfig(max_batch=2, max_queue=16, max_queue_delay_us=0)
        dispatcher: Dispatcher[int] = Dispatcher(engine, DeadlineScheduler(config),
                                                 _wall_us, sink)
        now = _wall_us()
        for i in range(8):
            dispatcher.admit(i, request(i, deadline_us=now + 10_000_000))
        runner = asyncio.ensure_future(dispatcher.run())
        for _ in range(1000):  # until the first batch is running
            if engine.batches:
                break
            await asyncio.sleep(0.001)
        withdrawn = dispatcher.withdraw(lambda handle: handle >= 4)
        assert sorted(r.window.window_seq for r in withdrawn) == [4, 5, 6, 7]
        assert await dispatcher.settle(5.0)
        assert {0, 1} <= {o.handle for o in outcomes}  # the batch running was answered
        await asyncio.wait_for(dispatcher.drain(), 5)
        runner.cancel()
    assert sorted(o.handle for o in outcomes) == [0, 1, 2, 3]


async def test_requests_admitted_while_expired_ones_are_answered_are_dispatched() -> None:
    # A restarted worker reads a backlog: the first requests are already hopeless, and
    # while their expired answers are being sent, more are admitted. The dispatcher must
    # see them (it once cleared the wake-up after that send and waited for good).
    outcomes: list[Outcome[int]] = []
    dispatcher: Dispatcher[int]
    all_answered = asyncio.Event()

    async def sink(batch: list[Outcome[int]]) -> None:
        outcomes.extend(batch)
        if len(outcomes) >= 4:
            all_answered.set()
        if any(o.status == "expired" for o in batch):
            await asyncio.sleep(0)  # the send of the expired answers yields...
            now = _wall_us()
            for i in range(1, 4):  # ...and meanwhile the agent admits what it read next
                dispatcher.admit(i, request(i, deadline_us=now + 10_000_000))
            await asyncio.sleep(0)

    async with SimulatedEngine(fixed_s=0.001, per_token_s=0.0) as engine:
        config = SchedulerConfig(max_batch=4, max_queue_delay_us=0)
        dispatcher = Dispatcher(engine, DeadlineScheduler(config), _wall_us, sink)
        dispatcher.admit(0, request(0, deadline_us=_wall_us() - 1_000))  # hopeless
        runner = asyncio.ensure_future(dispatcher.run())
        try:
            await asyncio.wait_for(all_answered.wait(), 5.0)
        finally:
            runner.cancel()
    assert {o.handle: o.status for o in outcomes} == {0: "expired", 1: "ok", 2: "ok", 3: "ok"}


async def test_dispatcher_answers_hopeless_requests_as_expired_without_running_them() -> None:
    async with SimulatedEngine(fixed_s=0.004, per_token_s=0.0) as engine:
        outcomes, telemetry = await _dispatch(engine, [(0, 1), (1, 500)])
    status = {o.handle: o.status for o in outcomes}
    assert status == {0: "expired", 1: "ok"}
    assert sum(engine.batches) == 1
    assert telemetry.requests.labels("vl", "expired")._value.get() == 1


async def test_dispatcher_raises_what_the_engine_raises() -> None:
    class Lost(EngineError):
        retriable = True

    async with FakeEngine(fail_with=Lost("device lost")) as engine:
        with pytest.raises(Lost):
            await _dispatch(engine, [(0, 500)])


async def test_dispatcher_backpressure_waits_until_the_queue_drains_to_half() -> None:
    async with SimulatedEngine(fixed_s=0.002, per_token_s=0.0) as engine:
        outcomes: list[Outcome[int]] = []

        async def sink(batch: list[Outcome[int]]) -> None:
            outcomes.extend(batch)

        config = SchedulerConfig(max_batch=2, max_queue=4, max_queue_delay_us=0)
        dispatcher: Dispatcher[int] = Dispatcher(engine, DeadlineScheduler(config), _wall_us,
                                                 sink)
        now = _wall_us()
        for i in range(4):
            dispatcher.admit(i, request(i, deadline_us=now + 10_000_000))
        assert dispatcher.full
        runner = asyncio.ensure_future(dispatcher.run())
        await asyncio.wait_for(dispatcher.wait_space(), 5)
        assert dispatcher.policy.depth <= 2
        await dispatcher.drain()
        runner.cancel()
    assert len(outcomes) == 4
