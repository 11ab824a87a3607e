"""The limit: a raw consume→produce pass-through over the pipeline's hops, same client.

A source process produces ``records`` synthetic tokens (the encoded media mix of one
stream-second, cycled over 16 keys) as fast as it can to ``bench.raw.<run>.0``; three hop
processes (as many as the pipeline's align, route and worker hops) each consume one topic
and produce every record unchanged to the next, with the roles' own aiokafka consumer and
producer settings (but a linger of :data:`LINGER_MS`: a throughput client's batching, so
that the roles' latency setting does not lower the limit) and a commit per batch; the
bench reads the last topic. The max sustained rate is what arrives at the end between the
10th and the 90th percentile of arrivals (the join and the tail left out). Nothing is
decoded: this is what the client and the broker allow on this machine, the ceiling the
pipeline's throughput is compared with.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import KafkaException

from lockstep.bench.pipeline.procs import BenchProcessError, cpu_seconds
from lockstep.config.settings import KafkaSettings
from lockstep.kafka.admin import admin_client, ensure_topics
from lockstep.producer.synthetic import SyntheticStream
from lockstep.topics.catalog import TopicSpec
from lockstep.topics.codec import encode

HOPS = 3
#: The pass-through producers' linger, ms (the roles' was 2 ms until 6 December; at 0 the
#: pass-through moved 6,300-10,400 records/s against 8,600-16,700 at 2 ms, alternating runs
#: on Apache Kafka on the 2-core development machine).
LINGER_MS = 2.0
log = logging.getLogger(__name__)


def payloads() -> list[bytes]:
    """The encoded tokens of one synthetic stream-second (30 frames, 50 chunks, …)."""
    start_us = 1_700_000_000_000_000
    return [encode(t) for t in SyntheticStream("raw", start_us).due(start_us + 999_999)]


def _consumer(kafka: KafkaSettings, group: str | None) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        **kafka.aiokafka_options(), group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=kafka.fetch_max_wait_ms,
        max_partition_fetch_bytes=kafka.max_record_bytes,
        fetch_max_bytes=max(kafka.max_record_bytes, 52_428_800),
        session_timeout_ms=kafka.session_timeout_ms,
        heartbeat_interval_ms=max(100, kafka.session_timeout_ms // 3))


def _producer(kafka: KafkaSettings) -> AIOKafkaProducer:
    from lockstep.agents.runner import producer

    return producer(kafka, linger_ms=LINGER_MS)


async def _hop(kafka: KafkaSettings, source: str, target: str, group: str,
               total: int, timeout_s: float) -> None:
    consumer, producer = _consumer(kafka, group), _producer(kafka)
    await consumer.start()
    await producer.start()
    moved = 0
    deadline = time.monotonic() + timeout_s
    try:
        consumer.subscribe([source])
        while moved < total and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=100, max_records=1000)
            sends = [await producer.send(target, r.value, key=r.key)
                     for records in batches.values() for r in records]
            if sends:
                await asyncio.gather(*sends)
                await consumer.commit()
                moved += len(sends)
    finally:
        await producer.stop()
        await consumer.stop()


async def _source(kafka: KafkaSettings, topic: str, total: int) -> None:
    producer = _producer(kafka)
    await producer.start()
    try:
        values = itertools.cycle(payloads())
        pending = []
        for i in range(total):
            pending.append(await producer.send(topic, next(values), key=b"raw-%d" % (i % 16)))
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


def _hop_main(kafka: KafkaSettings, source: str, target: str, group: str, total: int,
              timeout_s: float) -> None:
    asyncio.run(_hop(kafka, source, target, group, total, timeout_s))


def _source_main(kafka: KafkaSettings, topic: str, total: int) -> None:
    asyncio.run(_source(kafka, topic, total))


async def _sink(kafka: KafkaSettings, topic: str, partitions: int, total: int,
                timeout_s: float) -> list[tuple[float, int]]:
    consumer = _consumer(kafka, None)
    await consumer.start()
    arrivals: list[tuple[float, int]] = []
    seen = 0
    deadline = time.monotonic() + timeout_s
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while seen < total and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=100, max_records=5000)
            n = sum(len(records) for records in batches.values())
            if n:
                seen += n
                arrivals.append((time.monotonic(), seen))
    finally:
        await consumer.stop()
    return arrivals


def sustained_rate(arrivals: list[tuple[float, int]], total: int) -> float | None:
    """Records/s between the arrivals of the 10th and 90th percentile of ``total``."""
    lo, hi = 0.1 * total, 0.9 * total
    t_lo = next((t for t, n in arrivals if n >= lo), None)
    hit = next(((t, n) for t, n in arrivals if n >= hi), None)
    if t_lo is None or hit is None or hit[0] <= t_lo:
        return None
    first = next(n for t, n in arrivals if t == t_lo)
    return (hit[1] - first) / (hit[0] - t_lo)


async def measure_passthrough(kafka: KafkaSettings, run_id: str, partitions: int,
                              records: int = 50_000, timeout_s: float = 180.0
                              ) -> dict[str, Any]:
    """Run the raw pass-through once; its max sustained records/s and CPU per record."""
    topics = [f"bench.raw.{run_id}.{i}" for i in range(HOPS + 1)]
    admin = admin_client(kafka.confluent_config())
    await asyncio.to_thread(ensure_topics, admin, [TopicSpec(t, partitions, 1) for t in topics])
    ctx = mp.get_context("spawn")
    hops = [ctx.Process(target=_hop_main, name=f"raw-hop-{i}", daemon=True, args=(
        kafka, topics[i], topics[i + 1], f"bench-{run_id}-raw-{i}", records, timeout_s))
        for i in range(HOPS)]
    source = ctx.Process(target=_source_main, name="raw-source", daemon=True,
                         args=(kafka, topics[0], records))
    cpu: dict[str, float] = {}
    try:
        for p in hops:
            p.start()
        source.start()
        sink = asyncio.ensure_future(_sink(kafka, topics[-1], partitions, records, timeout_s))
        while not sink.done():
            for p in (*hops, source):
                if p.pid is not None and p.is_alive() and (used := cpu_seconds(p.pid)):
                    cpu[p.name] = used
                if p.exitcode not in (None, 0):
                    sink.cancel()
                    raise BenchProcessError(f"pass-through {p.name} exited with code "
                                            f"{p.exitcode}")
            await asyncio.sleep(0.25)
        arrivals = sink.result()
    finally:
        for p in (*hops, source):
            p.join(timeout=10.0)
            if p.is_alive():
                p.kill()
                p.join()
        try:
            await asyncio.to_thread(delete_topics, kafka, topics)
        except (KafkaException, TimeoutError) as exc:  # the figures stand either way
            log.warning("could not delete the pass-through topics: %s", exc)
    arrived = arrivals[-1][1] if arrivals else 0
    rate = sustained_rate(arrivals, records)
    hop_cpu = sum(v for k, v in cpu.items() if k.startswith("raw-hop"))
    return {"records": records, "arrived": arrived, "hops": HOPS, "partitions": partitions,
            "records_per_s": None if rate is None else round(rate, 1),
            "hop_cpu_ms_per_record": round(hop_cpu * 1000 / arrived, 4) if arrived else None,
            "cpu_seconds": {k: round(v, 3) for k, v in sorted(cpu.items())}}


def delete_topics(kafka: KafkaSettings, topics: list[str]) -> None:
    """Delete a bench's own topics (waits for the cluster's answer)."""
    admin = admin_client(kafka.confluent_config())
    for future in admin.delete_topics(topics, operation_timeout=10).values():
        future.result(timeout=15)
