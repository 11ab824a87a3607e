"""The naive baseline aligner: a fixed frame-rate grid over raw timestamps.

What a first implementation would do: lay a 30 fps grid from the first frame's ``t_us``,
put every token in the grid slot nearest its raw ``t_us`` (an audio chunk: its midpoint),
take the slot's frame as the anchor and, per modality, the token nearest the slot time (an
audio chunk: nearest by its interval, so a chunk covering the slot time wins).
It sees only what Lockstep sees
(the raw tokens, in arrival order); it knows nothing of clock offsets, jitter or drops.

A slot goes out once the stream's newest raw ``t_us`` is ``hold`` past it; a token for a
slot already out is late. The baseline follows event time only, so :meth:`poll` emits
nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lockstep.bench.faults import CaptureKey
from lockstep.bench.score import Pairing
from lockstep.topics.schemas import AudioToken, Modality, Token

#: Modalities that arrive at a steady cadence and so are expected in every slot once seen.
DENSE = frozenset({Modality.VIDEO, Modality.AUDIO, Modality.SENSOR})


@dataclass(frozen=True)
class GridWindow:
    """One emitted grid slot."""

    stream_id: str
    slot: int
    slot_t_us: int
    anchor_seq: int | None
    #: Per modality present, the seq of the token nearest the slot time.
    matched: Mapping[Modality, int]
    members: Mapping[Modality, tuple[int, ...]]
    missing: tuple[Modality, ...]

    @property
    def partial(self) -> bool:
        """True when an expected modality has no token in the slot."""
        return bool(self.missing)

    def pairing(self) -> Pairing:
        """The slot as a pairing for :func:`lockstep.bench.score.score`."""
        return Pairing(stream_id=self.stream_id, anchor_seq=self.anchor_seq,
                       matched={m: s for m, s in self.matched.items() if m is not Modality.VIDEO},
                       partial=self.partial)


@dataclass
class GridOutput:
    """What one call of the baseline produced."""

    windows: list[GridWindow] = field(default_factory=list)
    late: list[CaptureKey] = field(default_factory=list)

    def extend(self, other: GridOutput) -> None:
        """Append another output's records to this one."""
        self.windows += other.windows
        self.late += other.late


@dataclass
class _Stream:
    origin_us: int | None = None
    pending: list[Token] = field(default_factory=list)  # tokens before the first frame
    slots: dict[int, list[Token]] = field(default_factory=dict)
    emitted_below: int | None = None
    high_us: int | None = None
    seen: set[Modality] = field(default_factory=set)


class GridAligner:
    """A fixed-grid aligner over raw timestamps, for comparison with Lockstep's.

    Args:
        fps: The grid's rate (slots per second).
        hold_ms: How far the newest raw ``t_us`` must be past a slot before it goes out.
        required: Modalities a slot is partial without, as in Lockstep's settings.
    """

    def __init__(self, fps: float = 30.0, hold_ms: float = 100.0,
                 required: Iterable[Modality] = (Modality.VIDEO, Modality.AUDIO)) -> None:
        self.period_us = 1e6 / fps
        self.hold_us = int(hold_ms * 1000)
        self.required = frozenset(required)
        self._streams: dict[str, _Stream] = {}

    def add(self, token: Token, now_us: int) -> GridOutput:
        """Take one token; return the slots it lets out and whether it came too late."""
        del now_us  # the grid runs on event time only
        st = self._streams.setdefault(token.stream_id, _Stream())
        st.seen.add(token.modality)
        st.high_us = token.t_us if st.high_us is None else max(st.high_us, token.t_us)
        out = GridOutput()
        if st.origin_us is None:
            if token.modality is not Modality.VIDEO:
                st.pending.append(token)
                return out
            st.origin_us = token.t_us
            for early in st.pending:
                self._place(st, early, out)
            st.pending.clear()
        self._place(st, token, out)
        out.windows += self._emit(token.stream_id, st, st.high_us - self.hold_us)
        return out

    def poll(self, now_us: int) -> GridOutput:
        """Nothing: the grid waits for event time, not for the wall clock."""
        del now_us
        return GridOutput()

    def flush(self, now_us: int) -> GridOutput:
        """Emit every slot now; tokens of streams that never sent a frame are late."""
        del now_us
        out = GridOutput()
        for stream_id, st in self._streams.items():
            out.late += [(t.stream_id, t.modality, t.seq) for t in st.pending]
            st.pending.clear()
            if st.slots:
                out.windows += self._emit(stream_id, st, None)
        return out

    def _slot_time(self, st: _Stream, slot: int) -> int:
        return (st.origin_us or 0) + round(slot * self.period_us)

    def _place(self, st: _Stream, token: Token, out: GridOutput) -> None:
        slot = math.floor((_position(token) - (st.origin_us or 0)) / self.period_us + 0.5)
        if st.emitted_below is not None and slot < st.emitted_below:
            out.late.append((token.stream_id, token.modality, token.seq))
        else:
            st.slots.setdefault(slot, []).append(token)

    def _emit(self, stream_id: str, st: _Stream, cutoff_us: int | None) -> list[GridWindow]:
        windows = []
        while st.slots:
            slot = min(st.slots)
            slot_us = self._slot_time(st, slot)
            if cutoff_us is not None and slot_us > cutoff_us:
                break
            windows.append(self._build(stream_id, st, slot, slot_us, st.slots.pop(slot)))
            st.emitted_below = slot + 1
        return windows

    def _build(self, stream_id: str, st: _Stream, slot: int, slot_us: int,
               tokens: list[Token]) -> GridWindow:
        nearest: dict[Modality, Token] = {}
        members: dict[Modality, list[int]] = {}
        for t in tokens:
            members.setdefault(t.modality, []).append(t.seq)
            best = nearest.get(t.modality)
            if best is None or _distance(t, slot_us) < _distance(best, slot_us):
                nearest[t.modality] = t
        expected = self.required | (st.seen & DENSE)
        anchor = nearest.get(Modality.VIDEO)
        return GridWindow(
            stream_id=stream_id, slot=slot, slot_t_us=slot_us,
            anchor_seq=anchor.seq if anchor is not None else None,
            matched={m: t.seq for m, t in sorted(nearest.items())},
            members={m: tuple(s) for m, s in sorted(members.items())},
            missing=tuple(sorted(expected - set(nearest))),
        )


def _position(token: Token) -> int:
    """Where a token sits on the grid: its ``t_us``, or an audio chunk's midpoint."""
    if isinstance(token, AudioToken):
        return token.t_us + token.duration_us // 2
    return token.t_us


def _distance(token: Token, at_us: int) -> int:
    """How far a token is from a time: to its ``t_us``, or to an audio chunk's interval."""
    if isinstance(token, AudioToken):
        if at_us < token.t_us:
            return token.t_us - at_us
        return max(0, at_us - (token.t_us + token.duration_us - 1))
    return abs(token.t_us - at_us)
