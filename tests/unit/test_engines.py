import asyncio
from collections.abc import Sequence

import pytest

from engines.base import Engine, InferenceResult
from engines.reference import ReferenceEngine, describe
from engines.worker import Worker
from lockstep.errors import EngineError, EngineTimeout
from streams.synthetic import SyntheticConfig, SyntheticStream
from streams.telemetry import Telemetry
from tests.factories import T0, audio, ocr, sensor, video
from topics.schemas import Modality, ModalityState, Request, Timeline, Window

pytestmark = pytest.mark.unit


def _request(seq: int = 1, **window: object) -> Request:
    fields: dict[str, object] = dict(
        stream_id="s", window_seq=seq, t_start_us=T0, t_end_us=T0 + 100_000, anchor_t_us=T0,
        slo_class="cabin", modalities={Modality.VIDEO: ModalityState(present=True)},
        missing=[], members={}, timeline=Timeline(capture_us=T0, routed_us=T0 + 1000))
    fields.update(window)
    return Request(window=Window(**fields), route="full", pool="vl",  # type: ignore[arg-type]
                   priority=0.5, deadline_us=T0 + 120_000)


class FakeEngine(Engine):
    """A test engine with knobs: a delay, an error to raise, a wrong result count."""

    name = "fake"

    def __init__(self, delay: float = 0.0, fail_with: Exception | None = None,
                 drop_one: bool = False, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.delay, self.fail_with, self.drop_one = delay, fail_with, drop_one
        self.batches: list[int] = []

    async def _infer(self, batch: Sequence[Request]) -> list[InferenceResult]:
        self.batches.append(len(batch))
        await asyncio.sleep(self.delay)
        if self.fail_with is not None:
            raise self.fail_with
        results = [InferenceResult(f"w{r.window.window_seq}", {}) for r in batch]
        return results[:-1] if self.drop_one else results


def test_reference_engine_finds_the_tone_the_text_and_the_bright_spot() -> None:
    frame = video(width=8, height=6, seq=3)  # bright pixel at (3, 3)
    result = describe(_request(video=frame, audio=[audio(seq=i, t_us=T0 + i * 20_000,
                                                         tone_hz=1000) for i in range(5)],
                               ocr=[ocr(text="EXIT")], sensor=[sensor(value=2.5)]).window)
    assert result.scores["audio_peak_hz"] == pytest.approx(1000, abs=10)
    assert result.scores["bright_x"] == pytest.approx(3 / 8)
    assert result.scores["sensor_imu_0"] == 2.5
    assert "text EXIT" in result.output and "tone 1000 Hz" in result.output


def test_reference_engine_tracks_the_synthetic_moving_square() -> None:
    stream = SyntheticStream("s", T0, SyntheticConfig(width=64, height=48))
    frames = [t for t in stream.due(T0 + 1_000_000) if t.modality is Modality.VIDEO]
    xs = [describe(_request(video=f).window).scores["bright_x"] for f in frames[:10]]
    assert xs == sorted(xs) and xs[0] < xs[-1]  # the square moves right


def test_reference_engine_is_deterministic_and_names_missing_modalities() -> None:
    req = _request(video=video(), missing=[Modality.AUDIO])
    assert describe(req.window) == describe(req.window)
    assert "missing audio" in describe(req.window).output


async def test_worker_answers_each_request_in_order_with_its_timeline() -> None:
    telemetry = Telemetry()
    clock = iter([T0 + 2000, T0 + 5000])
    async with ReferenceEngine(telemetry=telemetry, pool="vl") as engine:
        worker = Worker(engine, telemetry, "vl", lambda: next(clock))
        responses = await worker.process([_request(1, video=video()), _request(2)])
    assert [r.window_seq for r in responses] == [1, 2]
    assert responses[0].engine == "reference" and responses[0].pool == "vl"
    assert responses[0].timeline.dequeued_us == T0 + 2000
    assert responses[0].timeline.inferred_us == T0 + 5000
    assert telemetry.stage_stats()["queue"].p50_ms == pytest.approx(1.0)


async def test_engine_timeout_is_retriable() -> None:
    async with FakeEngine(delay=0.2, timeout_s=0.01) as engine:
        with pytest.raises(EngineTimeout) as info:
            await engine.infer([_request()])
    assert info.value.retriable


async def test_engine_failures_and_wrong_result_counts_become_engine_errors() -> None:
    async with FakeEngine(fail_with=RuntimeError("cuda oom")) as engine:
        with pytest.raises(EngineError, match="cuda oom"):
            await engine.infer([_request()])
    async with FakeEngine(drop_one=True) as engine:
        with pytest.raises(EngineError, match="1 results for 2"):
            await engine.infer([_request(1), _request(2)])


async def test_engine_must_be_started() -> None:
    with pytest.raises(EngineError, match="not started"):
        await FakeEngine().infer([_request()])
