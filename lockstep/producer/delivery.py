"""What a producer delivered: sent, acknowledged and failed tokens, per modality.

:class:`DeliveryStats` (the :class:`~lockstep.producer.publisher.Publisher`'s) and
:class:`PublishReport` (``publish_synthetic``'s) say what was sent, acknowledged and failed
per modality; :func:`delivery_line` puts that on one line. Retries and the outage log
are the Kafka layer's (:mod:`lockstep.kafka.retry`).
"""

from __future__ import annotations

import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lockstep.topics.keys import TokenKey, TokenSet
from lockstep.topics.schemas import Modality

#: Distinct delivery errors kept for a report.
MAX_ERRORS = 10


def delivery_line(sent: Mapping[str, int], acked: Mapping[str, int],
                  failed: Mapping[str, int]) -> str:
    """``tokens sent/acked/failed: video 720/700/20, audio …`` in modality order."""
    known = [m.value for m in Modality]
    order = known + sorted((set(sent) | set(acked) | set(failed)) - set(known))
    parts = [f"{m} {sent.get(m, 0):,}/{acked.get(m, 0):,}/{failed.get(m, 0):,}"
             for m in order if sent.get(m) or acked.get(m) or failed.get(m)]
    return f"tokens sent/acked/failed: {', '.join(parts) or 'none'}"


@dataclass(frozen=True)
class DeliveryStats:
    """What a :class:`Publisher` has sent and what the broker acknowledged."""

    sent: Mapping[str, int]
    acked: Mapping[str, int]
    failed: Mapping[str, int]
    bytes_sent: int
    #: The first distinct delivery errors, for the report.
    errors: tuple[str, ...]
    #: Tokens refused before sending, per modality, because align would dead-letter them
    #: (counted in ``sent`` and ``failed`` too).
    refused: Mapping[str, int] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        """Tokens sent but neither acknowledged nor failed yet."""
        return sum(self.sent.values()) - sum(self.acked.values()) - sum(self.failed.values())

    @property
    def ok(self) -> bool:
        """Everything sent was acknowledged."""
        return self.in_flight == 0 and not sum(self.failed.values())

    def line(self) -> str:
        """Sent/acked/failed per modality, on one line."""
        return delivery_line(self.sent, self.acked, self.failed)


@dataclass
class PublishReport:
    """What was published: the acknowledged tokens are the ledger's left-hand side."""

    #: Tokens the broker acknowledged: seqs per stream and modality, not an object each. A
    #: publisher keeps every one for the whole run; as key objects they made the cyclic
    #: collector's full passes long enough (~45 ms at 30 streams) to hold its sends.
    keys: TokenSet = field(default_factory=TokenSet)
    #: Acknowledged tokens per modality.
    by_modality: Counter[str] = field(default_factory=Counter)
    #: Undecodable records (``inject_bad``) acknowledged.
    bad_records: int = 0
    seconds: float = 0.0
    #: Tokens sent per modality (once each, however often re-sent).
    sent: Counter[str] = field(default_factory=Counter)
    #: Tokens not delivered, with the reason.
    failed: dict[TokenKey, str] = field(default_factory=dict)
    bad_records_failed: int = 0
    #: Re-sends after a retriable failure (a broker restart, a timeout).
    retries: int = 0
    #: The first distinct delivery errors.
    errors: list[str] = field(default_factory=list)
    #: Tokens sent per stream and modality; the first and last ``seq`` sent of each.
    by_stream: dict[str, Counter[str]] = field(default_factory=dict)
    seqs: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    bytes_sent: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its keys as arrays of seqs per (stream, modality).

        A report crosses processes (the demo's publisher runs in a child). As a set of
        key objects, tens of thousands of them took ~0.15 s to unpickle in one call that
        holds the interpreter: every coroutine of the receiving process stood still
        meanwhile. From arrays, the :class:`~lockstep.observe.ledger.TokenSet` is rebuilt one
        set update per stream and modality.
        """
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["keys"] = {(stream_id, modality.value): array.array("q", sorted(seqs)).tobytes()
                         for stream_id, modality, seqs in self.keys.groups()}
        return (_unpickle_report, (state,))

    def count_sent(self, key: TokenKey, size: int) -> None:
        """One token of ``size`` bytes handed to the producer (once, however often re-sent)."""
        modality = key.modality.value
        self.sent[modality] += 1
        self.by_stream.setdefault(key.stream_id, Counter())[modality] += 1
        first = self.seqs.get((key.stream_id, modality), (key.seq, 0))[0]
        self.seqs[(key.stream_id, modality)] = (first, key.seq)
        self.bytes_sent += size

    def stats(self) -> DeliveryStats:
        """The delivery counts in the form :class:`Publisher` reports them."""
        return DeliveryStats(dict(self.sent), dict(self.by_modality),
                             dict(self.failed_by_modality), self.bytes_sent, tuple(self.errors))

    @property
    def failed_by_modality(self) -> Counter[str]:
        """Undelivered tokens per modality."""
        return Counter(key.modality.value for key in self.failed)

    @property
    def ok(self) -> bool:
        """Every token and record sent was acknowledged."""
        return (not self.failed and not self.bad_records_failed
                and sum(self.sent.values()) == len(self.keys))

    def line(self) -> str:
        """Sent/acked/failed per modality, on one line."""
        return delivery_line(self.sent, self.by_modality, self.failed_by_modality)

    def note(self, reason: str) -> None:
        """Keep ``reason`` among the first distinct errors."""
        if len(self.errors) < MAX_ERRORS and reason not in self.errors:
            self.errors.append(reason)


def _unpickle_report(state: dict[str, Any]) -> PublishReport:
    keys = TokenSet()
    for (stream_id, modality_value), raw in state["keys"].items():
        seqs = array.array("q")
        seqs.frombytes(raw)
        keys.add_seqs(stream_id, Modality(modality_value), seqs)
    return PublishReport(**{**state, "keys": keys})


