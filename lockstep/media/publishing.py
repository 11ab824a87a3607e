"""Several media streams published in parallel, one decoding thread per stream.

Every source is opened, every sidecar validated and every recogniser started before the
first token is sent, so unreadable input publishes nothing. An error after that (a decode
failure, a truncated file, the broker) stops that stream and is reported with what it had
already sent. Each token goes out as soon as it is due; perception
(:mod:`lockstep.media.perception`) is offered it afterwards and publishes its text on its own.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from lockstep.errors import ConfigError, LockstepError
from lockstep.media.perception import PerceptionMetrics, PerceptionOptions, StreamPerception
from lockstep.media.sidecar import Sidecar, sidecar_tokens
from lockstep.media.source import MediaOptions, MediaSource
from lockstep.media.timing import Pacer
from lockstep.producer.checks import CaptureSpan
from lockstep.producer.publisher import Publisher
from lockstep.streams.align.state import DENSE
from lockstep.topics.schemas import Modality, OcrToken, SensorToken, Token


@dataclass(frozen=True)
class StreamPlan:
    """One stream to publish: its id and its source."""

    stream_id: str
    source: str


def plan_streams(sources: Sequence[str], stream_ids: Sequence[str],
                 copies: int = 1) -> list[StreamPlan]:
    """Pair sources with stream ids; ``copies`` publishes each source that many times.

    One id for several streams numbers them ``ID-0``, ``ID-1``...; otherwise give one id
    per stream.

    Raises:
        ConfigError: The ids do not fit the streams.
    """
    if not sources:
        raise ConfigError("no media source given")
    expanded = [src for src in sources for _ in range(copies)]
    if not stream_ids:
        raise ConfigError("give the stream id with --stream ID")
    if len(stream_ids) == 1 and len(expanded) > 1:
        ids = [f"{stream_ids[0]}-{i}" for i in range(len(expanded))]
    elif len(stream_ids) == len(expanded):
        ids = list(stream_ids)
    else:
        raise ConfigError(f"{len(stream_ids)} stream ids for {len(expanded)} streams: give one "
                          "id (numbered ID-0, ID-1...) or one per stream")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"stream ids must differ: {ids}")
    return [StreamPlan(sid, src) for sid, src in zip(ids, expanded, strict=True)]


@dataclass
class StreamProgress:
    """What one stream has published so far."""

    plan: StreamPlan
    declared_s: float | None = None
    sent: Counter[str] = field(default_factory=Counter)
    media_s: float = 0.0
    done: bool = False
    error: str | None = None
    #: Recognisers that failed or did not finish (their text is missing, not the media).
    perception_errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def complete(self) -> bool:
        """Finished without an error."""
        return self.done and self.error is None and not self.perception_errors

    def count(self, modality: str) -> None:
        """One more token of ``modality`` sent (thread-safe)."""
        with self._lock:
            self.sent[modality] += 1


class MediaPublish:
    """Opens the sources and publishes them; :meth:`run` blocks until all are done."""

    def __init__(self, publisher: Publisher, plans: Sequence[StreamPlan],
                 options: MediaOptions, sidecars: Sequence[Sidecar] = (), *,
                 realtime: bool = True, perception: PerceptionOptions | None = None,
                 metrics: PerceptionMetrics | None = None) -> None:
        """Open every source, map every sidecar line and start the recognisers.

        Raises:
            MediaError: A source cannot be opened, a sidecar line cannot be mapped or a
                recogniser cannot start.
        """
        self.publisher = publisher
        self.realtime = realtime
        self.metrics = metrics or PerceptionMetrics()
        self._opened: list[tuple[MediaSource, list[OcrToken | SensorToken]]] = []
        self._perceivers: list[StreamPerception | None] = []
        self.progress: list[StreamProgress] = []
        self.stop = threading.Event()
        try:
            # The recognisers load their models first: a source anchored at the wall clock
            # takes "now" when it opens, and publishing starts right after.
            for plan in plans:
                progress = StreamProgress(plan)
                self.progress.append(progress)
                self._perceivers.append(StreamPerception(
                    plan.stream_id, perception, functools.partial(self._send, progress),
                    self.metrics) if perception is not None and perception.enabled else None)
            for perceiver in self._perceivers:  # side by side
                if perceiver is not None:
                    perceiver.start()
            for perceiver in self._perceivers:
                if perceiver is not None:
                    perceiver.wait_ready()
            for plan, progress in zip(plans, self.progress, strict=True):
                source = MediaSource(plan.source, options)
                self._opened.append((source, []))
                self._opened[-1] = (source, sidecar_tokens(sidecars, plan.stream_id,
                                                           source.clock))
                progress.declared_s = source.declared_s
        except BaseException:
            self.close()
            raise

    def capture_spans(self) -> list[CaptureSpan]:
        """Per stream, the first and last capture time it will carry (last: None if unknown)."""
        spans = []
        for (source, side), progress in zip(self._opened, self.progress, strict=True):
            first = min([source.clock.anchor_us, *(t.t_us for t in side)])
            length = [s for s in (source.declared_s, source.options.max_seconds) if s]
            last = (max([source.clock.anchor_us + round(min(length) * 1e6),
                         *(t.t_us for t in side)]) if length else None)
            spans.append(CaptureSpan(progress.plan.stream_id, first, last))
        return spans

    def close(self) -> None:
        """Release every source and stop every recogniser."""
        for source, _ in self._opened:
            source.close()
        for perceiver in self._perceivers:
            if perceiver is not None:
                perceiver.close(0.0)

    def run(self, on_tick: Callable[[Sequence[StreamProgress]], None] | None = None,
            tick_s: float = 0.5) -> list[StreamProgress]:
        """Publish every stream in its own thread; call ``on_tick`` while they run."""
        threads = [threading.Thread(target=self._stream, args=(source, side, progress, perceiver),
                                    name=f"publish-{progress.plan.stream_id}", daemon=True)
                   for (source, side), progress, perceiver
                   in zip(self._opened, self.progress, self._perceivers, strict=True)]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                if on_tick is not None:
                    on_tick(self.progress)
                for thread in threads:
                    thread.join(tick_s / len(threads))
        except KeyboardInterrupt:
            self.stop.set()
            for thread in threads:
                thread.join()
            for p in self.progress:
                if not p.done:
                    p.error = p.error or "interrupted"
        finally:
            self.close()
        if on_tick is not None:
            on_tick(self.progress)
        return self.progress

    def _stream(self, source: MediaSource, side: list[OcrToken | SensorToken],
                progress: StreamProgress, perceiver: StreamPerception | None) -> None:
        pacer = Pacer(self.realtime)
        last: dict[Modality, Token] = {}  # of each dense modality, for the end of the stream
        try:
            for token in _merged(source.tokens(progress.plan.stream_id), side):
                if self.stop.is_set():
                    progress.error = "interrupted"
                    return
                pacer.wait(token.t_us)
                if self._send(progress, token) and token.modality in DENSE:
                    last[token.modality] = token
                progress.media_s = source.decoded_s
                if perceiver is not None:
                    perceiver.observe(token)
            # The source has ended: align need not wait for more of it (wire format §6).
            self.publisher.end(last.values())
        except LockstepError as exc:
            progress.error = str(exc)
        finally:
            if perceiver is not None:  # its last results, unless the stream was stopped
                errors = perceiver.close(0.5 if self.stop.is_set() else None)
                progress.perception_errors.extend(errors)
            progress.done = True

    def _send(self, progress: StreamProgress, token: Token) -> bool:
        """Publish a token of a stream and count it (from its thread or a recogniser's).

        Returns:
            Whether it was sent (not refused).
        """
        sent = self.publisher.publish(token)
        progress.count(token.modality.value)
        return sent


def _merged(media: Iterator[Token], side: list[OcrToken | SensorToken]) -> Iterator[Token]:
    """Media tokens with the sidecar tokens slotted in by capture time."""
    i = 0
    for token in media:
        while i < len(side) and side[i].t_us <= token.t_us:
            yield side[i]
            i += 1
        yield token
    yield from side[i:]


def rates(progress: Sequence[StreamProgress], bytes_sent: int, seconds: float
          ) -> dict[str, float]:
    """Tokens and megabytes per second over ``seconds`` of wall time."""
    tokens = sum(sum(p.sent.values()) for p in progress)
    seconds = max(seconds, 1e-9)
    return {"tokens_per_s": round(tokens / seconds, 1),
            "mb_per_s": round(bytes_sent / seconds / 1e6, 3)}

