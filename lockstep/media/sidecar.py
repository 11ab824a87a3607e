"""OCR and sensor tokens from JSONL sidecar files (format: docs/media.md).

One JSON object per line; blank lines are skipped. Each line gives its time either as
``t_s`` (seconds on the media's own timeline, mapped to capture time like the PTS) or as
``t_us`` (capture time, µs since the epoch, used as is). Every line of a file is validated
before anything is published: a bad line is a :class:`~lockstep.errors.MediaError` naming
the file, the line and the field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lockstep.errors import MediaError
from lockstep.media.timing import CaptureClock
from lockstep.topics.schemas import (
    Confidence,
    EventTime,
    Number,
    OcrToken,
    SensorToken,
    Text,
)

SidecarKind = Literal["ocr", "sensor"]


class _Line(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    t_s: Annotated[Number, Field(ge=0.0)] | None = None
    t_us: EventTime | None = None

    @model_validator(mode="after")
    def _one_time(self) -> _Line:
        if (self.t_s is None) == (self.t_us is None):
            raise ValueError("give exactly one of t_s (media seconds) and t_us (capture µs)")
        return self


class OcrLine(_Line):
    """One line of an OCR sidecar."""

    text: Text
    bbox: tuple[Number, Number, Number, Number]
    confidence: Confidence


class SensorLine(_Line):
    """One line of a sensor sidecar."""

    name: Annotated[str, Field(min_length=1, max_length=128, strict=True)]
    values: Annotated[list[Number], Field(min_length=1, max_length=1024)]
    unit: Annotated[str, Field(max_length=32, strict=True)] = ""
    confidence: Confidence | None = None


_MODELS: dict[SidecarKind, type[OcrLine] | type[SensorLine]] = {
    "ocr": OcrLine, "sensor": SensorLine}


@dataclass(frozen=True)
class Sidecar:
    """The validated lines of one sidecar file, with their line numbers."""

    kind: SidecarKind
    path: Path
    lines: tuple[tuple[int, OcrLine | SensorLine], ...]


def read_sidecar(path: Path, kind: SidecarKind) -> Sidecar:
    """Read and validate every line of a sidecar.

    Raises:
        MediaError: The file cannot be read, or a line is not JSON or breaks the format.
    """
    model = _MODELS[kind]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MediaError(f"{kind} sidecar {path}: cannot read: {exc}") from None
    lines: list[tuple[int, OcrLine | SensorLine]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{kind} sidecar {path} line {number}"
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise MediaError(f"{where}: not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise MediaError(f"{where}: expected a JSON object, got {type(data).__name__}")
        try:
            lines.append((number, model.model_validate(data)))
        except ValidationError as exc:
            raise MediaError(f"{where}: {_summarise(exc)}") from None
    return Sidecar(kind, path, tuple(lines))


def sidecar_tokens(sidecars: Sequence[Sidecar], stream_id: str,
                   clock: CaptureClock) -> list[OcrToken | SensorToken]:
    """The tokens of a stream's sidecars in capture order, numbered per modality.

    Raises:
        MediaError: A line maps to a capture time the wire rejects.
    """
    timed: list[tuple[int, int, Sidecar, OcrLine | SensorLine]] = []
    for sidecar in sidecars:
        for number, line in sidecar.lines:
            t_us = line.t_us if line.t_us is not None else clock.t_us(line.t_s or 0.0)
            timed.append((t_us, number, sidecar, line))
    timed.sort(key=lambda item: item[0])
    seqs = {"ocr": 0, "sensor": 0}
    tokens: list[OcrToken | SensorToken] = []
    for t_us, number, sidecar, line in timed:
        seq = seqs[sidecar.kind]
        seqs[sidecar.kind] += 1
        try:
            if isinstance(line, OcrLine):
                tokens.append(OcrToken(stream_id=stream_id, seq=seq, t_us=t_us, text=line.text,
                                       bbox=line.bbox, confidence=line.confidence))
            else:
                tokens.append(SensorToken(stream_id=stream_id, seq=seq, t_us=t_us,
                                          name=line.name, values=line.values, unit=line.unit,
                                          confidence=line.confidence))
        except ValidationError as exc:
            raise MediaError(f"{sidecar.kind} sidecar {sidecar.path} line {number}: "
                             f"{_summarise(exc)}") from None
    return tokens


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        message = "missing field" if err["type"] == "missing" else err["msg"]
        parts.append(f"{loc}: {message}" if loc else message)
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
