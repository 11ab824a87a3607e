"""The token ledger read from the pipeline's output topics (the demo, ``lockstep chaos``).

Every published token must end in exactly one of: a window's members, a late record, a
dead letter; every window must be answered (a response with any status); a key
(``stream_id``, ``window_seq``) must never carry two different windows or responses.
:class:`Ledger` takes raw output records as they are read; of windows, the most numerous,
it keeps just what those checks need (MessagePack fields, not validated models: the
bookkeeping must stay cheap next to the pipeline it watches). A record sent twice with
the same bytes (a produce retried after a lost acknowledgement) is a duplicate; the same
key with other bytes is a conflict.

What it keeps grows with the run and lives in the process that runs the roles (the demo),
so it is kept out of the cyclic collector's way: tokens as seqs per (stream, modality)
(:class:`TokenSet`), windows and responses as tuples of strings and numbers, which the
collector stops tracking. An object per token and a model per response made every full
collection walk the whole run so far: the demo's event loop stalled 50 to 110 ms every
second or two at 30 streams.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, KeysView, MutableMapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import msgpack

from lockstep.errors import BadInput
from lockstep.topics.codec import HEADER_SIZE, Kind, decode_as, peek_kind
from lockstep.topics.keys import TokenKey, TokenSet
from lockstep.topics.schemas import DeadLetter, Modality, Response, late_seqs

log = logging.getLogger(__name__)
Key = tuple[str, int]
R = TypeVar("R", bound=tuple[Any, ...])


class SeenWindow(NamedTuple):
    """What the ledger keeps of a window."""

    stream_id: str
    window_seq: int
    t_start_us: int
    t_end_us: int
    aligned_us: int
    missing: tuple[str, ...]
    digest: bytes


class SeenTimeline(NamedTuple):
    """A response's timeline (:class:`~lockstep.topics.schemas.Timeline`), as kept."""

    capture_us: int
    ingest_us: int
    aligned_us: int
    routed_us: int
    dequeued_us: int
    inferred_us: int
    responded_us: int


class SeenResponse(NamedTuple):
    """What the ledger keeps of a response (the fields of :class:`Response` it reports)."""

    stream_id: str
    window_seq: int
    route: str
    pool: str
    reason: str
    status: str
    detail: str
    engine: str
    slo_class: str
    output: str
    timeline: SeenTimeline

    @classmethod
    def plain(cls, r: SeenResponse) -> tuple[Any, ...]:
        """As kept by :class:`Rows`: plain tuples (the timeline last)."""
        return (*r[:-1], tuple(r.timeline))

    @classmethod
    def named(cls, row: tuple[Any, ...]) -> SeenResponse:
        """From :meth:`plain`."""
        return cls._make((*row[:-1], SeenTimeline._make(row[-1])))

    @classmethod
    def of(cls, r: Response) -> SeenResponse:
        """Keep what the reports need of ``r``."""
        t = r.timeline
        return cls(r.stream_id, r.window_seq, r.route, r.pool, r.reason, r.status, r.detail,
                   r.engine, r.slo_class, r.output, SeenTimeline(
                       t.capture_us, t.ingest_us, t.aligned_us, t.routed_us, t.dequeued_us,
                       t.inferred_us, t.responded_us))


class Rows(MutableMapping[Key, R], Generic[R]):
    """A dict of named tuples, stored as plain tuples of strings and numbers.

    The collector stops tracking a plain tuple of untracked values (and a dict of them),
    not a named tuple: the rows are kept plain and named again when read.
    """

    __slots__ = ("_make", "_plain", "_rows")

    def __init__(self, make: Callable[[tuple[Any, ...]], R],
                 plain: Callable[[R], tuple[Any, ...]] = tuple) -> None:
        self._rows: dict[Key, tuple[Any, ...]] = {}
        self._make = make
        self._plain = plain

    def __getitem__(self, key: Key) -> R:
        return self._make(self._rows[key])

    def __setitem__(self, key: Key, value: R) -> None:
        self._rows[key] = self._plain(value)

    def __delitem__(self, key: Key) -> None:
        del self._rows[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def keys(self) -> KeysView[Key]:
        """The keys (the stored dict's own view: set operations run at C speed)."""
        return self._rows.keys()


@dataclass
class Ledger:
    """Where tokens and windows ended up, de-duplicated on their idempotency keys."""

    windows: Rows[SeenWindow] = field(default_factory=lambda: Rows(SeenWindow._make))
    responses: Rows[SeenResponse] = field(
        default_factory=lambda: Rows(SeenResponse.named, SeenResponse.plain))
    in_windows: TokenSet = field(default_factory=TokenSet)
    late: TokenSet = field(default_factory=TokenSet)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: Identical records seen again ("window", "response", "late"), and keys seen with other
    #: bytes.
    duplicates: Counter[str] = field(default_factory=Counter)
    conflicts: Counter[str] = field(default_factory=Counter)
    #: Tokens in more than one outcome (two windows, or a window and a late record).
    settled_twice: set[TokenKey] = field(default_factory=set)
    #: Late records by reason code (``stale``, ``behind_watermark``…).
    late_codes: Counter[str] = field(default_factory=Counter)
    _remaining: set[TokenKey] | None = None
    _response_digests: dict[Key, bytes] = field(default_factory=dict)

    def expect(self, published: Iterable[TokenKey]) -> None:
        """From now on, track which of ``published`` are not accounted for (incrementally)."""
        self._remaining = set()
        self.expect_more(published)

    def expect_more(self, published: Iterable[TokenKey]) -> None:
        """Track more published tokens, as :meth:`expect` does (a large set, in slices)."""
        if self._remaining is None:
            self._remaining = set()
        in_windows, late = self.in_windows, self.late
        self._remaining.update(k for k in published if k not in in_windows and k not in late)

    def unaccounted(self, published: AbstractSet[TokenKey] | None = None) -> set[TokenKey]:
        """Published tokens in no window and no late record (those given to :meth:`expect`)."""
        if published is not None:
            in_windows, late = self.in_windows, self.late
            return {k for k in published if k not in in_windows and k not in late}
        return set(self._remaining or ())

    @property
    def unaccounted_count(self) -> int:
        """How many expected tokens are still unaccounted for."""
        return len(self._remaining or ())

    def unanswered(self) -> set[Key]:
        """Windows with no response."""
        return self.windows.keys() - self.responses.keys()

    def add(self, value: bytes | None) -> Kind | None:
        """Take one output record; returns its kind (None: not a Lockstep record)."""
        try:
            kind = peek_kind(value)
            body: Any = msgpack.unpackb(value[HEADER_SIZE:])  # type: ignore[index]
        except (BadInput, ValueError, msgpack.UnpackException):
            return None
        assert value is not None
        try:
            if kind is Kind.WINDOW:
                self._window(body, value)
            elif kind is Kind.RESPONSE:
                self._response(value)
            elif kind is Kind.LATE:
                self._late(body)
            elif kind is Kind.DEADLETTER:
                self.dead_letters.append(decode_as(DeadLetter, value))
        except (BadInput, KeyError, TypeError, ValueError) as error:
            log.warning("malformed %s record in the output: %r", kind.name.lower(), error)
            return None
        return kind

    def _window(self, body: dict[str, Any], value: bytes) -> None:
        key = (body["stream_id"], int(body["window_seq"]))
        digest = hashlib.blake2b(value, digest_size=16).digest()
        seen = self.windows.get(key)
        if seen is not None:
            self.duplicates["window"] += seen.digest == digest
            self.conflicts["window"] += seen.digest != digest
            if seen.digest == digest:
                return
        timeline = body.get("timeline") or {}
        self.windows[key] = SeenWindow(
            key[0], key[1], int(body["t_start_us"]), int(body["t_end_us"]),
            int(timeline.get("aligned_us", 0)), tuple(body.get("missing") or ()), digest)
        sid = key[0]
        for modality, seqs in body["members"].items():
            m = Modality(modality)
            for seq in seqs:
                self._settle(sid, m, int(seq), self.in_windows)

    def _response(self, value: bytes) -> None:
        response = decode_as(Response, value)
        key = (response.stream_id, response.window_seq)
        digest = hashlib.blake2b(value, digest_size=16).digest()
        seen = self._response_digests.get(key)
        if seen is not None:
            self.duplicates["response"] += seen == digest
            self.conflicts["response"] += seen != digest
            return
        self._response_digests[key] = digest
        self.responses[key] = SeenResponse.of(response)

    def _late(self, body: dict[str, Any]) -> None:
        code = str(body.get("code") or body.get("reason") or "?")
        stream_id, modality = str(body["stream_id"]), Modality(body["modality"])
        for seq in late_seqs(body):
            if self.late.has(stream_id, modality, seq):
                # A replay wrote it again (its at_us may differ): the same outcome, not a
                # second.
                self.duplicates["late"] += 1
                continue
            self.late_codes[code] += 1
            self._settle(stream_id, modality, seq, self.late)

    def _settle(self, stream_id: str, modality: Modality, seq: int, into: TokenSet) -> None:
        if self.in_windows.has(stream_id, modality, seq) or self.late.has(stream_id, modality, seq):
            self.settled_twice.add(TokenKey(stream_id, modality, seq))
        into.add_seq(stream_id, modality, seq)
        if self._remaining:
            self._remaining.discard(TokenKey(stream_id, modality, seq))


