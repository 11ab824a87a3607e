"""``lockstep publish`` and ``lockstep subscribe``: the producer and consumer ends by hand."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import click
from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.clikit import (
    bootstrap_option,
    check_cluster,
    kafka_overrides,
    run_async,
    settings_for,
)
from lockstep.errors import BadInput, BrokerError, ConfigError, MediaError
from lockstep.logfilter import route_client_logs
from lockstep.records import describe_response
from lockstep.streams.settings import Settings
from lockstep.topics import catalog
from lockstep.topics.admin import admin_client, wait_for_partitions
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import Response


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
              help="--synthetic: stream ids are PREFIX + cam<i>.")
@click.option("--realtime/--fast", default=True, show_default=True,
              help="Pace tokens at their capture times, or publish as fast as possible.")
@click.option("--anchor", default="wall", show_default=True, metavar="wall|file|TIME",
              help="Capture time of the media's start: now, the file's creation_time, "
                   "an ISO 8601 instant or µs since the epoch.")
@click.option("--fps", type=click.FloatRange(0.1, 1000), default=None,
              help="Target video rate (default: the source's).")
@click.option("--width", type=click.IntRange(2, 16384), default=None, help="Frame width.")
@click.option("--height", type=click.IntRange(2, 16384), default=None, help="Frame height.")
@click.option("--format", "video_format", default="jpeg", show_default=True,
              type=click.Choice(["jpeg", "png", "rgb24", "gray8"]), help="Frame encoding.")
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
    come from JSONL sidecars. Prints a summary; exits 1 if a stream did not complete or a
    token was not acknowledged by the broker within --delivery-timeout (the summary and
    the error line say how many tokens per modality were sent, acknowledged and failed).
    """
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    check_cluster(settings)
    route_client_logs()
    if synthetic:
        if sources:
            raise ConfigError("give SOURCEs or --synthetic, not both")
        _publish_synthetic(settings, streams, seconds or 10.0, prefix, delivery_timeout)
        return
    from lockstep.media.command import publish_media

    report = publish_media(settings, sources, stream_ids, streams, seconds,
                           delivery_timeout=delivery_timeout, **media)
    if report["ok"]:
        return
    incomplete = [sid for sid, s in report["streams"].items() if not s["complete"]]
    lost = (f"{report['failed'] + report['undelivered']:,} of {report['tokens_published']:,} "
            f"tokens not delivered ({report['delivery_line']})")
    if incomplete:
        raise MediaError(f"publishing incomplete: streams {incomplete} did not finish; {lost}")
    raise BrokerError(f"{lost}; first error: {(report['delivery_errors'] or ['none'])[0]}")


def _publish_synthetic(settings: Settings, streams: int, seconds: float, prefix: str,
                       delivery_timeout: float) -> None:
    from lockstep.publisher import publish_synthetic
    from lockstep.streams.telemetry import Telemetry

    telemetry = Telemetry()
    ids = [f"{prefix}cam{i}" for i in range(streams)]
    report = run_async(publish_synthetic(settings.kafka, ids, seconds, telemetry,
                                         delivery_timeout_s=delivery_timeout))
    stats = telemetry.stage_stats().get("publish")
    failed = report.failed_by_modality
    click.echo(json.dumps({
        "ok": report.ok,
        "tokens_published": len(report.keys),
        "tokens_by_modality": dict(sorted(report.by_modality.items())),
        "sent": sum(report.sent.values()),
        "acked": len(report.keys),
        "failed": len(report.failed),
        "delivery": {m: {"sent": n, "acked": report.by_modality[m], "failed": failed[m]}
                     for m, n in sorted(report.sent.items())},
        "retries": report.retries,
        "delivery_errors": report.errors,
        "streams": ids,
        "seconds": round(report.seconds, 3),
        "publish_p50_ms": round(stats.p50_ms, 3) if stats else None,
        "publish_p99_ms": round(stats.p99_ms, 3) if stats else None,
    }))
    if not report.ok:
        first = f"; first error: {report.errors[0]}" if report.errors else ""
        raise BrokerError(f"{len(report.failed):,} of {sum(report.sent.values()):,} tokens "
                          f"not delivered ({report.line()}){first}")


@click.command()
@bootstrap_option
@click.option("--topic", default=catalog.RESPONSES, show_default=True,
              help="Response topic to read.")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest response.")
@click.option("--max", "max_records", default=0, type=click.IntRange(0),
              help="Stop after this many responses (0: no limit).")
@click.option("--timeout", default=0.0, type=click.FloatRange(0),
              help="Stop after this many idle seconds (0: never).")
@click.option("--stream", "stream_ids", multiple=True, metavar="ID",
              help="Only these streams (repeatable).")
@click.option("--jsonl", "--json", "as_json", is_flag=True,
              help="One JSON object per line (the response plus e2e_ms and received_ms).")
@click.pass_context
def subscribe(ctx: click.Context, bootstrap: str | None, topic: str, from_beginning: bool,
              max_records: int, timeout: float, stream_ids: tuple[str, ...],
              as_json: bool) -> None:
    """Print responses as they arrive, one per line, with their end-to-end latency.

    e2e is capture time of the window's newest token → response produced (the pipeline's
    own figure); "received" is capture → this command reading it (includes the hop to here).
    """
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    check_cluster(settings)
    wanted = {sid.encode() for sid in stream_ids}

    async def main() -> int:
        admin = admin_client(settings.kafka.confluent_config())
        counts = await asyncio.to_thread(wait_for_partitions, admin, [topic], 5.0)
        consumer = AIOKafkaConsumer(**settings.kafka.aiokafka_options(), group_id=None,
                                    enable_auto_commit=False,
                                    fetch_max_wait_ms=settings.kafka.fetch_max_wait_ms)
        await consumer.start()
        count = 0
        try:
            tps = [TopicPartition(topic, p) for p in range(counts[topic])]
            consumer.assign(tps)
            await (consumer.seek_to_beginning(*tps) if from_beginning
                   else consumer.seek_to_end(*tps))
            idle_since = time.monotonic()
            while not max_records or count < max_records:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    for record in records:
                        if wanted and record.key not in wanted:
                            continue
                        if max_records and count >= max_records:
                            break
                        _echo(record.value, as_json)
                        count += 1
                if batches:
                    idle_since = time.monotonic()
                elif timeout and time.monotonic() - idle_since > timeout:
                    break
        except asyncio.CancelledError:
            pass
        finally:
            await consumer.stop()
        return count

    run_async(main())


def _echo(value: bytes | None, as_json: bool) -> None:
    received_us = time.time_ns() // 1000
    try:
        response = decode_as(Response, value)
    except BadInput as error:
        click.echo(f"# undecodable record: {error.reason}", err=True)
        return
    if as_json:
        timeline = response.timeline
        record = response.model_dump(mode="json")
        record.update(e2e_ms=round((timeline.responded_us - timeline.capture_us) / 1000.0, 3),
                      received_ms=round((received_us - timeline.capture_us) / 1000.0, 3))
        click.echo(json.dumps(record))
        return
    click.echo(describe_response(response, now_us=received_us))
