"""`lockstep demo --report`, `lockstep top --once` and `lockstep report` as a user runs them."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.clirun import clean_env as _env
from tests.clirun import lockstep as _cli
from tests.clirun import lockstep_path

pytestmark = pytest.mark.e2e


def _plots(page: str) -> dict[str, str]:
    return dict(re.findall(r'<svg class="latency-plot" data-stage="([a-z0-9]+)"(.*?)</svg>',
                           page, re.S))


def test_demo_writes_a_single_file_html_report_with_a_plot_per_stage(tmp_path: Path) -> None:
    out = tmp_path / "out.html"
    # The reference engine keeps up on any machine, so every stage is observed.
    result = _cli("demo", "--seconds", "2", "--report", str(out),
                  env={"LOCKSTEP_WORKER__ENGINE": "reference"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"report written to {out}" in result.stderr
    page = out.read_text()
    plots = _plots(page)
    for stage in ("transport", "align", "route", "queue", "infer", "respond", "e2e"):
        assert stage in plots, f"no plot for {stage}"
        assert "<rect" in plots[stage] and "P99 " in plots[stage] and "budget " in plots[stage]
    assert "SLO attainment per class" in page and "cabin" in page
    assert "Token ledger" in page and "Routes" in page
    assert "<script" not in page and not re.search(r"(src|href)=", page)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_top_once_and_report_read_a_running_role_over_http(tansu: str, tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = {**_env(), "LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS": "5",
           "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": "6000", "LOCKSTEP_APP_ID": "lockstep-e2e-top",
           "LOCKSTEP_WORKER__ENGINE": "reference"}
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen([lockstep_path(), "run", "--roles", "all", "--bootstrap", tansu,
                             "--create-topics", "--metrics-port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for(url, 60)
        # Published in real time for long enough that fresh windows follow the group's join
        # (tokens read seconds late miss their deadline and are shed unanswered).
        publisher = subprocess.Popen([lockstep_path(), "publish", "--synthetic", "--streams", "1",
                                      "--seconds", "20", "--bootstrap", tansu],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=_env())
        try:
            answered = re.compile(r"^lockstep_e2e_latency_seconds_count\{.*\} ([1-9]\d{1,})",
                                  re.M)  # at least ten answers
            deadline = time.monotonic() + 60
            while not answered.search(body := urllib.request.urlopen(url, timeout=5).read()
                                      .decode()):
                assert time.monotonic() < deadline, "no response within 60 s"
                time.sleep(0.5)
        finally:
            publisher.terminate()
            publisher.wait(timeout=30)
        top = _cli("top", "--once", "--url", url)
        assert top.returncode == 0, top.stderr[-3000:]
        for stage in ("align", "route", "infer", "e2e"):
            assert re.search(rf"│ {stage}\s+│\s+\d+", top.stdout), top.stdout
        assert "cabin" in top.stdout
        # Which routes a run takes is the SLO controller's call (a loaded machine breaches at the
        # group's join and routes degraded): top must show every route the role counted.
        routes = set(re.findall(r'^lockstep_windows_total\{.*route="([^"]+)".*\} ', body, re.M))
        assert routes, body
        for route in routes:
            assert f"route {route}" in top.stdout, top.stdout
        out = tmp_path / "live.html"
        report = _cli("report", "--url", url, "-o", str(out))
        assert report.returncode == 0, report.stderr[-3000:]
        assert {"align", "route", "infer", "e2e"} <= set(_plots(out.read_text()))
        (tmp_path / "scrape.txt").write_text(body)
        saved = _cli("report", str(tmp_path / "scrape.txt"), "-o", str(tmp_path / "saved.html"))
        assert saved.returncode == 0 and "infer" in _plots((tmp_path / "saved.html").read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_top_once_exits_1_when_no_endpoint_answers() -> None:
    result = _cli("top", "--once", "--url", f"http://127.0.0.1:{_free_port()}/metrics")
    assert result.returncode == 1 and "cannot scrape" in result.stdout


def test_report_without_input_is_a_usage_error() -> None:
    result = _cli("report")
    assert result.returncode == 2 and "--url" in result.stderr
