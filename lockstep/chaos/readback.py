"""The ledger read back from the output topics, with the time each record was produced.

:class:`TopicReadback` marks the end of ``aligned.windows``, ``late``, ``deadletter`` and
``responses`` when a scenario starts, and reads from those marks on (manual assignment,
no consumer group): what the pipeline wrote, not what its processes say they did. Besides
the :class:`~lockstep.observe.ledger.Ledger` it keeps when each window and response was first
produced (the record timestamps, CreateTime), for the recovery time after a fault, and
which inputs and which tokens were dead-lettered.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import msgpack

from lockstep.config.settings import KafkaSettings
from lockstep.errors import BadInput
from lockstep.kafka.reader import TopicReader
from lockstep.kafka.types import Record, TopicPartition
from lockstep.observe.ledger import Key, Ledger
from lockstep.topics import catalog
from lockstep.topics.codec import HEADER_SIZE, TOKEN_KINDS, Kind, decode, peek_kind
from lockstep.topics.keys import TokenKey, late_tokens
from lockstep.topics.schemas import DeadLetter, Modality

log = logging.getLogger(__name__)

#: Where a record was read from: topic, partition, offset.
Source = tuple[str, int, int]
OUTPUTS: tuple[str, ...] = (catalog.ALIGNED, catalog.LATE, catalog.DEADLETTER,
                            catalog.RESPONSES)


def token_key(value: bytes | None) -> TokenKey | None:
    """The key of the token ``value`` holds, if it decodes as a valid token."""
    try:
        if peek_kind(value) not in TOKEN_KINDS:
            return None
        token: Any = decode(value)
    except BadInput:
        return None
    return TokenKey(token.stream_id, token.modality, token.seq)


def dead_token(letter: DeadLetter) -> TokenKey | None:
    """The token a dead letter carries whole, if it is a decodable token."""
    return None if letter.truncated else token_key(letter.value)


class TopicReadback:
    """Reads the output topics from the marks taken at :meth:`start` into a ledger."""

    def __init__(self, kafka: KafkaSettings, topics: Sequence[str] = OUTPUTS) -> None:
        self.ledger = Ledger()
        #: Produce time (ms) of the first copy of each window and response.
        self.window_at_ms: dict[Key, int] = {}
        self.response_at_ms: dict[Key, int] = {}
        #: Inputs that were dead-lettered, and the whole tokens among them.
        self.dead_sources: set[Source] = set()
        self.dead_tokens: set[TokenKey] = set()
        #: Where each token was settled first (window key or late reason), and, for the
        #: tokens settled twice, both places.
        self.settled_in: dict[TokenKey, str] = {}
        self.twice: dict[TokenKey, tuple[str, str]] = {}
        #: Late records read twice with the same bytes, and keys read with other bytes.
        self.repeated_late: set[TokenKey] = set()
        self.conflict_examples: list[str] = []
        self._late_digest: dict[TokenKey, bytes] = {}
        self._first_offset: dict[tuple[str, Key], int] = {}
        self.records = 0
        self._kafka = kafka
        self._topics = list(topics)
        self._reader: TopicReader | None = None
        self.marks: dict[TopicPartition, int] = {}

    def _new_reader(self, timeout_s: float) -> TopicReader:
        return TopicReader(self._kafka, self._topics, what="chaos read-back",
                           fetch_wait_ms=100, connect_timeout_s=timeout_s)

    async def start(self, timeout_s: float = 30.0) -> None:
        """Mark the current end of every output partition.

        No client stays connected afterwards: one idle through a broker outage retries
        its metadata a thousand times a second. :meth:`catch_up` connects.

        Raises:
            BrokerError: The cluster or a topic is not there within ``timeout_s``.
        """
        async with self._new_reader(timeout_s) as reader:
            self.marks = await reader.end_offsets()

    async def stop(self) -> None:
        """Disconnect."""
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None

    async def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read every output partition up to its end as it is now (from the marks at first).

        Raises:
            BrokerError: The ends were not reached within ``timeout_s``.
        """
        reader = self._reader
        if reader is None:
            reader = self._new_reader(timeout_s)
            await reader.start()
            self._reader = reader
            reader.seek(self.marks)
        async for records in reader.read_until(await reader.end_offsets(), timeout_s=timeout_s):
            for record in records:
                self.add(record.topic, record)

    def add(self, topic: str, record: Record) -> None:
        """Take one output record."""
        self.records += 1
        ledger = self.ledger
        value = record.value
        conflicts = sum(ledger.conflicts.values())
        kind = ledger.add(value)
        if kind is None or value is None:
            if topic != catalog.DEADLETTER:
                log.warning("undecodable record on %s at offset %d", topic, record.offset)
            return
        if kind in (Kind.WINDOW, Kind.RESPONSE):
            self._keyed(kind, record, value, conflicts)
        elif kind is Kind.LATE:
            body = msgpack.unpackb(value[HEADER_SIZE:])
            digest = hashlib.blake2b(value, digest_size=16).digest()
            where = f"late ({str(body.get('reason', ''))[:60]}, offset {record.offset})"
            for token in late_tokens(body):
                if self._late_digest.setdefault(token, digest) == digest and (
                        self.settled_in.get(token, "").startswith("late")):
                    # The same late record again (a produce retried after a lost answer):
                    # a duplicate, as an identical window would be.
                    self.repeated_late.add(token)
                    continue
                self._where(token, where)
        elif kind is Kind.DEADLETTER:
            letter = ledger.dead_letters[-1]
            self.dead_sources.add((letter.topic, letter.partition, letter.offset))
            dead = dead_token(letter)
            if dead is not None:
                self.dead_tokens.add(dead)

    def _keyed(self, kind: Kind, record: Record, value: bytes,
               conflicts: int) -> None:
        body = msgpack.unpackb(value[HEADER_SIZE:])
        key = (body["stream_id"], int(body["window_seq"]))
        into = self.window_at_ms if kind is Kind.WINDOW else self.response_at_ms
        label = kind.name.lower()
        first = self._first_offset.setdefault((label, key), record.offset)
        if sum(self.ledger.conflicts.values()) > conflicts:
            self.conflict_examples.append(
                f"{label} {key[0]}#{key[1]} at offsets {first} and {record.offset}")
        if key in into:
            return
        into[key] = record.timestamp
        if kind is Kind.WINDOW:
            where = f"window {key[0]}#{key[1]} (offset {record.offset})"
            for modality, seqs in body["members"].items():
                for seq in seqs:
                    self._where(TokenKey(key[0], Modality(modality), int(seq)), where)

    def _where(self, token: TokenKey, where: str) -> None:
        first = self.settled_in.get(token)
        if first is None:
            self.settled_in[token] = where
        elif token not in self.twice:
            self.twice[token] = (first, where)

    @property
    def settled_twice(self) -> set[TokenKey]:
        """Tokens settled in two places (an identical late record repeated is not one)."""
        return set(self.twice)

    def lost(self, published: set[TokenKey]) -> set[TokenKey]:
        """Published tokens in no window, no late record and no dead letter."""
        return self.ledger.unaccounted(published) - self.dead_tokens

    def settled(self, published: set[TokenKey]) -> bool:
        """Every token accounted for and every window answered."""
        return not self.lost(published) and not self.ledger.unanswered()

    def accounted(self, source: Source, token: TokenKey | None) -> bool:
        """Whether an input was dead-lettered, or the token it holds settled (window, late)."""
        return source in self.dead_sources or (token is not None and (
            token in self.ledger.late or token in self.ledger.in_windows))
