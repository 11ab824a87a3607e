"""What a previous owner of a partition already settled, so a replay never settles it again.

Pure. When a role takes over partitions, the records after the group's committed offset
are replayed; some of them were already settled by the previous owner (it produced their
window, late record, request, response or dead letter, but died before committing). The
agent reads those outputs back from the topics (:mod:`lockstep.kafka.readback`) into a
:class:`ReplayGuard`; a replayed input the guard knows is acknowledged without producing
anything. So an output key is written once — the same key always carries the same
content, and de-duplicating on (``stream_id``, ``window_seq``) never drops data — and every
input still ends in exactly one outcome.

The aligner also needs, per stream, where the previous owner's windows ended
(:class:`Resume`), so it does not build a second window over the same stretch of time.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgpack

from lockstep.errors import BadInput
from lockstep.topics.codec import HEADER_SIZE, Kind, peek_kind
from lockstep.topics.keys import TokenKey
from lockstep.topics.schemas import Modality

log = logging.getLogger(__name__)
P = TypeVar("P", bound=Hashable)


@dataclass(frozen=True)
class Output:
    """One record read back (or still being re-sent by this process's producer)."""

    topic: str
    partition: int  # -1: not written yet
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Resume:
    """Where a stream's emitted windows end, for :meth:`Aligner.resume`."""

    closed_end_us: int
    #: The last window anchored on a frame (None: only hop windows were emitted).
    last_window_seq: int | None


@dataclass
class ReplayGuard(Generic[P]):
    """Outputs already written for inputs that will be replayed.

    Attributes:
        until: Per input partition, the log end when it was taken over: only records below
            it can have been settled by a previous owner.
        tokens: Media tokens already in a window or a late record (align).
        keys: (stream_id, window_seq) of outputs already written (route, worker).
        dead: (topic, partition, offset) of inputs already dead-lettered by this stage.
        resume: Per stream, where its emitted windows end (align).
    """

    until: dict[P, int] = field(default_factory=dict)
    tokens: set[TokenKey] = field(default_factory=set)
    keys: set[tuple[str, int]] = field(default_factory=set)
    dead: set[tuple[str, int, int]] = field(default_factory=set)
    resume: dict[str, Resume] = field(default_factory=dict)

    def guards(self, tp: P, offset: int) -> bool:
        """Whether a record of ``tp`` at ``offset`` may have been settled before."""
        end = self.until.get(tp)
        return end is not None and offset < end

    def passed(self, tp: P, position: int) -> None:
        """Note that ``tp`` is read up to ``position``; forget everything once all are past."""
        end = self.until.get(tp)
        if end is not None and position >= end:
            del self.until[tp]
            if not self.until:
                self.tokens.clear()
                self.keys.clear()
                self.dead.clear()

    def drop(self, tps: list[P]) -> None:
        """Stop guarding partitions (revoked)."""
        for tp in tps:
            self.until.pop(tp, None)

    def add_window(self, stream_id: str, window_seq: int, t_end_us: int,
                   members: Mapping[str, list[int]], hop_base: int) -> None:
        """Record a window the previous owner wrote (its members are settled)."""
        for modality, seqs in members.items():
            m = Modality(modality)
            self.tokens.update(TokenKey(stream_id, m, s) for s in seqs)
        prev = self.resume.get(stream_id)
        frame_seq = window_seq if window_seq < hop_base else None
        if prev is None:
            self.resume[stream_id] = Resume(t_end_us, frame_seq)
            return
        last = prev.last_window_seq
        if frame_seq is not None and (last is None or frame_seq > last):
            last = frame_seq
        self.resume[stream_id] = Resume(max(prev.closed_end_us, t_end_us), last)


def settle_keys(replay: ReplayGuard[P], outputs: Iterable[Output], stage: str) -> None:
    """Fill ``replay`` from records read back (route and worker).

    Requests and responses settle their (stream_id, window_seq); dead letters written by
    ``stage`` settle their input record.
    """
    for out in outputs:
        try:
            kind = peek_kind(out.value)
            body: Any = msgpack.unpackb(out.value[HEADER_SIZE:])  # type: ignore[index]
        except (BadInput, ValueError, msgpack.UnpackException):
            continue  # not ours: it settles nothing
        if not isinstance(body, dict):
            continue
        try:
            if kind is Kind.REQUEST:
                window = body["window"]
                replay.keys.add((window["stream_id"], int(window["window_seq"])))
            elif kind is Kind.RESPONSE:
                replay.keys.add((body["stream_id"], int(body["window_seq"])))
            elif kind is Kind.DEADLETTER and body.get("stage") == stage:
                replay.dead.add((body["topic"], int(body["partition"]), int(body["offset"])))
        except (KeyError, TypeError, ValueError):
            log.info("a record read back from %s does not parse; ignored", out.topic)
