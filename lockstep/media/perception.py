"""Perception beside the media: OCR and ASR on what a stream publishes, never in front of it.

Frames and audio chunks are published the moment they are decoded; a
:class:`StreamPerception` then offers each to its recognisers, which run in child processes
(:mod:`lockstep.media.workers`, :mod:`lockstep.media.recognizer_tasks`) and never make
the stream wait.
A recogniser that falls behind skips work: the OCR slot holds only the newest frame, and an
ASR backlog longer than ``asr_backlog_s`` is dropped with the utterance it cut.

Recognised text is published as OCR tokens (docs/wire-format.md §4): scene text with
``source="scene"``, one token per line in reading order (an empty text once the captions
are gone), and each utterance as one token with ``source="speech"``. Both carry in
``span_us`` the capture times they were recognised from, and as ``t_us`` the capture time
of the newest media the stream has published: the moment the text became known, so it joins
the windows still open (docs/alignment.md, "Late perception").

The perception lag per recogniser (media published → its text published) and the work
skipped are :class:`PerceptionMetrics`: Prometheus series and the publish summary.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram

from lockstep.errors import LockstepError
from lockstep.media.recognizer_tasks import (
    AsrConfig,
    ChunkJob,
    Failed,
    FrameJob,
    Heard,
    HearSpeech,
    OcrConfig,
    Reading,
    ReadText,
    Skipped,
)
from lockstep.media.recognizers import TextBox
from lockstep.media.workers import Worker
from lockstep.telemetry.metrics import LATENCY_BUCKETS
from lockstep.topics.schemas import AudioToken, OcrToken, Token, VideoToken

#: Lag samples kept per recogniser for the summary.
_SAMPLES = 4096
_NO_BOX = (0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class PerceptionOptions:
    """Which recognisers run and how they keep up."""

    ocr: bool = False
    asr: bool = False
    #: JSGF grammar narrowing ASR to known commands.
    asr_grammar: Path | None = None
    #: Read a frame at least every this many seconds of media...
    ocr_every_s: float = 1.0
    #: ... and sooner when this share of the picture changed since the last frame read
    #: (0: only on the interval).
    ocr_change: float = 0.05
    #: Look for a changed picture in one frame per this many seconds of media.
    ocr_check_s: float = 0.1
    #: Frames with a longer side are scaled down to it for text detection.
    ocr_limit_side: int = 960
    #: Audio waiting for ASR beyond this is dropped (with the utterance it cuts).
    asr_backlog_s: float = 5.0
    #: The recognisers get only the CPU the rest of the machine leaves idle.
    background: bool = True
    #: Wait for the recognisers instead of skipping (publishing faster than real time).
    lossless: bool = False
    #: How long the recognisers may take to load their models.
    start_timeout_s: float = 120.0
    #: At the end of a stream, how long to wait for the last results.
    drain_timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        """Whether any recogniser runs."""
        return self.ocr or self.asr


class PerceptionMetrics:
    """Perception lag and skipped work per recogniser (``ocr``, ``asr``); thread-safe.

    Args:
        registry: Where the Prometheus series go (the process's telemetry registry).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.lag = Histogram(
            "lockstep_perception_lag_seconds", "Media published to the text recognised in it "
            "published, per recogniser (modality ocr or asr).", ["modality"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.runs = Counter("lockstep_perception_runs", "Frames read (ocr) and utterances "
                            "recognised (asr).", ["modality"], registry=r)
        self.skipped = Counter(
            "lockstep_perception_skipped", "Perception work skipped to keep up with the "
            "media: frames replaced by newer ones before the reader saw them (ocr), "
            "utterances cut by a dropped backlog (asr).", ["modality"], registry=r)
        self._lock = threading.Lock()
        self._lags: dict[str, list[float]] = {"ocr": [], "asr": []}
        self._counts: dict[str, dict[str, int]] = {
            m: {"runs": 0, "tokens": 0, "skipped": 0, "dropped": 0, "failed": 0}
            for m in ("ocr", "asr")}

    def observe(self, modality: str, lag_s: float, tokens: int) -> None:
        """One frame read or utterance heard, published ``lag_s`` after its media."""
        self.lag.labels(modality).observe(lag_s)
        self.runs.labels(modality).inc()
        with self._lock:
            lags = self._lags[modality]
            if len(lags) >= _SAMPLES:
                del lags[: _SAMPLES // 2]
            lags.append(lag_s)
            counts = self._counts[modality]
            counts["runs"] += 1
            counts["tokens"] += tokens

    def skip(self, modality: str, n: int = 1) -> None:
        """``n`` units of work skipped."""
        self.skipped.labels(modality).inc(n)
        with self._lock:
            self._counts[modality]["skipped"] += n

    def drop(self, modality: str, n: int) -> None:
        """``n`` jobs dropped with a backlog (ASR: 20 ms chunks of audio never heard)."""
        with self._lock:
            self._counts[modality]["dropped"] += n

    def fail(self, modality: str) -> None:
        """A job the recogniser could not do."""
        with self._lock:
            self._counts[modality]["failed"] += 1

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per recogniser: runs, tokens, skipped, dropped, failed; the lag's P50/P99/max (ms)."""
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for m, counts in self._counts.items():
                lags = np.asarray(self._lags[m]) * 1e3
                p50, p99 = (np.percentile(lags, [50, 99]) if len(lags) else (None, None))
                out[m] = {**counts,
                          "lag_p50_ms": None if p50 is None else round(float(p50), 1),
                          "lag_p99_ms": None if p99 is None else round(float(p99), 1),
                          "lag_max_ms": round(float(lags.max()), 1) if len(lags) else None}
        return out


class TextSink:
    """Numbers a stream's text tokens and publishes them when their text becomes known."""

    def __init__(self, stream_id: str, publish: Callable[[Token], object]) -> None:
        self.stream_id = stream_id
        self._publish = publish
        self._lock = threading.Lock()
        self._seq = 0
        self._media_us = 0
        self._last_us = 0
        self._showing = False
        #: Publishing failures (the first few).
        self.errors: list[str] = []

    def media(self, t_us: int) -> None:
        """The stream published media captured at ``t_us``."""
        if t_us > self._media_us:
            self._media_us = t_us

    def scene(self, frame_us: int, boxes: tuple[TextBox, ...]) -> int:
        """Publish the text read in a frame; return the tokens published.

        A frame without text publishes one empty token when text was showing before, so
        the captions stop being held.
        """
        lines = [(b.text, b.bbox, b.confidence) for b in boxes]
        with self._lock:
            if not lines and not self._showing:
                return 0
            self._showing = bool(lines)
            t_us = self._known(frame_us)
            for text, bbox, confidence in lines or [("", _NO_BOX, 0.0)]:
                self._send(OcrToken(
                    stream_id=self.stream_id, seq=self._next(), t_us=t_us, text=text,
                    bbox=bbox, confidence=confidence, source="scene",
                    span_us=(frame_us, frame_us)))
            return len(lines) or 1

    def speech(self, since_us: int, until_us: int, text: str, confidence: float) -> None:
        """Publish one utterance."""
        with self._lock:
            self._send(OcrToken(
                stream_id=self.stream_id, seq=self._next(), t_us=self._known(until_us),
                text=text[:4096], bbox=_NO_BOX, confidence=confidence, source="speech",
                span_us=(since_us, max(since_us, until_us))))

    def _known(self, span_end_us: int) -> int:
        # The newest media sent, and after every earlier result: one result's lines share
        # their time, and the aligner holds the latest time's text as current.
        self._last_us = max(self._last_us + 1, self._media_us, span_end_us)
        return self._last_us

    def _next(self) -> int:
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def _send(self, token: OcrToken) -> None:
        try:
            self._publish(token)
        except LockstepError as exc:  # the broker: the stream's own thread reports it too
            if len(self.errors) < 3:
                self.errors.append(f"{self.stream_id}: text not published: {exc}")


class StreamPerception:
    """The recognisers of one stream, fed with what it publishes.

    Args:
        stream_id: The stream.
        options: Which recognisers run and how.
        publish: Publishes a token (thread-safe; called from the recognisers' threads).
        metrics: Lag and skipped work, shared by the streams.
    """

    def __init__(self, stream_id: str, options: PerceptionOptions,
                 publish: Callable[[Token], object], metrics: PerceptionMetrics) -> None:
        self.options = options
        self.metrics = metrics
        self.sink = TextSink(stream_id, publish)
        self._ocr: Worker | None = None
        self._asr: Worker | None = None
        self._check_us = round(options.ocr_check_s * 1e6)
        self._checked_us: int | None = None  # capture time of the last frame offered
        if options.ocr:
            config = OcrConfig(round(options.ocr_every_s * 1e6), options.ocr_change,
                               options.ocr_limit_side)
            self._ocr = Worker(f"ocr-{stream_id}", functools.partial(ReadText, config),
                               self._read, policy="latest", lossless=options.lossless,
                               background=options.background,
                               on_skip=functools.partial(metrics.skip, "ocr"))
        if options.asr:
            chunks = max(1, round(options.asr_backlog_s / 0.02))
            self._asr = Worker(f"asr-{stream_id}",
                               functools.partial(HearSpeech, AsrConfig(options.asr_grammar)),
                               self._heard, policy="fifo", capacity=chunks,
                               lossless=options.lossless, background=options.background,
                               on_skip=self._dropped_audio)

    @property
    def workers(self) -> list[Worker]:
        """The running recognisers."""
        return [w for w in (self._ocr, self._asr) if w is not None]

    def start(self) -> None:
        """Start the recognisers (they load their models; see :meth:`wait_ready`)."""
        for worker in self.workers:
            worker.start()

    def wait_ready(self) -> None:
        """Wait until every recogniser is ready.

        Raises:
            MediaError: One could not start (a missing grammar, a broken model).
        """
        for worker in self.workers:
            worker.wait_ready(self.options.start_timeout_s)

    def observe(self, token: Token) -> None:
        """The stream published ``token``: offer it to the recogniser that wants it."""
        now = time.monotonic()
        if isinstance(token, VideoToken):
            self.sink.media(token.t_us)
            last = self._checked_us
            if self._ocr is not None and (last is None or token.t_us - last >= self._check_us):
                self._checked_us = token.t_us
                self._ocr.offer(FrameJob(token.t_us, token.format, token.width, token.height,
                                         token.data, now))
        elif isinstance(token, AudioToken):
            self.sink.media(token.t_us)
            if (self._asr is not None and token.encoding == "pcm_s16le"
                    and token.sample_rate == 16_000 and token.channels == 1):
                self._asr.offer(ChunkJob(token.t_us, token.data, now))

    def close(self, timeout_s: float | None = None) -> list[str]:
        """Let the recognisers finish (at most ``timeout_s`` each); return their errors."""
        timeout = self.options.drain_timeout_s if timeout_s is None else timeout_s
        errors = []
        for worker in self.workers:
            if not worker.close(timeout) and worker.error is None:
                worker.error = f"{worker.name} did not finish within {timeout:.0f} s"
            if worker.error is not None:
                errors.append(worker.error)
        return errors + self.sink.errors

    def _read(self, result: Any) -> None:
        if isinstance(result, Reading):
            tokens = self.sink.scene(result.t_us, result.boxes)
            self.metrics.observe("ocr", time.monotonic() - result.offered_at, tokens)
        elif isinstance(result, Failed):
            self.metrics.fail("ocr")

    def _dropped_audio(self, chunks: int) -> None:
        self.metrics.drop("asr", chunks)

    def _heard(self, result: Any) -> None:
        if isinstance(result, Heard):
            self.sink.speech(result.since_us, result.until_us, result.text, result.confidence)
            self.metrics.observe("asr", time.monotonic() - result.offered_at, 1)
        elif isinstance(result, Skipped):
            self.metrics.skip("asr")
