"""``lockstep validate``: check records from files or a topic as the pipeline would."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import bootstrap_option, kafka_overrides, settings_for
from lockstep.config.settings import KafkaSettings, Settings
from lockstep.errors import ConfigError
from lockstep.kafka.reader import TopicReader
from lockstep.kafka.types import TopicPartition
from lockstep.topics.validation import Candidate, Verdict, check, read_file


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--topic", default=None, metavar="TOPIC",
              help="Read the records of this topic (from the beginning, up to its end as it "
                   "was at the start) instead of FILEs.")
@bootstrap_option
@click.option("--max", "max_records", default=0, type=click.IntRange(0),
              help="--topic: stop after this many records (0: to the end).")
@click.option("--last", default=0, type=click.IntRange(0),
              help="--topic: only the last N records of each partition.")
@click.option("--as-topic", default=None, metavar="TOPIC",
              help="FILEs: check them as records of this topic (its kind, key and media "
                   "checks) when the input does not name one.")
@click.option("--decode", "decode_media", is_flag=True,
              help="Also decode encoded frames (FFmpeg): finds more damage, ~ms per frame.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.pass_context
def validate(ctx: click.Context, files: tuple[Path, ...], topic: str | None,
             bootstrap: str | None, max_records: int, last: int, as_topic: str | None,
             decode_media: bool, as_json: bool) -> None:
    """Check records as Lockstep would: per record PASS, or the code and field that fail.

    FILEs are raw record values (a file starting with b'LS'), hex (.hex), or JSON (.json:
    an object or an array; .jsonl: one object a line) with value_hex / value_base64 and/or
    kind + record, and optionally topic and key: the test vectors in docs/test-vectors/
    are such files. Or --topic reads a topic. Checks what one record shows (framing,
    schema, topic, key, frame structure, capture time); not the stream's clock,
    duplicates or lateness. Exits 1 when any record fails.
    """
    if bool(files) == bool(topic):
        raise ConfigError("give FILEs or --topic TOPIC (not both)")
    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    if topic is not None:
        candidates = run_async(_from_topic(settings.kafka, topic, max_records, last))
    else:
        candidates = [c if c.topic is not None or as_topic is None
                      else Candidate(c.source, c.value, as_topic, c.key, c.record, c.kind,
                                     c.error)
                      for path in files for c in read_file(path)]
    verdicts = _check_all(candidates, settings, decode_media)
    _report(verdicts, as_json)
    sys.exit(0 if verdicts and all(v.ok for v in verdicts) else 1)


def _check_all(candidates: Iterable[Candidate], settings: Settings,
               decode_media: bool) -> list[Verdict]:
    now_us = time.time_ns() // 1000
    max_future_us = int(settings.align.max_future_ms * 1000)
    return [check(c, now_us=now_us, max_future_us=max_future_us,
                  max_bytes=settings.kafka.max_record_bytes, decode_media=decode_media)
            for c in candidates]


def _report(verdicts: list[Verdict], as_json: bool) -> None:
    failed = [v for v in verdicts if not v.ok]
    codes = Counter(v.code for v in failed)
    if as_json:
        click.echo(json.dumps({"records": [v.as_json() for v in verdicts],
                               "passed": len(verdicts) - len(failed), "failed": len(failed),
                               "codes": dict(sorted(codes.items()))}, indent=2))
        return
    for v in verdicts:
        if v.ok:
            click.echo(f"PASS {v.source}: {v.kind} {v.what}")
        else:
            where = f" {v.field}" if v.field else ""
            click.echo(f"FAIL {v.source}: {v.code}{where}: {v.reason}")
        for note in v.notes:
            click.echo(f"     note: {note}")
    tally = ", ".join(f"{code} {n}" for code, n in sorted(codes.items()))
    verdict = (f"{len(verdicts)} records: {len(verdicts) - len(failed)} passed, "
               f"{len(failed)} failed" + (f" ({tally})" if tally else ""))
    click.echo(verdict if verdicts else "no records to check")


async def _from_topic(kafka: KafkaSettings, topic: str, max_records: int,
                      last: int) -> list[Candidate]:
    return [c async for c in _read(kafka, topic, max_records, last)]


async def _read(kafka: KafkaSettings, topic: str, max_records: int,
                last: int) -> AsyncIterator[Candidate]:
    count = 0
    async with TopicReader(kafka, [topic], what=f"reading {topic}") as reader:
        ends = await reader.end_offsets()
        starts = await reader.beginning_offsets()
        reader.seek({tp: max(starts[tp], ends[tp] - last) if last else starts[tp]
                     for tp in reader.partitions})
        async for records in reader.read_until(ends, timeout_ms=200, max_records=500):
            for r in records:
                if r.offset >= ends[TopicPartition(r.topic, r.partition)]:
                    continue
                yield Candidate(f"{r.topic}/{r.partition}@{r.offset}", r.value,
                                topic=r.topic, key=r.key)
                count += 1
                if max_records and count >= max_records:
                    return
