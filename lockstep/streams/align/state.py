"""Per-stream state of the aligner: buffers, watermarks, clocks, dedup memory.

Buffers hold tokens by the corrected time that decides which window owns them (an audio
chunk is owned by the window holding its last sample), sorted, so a window takes a prefix.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from lockstep.errors import ReasonCode
from lockstep.streams.align.clock import CaptureClock, ClockLag, LagFloor
from lockstep.streams.align.matching import Item
from lockstep.streams.align.seqset import EMPTY as NO_SEQS
from lockstep.streams.align.seqset import SeqSet
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import LateToken, Modality, Window

#: Modalities that arrive at a steady cadence; sparse OCR is never waited for.
DENSE = frozenset({Modality.VIDEO, Modality.AUDIO, Modality.SENSOR})
#: A wake time that never comes (no visit queued).
NEVER = 1 << 62
#: Per modality, the duplicate check remembers the last 2,048 to 4,096 seqs (two generations).
_DEDUP_GENERATION = 2048

V = TypeVar("V")


class PerModality(dict[Modality, V]):
    """A per-modality map whose entries are made on first use.

    Most of a stream's state is per modality, and many streams send only some modalities
    (or, in a flood of new ids, a token or two): nothing is allocated for the others.
    ``get`` and iteration see only the entries made so far.
    """

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[Modality], V]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, m: Modality) -> V:
        value = self[m] = self._make(m)
        return value


def _items(_: Modality) -> list[Item]:
    return []


def _clock(_: Modality) -> CaptureClock:
    return CaptureClock()


def _lag(m: Modality) -> ClockLag:
    return ClockLag(size=8 if m is Modality.OCR else 16)


@dataclass(frozen=True)
class Rejected:
    """A token that decodes but cannot be aligned (goes to the dead-letter topic)."""

    key: TokenKey
    reason: str
    code: ReasonCode = ReasonCode.BAD_INPUT


class AlignOutput:
    """What one call of the aligner produced."""

    __slots__ = ("duplicates", "late", "rejected", "windows")

    def __init__(self) -> None:
        self.windows: list[Window] = []
        self.late: list[LateToken] = []
        self.duplicates: list[TokenKey] = []
        self.rejected: list[Rejected] = []

    def extend(self, other: AlignOutput) -> None:
        """Append another output's records to this one."""
        self.windows += other.windows
        self.late += other.late
        self.duplicates += other.duplicates
        self.rejected += other.rejected


@dataclass(slots=True)
class Plan:
    """The next window of a stream: its bounds, anchor and anchor frame."""

    start: int
    end: int
    anchor: int
    frame: Item | None
    seq: int
    certain: bool  # the end is fixed by a known next anchor, not predicted
    stride: int  # the anchor stride it was planned with
    next_t: int | None = None  # the next anchor's time, when it fixed the end


def own_time(item: Item) -> int:
    """The corrected time that decides which window owns a token."""
    return item.own


@dataclass(slots=True)
class Stream:
    """Everything the aligner keeps for one stream."""

    closed_end: int | None = None
    buf: dict[Modality, list[Item]] = field(default_factory=lambda: PerModality(_items))
    buffered: int = 0
    clocks: dict[Modality, CaptureClock] = field(default_factory=lambda: PerModality(_clock))
    lags: dict[Modality, ClockLag] = field(default_factory=lambda: PerModality(_lag))
    offsets: dict[Modality, int] = field(default_factory=dict)
    offset_known: set[Modality] = field(default_factory=set)
    watermark: dict[Modality, int] = field(default_factory=dict)
    last_seen: dict[Modality, int] = field(default_factory=dict)
    last_arrival: int = 0
    #: The stream's last token was a replay (``Token.replay``): published as fast as it is
    #: read, topic by topic, so its windows close on watermarks, like a backlog's.
    replay: bool = False
    last_anchor_seq: int | None = None
    #: Per modality, the ``seq`` of its token marked ``final``: no more of it will come
    #: (until a later ``seq`` does), so no window waits for it.
    final: dict[Modality, int] = field(default_factory=dict)
    last_sensor: dict[str, Item] = field(default_factory=dict)
    last_ocr: list[Item] = field(default_factory=list)
    delay: LagFloor = field(default_factory=LagFloor)
    lag_us: int = 0
    #: Before this wall time a poll has nothing to do for the stream.
    wake_us: int = 0
    #: The earliest wake time the aligner has queued for the stream (``NEVER``: none).
    queued_us: int = NEVER
    #: The waiting window (start, end, modalities it waits for); None: re-plan on any token.
    pending: tuple[int, int, frozenset[Modality]] | None = None
    #: The waiting window's plan, while no token that could change it has arrived.
    plan: Plan | None = None
    #: The modalities to wait for and to expect in a window (see ``Readiness.expected``),
    #: valid until ``expect_until`` unless a token of a modality not in ``live`` arrives.
    expect: tuple[frozenset[Modality], frozenset[Modality]] = (frozenset(), frozenset())
    expect_until: int = -1
    live: frozenset[Modality] = frozenset()
    #: Modalities whose tokens have arrived out of ``seq`` order (one partition keeps them
    #: in order; a producer that spreads a stream does not): see ``Readiness.early``.
    reordered: frozenset[Modality] = frozenset()
    #: Per modality, the consecutive tokens (seq, t_us) off its clock just before now
    #: (see :class:`~lockstep.streams.align.clockguard.ClockGuard`).
    offclock: dict[Modality, list[tuple[int, int]]] = field(default_factory=dict)
    #: Per modality, the seqs seen lately: (this generation, the one before).
    _recent: dict[Modality, tuple[SeqSet, SeqSet]] = field(default_factory=dict)

    def seen_before(self, modality: Modality, seq: int) -> bool:
        """True for a (modality, seq) among the recent ones; remembers it otherwise.

        The recent ones are the last 2,048 to 4,096 seqs of the modality: two generations
        of sets, the older dropped when the newer fills (no queue of every seq to keep).
        The sets are bitmaps (:mod:`lockstep.streams.align.seqset`), not sets of int objects.
        """
        recent = self._recent.get(modality)
        if recent is None:
            recent = self._recent[modality] = (SeqSet(), NO_SEQS)
        seen, before = recent
        if seq in seen or seq in before:
            return True
        seen.add(seq)
        if seen.count >= _DEDUP_GENERATION:
            self._recent[modality] = (SeqSet(), seen)
        return False

    def insert(self, item: Item, m: Modality, now_us: int) -> None:
        """Buffer a token of modality ``m`` and advance the stream's marks."""
        items = self.buf[m]
        if not items or items[-1].own <= item.own:
            items.append(item)  # the usual case: tokens of a modality arrive in order
        else:
            bisect.insort(items, item, key=own_time)
        self.buffered += 1
        mark = self.watermark.get(m)
        if mark is None or item.end > mark:
            self.watermark[m] = item.end
        self.last_seen[m] = now_us
        if m not in self.live:
            self.expect_until = -1  # it was idle or new: the expected modalities change
        self.lag_us = self.delay.push(now_us, item.t)

    def starts_by(self, limit: int) -> bool:
        """Whether a buffered token's capture starts at or before ``limit``."""
        for m, items in self.buf.items():
            if items and (items[0].t <= limit or (
                    m is Modality.AUDIO and any(i.t <= limit for i in items[1:8]))):
                return True
        return False

    def earliest_start(self) -> int:
        """The earliest capture start buffered (the stream must hold a token)."""
        earliest = 1 << 62
        for m, items in self.buf.items():
            if not items:
                continue
            # Instants are owned by their start, so the first starts first; audio chunks are
            # owned by their end, so their starts sort only as far as their durations agree.
            t = min(i.t for i in items[:8]) if m is Modality.AUDIO else items[0].t
            if t < earliest:
                earliest = t
        return earliest

    def take_until(self, end: int) -> dict[Modality, list[Item]]:
        """Remove and return, per modality, every buffered token owned before ``end``."""
        taken: dict[Modality, list[Item]] = {}
        buf = self.buf
        for m, items in buf.items():
            if items and items[0].own < end:
                cut = bisect.bisect_left(items, end, key=own_time)
                taken[m] = items[:cut]
                buf[m] = items[cut:]
                self.buffered -= cut
        return taken

    def peek_before(self, m: Modality, end: int) -> list[Item]:
        """Buffered tokens of ``m`` (owned by later windows) that start before ``end``."""
        return [i for i in self.buf[m] if i.t < end]

    def peek_after(self, m: Modality, t: int) -> list[Item]:
        """The first buffered token of ``m`` after ``t``, per sensor name at most one."""
        out: dict[str, Item] = {}
        for item in self.buf[m]:
            name = getattr(item.token, "name", "")
            if item.t > t and name not in out:
                out[name] = item
        return list(out.values())

    def remember(self, sensors: list[Item], ocr: list[Item]) -> None:
        """Keep the last sensor reading per name and the last OCR capture past a window."""
        for item in sensors:
            name = getattr(item.token, "name", "")
            prev = self.last_sensor.get(name)
            if prev is None or item.t >= prev.t:
                self.last_sensor[name] = item
        if ocr:
            latest = max(i.t for i in ocr)
            if not self.last_ocr or latest >= self.last_ocr[0].t:
                self.last_ocr = [i for i in ocr if i.t == latest]
