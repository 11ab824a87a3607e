"""The demo's publisher process, on the embedded broker: it never holds the roles' loop."""

from __future__ import annotations

import secrets
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from lockstep.agents.runner import prepare_topics
from lockstep.cli.demo import publish_elsewhere
from lockstep.config.settings import load_settings
from lockstep.telemetry.metrics import Telemetry

pytestmark = pytest.mark.integration


async def test_the_publisher_process_is_joined_off_the_event_loop(
        tansu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Joining the child on the loop held every role in the demo still for the ~0.3 s the
    # child's interpreter takes to exit, as the run's last windows were being made.
    on_loop: list[tuple[str, bool]] = []
    shutdown = ProcessPoolExecutor.shutdown

    def spy_shutdown(self: ProcessPoolExecutor, *args: Any, **kwargs: Any) -> None:
        on_loop.append(("shutdown", threading.current_thread() is threading.main_thread()))
        shutdown(self, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "shutdown", spy_shutdown)
    settings = load_settings(kafka={"bootstrap_servers": tansu}, metrics={"enabled": False})
    await prepare_topics(settings, create=True)
    telemetry = Telemetry()

    report, latencies = await publish_elsewhere(
        settings.kafka, [f"pub-{secrets.token_hex(3)}"], 1.0, telemetry)

    assert on_loop == [("shutdown", False)]
    # One publish latency per acknowledged token, left for the caller to record once the
    # roles are done; the published counts are recorded at once.
    assert report.keys and len(latencies) == len(report.keys)
    assert all(0.0 <= s < 30.0 for s in latencies)
    assert "publish" not in telemetry.stage_stats()
    published = sum(report.by_modality.values())
    assert published == len(report.keys)
