"""A role started before its broker waits for it, quietly, instead of exiting."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from lockstep.kafka.embedded import EmbeddedBroker
from tests.integration.procs import lockstep_run

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(log: Path, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def test_a_role_started_before_its_broker_waits_and_then_runs(tmp_path: Path) -> None:
    port = _free_port()
    env = {"LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
           "LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": "5", "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": "6000",
           "LOCKSTEP_METRICS__ENABLED": "false", "LOCKSTEP_DATA_DIR": str(tmp_path / "data")}
    log = tmp_path / "align.log"
    with lockstep_run(["run", "--roles", "align", "--create-topics"], env, log) as role:
        time.sleep(12.0)  # no broker at all for a while
        assert role.returncode is None, f"the role gave up\n{role.tail()}"
        waiting = log.read_text(errors="replace")
        with EmbeddedBroker(port=port):
            assert _wait_for(log, "running align in groups", 60.0), role.tail()
            assert role.returncode is None
            status = asyncio.run(role.stop(timeout_s=30.0))
    assert status == 0, role.tail()
    # One "waiting" line per interval, not one per reconnect attempt.
    assert 1 <= waiting.count("waiting for Kafka") <= 3, waiting[-3000:]
    assert len(waiting.splitlines()) < 40, waiting[-3000:]
