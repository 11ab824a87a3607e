"""The token ledger read from the pipeline's output topics (the demo, ``lockstep chaos``).

Every published token must end in exactly one of: a window's members, a late record, a
dead letter; every window must be answered (a response with any status); a key
(``stream_id``, ``window_seq``) must never carry two different windows or responses.
:class:`Ledger` takes raw output records as they are read; of windows, the most numerous,
it keeps just what those checks need (MessagePack fields, not validated models: the
bookkeeping must stay cheap next to the pipeline it watches). A record sent twice with
the same bytes (a produce retried after a lost acknowledgement) is a duplicate; the same
key with other bytes is a conflict.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from lockstep.errors import BadInput
from lockstep.streams.alignstate import TokenKey
from lockstep.topics.codec import HEADER_SIZE, Kind, decode_as, peek_kind
from lockstep.topics.schemas import DeadLetter, Modality, Response, late_seqs

log = logging.getLogger(__name__)
Key = tuple[str, int]


@dataclass(frozen=True)
class SeenWindow:
    """What the ledger keeps of a window."""

    stream_id: str
    window_seq: int
    t_start_us: int
    t_end_us: int
    aligned_us: int
    missing: tuple[str, ...]
    digest: bytes


@dataclass
class Ledger:
    """Where tokens and windows ended up, de-duplicated on their idempotency keys."""

    windows: dict[Key, SeenWindow] = field(default_factory=dict)
    responses: dict[Key, Response] = field(default_factory=dict)
    in_windows: set[TokenKey] = field(default_factory=set)
    late: set[TokenKey] = field(default_factory=set)
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
        self._remaining = set(published) - self.in_windows - self.late

    def unaccounted(self, published: set[TokenKey] | None = None) -> set[TokenKey]:
        """Published tokens in no window and no late record (those given to :meth:`expect`)."""
        if published is not None:
            return published - self.in_windows - self.late
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
                self._settle(TokenKey(sid, m, int(seq)), self.in_windows)

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
        self.responses[key] = response

    def _late(self, body: dict[str, Any]) -> None:
        code = str(body.get("code") or body.get("reason") or "?")
        for token in late_tokens(body):
            if token in self.late:
                # A replay wrote it again (its at_us may differ): the same outcome, not a
                # second.
                self.duplicates["late"] += 1
                continue
            self.late_codes[code] += 1
            self._settle(token, self.late)

    def _settle(self, token: TokenKey, into: set[TokenKey]) -> None:
        if token in self.in_windows or token in self.late:
            self.settled_twice.add(token)
        into.add(token)
        if self._remaining is not None:
            self._remaining.discard(token)


def late_tokens(body: dict[str, Any]) -> list[TokenKey]:
    """The tokens a late record settles, from its MessagePack fields."""
    stream_id, modality = str(body["stream_id"]), Modality(body["modality"])
    return [TokenKey(stream_id, modality, seq) for seq in late_seqs(body)]
