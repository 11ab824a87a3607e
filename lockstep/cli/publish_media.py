"""The body of ``lockstep publish SOURCE...`` (part of the CLI's output layer)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from lockstep.config.settings import Settings
from lockstep.errors import ConfigError
from lockstep.kafka.retry import DELIVERY_TIMEOUT_S
from lockstep.media.perception import PerceptionMetrics, PerceptionOptions
from lockstep.media.progress import progress_line, render_summary, summary
from lockstep.media.publishing import MediaPublish, StreamProgress, plan_streams
from lockstep.media.recognizers import require
from lockstep.media.sidecar import Sidecar, read_sidecar
from lockstep.media.source import MediaOptions
from lockstep.producer.checks import capture_plan, check_stream_ids, summary_lines
from lockstep.producer.publisher import Publisher
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog


def publish_media(settings: Settings, sources: Sequence[str], stream_ids: Sequence[str],
                  copies: int, seconds: float | None, *, realtime: bool, anchor: str,
                  fps: float | None, width: int | None, height: int | None,
                  video_format: Any, jpeg_quality: int, chunk_ms: float, video: bool,
                  audio: bool, sidecar_ocr: Path | None, sidecar_sensor: Path | None,
                  asr: bool, asr_grammar: Path | None, ocr: bool, ocr_every: float,
                  input_format: str | None, compression: Any, idempotence: bool,
                  progress: bool | None, as_json: bool,
                  delivery_timeout: float = DELIVERY_TIMEOUT_S) -> dict[str, Any]:
    """Validate everything, publish every stream, print the summary; return it.

    Raises:
        ConfigError: Bad arguments or a missing extra.
        MediaError: A source or sidecar cannot be read (nothing was published).
        BrokerError: The media topics do not exist, or the broker stayed unreachable for
            ``delivery_timeout`` seconds (nothing was published).
    """
    plans = plan_streams(sources, stream_ids, copies)
    check_stream_ids(plan.stream_id for plan in plans)
    options = MediaOptions(fps=fps, width=width, height=height, video_format=video_format,
                           jpeg_quality=jpeg_quality, audio_chunk_ms=chunk_ms, video=video,
                           audio=audio, anchor=anchor, max_seconds=seconds,
                           input_format=input_format)
    if ocr and sidecar_ocr:
        raise ConfigError("--ocr and --sidecar-ocr both make OCR tokens: choose one")
    if ocr and not video:
        raise ConfigError("--ocr reads the video: drop --no-video")
    asr = asr or asr_grammar is not None
    if asr and not audio:
        raise ConfigError("--asr listens to the audio: drop --no-audio")
    if asr:
        require("pocketsphinx")
    if ocr:
        require("rapidocr_onnxruntime")
    sidecars: list[Sidecar] = []
    if sidecar_ocr:
        sidecars.append(read_sidecar(sidecar_ocr, "ocr"))
    if sidecar_sensor:
        sidecars.append(read_sidecar(sidecar_sensor, "sensor"))

    if ocr_every <= 0:
        raise ConfigError(f"--ocr-every must be positive, not {ocr_every}")
    # Real time: recognisers skip work to keep up; faster than that, they see everything.
    perception = PerceptionOptions(ocr=ocr, asr=asr, asr_grammar=asr_grammar,
                                   ocr_every_s=ocr_every, lossless=not realtime)

    # capture → ack is a latency only when capture times are the wall clock, paced live
    telemetry = Telemetry() if realtime and anchor == "wall" else None
    publisher = Publisher(settings.kafka, compression=compression, idempotence=idempotence,
                          telemetry=telemetry, delivery_timeout_s=delivery_timeout,
                          max_future_ms=settings.align.max_future_ms)
    publisher.wait_for_topics(catalog.MEDIA.values())
    metrics = PerceptionMetrics(telemetry.registry if telemetry is not None else None)
    job = MediaPublish(publisher, plans, options, sidecars, realtime=realtime,
                       perception=perception, metrics=metrics)
    try:  # before anything is sent: capture times from the future, replays
        capture = capture_plan(settings, job.capture_spans(), realtime=realtime, anchor=anchor)
    except ConfigError:
        job.close()
        raise
    publisher.mark_replay(capture.replay)
    show = sys.stderr.isatty() if progress is None else progress
    began = time.monotonic()

    def tick(state: Sequence[StreamProgress]) -> None:
        line = progress_line(state, time.monotonic() - began, publisher.stats().bytes_sent)
        click.echo(f"\r{line}", err=True, nl=False)

    result = job.run(on_tick=tick if show else None)
    if show:
        click.echo("", err=True)
    undelivered = publisher.close()
    elapsed = time.monotonic() - began
    stage = telemetry.stage_stats().get("publish") if telemetry else None
    ran = {m: p for m, p in metrics.summary().items()
           if (m == "ocr" and ocr) or (m == "asr" and asr)}
    report = summary(result, publisher.stats(), undelivered, elapsed,
                     (round(stage.p50_ms, 3), round(stage.p99_ms, 3)) if stage else None, ran)
    report.update(replay=sorted(capture.replay), replay_reason=capture.reason,
                  refused=sum(publisher.stats().refused.values()))
    click.echo(json.dumps(report) if as_json
               else "\n".join([render_summary(report), *summary_lines(report)]))
    return report
