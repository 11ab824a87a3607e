"""JSONL sidecars: parsing, time mapping and clear errors for bad lines."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from lockstep.errors import MediaError
from lockstep.media.sidecar import read_sidecar, sidecar_tokens
from lockstep.media.timing import CaptureClock
from lockstep.topics.schemas import OcrToken, SensorToken

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000_000


def _write(tmp_path: Path, *lines: object, name: str = "side.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_ocr_and_sensor_lines_become_tokens_in_capture_order(tmp_path: Path) -> None:
    ocr = read_sidecar(_write(tmp_path, {"t_s": 0.5, "text": "STOP", "bbox": [0.1, 0.2, 0.3, 0.1],
                                         "confidence": 0.9},
                              "",
                              {"t_us": T0 + 100_000, "text": "EXIT", "bbox": [0, 0, 1, 1],
                               "confidence": 1}, name="o.jsonl"), "ocr")
    sensor = read_sidecar(_write(tmp_path, {"t_s": 0.25, "name": "imu", "values": [1, 2.5]},
                                 {"t_s": 0.0, "name": "imu", "values": [0], "unit": "g",
                                  "confidence": 0.5}, name="s.jsonl"), "sensor")
    tokens = sidecar_tokens([ocr, sensor], "cam-1", CaptureClock(T0))
    assert [(type(t).__name__, t.seq, t.t_us - T0) for t in tokens] == [
        ("SensorToken", 0, 0), ("OcrToken", 0, 100_000), ("SensorToken", 1, 250_000),
        ("OcrToken", 1, 500_000)]
    first_ocr = tokens[1]
    assert isinstance(first_ocr, OcrToken) and first_ocr.text == "EXIT"
    assert first_ocr.stream_id == "cam-1"
    reading = tokens[0]
    assert isinstance(reading, SensorToken) and reading.unit == "g" and reading.values == [0.0]


def test_media_seconds_follow_the_clock_origin(tmp_path: Path) -> None:
    side = read_sidecar(_write(tmp_path, {"t_s": 2.0, "name": "x", "values": [1]}), "sensor")
    (token,) = sidecar_tokens([side], "s", CaptureClock(T0, origin_s=Fraction(1)))
    assert token.t_us == T0 + 1_000_000


@pytest.mark.parametrize(("line", "message"), [
    ({"t_s": 0.1, "text": "A", "bbox": [0, 0, 1, 1]}, "line 1: confidence: missing field"),
    ({"text": "A", "bbox": [0, 0, 1, 1], "confidence": 1}, "exactly one of t_s"),
    ({"t_s": 0, "t_us": T0, "text": "A", "bbox": [0, 0, 1, 1], "confidence": 1},
     "exactly one of t_s"),
    ({"t_s": 0.1, "text": "A", "bbox": [0, 0, 1], "confidence": 1}, "bbox"),
    ({"t_s": 0.1, "text": "A", "bbox": [0, 0, 1, 1], "confidence": 1.5}, "confidence"),
    ({"t_s": 0.1, "text": "A", "bbox": [0, 0, 1, 1], "confidence": 1, "lang": "en"}, "lang"),
    ({"t_s": "0.1", "text": "A", "bbox": [0, 0, 1, 1], "confidence": 1}, "t_s"),
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_ocr_lines_are_rejected_with_file_line_and_field(
        tmp_path: Path, line: object, message: str) -> None:
    path = _write(tmp_path, line)
    with pytest.raises(MediaError, match=f"ocr sidecar {path}") as err:
        read_sidecar(path, "ocr")
    assert message in str(err.value)


def test_bad_sensor_values_name_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, {"t_s": 0, "name": "imu", "values": [1]},
                  {"t_s": 0.1, "name": "imu", "values": []})
    with pytest.raises(MediaError, match="line 2: values"):
        read_sidecar(path, "sensor")


def test_nan_in_a_sensor_line_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"t_s": 0, "name": "imu", "values": [NaN]}')
    with pytest.raises(MediaError, match=r"line 1: values\.0"):
        read_sidecar(path, "sensor")


def test_a_missing_sidecar_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="cannot read"):
        read_sidecar(tmp_path / "absent.jsonl", "sensor")


def test_a_t_s_mapping_outside_the_wire_range_names_the_line(tmp_path: Path) -> None:
    side = read_sidecar(_write(tmp_path, {"t_s": 4e9, "name": "x", "values": [1]}), "sensor")
    with pytest.raises(MediaError, match="line 1: t_us"):
        sidecar_tokens([side], "s", CaptureClock(T0))
