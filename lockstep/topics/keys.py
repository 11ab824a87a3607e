"""Keys: the identity of a token, hop window ids, and the tokens a late record settles.

What every part that counts tokens or names windows agrees on: the aligner, the roles'
late records and read-back, the publishers' delivery counts and the ledgers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from lockstep.topics.schemas import Modality, late_seqs

#: ``window_seq`` of hop windows starts here, above any token's ``seq`` (< 2^62).
HOP_BASE = 1 << 62


@dataclass(frozen=True)
class TokenKey:
    """The ledger identity of a token."""

    stream_id: str
    modality: Modality
    seq: int


def window_id(window_seq: int) -> str:
    """A window's id as people read it: ``#42`` (frame-anchored) or ``#hop:7``."""
    return f"#hop:{window_seq - HOP_BASE}" if window_seq >= HOP_BASE else f"#{window_seq}"


class TokenSet(AbstractSet[TokenKey]):
    """A set of tokens kept as seqs per (stream, modality): a few containers, no object a token.

    A set like any other to read (membership, iteration, ``len``, ``&``, ``-``; results are
    plain sets of :class:`TokenKey`).
    """

    __slots__ = ("_len", "_seqs")

    def __init__(self, tokens: Iterable[TokenKey] = ()) -> None:
        self._seqs: dict[tuple[str, Modality], set[int]] = {}
        self._len = 0
        for token in tokens:
            self.add(token)

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> set[Any]:
        return set(it)

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, TokenKey):
            return False
        seqs = self._seqs.get((token.stream_id, token.modality))
        return seqs is not None and token.seq in seqs

    def __iter__(self) -> Iterator[TokenKey]:
        for (stream_id, modality), seqs in list(self._seqs.items()):
            for seq in sorted(seqs):
                yield TokenKey(stream_id, modality, seq)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"TokenSet({set(self)!r})"

    def has(self, stream_id: str, modality: Modality, seq: int) -> bool:
        """Whether the token is in the set (no key object built)."""
        seqs = self._seqs.get((stream_id, modality))
        return seqs is not None and seq in seqs

    def add(self, token: TokenKey) -> None:
        """Add a token (nothing changes if it is in already)."""
        self.add_seq(token.stream_id, token.modality, token.seq)

    def add_seq(self, stream_id: str, modality: Modality, seq: int) -> None:
        """Add the token of ``seq`` (no key object built)."""
        seqs = self._seqs.setdefault((stream_id, modality), set())
        if seq not in seqs:
            seqs.add(seq)
            self._len += 1

    def add_seqs(self, stream_id: str, modality: Modality, seqs: Iterable[int]) -> None:
        """Add the tokens of ``seqs`` of one stream and modality (no key objects built)."""
        group = self._seqs.setdefault((stream_id, modality), set())
        before = len(group)
        group.update(seqs)
        self._len += len(group) - before

    def groups(self) -> Iterator[tuple[str, Modality, frozenset[int]]]:
        """The seqs of each stream and modality (a copy of each group)."""
        for (stream_id, modality), seqs in list(self._seqs.items()):
            yield stream_id, modality, frozenset(seqs)


def late_tokens(body: dict[str, Any]) -> list[TokenKey]:
    """The tokens a late record settles, from its MessagePack fields."""
    stream_id, modality = str(body["stream_id"]), Modality(body["modality"])
    return [TokenKey(stream_id, modality, seq) for seq in late_seqs(body)]

