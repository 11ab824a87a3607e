"""`lockstep inspect` and `lockstep subscribe`: what an on-call engineer reads back."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.clirun import lockstep as _cli

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo_run(tansu: str) -> dict[str, object]:
    """One demo on the session's embedded broker, with bad records and a partial stream."""
    result = _cli("demo", "--json", "--bootstrap", tansu, "--streams", "2", "--seconds", "2",
                  "--inject-bad", "3", "--scenario", "partial", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, object] = json.loads(result.stdout)
    return report


def test_inspect_deadletter_names_where_each_record_came_from_and_why(
        tansu: str, demo_run: dict[str, object]) -> None:
    streams = sorted(demo_run["responses_per_stream"])  # type: ignore[call-overload]
    result = _cli("inspect", "deadletter", "--bootstrap", tansu, "--stream", streams[0])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout
    assert all(" dead-lettered by align [" in line and "]: DecodeError: " in line
               for line in lines)
    assert any("[bad_magic]: DecodeError: not a Lockstep record: missing b'LS' magic" in line
               for line in lines)
    assert all(line.startswith("media.") for line in lines)  # topic/partition@offset
    assert "3 deadletter records" in result.stderr


def test_inspect_responses_shows_status_and_readable_window_ids(
        tansu: str, demo_run: dict[str, object]) -> None:
    streams = sorted(demo_run["responses_per_stream"])  # type: ignore[call-overload]
    result = _cli("inspect", "responses", "--bootstrap", tansu, "--stream", streams[0],
                  "--jsonl")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert records and all(r["kind"] == "Response" for r in records)
    assert all(r["window_id"].startswith("#") and "4611686" not in r["window_id"]
               for r in records)
    assert {r["stream_id"] for r in records} == {streams[0]}
    text = _cli("inspect", "responses", "--bootstrap", tansu, "--stream", streams[0])
    lines = text.stdout.splitlines()
    assert len(lines) == len(records)
    for line, record in zip(lines, records, strict=True):
        # the first stream of the partial scenario sends no video
        assert line.startswith(f"{streams[0]} {record['window_id']} [") and "missing" in line
        status = record["status"]
        assert f"] {status} e2e " in line
        if status != "ok":  # a response that is not an answer says why
            assert f"{status.upper()}: " in line and line.split(f"{status.upper()}: ")[1]


def test_inspect_windows_reports_members_and_what_is_missing(
        tansu: str, demo_run: dict[str, object]) -> None:
    streams = sorted(demo_run["responses_per_stream"])  # type: ignore[call-overload]
    result = _cli("inspect", "windows", "--bootstrap", tansu, "--stream", streams[1],
                  "--max", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith(streams[1] + " #") for line in lines)
    assert all(" ms [" in line for line in lines)


def test_every_command_fails_in_one_line_naming_an_unreachable_bootstrap() -> None:
    # Each waits out its 10-s connect timeout: the commands run side by side.
    commands = [["inspect", "late"], ["topics", "describe"], ["topics", "create"],
                ["subscribe", "--max", "1"],
                ["publish", "--synthetic", "--seconds", "1", "--delivery-timeout", "10"]]
    with ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(
            lambda command: _cli(*command, "--bootstrap", "127.0.0.1:1", timeout=60), commands))
    for command, result in zip(commands, results, strict=True):
        assert result.returncode == 1, (command, result.stderr[-2000:])
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "lockstep: error: cannot reach Kafka at 127.0.0.1:1"), (command, result.stderr[-2000:])
