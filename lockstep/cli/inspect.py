"""``lockstep inspect``: read dead letters, late tokens, responses or windows back, decoded."""

from __future__ import annotations

import json
import time

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import bootstrap_option, kafka_overrides, settings_for
from lockstep.kafka.reader import read_records
from lockstep.observe.describe import as_json, describe, parse_since
from lockstep.topics import catalog

#: What can be inspected, and its topic.
TOPICS = {"deadletter": catalog.DEADLETTER, "late": catalog.LATE,
          "responses": catalog.RESPONSES, "windows": catalog.ALIGNED}


@click.command()
@click.argument("what", type=click.Choice(sorted(TOPICS)))
@bootstrap_option
@click.option("--stream", "stream_ids", multiple=True, metavar="ID",
              help="Only records of these streams (repeatable).")
@click.option("--since", metavar="WHEN",
              help="Records produced since: a duration ago (10m, 2h), an ISO time or epoch ms "
                   "(default: all retained).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new records.")
@click.option("--max", "max_records", default=0, type=click.IntRange(0),
              help="Stop after this many records (0: no limit).")
@click.option("--jsonl", "--json", "as_jsonl", is_flag=True, help="One JSON object per line.")
@click.pass_context
def inspect(ctx: click.Context, what: str, bootstrap: str | None, stream_ids: tuple[str, ...],
            since: str | None, follow: bool, max_records: int, as_jsonl: bool) -> None:
    """Print a pipeline topic's records, decoded and readable.

    WHAT is deadletter (why each record was refused, and where it came from), late (why
    each token missed its window), responses (status, detail and output) or windows (what
    each holds). Without --follow it stops at the end of the topic as it was when it
    started.
    """
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    since_ms = parse_since(since) if since else None

    async def main() -> int:
        count = 0
        async for read in read_records(settings.kafka, TOPICS[what], since_ms=since_ms,
                                       follow=follow, stream_ids=stream_ids):
            now = time.time_ns() // 1000
            click.echo(json.dumps(as_json(read, now_us=now)) if as_jsonl
                       else describe(read, now_us=now if what == "responses" else None))
            count += 1
            if max_records and count >= max_records:
                break
        return count

    count = run_async(main())
    if not as_jsonl:
        click.echo(f"{count} {what} record{'s' if count != 1 else ''}", err=True)
