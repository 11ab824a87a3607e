"""Deploying as an operator does: topic layout checks, metrics ports and bad secrets at start."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from lockstep.kafka.embedded import EmbeddedBroker
from tests.clirun import clean_env, lockstep_path
from tests.clirun import lockstep as _cli

pytestmark = pytest.mark.e2e


def _create(bootstrap: str, layout: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, n, 1) for name, n in layout.items()])
    for future in futures.values():
        future.result(timeout=15)


def test_topics_create_warns_about_extra_partitions_and_fails_only_on_media() -> None:
    with EmbeddedBroker() as broker:
        _create(broker.bootstrap, {"aligned.windows": 6, "deadletter": 3})
        ok = _cli("topics", "create", "--bootstrap", broker.bootstrap)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "aligned.windows" in ok.stderr and "more than the catalog's 4" in ok.stderr
    assert "warning: has 3 partitions" in ok.stdout  # deadletter, in the table

    with EmbeddedBroker() as broker:
        _create(broker.bootstrap, {"media.video": 6, "responses": 8})
        bad = _cli("topics", "create", "--bootstrap", broker.bootstrap)
    assert bad.returncode == 1
    [error] = [line for line in bad.stderr.splitlines() if line.startswith("lockstep: error")]
    assert "media.video: has 6 partitions, catalog says 4" in error
    assert "responses:" not in error  # more partitions there is only a warning


def _taken_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_run_with_a_taken_metrics_port_says_so_in_one_line_and_exits_2() -> None:
    with _taken_port() as sock:
        port = sock.getsockname()[1]
        result = _cli("run", "--roles", "align", "--bootstrap", "127.0.0.1:9",
                      env={"LOCKSTEP_METRICS__PORT": str(port)}, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"lockstep: error: metrics port {port} is in use "
        "(set --metrics-port or LOCKSTEP_METRICS__PORT, 0 = any)")


@pytest.mark.parametrize("env", [
    {"LOCKSTEP_KAFKA__SECURITY_PROTOCOL": "SASL_SSL"},
    {"LOCKSTEP_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
     "LOCKSTEP_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512"},
    {"LOCKSTEP_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "LOCKSTEP_KAFKA__SASL_USERNAME": "u",
     "LOCKSTEP_KAFKA__SASL_MECHANISM": "MD5"},
])
def test_run_with_an_incomplete_sasl_configuration_never_prints_the_password(
        env: dict[str, str]) -> None:
    secret = "Hunter2-s3cret-Passw0rd"
    result = _cli("run", "--roles", "align", "--bootstrap", "127.0.0.1:9",
                  env={**env, "LOCKSTEP_KAFKA__SASL_PASSWORD": secret}, timeout=60)
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert secret not in output and "Hunter2" not in output
    assert output.count("\n") == 1 and output.startswith("lockstep: error: invalid settings:")
    assert "LOCKSTEP_KAFKA__SASL_" in output


def test_run_prints_the_metrics_url_once_and_serves_there(tansu: str) -> None:
    proc = subprocess.Popen(
        [lockstep_path(), "run", "--roles", "route", "--bootstrap", tansu, "--create-topics",
         "--metrics-port", "0"],
        env=clean_env({"LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": "5",
                       "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": "6000"}),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "metrics on" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the process ended before serving metrics"
        url = line.strip().removeprefix("metrics on ")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), line
        assert int(url.split(":")[2].split("/")[0]) > 0
        body = urllib.request.urlopen(url, timeout=5).read().decode()
        assert "lockstep_" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rest = proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            rest = proc.communicate()[1]
    assert "metrics on" not in rest  # printed once


def _environ_of_running(roles: str, env: dict[str, str]) -> dict[str, str]:
    """The environment a ``lockstep run`` process serves its metrics with."""
    base = {k: v for k, v in clean_env(env).items()
            if k not in ("PYTHONMALLOC", "GLIBC_TUNABLES")}
    with subprocess.Popen(
            [lockstep_path(), "run", "--roles", roles, "--bootstrap", "127.0.0.1:9",
             "--metrics-port", "0"], env=base,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stderr is not None
            line = ""
            while "metrics on" not in line:  # serving: past any re-execution
                line = proc.stderr.readline()
                assert line or proc.poll() is None, "the process ended before serving metrics"
            raw = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
            return dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_the_align_role_runs_on_glibc_malloc_in_one_arena_unless_told_otherwise() -> None:
    align = _environ_of_running("align", {})
    assert align.get("PYTHONMALLOC") == "malloc"
    assert "glibc.malloc.arena_max=1" in align.get("GLIBC_TUNABLES", "")
    assert "PYTHONMALLOC" not in _environ_of_running("route", {})
    assert "PYTHONMALLOC" not in _environ_of_running(
        "align", {"LOCKSTEP_ALIGN__SYSTEM_ALLOCATOR": "false"})
