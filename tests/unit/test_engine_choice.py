"""worker.engine=auto never runs random weights; every worker says which engine and model."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lockstep.config.worker import WorkerSettings
from lockstep.engines.registry import choose, create_engine

pytestmark = pytest.mark.unit

LOGGER = "lockstep.engines.registry"


def test_auto_without_a_checkpoint_takes_the_reference_engine_and_says_why(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    engine = create_engine(WorkerSettings(engine="auto", pool="vl"))
    assert engine.name == "reference"  # torch and transformers are installed here
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "worker.cpu.model_dir" in warnings[0]
    assert "random weights" in warnings[0]


def test_auto_with_a_checkpoint_takes_the_cpu_engine(tmp_path: Path) -> None:
    choice = choose(WorkerSettings(engine="auto", cpu={"model_dir": tmp_path}))
    assert choice.name == "cpu"


def test_auto_takes_trtllm_only_with_a_model_named() -> None:
    assert choose(WorkerSettings(engine="auto")).name != "trtllm"


def test_the_random_weights_model_runs_only_by_name_and_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    engine = create_engine(WorkerSettings(engine="cpu", pool="text"))
    assert engine.name == "cpu"
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "RANDOM weights" in warning and "LOCKSTEP_WORKER__CPU__MODEL_DIR" in warning


@pytest.mark.parametrize(("settings", "says"), [
    ({"engine": "reference"}, "engine reference, model numpy description"),
    ({"engine": "openai", "openai": {"model": "m7", "base_url": "http://h:1/v1"}},
     "engine openai, model m7 at http://h:1/v1"),
    ({"engine": "cpu", "cpu": {"model_dir": "/models/qwen"}},
     "engine cpu, model /models/qwen (device auto)"),
    ({"engine": "auto"}, "engine reference (auto), model numpy description"),
])
def test_every_worker_logs_its_engine_and_model_in_one_info_line(
        caplog: pytest.LogCaptureFixture, settings: dict[str, object], says: str) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    create_engine(WorkerSettings(pool="vl", **settings))  # type: ignore[arg-type]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and infos[0].startswith(f"worker vl: {says}"), infos
