"""Stale tokens shed by ``align``, batched into late records (part of :mod:`.align`).

Shedding is what a backlog costs, so it must cost less than aligning: the stale tokens of
one stream and modality read in one batch share one late record (its ``seq`` and
``more_seqs``), sent when the batch is done or the record is full.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lockstep.errors import ReasonCode
from lockstep.kafka.types import TopicPartition
from lockstep.topics.schemas import MAX_LATE_BATCH, LateToken, Modality, Token

#: Sends a late record settling ``settles``, counting ``count`` tokens late.
SendLate = Callable[[LateToken, list[tuple[TopicPartition, int]], int], Awaitable[None]]


class Shedder:
    """The stale tokens of the batch being read, by stream, modality and why."""

    def __init__(self, send_late: SendLate) -> None:
        self._send_late = send_late
        self._runs: dict[tuple[str, Modality, bool], _Run] = {}

    async def shed(self, token: Token, tp: TopicPartition, offset: int, size: int, now_us: int,
                   stale_us: int, *, skipped: bool) -> None:
        """Settle a token read too late to wait for its window: to ``late``, batched.

        ``skipped``: not stale itself, shed while its partition crosses a stale backlog.
        """
        group = (token.stream_id, token.modality, skipped)
        run = self._runs.get(group)
        if run is None:
            run = self._runs[group] = _Run(token, now_us, stale_us, skipped)
        run.add(token.seq, tp, offset, size)
        if len(run.seqs) >= MAX_LATE_BATCH:
            del self._runs[group]
            await self._send(run)

    async def flush(self) -> None:
        """Send the late records of the tokens shed in this batch."""
        runs, self._runs = self._runs, {}
        for run in runs.values():
            await self._send(run)

    async def _send(self, run: _Run) -> None:
        first = run.first
        oldest_ms = (run.now_us - first.t_us) / 1000
        what, whose = (f"{len(run.seqs)} tokens, the first read", "their windows") \
            if len(run.seqs) > 1 else ("read", "its window")
        why = (f"skipped with a backlog read past the {run.stale_us / 1000:.0f} ms "
               f"{whose} could wait, to the log end" if run.skipped else
               f"past the {run.stale_us / 1000:.0f} ms {whose} could wait")
        await self._send_late(LateToken(
            stream_id=first.stream_id, modality=first.modality, seq=run.seqs[0],
            more_seqs=run.seqs[1:], t_us=first.t_us, watermark_us=run.now_us - run.stale_us,
            at_us=run.now_us, value_size=run.size, code=ReasonCode.STALE,
            reason=f"stale: {what} {oldest_ms:.0f} ms after capture, {why}"),
            run.settles, len(run.seqs))


class _Run:
    """Stale tokens of one stream and modality, read in one batch: one late record."""

    __slots__ = ("first", "now_us", "seqs", "settles", "size", "skipped", "stale_us")

    def __init__(self, first: Token, now_us: int, stale_us: int, skipped: bool) -> None:
        self.first = first
        self.now_us = now_us
        self.stale_us = stale_us
        self.skipped = skipped
        self.seqs: list[int] = []
        self.settles: list[tuple[TopicPartition, int]] = []
        self.size = 0

    def add(self, seq: int, tp: TopicPartition, offset: int, size: int) -> None:
        self.seqs.append(seq)
        self.settles.append((tp, offset))
        self.size += size
