"""``lockstep subscribe``: responses as they arrive, one per line, with their latency."""

from __future__ import annotations

import asyncio
import json
import time

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import bootstrap_option, check_cluster, kafka_overrides, settings_for
from lockstep.errors import BadInput
from lockstep.kafka.reader import TopicReader
from lockstep.observe.describe import describe_response
from lockstep.topics import catalog
from lockstep.topics.codec import decode_as
from lockstep.topics.schemas import Response


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
