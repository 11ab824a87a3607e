"""Event-time alignment of one partition's media tokens into windows (the ``align`` stage).

Pure: no Kafka, no clock. Every call takes ``now_us`` (wall clock, µs) and returns what
to produce. Each token ends in exactly one outcome — a window's ``members``, a late record,
a duplicate, or a rejection (dead letter) — which is what makes the ledger countable.

Windows are tumbling in event time: window ``k`` of a stream covers
``[k*hop, (k+1)*hop)`` and its ``window_seq`` is ``k``, so a replay after a restart rebuilds
the same windows with the same idempotency keys. Within a window the video frame nearest
the centre is the anchor; every other modality is matched by nearest timestamp within
``tolerance``. A window closes when each expected modality has passed its end (its
watermark, or its cadence says the next token belongs to a later window), or when its
wait deadline expires — it then goes out partial, naming what is missing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from streams.settings import AlignSettings
from topics.schemas import (
    AudioToken,
    LateToken,
    Modality,
    ModalityState,
    OcrToken,
    SensorToken,
    Timeline,
    Token,
    VideoToken,
    Window,
)

#: Modalities that arrive at a steady cadence; sparse OCR is never waited for.
DENSE = frozenset({Modality.VIDEO, Modality.AUDIO, Modality.SENSOR})
_DEDUP_MEMORY = 4096
_LAG_MEMORY = 256
#: Evicted streams whose emitted-window watermark is still remembered (one int each).
_EVICTED_MEMORY = 100_000
_IDLE_EVICT_US = 60_000_000


@dataclass(frozen=True)
class TokenKey:
    """The ledger identity of a token."""

    stream_id: str
    modality: Modality
    seq: int


@dataclass(frozen=True)
class Rejected:
    """A token that decodes but cannot be aligned (goes to the dead-letter topic)."""

    key: TokenKey
    reason: str


@dataclass
class AlignOutput:
    """What one call of the aligner produced."""

    windows: list[Window] = field(default_factory=list)
    late: list[LateToken] = field(default_factory=list)
    duplicates: list[TokenKey] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)

    def extend(self, other: AlignOutput) -> None:
        """Append another output's records to this one."""
        self.windows += other.windows
        self.late += other.late
        self.duplicates += other.duplicates
        self.rejected += other.rejected


@dataclass
class _Open:
    tokens: list[tuple[Token, int]] = field(default_factory=list)  # (token, arrival µs)


class _SlidingMin:
    """Minimum of the last ``size`` values, O(1) amortised (monotonic deque)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._count = 0
        self._q: deque[tuple[int, int]] = deque()

    def push(self, value: int) -> int:
        while self._q and self._q[-1][1] >= value:
            self._q.pop()
        self._q.append((self._count, value))
        if self._q[0][0] <= self._count - self._size:
            self._q.popleft()
        self._count += 1
        return self._q[0][1]


@dataclass
class _Stream:
    open: dict[int, _Open] = field(default_factory=dict)
    closed_below: int = -1  # windows with index < this are emitted
    watermark: dict[Modality, int] = field(default_factory=dict)
    cadence: dict[Modality, float] = field(default_factory=dict)
    last_t: dict[Modality, int] = field(default_factory=dict)
    recent: dict[Modality, tuple[set[int], deque[int]]] = field(default_factory=dict)
    lag: _SlidingMin = field(default_factory=lambda: _SlidingMin(_LAG_MEMORY))
    lag_us: int = 0
    last_arrival_us: int = 0


class Aligner:
    """Aligns the tokens of many streams; one instance per align task."""

    def __init__(self, settings: AlignSettings, slo_class: str) -> None:
        self.hop_us = int(settings.hop_ms * 1000)
        self.tolerance_us = int(settings.tolerance_ms * 1000)
        self.max_wait_us = int(settings.max_wait_ms * 1000)
        self.grace_us = int(settings.grace_ms * 1000)
        self.max_future_us = int(settings.max_future_ms * 1000)
        self.max_open = settings.max_open_windows
        self.required = frozenset(Modality(m) for m in settings.required)
        self.slo_class = slo_class
        self._streams: dict[str, _Stream] = {}
        # closed_below of streams evicted for idleness, so a straggler is still late, not
        # a second window under an emitted window's key. Oldest first; bounded.
        self._evicted: dict[str, int] = {}

    @property
    def open_windows(self) -> int:
        """Windows buffered and not yet emitted, over all streams."""
        return sum(len(s.open) for s in self._streams.values())

    def add(self, token: Token, now_us: int, raw: bytes | None = None) -> AlignOutput:
        """Take one token; return what it settles.

        Args:
            token: A validated media token.
            now_us: Wall-clock time of arrival.
            raw: The record bytes, kept in a late record so nothing is lost.
        """
        out = AlignOutput()
        key = TokenKey(token.stream_id, token.modality, token.seq)
        if token.t_us > now_us + self.max_future_us:
            out.rejected.append(Rejected(key, f"t_us {token.t_us} is more than "
                                              f"{self.max_future_us} µs in the future"))
            return out
        st = self._streams.get(token.stream_id)
        if st is None:
            st = self._streams[token.stream_id] = _Stream(
                closed_below=self._evicted.pop(token.stream_id, -1))
        if self._seen_before(st, key):
            out.duplicates.append(key)
            return out
        index = token.t_us // self.hop_us
        if index < st.closed_below:
            out.late.append(LateToken(
                stream_id=token.stream_id, modality=token.modality, seq=token.seq,
                t_us=token.t_us, watermark_us=st.closed_below * self.hop_us,
                reason="window already emitted", at_us=now_us, value=raw,
            ))
            return out
        st.open.setdefault(index, _Open()).tokens.append((token, now_us))
        st.lag_us = st.lag.push(now_us - token.t_us)
        st.last_arrival_us = now_us
        self._advance(st, token)
        out.extend(self._close_ready(token.stream_id, st, now_us))
        return out

    def poll(self, now_us: int) -> AlignOutput:
        """Emit the windows whose wait deadline has passed; evict idle, empty streams."""
        out = AlignOutput()
        for stream_id, st in list(self._streams.items()):
            out.extend(self._close_ready(stream_id, st, now_us))
            if not st.open and now_us - st.last_arrival_us > _IDLE_EVICT_US:
                del self._streams[stream_id]
                self._evicted[stream_id] = st.closed_below
                if len(self._evicted) > _EVICTED_MEMORY:
                    del self._evicted[next(iter(self._evicted))]
        return out

    def flush(self, now_us: int) -> AlignOutput:
        """Emit every open window now (shutdown, end of input)."""
        out = AlignOutput()
        for stream_id, st in self._streams.items():
            out.windows += self._emit_until(stream_id, st, max(st.open, default=-1) + 1, now_us)
        return out

    def forget(self, stream_ids: Iterable[str]) -> None:
        """Drop the state of streams this task no longer owns (partitions revoked).

        Their tokens are not committed, so the new owner replays and rebuilds them.
        """
        for stream_id in stream_ids:
            self._streams.pop(stream_id, None)
            self._evicted.pop(stream_id, None)

    def overdue(self, now_us: int) -> list[tuple[str, int]]:
        """Open windows (stream, window_seq) whose deadline is at or before ``now_us``.

        Empty right after :meth:`poll` with the same time: no window waits past it.
        """
        return [(stream_id, index) for stream_id, st in self._streams.items()
                for index in st.open if now_us >= self._deadline(st, index)]

    def _deadline(self, st: _Stream, index: int) -> int:
        return (index + 1) * self.hop_us + st.lag_us + self.max_wait_us

    # -- internals ---------------------------------------------------------------------

    @staticmethod
    def _seen_before(st: _Stream, key: TokenKey) -> bool:
        seen, order = st.recent.setdefault(key.modality, (set(), deque()))
        if key.seq in seen:
            return True
        seen.add(key.seq)
        order.append(key.seq)
        if len(order) > _DEDUP_MEMORY:
            seen.discard(order.popleft())
        return False

    @staticmethod
    def _advance(st: _Stream, token: Token) -> None:
        m = token.modality
        end = token.t_us + token.duration_us if isinstance(token, AudioToken) else token.t_us
        st.watermark[m] = max(st.watermark.get(m, end), end)
        last = st.last_t.get(m)
        if last is not None and token.t_us > last:
            gap = token.t_us - last
            prev = st.cadence.get(m)
            st.cadence[m] = gap if prev is None else 0.8 * prev + 0.2 * gap
        st.last_t[m] = max(token.t_us, last or token.t_us)

    def _expected(self, st: _Stream) -> frozenset[Modality]:
        seen_dense = frozenset(st.watermark) & DENSE
        return self.required | seen_dense

    def _passed(self, st: _Stream, m: Modality, end_us: int) -> bool:
        mark = st.watermark.get(m)
        if mark is None:
            return False
        if mark >= end_us + self.grace_us:
            return True
        cadence = st.cadence.get(m)
        # The next token is due at mark + cadence; if that lands in a later window even
        # with the tolerance of jitter, this window will get no more of this modality.
        return cadence is not None and mark + cadence - self.tolerance_us >= end_us

    def _close_ready(self, stream_id: str, st: _Stream, now_us: int) -> AlignOutput:
        out = AlignOutput()
        if not st.open:
            return out
        expected = self._expected(st)
        ready = -1
        for index in sorted(st.open):
            end = (index + 1) * self.hop_us
            by_marks = all(self._passed(st, m, end) for m in expected)
            by_deadline = now_us >= self._deadline(st, index)
            if by_marks or by_deadline:
                ready = index
            else:
                break
        overflow = len(st.open) - self.max_open
        if overflow > 0:
            ready = max(ready, sorted(st.open)[overflow - 1])
        if ready >= 0:
            out.windows = self._emit_until(stream_id, st, ready + 1, now_us)
        return out

    def _emit_until(self, stream_id: str, st: _Stream, stop: int, now_us: int) -> list[Window]:
        windows = []
        for index in sorted(i for i in st.open if i < stop):
            windows.append(self._build(stream_id, st, index, st.open.pop(index), now_us))
        st.closed_below = max(st.closed_below, stop)
        return windows

    def _build(self, stream_id: str, st: _Stream, index: int, win: _Open, now_us: int) -> Window:
        start, end = index * self.hop_us, (index + 1) * self.hop_us
        by_mod: dict[Modality, list[Token]] = {}
        for token, _ in win.tokens:
            by_mod.setdefault(token.modality, []).append(token)
        for tokens in by_mod.values():
            tokens.sort(key=lambda t: (t.t_us, t.seq))
        frames = [t for t in by_mod.get(Modality.VIDEO, []) if isinstance(t, VideoToken)]
        centre = (start + end) // 2
        video = min(frames, key=lambda f: abs(f.t_us - centre)) if frames else None
        anchor = video.t_us if video is not None else centre
        audio = [t for t in by_mod.get(Modality.AUDIO, []) if isinstance(t, AudioToken)]
        ocr = [t for t in by_mod.get(Modality.OCR, []) if isinstance(t, OcrToken)]
        sensor = self._nearest_per_sensor(by_mod.get(Modality.SENSOR, []), anchor)
        states: dict[Modality, ModalityState] = {}
        if video is not None:
            states[Modality.VIDEO] = ModalityState(
                present=True, confidence=video.quality, skew_us=0, tokens=len(frames))
        if audio:
            skew = min(_distance(anchor, a.t_us, a.t_us + a.duration_us) for a in audio)
            confs = [a.asr_confidence for a in audio if a.asr_confidence is not None]
            states[Modality.AUDIO] = ModalityState(
                present=skew <= self.tolerance_us, confidence=max(confs) if confs else None,
                skew_us=skew, tokens=len(audio))
        if ocr:
            states[Modality.OCR] = ModalityState(
                present=True, confidence=sum(o.confidence for o in ocr) / len(ocr),
                skew_us=min(abs(o.t_us - anchor) for o in ocr), tokens=len(ocr))
        if sensor:
            skew = min(abs(s.t_us - anchor) for s in sensor)
            confs = [s.confidence for s in sensor if s.confidence is not None]
            states[Modality.SENSOR] = ModalityState(
                present=skew <= self.tolerance_us, confidence=min(confs) if confs else None,
                skew_us=skew, tokens=len(by_mod[Modality.SENSOR]))
        expected = self._expected(st) | frozenset(states)
        missing = sorted(m for m in expected if not (m in states and states[m].present))
        newest = max(t.t_us for t, _ in win.tokens)
        return Window(
            stream_id=stream_id, window_seq=index, t_start_us=start, t_end_us=end,
            anchor_t_us=anchor, slo_class=self.slo_class, modalities=states,
            missing=missing,
            members={m: [t.seq for t in ts] for m, ts in sorted(by_mod.items())},
            video=video, audio=audio, ocr=ocr, sensor=sensor,
            timeline=Timeline(capture_us=newest, ingest_us=max(a for _, a in win.tokens),
                              aligned_us=now_us),
        )

    @staticmethod
    def _nearest_per_sensor(tokens: list[Token], anchor: int) -> list[SensorToken]:
        best: dict[str, SensorToken] = {}
        for t in tokens:
            if isinstance(t, SensorToken):
                cur = best.get(t.name)
                if cur is None or abs(t.t_us - anchor) < abs(cur.t_us - anchor):
                    best[t.name] = t
        return [best[name] for name in sorted(best)]


def _distance(point: int, start: int, end: int) -> int:
    """Distance from a point to the interval [start, end] (0 inside)."""
    if point < start:
        return start - point
    return max(0, point - end)
