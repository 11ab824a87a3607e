"""Perception workers: a child process that never makes the publisher wait.

The tasks here run in a real child process (``python -m lockstep.media.workers``); a gate
file holds a job until the test opens it, so what the parent does meanwhile is observed
without any timing assumption.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lockstep.errors import ConfigError, MediaError
from lockstep.media.workers import GAP, Worker

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Gates:
    """Files the child task watches and writes."""

    folder: Path

    def started(self, job: int) -> Path:
        return self.folder / f"started-{job}"

    @property
    def gate(self) -> Path:
        return self.folder / "open"


class Gated:
    """Echoes each job once the gate file exists; says when it started one."""

    def __init__(self, gates: Gates) -> None:
        self.gates = gates

    def handle(self, job: int) -> list[Any]:
        self.gates.started(job).touch()
        while not self.gates.gate.exists():
            time.sleep(0.01)
        return [job]

    def gap(self) -> list[Any]:
        return [GAP]

    def finish(self) -> list[Any]:
        return ["finished"]


class Broken:
    """A task that cannot start."""

    def __init__(self) -> None:
        raise ConfigError("no model for this")


class Collected:
    """Results as they arrive, and a way to wait for some."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, result: Any) -> None:
        with self._cond:
            self.items.append(result)
            self._cond.notify_all()


def _started(gates: Gates, job: int) -> None:
    while not gates.started(job).exists():
        time.sleep(0.01)


def _worker(tmp_path: Path, results: Collected, **kw: Any) -> tuple[Worker, Gates]:
    gates = Gates(tmp_path)
    worker = Worker("gated", functools.partial(Gated, gates), results, background=False,
                    **kw)
    worker.start()
    worker.wait_ready(60.0)
    return worker, gates


def test_a_busy_reader_keeps_only_the_newest_frame_and_the_caller_never_waits(
        tmp_path: Path) -> None:
    results = Collected()
    skipped: list[int] = []
    worker, gates = _worker(tmp_path, results, policy="latest", on_skip=skipped.append)
    assert worker.offer(0)
    _started(gates, 0)  # the child holds job 0 until the gate opens
    for job in range(1, 20):
        assert worker.offer(job)  # returns while the child is still busy
    assert results.items == []
    gates.gate.touch()
    assert worker.close(60.0)
    assert results.items == [0, 19, "finished"]
    assert worker.skipped == sum(skipped) == 18


def test_a_full_backlog_is_dropped_whole_and_the_task_told_of_the_gap(tmp_path: Path) -> None:
    results = Collected()
    worker, gates = _worker(tmp_path, results, policy="fifo", capacity=3)
    worker.offer(0)
    _started(gates, 0)
    for job in range(1, 5):  # 1, 2, 3 fill the inbox; 4 finds it full
        worker.offer(job)
    gates.gate.touch()
    assert worker.close(60.0)
    assert results.items == [0, GAP, 4, "finished"]
    assert (worker.skipped, worker.gaps) == (3, 1)


def test_lossless_offers_wait_for_room_and_every_job_is_seen(tmp_path: Path) -> None:
    results = Collected()
    worker, gates = _worker(tmp_path, results, policy="latest", lossless=True)
    gates.gate.touch()
    for job in range(8):
        worker.offer(job)
    assert worker.close(60.0)
    assert results.items == [*range(8), "finished"]
    assert worker.skipped == 0


def test_a_task_that_cannot_start_is_an_error_before_any_work_with_its_reason() -> None:
    worker = Worker("broken", Broken, lambda _: None)
    worker.start()
    with pytest.raises(MediaError, match="broken: no model for this"):
        worker.wait_ready(60.0)
    assert worker.offer(1) is False
    worker.close(0.0)


def test_closing_before_the_child_finishes_stops_it_and_says_so(tmp_path: Path) -> None:
    results = Collected()
    worker, gates = _worker(tmp_path, results, policy="latest")
    worker.offer(0)
    _started(gates, 0)
    assert worker.close(0.2) is False  # the gate never opens: the child is stopped
    assert worker.offer(1) is False
