"""Which media a reader sheds as stale: a fast-forward across a backlog (part of ``align``).

Pure: ages are passed in. A token read later than its stale age (``stale_us``: its SLO
class's e2e budget times ``align.stale_after_budgets``) cannot be answered in time. Shedding
only those keeps a reader that is behind serving tokens just under that age, where every
window it forms still misses: under a sustained overload the head of the log settles at the
stale age, and the pipeline answers nothing in time while it sheds. :class:`FastForward`
adds hysteresis per partition: once a partition's token is read stale, the partition's
tokens are shed until one is read within ``resume_share`` of its stale age, or the partition
has been read to the log end the last fetch saw. The backlog is crossed to the newest data,
and the windows formed after it have their budget ahead of them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: What :meth:`FastForward.judge` says of a token: aligned (kept) or shed, and why.
KEEP = 0
STALE = 1
SKIPPED = 2


@dataclass
class FastForward:
    """Per-partition shedding with hysteresis: skip a backlog once it is found stale.

    Args:
        resume_share: Once a partition sheds, the share of the stale age a token of it
            must be read within to be kept again (1.0: no hysteresis, only stale tokens
            are shed).
        at_end: ``at_end(part, offset)``: whether ``offset`` is the last record of ``part``
            the last fetch knew of; asked only while the partition skips a token that is
            not stale itself.
    """

    resume_share: float = 0.5
    at_end: Callable[[Any, int], bool] = lambda part, offset: False
    _skipping: set[Hashable] = field(default_factory=set)

    def judge(self, part: Hashable, offset: int, age_us: int, stale_us: int) -> int:
        """Whether a token of ``part`` read ``age_us`` after capture is kept or shed.

        Args:
            part: The partition it was read from.
            offset: Its offset there.
            age_us: Read time minus capture time.
            stale_us: The age past which it is stale (0: never).

        Returns:
            :data:`KEEP`, :data:`STALE` (older than ``stale_us``) or :data:`SKIPPED` (not
            stale, shed while the partition crosses a backlog that was).
        """
        if not stale_us:
            return KEEP
        if age_us > stale_us:
            self._skipping.add(part)
            return STALE
        if part not in self._skipping:
            return KEEP
        if age_us <= stale_us * self.resume_share or self.at_end(part, offset):
            self._skipping.discard(part)
            return KEEP
        return SKIPPED

    def skipping(self) -> frozenset[Hashable]:
        """The partitions crossing a backlog now."""
        return frozenset(self._skipping)

    def forget(self, parts: Iterable[Hashable]) -> None:
        """Drop the state of ``parts`` (revoked partitions)."""
        self._skipping.difference_update(parts)
