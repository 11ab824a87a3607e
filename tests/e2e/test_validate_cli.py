"""`lockstep validate`: a producer team checks its records before going live."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from lockstep.topics.codec import encode
from lockstep.topics.contract import to_json
from lockstep.topics.schemas import SensorToken, VideoToken
from lockstep.topics.vectors import JPEG_16X8
from tests.clirun import lockstep as _cli

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "docs" / "test-vectors"
NOW_US = time.time_ns() // 1000  # at collection: may be many minutes before a test runs


def _frame(**fields: Any) -> VideoToken:
    base: dict[str, Any] = dict(stream_id="cam-9", seq=1, t_us=NOW_US, format="jpeg", width=16,
                                height=8, data=JPEG_16X8)
    return VideoToken.model_validate({**base, **fields})


def _report(stdout: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(stdout)
    return report


def test_every_valid_test_vector_passes() -> None:
    files = sorted(str(p) for p in (VECTORS / "valid").glob("*.json"))
    result = _cli("validate", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(files)} records: {len(files)} passed, 0 failed" in result.stdout
    assert all(line.startswith("PASS ") for line in result.stdout.splitlines()[:-1])


def test_every_invalid_test_vector_fails_with_its_expected_code_and_field() -> None:
    files = sorted((VECTORS / "invalid").glob("*.json"))
    result = _cli("validate", "--json", *map(str, files))
    assert result.returncode == 1
    report = _report(result.stdout)
    assert report["passed"] == 0 and report["failed"] == len(files)
    for path, verdict in zip(files, report["records"], strict=True):
        expect = json.loads(path.read_text(encoding="utf-8"))["expect"]
        assert (verdict["code"], verdict["field"]) == (expect["code"], expect["field"]), path


def test_a_mix_of_files_reports_pass_or_the_code_and_field_per_record(tmp_path: Path) -> None:
    good = _frame()
    (tmp_path / "frame.bin").write_bytes(encode(good))
    (tmp_path / "cut.hex").write_text("# a JPEG frame cut short\n"
                                      + encode(_frame(data=JPEG_16X8[:-40])).hex(" ", 16))
    bad_sensor = {**to_json(SensorToken(stream_id="cam-9", seq=1, t_us=NOW_US, name="imu",
                                        values=[1.0])), "values": "1.0"}
    lines = [
        {"kind": "video", "record": to_json(good), "topic": "media.video", "key": "cam-9"},
        {"kind": "sensor", "record": bad_sensor},
        {"value_hex": encode(good).hex(), "topic": "media.audio", "key": "cam-9"},
        {"value_hex": encode(good).hex(), "topic": "media.video", "key": "cam-1"},
        {"value_base64": "eyJzdHJlYW1faWQiOiAiY2FtLTkifQ==", "topic": "media.video"},
        {"value_hex": None, "topic": "media.video", "key": "cam-9"},
        {"value_hex": encode(_frame(t_us=time.time_ns() // 1000 + 3_600_000_000)).hex(),
         "topic": "media.video", "key": "cam-9"},
        {"kind": "window", "record": {"stream_id": "cam-9"}},
    ]
    (tmp_path / "mix.jsonl").write_text("\n".join(json.dumps(o) for o in lines) + "\n")
    result = _cli("validate", str(tmp_path / "frame.bin"), str(tmp_path / "cut.hex"),
                  str(tmp_path / "mix.jsonl"))
    assert result.returncode == 1
    out = result.stdout.splitlines()
    expected = [("PASS", None), ("FAIL", "bad_media data"), ("PASS", None),
                ("FAIL", "schema values"), ("FAIL", "wrong_topic"),
                ("FAIL", "key_mismatch stream_id"),
                ("FAIL", "bad_magic"), ("FAIL", "tombstone"), ("FAIL", "future_t_us t_us"),
                ("FAIL", "schema window_seq")]
    assert len(out) == len(expected) + 1, result.stdout
    for line, (verdict, code) in zip(out, expected, strict=False):
        assert line.startswith(verdict), line
        if code is not None:
            assert f": {code}" in line, line
    assert out[-1] == ("10 records: 2 passed, 8 failed (bad_magic 1, bad_media 1, future_t_us 1, "
                       "key_mismatch 1, schema 2, tombstone 1, wrong_topic 1)")


def test_usage_errors_exit_2_with_one_line() -> None:
    result = _cli("validate")
    assert result.returncode == 2
    assert result.stderr.strip() == "lockstep: error: give FILEs or --topic TOPIC (not both)"


def test_validate_reads_a_topic_and_names_each_records_offset(tansu: str) -> None:
    result = _cli("topics", "create", "--bootstrap", tansu)
    assert result.returncode == 0, result.stderr
    records = [(b"cam-9", encode(_frame())), (b"cam-9", encode(_frame(seq=2, data=b"\x00" * 9))),
               (b"cam-7", encode(_frame(seq=3))), (b"cam-9", b"LS\x01\x10\x80")]

    async def produce() -> list[str]:
        producer = AIOKafkaProducer(bootstrap_servers=tansu)
        await producer.start()
        try:
            sent = [await (await producer.send("media.video", value, key=key))
                    for key, value in records]
        finally:
            await producer.stop()
        return [f"{m.topic}/{m.partition}@{m.offset}" for m in sent]

    sources = asyncio.run(produce())
    # The session's broker holds other tests' media: the last 4 records of each partition
    # hold these 4 wherever their keys land.
    result = _cli("validate", "--topic", "media.video", "--last", "4", "--bootstrap", tansu,
                  "--json")
    assert result.returncode == 1, result.stderr  # some records fail
    verdicts = {v["source"]: v for v in _report(result.stdout)["records"]}
    assert [(verdicts[s]["ok"], verdicts[s]["code"]) for s in sources] == [
        (True, None), (False, "bad_media"), (False, "key_mismatch"), (False, "wrong_kind")]
