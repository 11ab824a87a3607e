"""``lockstep publish`` and ``lockstep subscribe``: the producer and consumer ends by hand."""

from __future__ import annotations

import asyncio
import json
import time

import click
from aiokafka import AIOKafkaConsumer, TopicPartition

from lockstep.clikit import bootstrap_option, kafka_overrides, run_async, settings_for
from lockstep.errors import BadInput
from topics import catalog
from topics.admin import admin_client, wait_for_partitions
from topics.codec import decode_as
from topics.schemas import Response


@click.command()
@bootstrap_option
@click.option("--synthetic", is_flag=True, required=True,
              help="Publish generated streams (moving-pattern video, tone audio, OCR, IMU).")
@click.option("--streams", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--seconds", default=10.0, show_default=True, type=click.FloatRange(0.1, 86400))
@click.option("--prefix", default="synthetic-", show_default=True,
              help="Stream ids are PREFIX + cam<i>.")
@click.pass_context
def publish(ctx: click.Context, bootstrap: str | None, synthetic: bool, streams: int,
            seconds: float, prefix: str) -> None:
    """Publish media tokens to the media.* topics in real time.

    Prints one JSON line with what was published and the publish latency.
    """
    from lockstep.publisher import publish_synthetic
    from streams.telemetry import Telemetry

    del synthetic  # the only source so far; media files arrive with `publish FILE`
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    telemetry = Telemetry()
    ids = [f"{prefix}cam{i}" for i in range(streams)]
    report = run_async(publish_synthetic(settings.kafka, ids, seconds, telemetry))
    stats = telemetry.stage_stats().get("publish")
    click.echo(json.dumps({
        "tokens_published": len(report.keys),
        "tokens_by_modality": dict(sorted(report.by_modality.items())),
        "streams": ids,
        "publish_p50_ms": round(stats.p50_ms, 3) if stats else None,
        "publish_p99_ms": round(stats.p99_ms, 3) if stats else None,
    }))


@click.command()
@bootstrap_option
@click.option("--topic", default=catalog.RESPONSES, show_default=True,
              help="Response topic to read.")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest response.")
@click.option("--max", "max_records", default=0, type=click.IntRange(0),
              help="Stop after this many responses (0: no limit).")
@click.option("--timeout", default=0.0, type=click.FloatRange(0),
              help="Stop after this many idle seconds (0: never).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def subscribe(ctx: click.Context, bootstrap: str | None, topic: str, from_beginning: bool,
              max_records: int, timeout: float, as_json: bool) -> None:
    """Print responses as they arrive, one per line."""
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))

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
    try:
        response = decode_as(Response, value)
    except BadInput as error:
        click.echo(f"# undecodable record: {error.reason}", err=True)
        return
    if as_json:
        click.echo(response.model_dump_json(exclude={"scores"} if not response.scores else None))
        return
    e2e_ms = (response.timeline.responded_us - response.timeline.capture_us) / 1000.0
    click.echo(f"{response.stream_id} #{response.window_seq} [{response.route}] "
               f"{e2e_ms:.1f} ms: {response.output}")
