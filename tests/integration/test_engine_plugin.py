"""Engine plugins: a package that registers an engine under ``lockstep.engines``."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.agents.runner import prepare_topics
from lockstep.config.settings import load_settings
from lockstep.config.worker import WorkerSettings
from lockstep.engines.base import WorkItem
from lockstep.engines.registry import create_engine
from lockstep.errors import ConfigError
from lockstep.observe.observer import Observer
from lockstep.topics import catalog
from lockstep.topics.codec import encode
from tests.factories import request
from tests.integration.procs import lockstep_run

pytestmark = pytest.mark.integration
PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "echo-engine"


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The echo-engine package installed (with its entry point) into a directory of its own."""
    target = tmp_path_factory.mktemp("plugins")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(PLUGIN)],
                   check=True, capture_output=True, timeout=300)
    return target


async def test_an_installed_plugin_is_chosen_by_its_entry_point_name(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(plugin_dir))
    engine = create_engine(WorkerSettings(engine="echo", engine_options={"prefix": "hi"}))
    assert type(engine).__name__ == "EchoEngine" and engine.name == "echo"
    async with engine:
        [result] = await engine.infer([_item()])
    assert result.output.startswith("hi s #7 ")  # type: ignore[union-attr]


def test_a_plugin_can_be_named_by_module_and_class(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(plugin_dir))
    engine = create_engine(WorkerSettings(engine="lockstep_echo_engine:EchoEngine"))
    assert engine.name == "echo"


def test_an_unknown_plugin_names_the_plugins_that_are_installed(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(plugin_dir))
    with pytest.raises(ConfigError, match=r"'ecoh' is no built-in engine .* echo"):
        create_engine(WorkerSettings(engine="ecoh"))
    with pytest.raises(ConfigError, match=r"is not a lockstep\.engines\.base\.Engine"):
        create_engine(WorkerSettings(engine="lockstep.errors:ConfigError"))


async def test_a_worker_process_serves_its_pool_with_a_plugin_engine(
        plugin_dir: Path, tansu: str, tmp_path: Path) -> None:
    pool = f"echo{secrets.token_hex(2)}"
    settings = load_settings(kafka={"bootstrap_servers": tansu, "fetch_max_wait_ms": 5},
                             topics={"pools": (pool,)}, worker={"pool": pool})
    await prepare_topics(settings, create=True)
    stream = f"plug-{secrets.token_hex(3)}"
    observer = Observer(settings.kafka, keep=lambda sid: sid == stream)
    await observer.start()
    env = {"LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": tansu, "LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": "5",
           "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": "6000", "LOCKSTEP_WORKER__ENGINE": "echo",
           "LOCKSTEP_WORKER__WARMUP": "false", "LOCKSTEP_TOPICS__POOLS": f'["{pool}"]',
           "LOCKSTEP_METRICS__PORT": "0", "LOCKSTEP_DATA_DIR": str(tmp_path / "data"),
           "PYTHONPATH": str(plugin_dir)}
    try:
        args = ["--log-level", "info", "run", "--roles", f"worker:{pool}"]
        with lockstep_run(args, env, tmp_path / "w.log") as w:
            producer = AIOKafkaProducer(bootstrap_servers=tansu)
            await producer.start()
            try:  # a new group starts at the earliest record: sent before it joins is fine
                req = request(7, stream=stream, deadline_us=time.time_ns() // 1000 + 60_000_000)
                await producer.send_and_wait(catalog.requests_topic(pool),
                                             encode(req.model_copy(update={"pool": pool})),
                                             key=stream.encode())
            finally:
                await producer.stop()
            deadline = time.monotonic() + 60
            # the observer reads in the background: nothing to wait on but time
            while not observer.ledger.responses and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            assert observer.ledger.responses, w.tail()
            assert "engine plugin <class 'lockstep_echo_engine.EchoEngine'>" in w.tail()
    finally:
        await observer.stop()
    response = next(iter(observer.ledger.responses.values()))
    assert response.engine == "echo" and response.output.startswith(f"echo {stream} #")


def _item() -> WorkItem:
    return WorkItem(request(7), max_new_tokens=8)
