"""``lockstep broker``: its address on stdout, and on stderr how far it lasts."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.clirun import LOCKSTEP

pytestmark = pytest.mark.e2e


def test_the_broker_prints_its_address_and_warns_of_its_limit_then_stops_on_sigterm() -> None:
    with subprocess.Popen([LOCKSTEP, "broker"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            address = process.stdout.readline().strip()
            warning = process.stderr.readline()
            host, _, port = address.rpartition(":")
            assert host == "127.0.0.1" and port.isdigit(), address
            assert "slows past ~100,000 records in a topic" in warning, warning
            assert "run Apache Kafka for anything longer" in warning
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_sigterm_while_the_broker_starts_stops_it_and_its_child() -> None:
    # The signal lands once the broker process exists, before it may answer: the command
    # still stops it, and exits 0.
    with subprocess.Popen([LOCKSTEP, "broker"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as process:
        try:
            deadline = time.monotonic() + 30
            while not (children := _children(process.pid)) and time.monotonic() < deadline:
                time.sleep(0.005)
            assert children, "the embedded broker never started"
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
            time.sleep(0.5)
            assert not [c for c in children if _alive(c)]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
