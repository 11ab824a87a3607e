"""Sets of a stream's seqs kept as bitmaps, not int objects (part of the ``align`` stage).

Pure. The aligner's duplicate check remembers the last few thousand seqs of every modality
of every stream. Held in Python sets, each seq is the int object decoded from its record
(32 bytes, plus its slot), and a stream's seqs live for minutes: the ones read during a
flood of new stream ids end up one in almost every pool of CPython's allocator that the
flood's short-lived objects filled, and keep those pools' arenas (and the process's RSS)
from being returned once the flood is evicted. A :class:`SeqSet` holds seqs as bits over a
span of values instead, from shortly before the first one it is given; the few seqs outside
that span (a producer that re-based, a seq far out of order) go into a small set.
"""

from __future__ import annotations

#: Seqs below the first one that the bitmap still covers (tokens overtaken in transport).
SLACK = 64
#: Seqs the bitmap covers at most (1 kB): two generations of the duplicate check with
#: room for gaps (captures dropped before publishing).
SPAN = 8192
_FIRST_BYTES = 16


class SeqSet:
    """A set of ints: bits over ``[base, base + SPAN)``, a set for the others.

    Only adding and membership (what the duplicate check needs); :attr:`count` is the
    number of distinct seqs added.
    """

    __slots__ = ("_base", "_bits", "_others", "count")

    def __init__(self) -> None:
        self._base = 0
        self._bits = bytearray()  # empty until the first seq fixes the base
        self._others: set[int] | None = None
        self.count = 0

    def __contains__(self, seq: int) -> bool:
        bits = self._bits
        i = seq - self._base
        if 0 <= i < len(bits) << 3:
            return bool(bits[i >> 3] >> (i & 7) & 1)
        others = self._others
        return others is not None and seq in others

    def __len__(self) -> int:
        return self.count

    def add(self, seq: int) -> None:
        """Add a seq (nothing changes if it is in the set already)."""
        bits = self._bits
        if not bits:
            self._base = seq - SLACK
            bits.extend(bytes(_FIRST_BYTES))
        i = seq - self._base
        if 0 <= i < SPAN:
            byte = i >> 3
            if byte >= len(bits):  # grow by doubling, up to the span
                bits.extend(bytes(min(SPAN >> 3, max(2 * len(bits), byte + 1)) - len(bits)))
            mask = 1 << (i & 7)
            if not bits[byte] & mask:
                bits[byte] |= mask
                self.count += 1
            return
        others = self._others
        if others is None:
            others = self._others = set()
        if seq not in others:
            others.add(seq)
            self.count += 1


#: An empty set that is never added to (the generation before the first).
EMPTY = SeqSet()
