"""Media time → capture time, frame sampling, audio chunking and pacing (pure).

Media time is what the container says (PTS x time base, in seconds); capture time is
``t_us`` on the wire. A :class:`CaptureClock` maps one to the other from an anchor: the
wall clock when publishing starts, the file's own ``creation_time``, or a given instant.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from lockstep.errors import MediaError
from lockstep.topics.schemas import MAX_T_US, MIN_T_US

#: Anchors that are not an explicit instant.
ANCHORS = ("wall", "file")


@dataclass(frozen=True)
class CaptureClock:
    """Maps media time (seconds) to capture time: ``anchor_us`` is media time ``origin_s``."""

    anchor_us: int
    origin_s: Fraction = Fraction(0)

    def t_us(self, media_s: Fraction | float) -> int:
        """Capture time (µs since the epoch) of a media time."""
        return self.anchor_us + round((Fraction(media_s) - self.origin_s) * 1_000_000)

    def media_s(self, t_us: int) -> Fraction:
        """The media time of a capture time (inverse of :meth:`t_us`)."""
        return self.origin_s + Fraction(t_us - self.anchor_us, 1_000_000)


def parse_anchor(value: str, *, now_us: int, creation_time: str | None) -> int:
    """The capture time of the media's start.

    Args:
        value: ``wall`` (now), ``file`` (the container's ``creation_time`` tag), an ISO 8601
            instant (``2027-01-15T08:00:00Z``) or integer µs since the epoch.
        now_us: The wall clock now.
        creation_time: The container's ``creation_time`` tag, if it has one.

    Raises:
        MediaError: ``file`` without a usable tag, or a value that is none of the above.
    """
    if value == "wall":
        return now_us
    if value == "file":
        if not creation_time:
            raise MediaError("--anchor file: the media has no creation_time tag; "
                             "use --anchor wall or an ISO 8601 instant")
        anchor = _iso_us(creation_time, "the media's creation_time tag")
    elif value.isdigit():
        anchor = int(value)
    else:
        anchor = _iso_us(value, "--anchor")
    if not MIN_T_US <= anchor <= MAX_T_US:
        raise MediaError(f"anchor {value!r} is outside the years 2000-2100 the wire accepts")
    return anchor


def _iso_us(text: str, what: str) -> int:
    try:
        instant = datetime.fromisoformat(text.strip())
    except ValueError:
        raise MediaError(f"{what} {text!r} is not 'wall', 'file', µs or an ISO 8601 "
                         "instant") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    delta = instant - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass
class FrameSampler:
    """Keeps the first frame of each slot of a ``fps`` grid; ``seq`` is the slot index.

    Without a target rate every frame is kept and ``seq`` counts them. A skipped slot (the
    source dropped a frame) leaves a gap in ``seq``, as the wire contract asks.
    """

    fps: float | None
    _last: int = -1

    def take(self, rel_s: float) -> int | None:
        """The ``seq`` of a frame ``rel_s`` seconds after the media's start, or None to skip."""
        if self.fps is None:
            self._last += 1
            return self._last
        slot = math.floor(max(0.0, rel_s) * self.fps + 1e-6)
        if slot <= self._last:
            return None
        self._last = slot
        return slot


@dataclass
class AudioChunker:
    """Cuts a mono int16 sample stream into chunks of ``size`` samples.

    Chunks are numbered from the first sample: chunk ``i`` starts at sample ``i * size``.
    """

    size: int
    _pending: list[npt.NDArray[np.int16]] = field(default_factory=list)
    _count: int = 0
    _emitted: int = 0

    def push(self, samples: npt.NDArray[np.int16]) -> list[tuple[int, bytes]]:
        """Add samples; return the whole chunks now complete as (first sample, PCM bytes)."""
        self._pending.append(samples)
        self._count += len(samples)
        if self._count < self.size:
            return []
        buffered = np.concatenate(self._pending)
        whole = len(buffered) // self.size * self.size
        chunks = [(self._emitted + i, buffered[i:i + self.size].tobytes())
                  for i in range(0, whole, self.size)]
        rest = buffered[whole:]
        self._pending = [rest] if len(rest) else []
        self._count = len(rest)
        self._emitted += whole
        return chunks

    def flush(self) -> list[tuple[int, bytes]]:
        """The last, shorter chunk if samples are left."""
        if not self._count:
            return []
        rest = np.concatenate(self._pending)
        self._pending, self._count = [], 0
        start, self._emitted = self._emitted, self._emitted + len(rest)
        return [(start, rest.tobytes())]


@dataclass
class Pacer:
    """Sleeps so that capture times are published when they come (real time)."""

    realtime: bool
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _start: tuple[float, int] | None = None

    def wait(self, t_us: int) -> float:
        """Wait until ``t_us`` is due; return the seconds slept (0 when not real time)."""
        if not self.realtime:
            return 0.0
        if self._start is None:
            self._start = (self.clock(), t_us)
            return 0.0
        due = self._start[0] + (t_us - self._start[1]) / 1e6
        delay = due - self.clock()
        if delay > 0:
            self.sleep(delay)
            return delay
        return 0.0
