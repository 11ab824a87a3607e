"""``lockstep publish`` and ``lockstep subscribe``: the producer and consumer ends by hand."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import bootstrap_option, check_cluster, kafka_overrides, settings_for
from lockstep.errors import BadInput, BrokerError, ConfigError, MediaError, ReasonCode
from lockstep.kafka.logfilter import route_client_logs
from lockstep.kafka.reader import TopicReader
from lockstep.observe.describe import describe_response
from lockstep.producer.checks import check_stream_ids
from lockstep.topics import catalog
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
        from lockstep.cli.publish_synthetic import MEDIA_ONLY, synthetic_config, synthetic_ids

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
    check_cluster(settings)
    route_client_logs()
    if synthetic:
        from lockstep.cli.publish_synthetic import publish_synthetic_command

        publish_synthetic_command(settings, ids, seconds or 10.0, config,
                                  delivery_timeout=delivery_timeout,
                                  progress=media["progress"], as_json=media["as_json"])
        return
    from lockstep.cli.publish_media import publish_media

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
        reader = TopicReader(settings.kafka, [topic], what="subscribe", topic_timeout_s=5.0)
        await reader.start()
        count = 0
        try:
            await (reader.seek_to_beginning() if from_beginning else reader.seek_to_end())
            idle_since = time.monotonic()
            while not max_records or count < max_records:
                batches = await reader.fetch(timeout_ms=200)
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
            await reader.stop()
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
