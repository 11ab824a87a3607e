"""What ``lockstep publish`` checks before anything is sent: stream ids and capture times.

Pure. A stream id the wire contract refuses, or capture times align would dead-letter as
coming from the future (more than ``align.max_future_ms`` ahead of its clock), are user
errors: the command stops before publishing (exit 2). Media is *replayed* when it is
published faster than it was captured (``--fast``) or its capture times start far in the
past (``--anchor file`` or an instant older than the stream's SLO budget): its tokens carry
``replay`` and its windows are answered but kept out of the live SLO figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from lockstep.config.settings import Settings
from lockstep.errors import ConfigError
from lockstep.topics.schemas import StreamId

_STREAM_ID: TypeAdapter[str] = TypeAdapter(StreamId)


def check_stream_ids(stream_ids: Iterable[str]) -> None:
    """Refuse a stream id the wire contract does not take (docs/wire-format.md §4).

    Raises:
        ConfigError: Names the first bad id and what an id may hold.
    """
    for sid in stream_ids:
        try:
            _STREAM_ID.validate_python(sid)
        except ValidationError:
            raise ConfigError(
                f"stream id {sid!r} is not valid: use 1-128 ASCII letters, digits and "
                ". _ : @ / - (docs/wire-format.md §4)") from None


@dataclass(frozen=True)
class CaptureSpan:
    """The capture times (µs since the epoch) one stream will carry."""

    stream_id: str
    first_us: int
    #: The last one, or None when not known in advance (a live source).
    last_us: int | None


@dataclass(frozen=True)
class CapturePlan:
    """What the capture times say about a publishing run."""

    #: The streams whose tokens are sent as replayed media.
    replay: frozenset[str]
    #: Why they are (for the summary), or "" when none is.
    reason: str


def judge_capture(spans: Sequence[CaptureSpan], *, now_us: int, fast: bool, anchored: bool,
                  max_future_us: int, budget_us: Callable[[str], int]) -> CapturePlan:
    """Refuse capture times from the future; say which streams are replays.

    In real time each token is sent when its capture time comes, relative to the first,
    so the run stays as far ahead of the clock as its first capture; with ``fast``
    everything is sent at once, so its last capture counts.

    Args:
        spans: Every stream's capture times.
        now_us: The wall clock.
        fast: Tokens are sent as fast as the broker takes them.
        anchored: The capture times come from the media or an instant (``--anchor file``
            or a time), not from the wall clock.
        max_future_us: How far ahead of its clock align accepts a capture time.
        budget_us: A stream's end-to-end SLO budget: media older than it when publishing
            starts is a replay.

    Raises:
        ConfigError: A stream's capture times would run more than ``max_future_us`` ahead
            of the clock (nothing was sent).
    """
    for span in spans:
        ahead = (span.last_us if fast and span.last_us is not None else span.first_us) - now_us
        if ahead > max_future_us:
            fix = ("publish --realtime, or give an --anchor further in the past"
                   if fast and span.first_us - now_us <= max_future_us
                   else "give --anchor wall or an instant in the past")
            raise ConfigError(
                f"{span.stream_id}: capture times would run {_duration(ahead)} ahead of the "
                f"clock (media starts {_iso(span.first_us)}); align dead-letters tokens more "
                f"than {_duration(max_future_us)} in the future (align.max_future_ms): {fix}")
    if fast:
        return CapturePlan(frozenset(s.stream_id for s in spans),
                           "published faster than captured (--fast)")
    old = [s for s in spans if anchored and now_us - s.first_us > budget_us(s.stream_id)]
    if not old:
        return CapturePlan(frozenset(), "")
    age = max(now_us - s.first_us for s in old)
    return CapturePlan(frozenset(s.stream_id for s in old),
                       f"captured up to {_duration(age)} before publishing")


def capture_plan(settings: Settings, spans: Sequence[CaptureSpan], *, realtime: bool,
                 anchor: str) -> CapturePlan:
    """:func:`judge_capture` now, with the pipeline's limits from ``settings``."""
    slo = settings.slo
    return judge_capture(spans, now_us=time.time_ns() // 1000, fast=not realtime,
                         anchored=anchor != "wall",
                         max_future_us=round(settings.align.max_future_ms * 1000),
                         budget_us=lambda sid: round(slo.budget_ms(slo.class_of(sid)) * 1000))


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Lines for people about replayed streams and refused tokens in a publish summary."""
    lines = []
    if report.get("replay"):
        lines.append(f"replay: {', '.join(report['replay'])} {report['replay_reason']}: "
                     "windows answered, kept out of the live SLO figures "
                     "(lockstep_replay_windows_total)")
    if report.get("refused"):
        lines.append(f"REFUSED {report['refused']:,} tokens before sending: align would "
                     "dead-letter them (see the delivery errors)")
    return lines


def _duration(us: float) -> str:
    s = us / 1e6
    for unit, size in (("days", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if s >= size:
            return f"{s / size:,.1f} {unit}"
    return f"{s:,.1f} s".replace(".0 s", " s")


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")
