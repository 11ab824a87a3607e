"""The limit: a raw consume→produce pass-through over the pipeline's hops, per client.

A source process produces ``records`` synthetic tokens (the encoded media mix of one
stream-second, cycled over 16 keys) as fast as it can to ``bench.raw.<run>.0``; three hop
processes (as many as the pipeline's align, route and worker hops) each consume one topic
and produce every record unchanged to the next. On ``aiokafka`` (the roles' client today,
kept for continuity) they use the roles' own consumer and producer settings; on
``librdkafka`` (confluent-kafka: batch consume, idempotent producer, synchronous commit
per batch) the same group, fetch wait and acks: the limit for any Kafka pipeline in
Python here. Both producers linger
:data:`~lockstep.kafka.probes.PASSTHROUGH_LINGER_MS` (a throughput client's batching, so
that the roles' latency setting does not lower the limit), and both commit per batch; the
bench reads the last topic. The max sustained rate is what arrives at the end between the
10th and the 90th percentile of arrivals (the join and the tail left out). Nothing is
decoded: this is what the client and the broker allow on this machine, the ceiling the
pipeline's throughput is compared with.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
from typing import Any

from lockstep.agents.children import cpu_seconds
from lockstep.config.settings import KafkaSettings
from lockstep.errors import BrokerError, ProcessError
from lockstep.kafka.admin import admin_client, delete_topics, ensure_topics
from lockstep.kafka.probes import PassthroughClient, read_arrivals, run_hop, run_source
from lockstep.producer.synthetic import SyntheticStream
from lockstep.topics.catalog import TopicSpec
from lockstep.topics.codec import encode

HOPS = 3
log = logging.getLogger(__name__)


def payloads() -> list[bytes]:
    """The encoded tokens of one synthetic stream-second (30 frames, 50 chunks, …)."""
    start_us = 1_700_000_000_000_000
    return [encode(t) for t in SyntheticStream("raw", start_us).due(start_us + 999_999)]


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
                              records: int = 50_000, timeout_s: float = 180.0,
                              client: PassthroughClient = "aiokafka", idempotent: bool = True
                              ) -> dict[str, Any]:
    """Run the raw pass-through once; its max sustained records/s and CPU per record.

    ``idempotent``: librdkafka's producers are (not on the embedded broker, which refuses).
    """
    topics = [f"bench.raw.{run_id}.{client}.{i}" for i in range(HOPS + 1)]
    admin = admin_client(kafka.confluent_config())
    await asyncio.to_thread(ensure_topics, admin, [TopicSpec(t, partitions, 1) for t in topics])
    ctx = mp.get_context("spawn")
    hops = [ctx.Process(target=run_hop, name=f"raw-hop-{i}", daemon=True, args=(
        kafka, topics[i], topics[i + 1], f"bench-{run_id}-raw-{client}-{i}", records, timeout_s,
        client, idempotent)) for i in range(HOPS)]
    source = ctx.Process(target=run_source, name="raw-source", daemon=True,
                         args=(kafka, topics[0], records, payloads(), client, idempotent))
    cpu: dict[str, float] = {}
    try:
        for p in hops:
            p.start()
        source.start()
        sink = asyncio.ensure_future(read_arrivals(kafka, topics[-1], records, timeout_s))
        while not sink.done():
            for p in (*hops, source):
                if p.pid is not None and p.is_alive() and (used := cpu_seconds(p.pid)):
                    cpu[p.name] = used
                if p.exitcode not in (None, 0):
                    sink.cancel()
                    raise ProcessError(f"pass-through {p.name} exited with code "
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
        except BrokerError as exc:  # the figures stand either way
            log.warning("could not delete the pass-through topics: %s", exc)
    arrived = arrivals[-1][1] if arrivals else 0
    rate = sustained_rate(arrivals, records)
    hop_cpu = sum(v for k, v in cpu.items() if k.startswith("raw-hop"))
    return {"client": client, "records": records, "arrived": arrived, "hops": HOPS,
            "partitions": partitions,
            "records_per_s": None if rate is None else round(rate, 1),
            "hop_cpu_ms_per_record": round(hop_cpu * 1000 / arrived, 4) if arrived else None,
            "cpu_seconds": {k: round(v, 3) for k, v in sorted(cpu.items())}}
