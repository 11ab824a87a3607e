"""The CLI as a user runs it: `lockstep demo`, `topics`, `broker`, `run`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

from tests.clirun import lockstep as _cli
from tests.clirun import lockstep_path

pytestmark = pytest.mark.e2e


def _check_demo_report(report: dict[str, object], streams: int, bad: int) -> None:
    assert report["ok"] is True
    ledger = report["ledger"]
    assert isinstance(ledger, dict)
    assert ledger["unaccounted"] == 0
    assert ledger["in_windows"] + ledger["late"] == report["tokens_published"]
    assert ledger["dead_letters"] == bad == report["bad_records_published"]
    assert report["windows"] == report["responses"] and report["windows_without_response"] == 0
    per_stream = report["responses_per_stream"]
    assert isinstance(per_stream, dict) and len(per_stream) == streams
    assert all(n > 0 for n in per_stream.values())
    # The sample answer is of a window with every modality, not one of a stream's first
    # windows, which go out before the audio and sensor clocks are known.
    assert "missing" not in str(report["sample_output"]), report["sample_output"]
    stages = report["stages"]
    assert isinstance(stages, dict)
    for stage in ("publish", "transport", "align", "route", "queue", "infer", "respond", "e2e"):
        assert stages[stage]["count"] > 0
        assert 0 <= stages[stage]["p50_ms"] <= stages[stage]["p99_ms"]


def test_demo_without_arguments_runs_on_the_embedded_broker_and_prints_the_summary() -> None:
    result = _cli("demo", "--seconds", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "embedded tansu" in out and "ledger closed: every token accounted for" in out
    # the last line is the SLA verdict, met or not, never a bare "OK"
    verdict = out.strip().splitlines()[-1]
    assert verdict.strip().startswith("SLA met (cabin): ") or (
        "SLA NOT met (cabin): " in verdict and "; why: " in verdict), verdict
    assert "demo: publishing 2 streams" in result.stderr  # progress while it starts
    for stage in ("publish", "align", "route", "queue", "infer", "e2e"):
        assert f"  {stage} " in out
    assert "SLO cabin" in out


def test_demo_json_accounts_for_every_token_and_reports_the_partial_routes() -> None:
    # On the embedded broker: an exported cluster address is not where the demo publishes,
    # only --bootstrap is.
    result = _cli("demo", "--json", "--scenario", "partial", "--streams", "3", "--seconds", "3",
                  "--inject-bad", "2", env={"LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ignoring LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS=127.0.0.1:1" in result.stderr
    report = json.loads(result.stdout)
    assert report["broker"] == "embedded tansu" and report["scenario"] == "partial"
    _check_demo_report(report, streams=3, bad=2)
    reasons = report["reasons"]
    assert reasons["text_only:video_missing"] > 0
    assert reasons["early_exit:asr_confident_intent"] > 0
    assert reasons["full:all_trusted"] > 0
    assert sum(report["routes"].values()) == report["responses"]


def test_demo_json_accounts_for_every_token_on_apache_kafka(apache_kafka: str) -> None:
    result = _cli("demo", "--json", "--bootstrap", apache_kafka, "--streams", "2",
                  "--seconds", "3", "--inject-bad", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["broker"] == "kafka" and report["bootstrap"] == apache_kafka
    _check_demo_report(report, streams=2, bad=3)


def test_demo_runs_the_vision_language_model_on_the_cpu_engine() -> None:
    result = _cli("demo", "--json", "--engine", "cpu", "--streams", "1", "--seconds", "2",
                  timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["engine"] == "cpu"
    assert report["windows"] == report["responses"] > 0
    statuses = report["responses_by_status"]
    assert set(statuses) <= {"ok", "expired"} and sum(statuses.values()) == report["responses"]


def test_topics_create_is_idempotent_and_describe_verifies(apache_kafka: str) -> None:
    first = _cli("topics", "create", "--bootstrap", apache_kafka)
    assert first.returncode == 0, first.stderr
    second = _cli("topics", "create", "--bootstrap", apache_kafka)
    assert second.returncode == 0, second.stderr
    assert "created" not in second.stdout
    described = _cli("topics", "describe", "--bootstrap", apache_kafka)
    assert described.returncode == 0, described.stderr
    for topic in ("media.video", "media.audio", "media.ocr", "media.sensor", "aligned.windows",
                  "requests.vl", "responses", "deadletter", "late"):
        assert topic in described.stdout
    assert _cli("topics", "verify", "--bootstrap", apache_kafka).returncode == 0


def test_topics_verify_fails_on_a_cluster_without_the_catalog(tansu: str) -> None:
    result = _cli("topics", "verify", "--bootstrap", tansu,
                  env={"LOCKSTEP_TOPICS__POOLS": '["nowhere"]'})
    assert result.returncode == 1
    assert "requests.nowhere: missing" in result.stderr


def test_broker_command_serves_until_sigterm() -> None:
    with subprocess.Popen([lockstep_path(), "broker"], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            bootstrap = proc.stdout.readline().strip()
            assert bootstrap.startswith("127.0.0.1:")
            admin = AdminClient({"bootstrap.servers": bootstrap})
            assert isinstance(admin.list_topics(timeout=10).topics, dict)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            proc.kill()


def test_unknown_role_is_a_usage_error() -> None:
    result = _cli("run", "--roles", "align,juggle", "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 2
    assert "unknown roles ['juggle']" in result.stderr


def test_run_without_a_bootstrap_server_says_how_to_set_one() -> None:
    result = _cli("run", "--roles", "align")
    assert result.returncode == 2
    assert "LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS" in result.stderr


def test_module_entry_point_prints_help() -> None:
    result = subprocess.run([sys.executable, "-m", "lockstep", "--help"], capture_output=True,
                            text=True, check=False, timeout=60)
    assert result.returncode == 0 and "demo" in result.stdout and "run" in result.stdout
