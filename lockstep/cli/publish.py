"""``lockstep publish``: media files, URLs and devices, or synthetic streams, onto the bus.

The command checks its options, the stream ids and the cluster, then runs one of its two
bodies: :func:`publish_media` (SOURCEs through PyAV, sidecars, perception) or
:func:`publish_synthetic_command` (generated streams in real time). Both print the same
summary (:mod:`lockstep.media.progress`).

Synthetic streams are published in real time at the wall clock. Their capture grid is
anchored at the Unix epoch, so ``seq = round(t_us / period)``: publishing again under the
same stream ids continues every ``seq`` where the clock says, with no state kept between
runs (the captures in between show as a gap, as a camera's frame counter would), and the
window keys (``window_seq`` = the anchor frame's ``seq``) never repeat. Unique ids per run
would do the same but break what follows a stream by its id (``subscribe --stream``,
dashboards).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import bootstrap_option, check_cluster, kafka_overrides, settings_for
from lockstep.config.settings import Settings
from lockstep.errors import BadInput, BrokerError, ConfigError, MediaError, ReasonCode
from lockstep.kafka.logfilter import route_client_logs
from lockstep.kafka.retry import DELIVERY_TIMEOUT_S
from lockstep.media.perception import PerceptionMetrics, PerceptionOptions
from lockstep.media.progress import progress_line, render_summary, summary
from lockstep.media.publishing import MediaPublish, StreamPlan, StreamProgress, plan_streams
from lockstep.media.recognizers import require
from lockstep.media.sidecar import Sidecar, read_sidecar
from lockstep.media.source import MediaOptions
from lockstep.producer.checks import capture_plan, check_stream_ids, summary_lines
from lockstep.producer.delivery import PublishReport
from lockstep.producer.publisher import Publisher
from lockstep.producer.realtime import publish_synthetic
from lockstep.producer.synthetic import SyntheticConfig, synthetic_config, synthetic_ids
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics import catalog
from lockstep.topics.schemas import Modality

#: ``publish`` options that only apply to media SOURCEs (their parameter names).
MEDIA_ONLY = ("anchor", "sidecar_ocr", "sidecar_sensor", "asr", "asr_grammar", "ocr",
              "ocr_every", "perception_cpu", "input_format", "compression", "idempotence")


@click.command()
@bootstrap_option
@click.argument("sources", nargs=-1, metavar="[SOURCE]...")
@click.option("--synthetic", is_flag=True,
              help="Publish generated streams (moving-pattern video, tone audio, OCR, IMU) "
                   "instead of SOURCEs.")
@click.option("--stream", "stream_ids", multiple=True, metavar="ID",
              help="Stream id: one per stream, or one for all (numbered ID-0, ID-1...).")
@click.option("--streams", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Streams per SOURCE (with --synthetic: how many synthetic streams).")
@click.option("--seconds", default=None, type=click.FloatRange(0.1, 86400),
              help="Stop after this much media time (--synthetic: wall time, default 10).")
@click.option("--prefix", default="synthetic-", show_default=True,
              help="--synthetic without --stream: stream ids are PREFIX + cam<i>.")
@click.option("--realtime/--fast", default=True, show_default=True,
              help="Pace tokens at their capture times, or publish as fast as possible.")
@click.option("--anchor", default="wall", show_default=True, metavar="wall|file|TIME",
              help="Capture time of the media's start: now, the file's creation_time, "
                   "an ISO 8601 instant or µs since the epoch.")
@click.option("--fps", type=click.FloatRange(0.1, 1000), default=None,
              help="Target video rate (default: the source's).")
@click.option("--width", type=click.IntRange(2, 16384), default=None, help="Frame width.")
@click.option("--height", type=click.IntRange(2, 16384), default=None, help="Frame height.")
@click.option("--format", "video_format", default=None,
              type=click.Choice(["jpeg", "png", "rgb24", "gray8"]),
              help="Frame encoding (default: jpeg; gray8 with --synthetic).")
@click.option("--jpeg-quality", default=80, show_default=True, type=click.IntRange(1, 100))
@click.option("--chunk-ms", default=20.0, show_default=True, type=click.FloatRange(20, 40),
              help="Audio chunk length (16 kHz mono pcm_s16le).")
@click.option("--video/--no-video", default=True, show_default=True)
@click.option("--audio/--no-audio", default=True, show_default=True)
@click.option("--sidecar-ocr", type=click.Path(dir_okay=False, path_type=Path),
              help="OCR tokens from a JSONL file (docs/media.md).")
@click.option("--sidecar-sensor", type=click.Path(dir_okay=False, path_type=Path),
              help="Sensor tokens from a JSONL file (docs/media.md).")
@click.option("--asr", is_flag=True, help="Speech recognition on the audio (extra: asr).")
@click.option("--asr-grammar", type=click.Path(dir_okay=False, path_type=Path),
              help="JSGF grammar that narrows the ASR vocabulary (implies --asr).")
@click.option("--ocr", is_flag=True, help="OCR on sampled frames (extra: ocr).")
@click.option("--ocr-every", default=1.0, show_default=True, type=click.FloatRange(0.01),
              help="Seconds of media between OCR frames.")
@click.option("--perception-cpu", type=click.Choice(["idle", "shared"]), default="idle",
              show_default=True,
              help="CPU for --ocr/--asr: idle takes only what the machine leaves (frames never "
                   "wait; a busy host reads fewer frames), shared competes like the publisher.")
@click.option("--input-format", default=None, metavar="FMT",
              help="FFmpeg input format for devices (v4l2, alsa, lavfi...).")
@click.option("--compression", default="lz4", show_default=True,
              type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]))
@click.option("--idempotence/--no-idempotence", default=True, show_default=True,
              help="Idempotent producer (turn off for brokers without idempotent producers).")
@click.option("--delivery-timeout", default=120.0, show_default=True,
              type=click.FloatRange(1, 86400), metavar="SECONDS",
              help="How long a token is retried (broker restart, timeouts) before it counts "
                   "as failed; also how long to wait for a broker that is down at start.")
@click.option("--progress/--no-progress", default=None,
              help="Progress line on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def publish(ctx: click.Context, /, bootstrap: str | None, sources: tuple[str, ...],
            synthetic: bool, stream_ids: tuple[str, ...], streams: int, seconds: float | None,
            prefix: str, delivery_timeout: float, **media: Any) -> None:
    """Publish media to the media.* topics: files, URLs or devices that PyAV opens.

    Video is sampled, resized and encoded (JPEG by default), audio resampled to 16 kHz
    mono PCM chunks, with capture times from the container's PTS; OCR and sensor tokens
    come from JSONL sidecars. With --synthetic, generated streams are published in real
    time instead. Stream ids and capture times are checked before anything is sent (one
    from the future exits 2); media published --fast, or captured long before it is
    published, is marked replay (docs/media.md). Prints a summary; exits 1 if a stream did
    not complete, a token was refused before sending because align would dead-letter it,
    or a token was not acknowledged by the broker within --delivery-timeout (the summary
    and the error line say how many tokens per modality were sent, acknowledged and failed).
    """
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    check_stream_ids(stream_ids)
    if synthetic:
        if sources:
            raise ConfigError("give SOURCEs or --synthetic, not both")
        given = [name for name in MEDIA_ONLY if _given(ctx, name)]
        if given or not media["realtime"]:
            flag = "--fast" if not given else f"--{given[0].replace('_', '-')}"
            raise ConfigError(f"{flag} applies to media SOURCEs, not to --synthetic")
        if stream_ids and _given(ctx, "prefix"):
            raise ConfigError("give --stream or --prefix, not both")
        ids = synthetic_ids(stream_ids, streams, prefix)
        config = synthetic_config(
            fps=media["fps"], width=media["width"], height=media["height"],
            video_format=media["video_format"] or "gray8", jpeg_quality=media["jpeg_quality"],
            chunk_ms=media["chunk_ms"], video=media["video"], audio=media["audio"],
            max_record_bytes=settings.kafka.max_record_bytes)
    elif _given(ctx, "prefix"):
        raise ConfigError("--prefix names --synthetic streams: give --stream ID")
    # A broker down at start is waited for as long as a delivery is (--delivery-timeout).
    check_cluster(settings, timeout_s=delivery_timeout)
    route_client_logs()
    if synthetic:
        publish_synthetic_command(settings, ids, seconds or 10.0, config,
                                  delivery_timeout=delivery_timeout,
                                  progress=media["progress"], as_json=media["as_json"])
        return
    media["video_format"] = media["video_format"] or "jpeg"
    report = publish_media(settings, sources, stream_ids, streams, seconds,
                           delivery_timeout=delivery_timeout, **media)
    if report["ok"]:
        return
    incomplete = [sid for sid, s in report["streams"].items() if not s["complete"]]
    lost = (f"{report['failed'] + report['undelivered']:,} of {report['tokens_published']:,} "
            f"tokens not delivered ({report['delivery_line']})")
    if incomplete:
        raise MediaError(f"publishing incomplete: streams {incomplete} did not finish; {lost}")
    if report["refused"]:
        reason = next(e for e in report["delivery_errors"] if "refused before sending" in e)
        raise BadInput(f"{report['refused']:,} of {report['tokens_published']:,} tokens "
                       f"refused before sending, as align would dead-letter them ({reason}); "
                       f"{lost}", ReasonCode.FUTURE_T_US)
    raise BrokerError(f"{lost}; first error: {(report['delivery_errors'] or ['none'])[0]}")


def _given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given (on the command line or in the environment)."""
    source = ctx.get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT)


def publish_media(settings: Settings, sources: Sequence[str], stream_ids: Sequence[str],
                  copies: int, seconds: float | None, *, realtime: bool, anchor: str,
                  fps: float | None, width: int | None, height: int | None,
                  video_format: Any, jpeg_quality: int, chunk_ms: float, video: bool,
                  audio: bool, sidecar_ocr: Path | None, sidecar_sensor: Path | None,
                  asr: bool, asr_grammar: Path | None, ocr: bool, ocr_every: float,
                  perception_cpu: str, input_format: str | None, compression: Any,
                  idempotence: bool, progress: bool | None, as_json: bool,
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
                                   ocr_every_s=ocr_every, lossless=not realtime,
                                   background=perception_cpu == "idle")

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


def publish_synthetic_command(settings: Settings, stream_ids: Sequence[str], seconds: float,
                              config: SyntheticConfig, *, delivery_timeout: float,
                              progress: bool | None, as_json: bool) -> dict[str, Any]:
    """Publish the streams in real time, show progress, print the summary; return it.

    Raises:
        BrokerError: The broker stayed unreachable (nothing was sent), or tokens were not
            acknowledged within ``delivery_timeout`` (after the summary).
    """
    telemetry = Telemetry()
    streams = {sid: StreamProgress(StreamPlan(sid, "synthetic"), declared_s=seconds)
               for sid in stream_ids}
    show = sys.stderr.isatty() if progress is None else progress

    def tick(report: PublishReport, elapsed: float) -> None:
        _follow(streams, report, min(elapsed, seconds), done=elapsed >= seconds)
        line = progress_line(list(streams.values()), elapsed, report.bytes_sent)
        click.echo(f"\r{line}", err=True, nl=False)

    report = run_async(publish_synthetic(settings.kafka, list(stream_ids), seconds, telemetry,
                                         config=config, delivery_timeout_s=delivery_timeout,
                                         epoch_us=0, on_tick=tick if show else None))
    if show:
        click.echo("", err=True)
    _follow(streams, report, seconds, done=True)
    stage = telemetry.stage_stats().get("publish")
    out = summary(list(streams.values()), report.stats(), 0, report.seconds,
                  (round(stage.p50_ms, 3), round(stage.p99_ms, 3)) if stage else None)
    out.update(
        sent=sum(report.sent.values()), retries=report.retries, refused=0, replay=[],
        replay_reason="",
        video={"format": config.video_format, "width": config.width, "height": config.height,
               "fps": config.fps} if Modality.VIDEO not in config.withheld else None,
        seq={sid: {m: list(span) for (s, m), span in sorted(report.seqs.items()) if s == sid}
             for sid in stream_ids})
    click.echo(json.dumps(out) if as_json else "\n".join([render_summary(out), *_notes(out)]))
    if not report.ok:
        first = f"; first error: {report.errors[0]}" if report.errors else ""
        raise BrokerError(f"{len(report.failed):,} of {sum(report.sent.values()):,} tokens "
                          f"not delivered ({report.line()}){first}")
    return out


def _follow(streams: dict[str, StreamProgress], report: PublishReport, media_s: float, *,
            done: bool) -> None:
    for sid, stream in streams.items():
        stream.sent = Counter(report.by_stream.get(sid, {}))
        stream.media_s = media_s
        stream.done = done


def _notes(out: dict[str, Any]) -> list[str]:
    video = out["video"]
    lines = [f"video {video['width']}x{video['height']} {video['format']} at "
             f"{video['fps']:g} fps"] if video else []
    spans = [f"{sid} {m} {first:,}-{last:,}" for sid, seqs in list(out["seq"].items())[:3]
             for m, (first, last) in seqs.items() if m == "video" or not video]
    if spans:
        more = ", …" if len(out["seq"]) > 3 else ""
        lines.append(f"seq from the capture clock (continues across runs under the same ids): "
                     f"{', '.join(spans[:3])}{more}")
    return lines
