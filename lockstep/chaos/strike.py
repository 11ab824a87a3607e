"""Striking a scenario's fault at its time, and what it did (for the outcome).

A role kill picks the process of the role whose partitions carry the most live streams,
SIGKILLs it and starts it again; a broker fault SIGTERMs or SIGKILLs one node and starts
it on its log dir; hostile input and floods are written beside the live streams. Each
returns a :class:`Strike`: when it struck, and what the ledger must also account for.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from lockstep.agents.runner import groups_of
from lockstep.chaos.inject import Sent, send_flood, send_hostile
from lockstep.chaos.outcome import Rss
from lockstep.chaos.procs import Pipeline, RoleProcess
from lockstep.chaos.readback import Source
from lockstep.chaos.scenarios import BrokerDown, Flood, HostileInput, KillRole, Scenario
from lockstep.config.settings import Settings
from lockstep.errors import BrokerError, LockstepError
from lockstep.kafka.apache import ApacheKafka, KafkaCluster, KafkaNode
from lockstep.kafka.groups import Group, describe
from lockstep.kafka.readback import partition_of
from lockstep.observe.metrics import fetch, parse
from lockstep.topics.keys import TokenKey

log = logging.getLogger(__name__)

Brokers = ApacheKafka | KafkaCluster
#: How often the align processes' RSS is read during a flood.
_RSS_EVERY_S = 0.25


class RssWatch:
    """Reads the RSS of some processes until stopped; keeps each one's peak."""

    def __init__(self, processes: Sequence[RoleProcess]) -> None:
        self.processes = list(processes)
        self.peak: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> dict[str, int]:
        """Read every process's RSS now (kB); update the peaks."""
        now = {p.name: kb for p in self.processes if (kb := p.rss_kb()) is not None}
        for name, kb in now.items():
            self.peak[name] = max(kb, self.peak.get(name, 0))
        return now

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(_RSS_EVERY_S)

    def start(self) -> None:
        """Sample every 0.25 s from now on."""
        self._task = asyncio.create_task(self._run(), name="lockstep.chaos.rss")

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


_METRICS_URL = re.compile(r"metrics on (http://\S+/metrics)")


def _streams_held(process: RoleProcess) -> float | None:
    """``lockstep_align_streams`` of an align process now (None: not readable)."""
    urls = _METRICS_URL.findall(process.tail(10**7))
    if not urls:
        return None
    try:
        gauges = parse(fetch(urls[-1], timeout_s=2.0)).gauges
    except (LockstepError, OSError):
        return None
    held = gauges.get("lockstep_align_streams")
    return None if held is None else sum(held.values())


async def wait_evicted(processes: Sequence[RoleProcess], at_most: int, timeout_s: float,
                       settle_s: float) -> bool:
    """Wait until every align process holds at most ``at_most`` streams, then ``settle_s``.

    A flood is read (and its streams' TTLs start) long after it was published when the
    align processes fall behind; RSS "once evicted" is read after this.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        held = [await asyncio.to_thread(_streams_held, p) for p in processes]
        if all(h is not None and h <= at_most for h in held):
            await asyncio.sleep(settle_s)  # the heap trim follows the last eviction
            return True
        await asyncio.sleep(0.5)
    return False


@dataclass
class Strike:
    """What a fault did."""

    what: str
    at_us: int
    #: Records the pipeline must dead-letter, and tokens it must settle, besides the live ones.
    hostile: dict[Source, Sent] = field(default_factory=dict)
    tokens: set[TokenKey] = field(default_factory=set)
    not_delivered: int = 0
    #: Align processes' RSS before a flood, and the watch that keeps their peaks since.
    rss_start: dict[str, int] = field(default_factory=dict)
    rss_watch: RssWatch | None = None
    done_at: float = 0.0

    async def finish(self, pipeline: Pipeline) -> dict[str, Rss]:
        """Stop watching; return each align process's RSS before, at peak and now."""
        watch = self.rss_watch
        if watch is None:
            return {}
        now = watch.sample()
        await watch.stop()
        return {name: Rss(start, max(watch.peak.get(name, 0), now[name]), now[name])
                for name, start in self.rss_start.items() if name in now}


def node_of(brokers: Brokers, index: int) -> KafkaNode:
    """The ``index``-th node (a single broker is node 0)."""
    return brokers.node if isinstance(brokers, ApacheKafka) else brokers.nodes[index]


def live_partitions(settings: Settings, roles: str, live: Sequence[str]) -> set[int]:
    """The partitions of ``roles``' input topics that carry the live streams."""
    count = (settings.topics.media_partitions if roles.startswith("align")
             else settings.topics.pipeline_partitions)
    return {partition_of(sid.encode(), count) for sid in live}


async def victim(settings: Settings, pipeline: Pipeline, roles: str,
                 live: Sequence[str]) -> RoleProcess:
    """The process of ``roles`` whose partitions carry the most live streams.

    Raises:
        BrokerError: No process runs ``roles``.
    """
    candidates = pipeline.of(roles)
    if not candidates:
        raise BrokerError(f"no process runs {roles}: nothing to kill")
    if len(candidates) == 1:
        return candidates[0]
    group = (await asyncio.to_thread(describe, settings, groups_of(settings, roles)[:1]))[0]
    chosen = busiest(group, live_partitions(settings, roles, live),
                     [p.client_id for p in candidates])
    return next(p for p in candidates if p.client_id == chosen)


async def strike(scenario: Scenario, settings: Settings, brokers: Brokers, pipeline: Pipeline,
                 live: Sequence[str], started_us: int, prefix: str) -> Strike:
    """Wait until the scenario's fault time, strike, and return what was done."""
    fault = scenario.fault
    await asyncio.sleep(scenario.fault_at_s)
    if isinstance(fault, KillRole):
        proc = await victim(settings, pipeline, fault.roles, live)
        pid = proc.pid
        proc.kill()
        done = Strike(f"SIGKILL {proc.name} (pid {pid}), restarted "
                      f"{fault.restart_after_s:g} s later", time.time_ns() // 1000)
        await asyncio.sleep(fault.restart_after_s)
        proc.start()
    elif isinstance(fault, BrokerDown):
        node = node_of(brokers, fault.node)
        signal = "SIGKILL" if fault.hard else "SIGTERM"
        began = time.monotonic()
        await asyncio.to_thread(node.take_down, hard=fault.hard)
        at_us = time.time_ns() // 1000
        await asyncio.sleep(fault.down_s)
        await asyncio.to_thread(node.start)
        done = Strike(f"{signal} broker node {node.address.node_id}, down "
                      f"{time.monotonic() - began:.1f} s until ready again", at_us)
    elif isinstance(fault, HostileInput):
        at_us = time.time_ns() // 1000
        sources = await send_hostile(settings.kafka, live, fault, started_us, fps=30.0)
        done = Strike(f"{len(sources)} hostile records over {fault.spread_s:g} s", at_us,
                      hostile=sources)
    else:
        done = await _flood(settings, pipeline, prefix, fault)
    done.done_at = time.monotonic()
    log.info("%s: %s", scenario.name, done.what)
    return done


async def _flood(settings: Settings, pipeline: Pipeline, prefix: str, fault: Flood) -> Strike:
    watch = RssWatch([p for p in pipeline.processes if p.roles == "align"])
    start = watch.sample()
    watch.start()
    at_us = time.time_ns() // 1000
    try:
        keys, failed = await send_flood(settings.kafka, prefix, fault)
    except BaseException:
        await watch.stop()
        raise
    # The flood is read, aligned and evicted after it is published: the watch goes on.
    return Strike(f"{len(keys)} tokens of {fault.streams} new streams", at_us, tokens=keys,
                  not_delivered=failed, rss_start=start, rss_watch=watch)


def busiest(group: Group, partitions: set[int], client_ids: list[str]) -> str:
    """Of ``client_ids``, the member owning the most of ``partitions`` (any topic)."""
    def load(client_id: str) -> int:
        return sum(1 for _, p in group.members.get(client_id, ()) if p in partitions)
    return max(client_ids, key=load)

