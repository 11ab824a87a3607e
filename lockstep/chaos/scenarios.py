"""The chaos scenarios, as data: which processes run, which fault strikes, and when.

Each :class:`Scenario` names the role processes of the pipeline (``lockstep run``, one
role per process), the brokers (one Apache Kafka node, or a three-node KRaft cluster),
and one fault, struck ``fault_at_s`` into ``seconds`` of synthetic publishing.
:data:`SCENARIOS` is the list ``lockstep chaos`` runs; :mod:`lockstep.chaos.trial` runs one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from lockstep.errors import ConfigError


@dataclass(frozen=True)
class Processes:
    """``count`` processes running ``lockstep run --roles <roles>``."""

    roles: str
    count: int = 1


@dataclass(frozen=True)
class KillRole:
    """SIGKILL one process of ``roles`` (one that owns live streams); restart it later."""

    roles: str
    restart_after_s: float = 2.0


@dataclass(frozen=True)
class BrokerDown:
    """SIGKILL (``hard``) or SIGTERM one broker node; start it on its log dir ``down_s`` later."""

    hard: bool
    down_s: float = 3.0
    #: Which node of a cluster (0-based); a single broker is node 0.
    node: int = 0


@dataclass(frozen=True)
class HostileInput:
    """Hostile records (:mod:`lockstep.chaos.hostile`) interleaved with the live streams.

    Every second for ``spread_s`` seconds, ``per_kind`` records of each kind are aimed at
    each live stream (the two record-size kinds once only).
    """

    per_kind: int = 10
    spread_s: float = 15.0
    seed: int = 11


@dataclass(frozen=True)
class Flood:
    """``streams`` new stream ids with ``tokens`` tokens each (video, audio, sensor), then quiet.

    The roles run with ``align.stream_ttl_ms`` set to ``stream_ttl_ms``; the align
    processes' RSS is read before the flood, at its peak and once its streams are evicted.
    """

    streams: int = 50_000
    tokens: int = 3
    stream_ttl_ms: int = 5_000


Fault = KillRole | BrokerDown | HostileInput | Flood

#: The pipeline the issue was tried on: two align, one route, two vl workers, one text worker.
FULL: tuple[Processes, ...] = (Processes("align", 2), Processes("route"),
                               Processes("worker:vl", 2), Processes("worker:text"))


@dataclass(frozen=True)
class Scenario:
    """One chaos run: the pipeline, the brokers, the fault and its timing.

    Attributes:
        name: What ``lockstep chaos NAME`` selects.
        about: One line for people.
        fault: What strikes.
        processes: The role processes (separate ``lockstep run`` processes).
        brokers: 1 (a single node) or 3 (a KRaft cluster, replication 3, min.insync 2).
        seconds: How long the live streams publish, at least.
        fault_at_s: When the fault strikes, after publishing began.
        after_s: The live streams go on this long after the fault has passed, at least (a
            broker that takes long to come back still leaves time to see the recovery).
        settings: Extra ``LOCKSTEP_*`` settings of the role processes.
    """

    name: str
    about: str
    fault: Fault
    processes: tuple[Processes, ...] = FULL
    brokers: int = 1
    seconds: float = 35.0
    fault_at_s: float = 10.0
    after_s: float = 8.0
    settings: Mapping[str, str] = field(default_factory=dict)

    def scaled(self, seconds: float | None) -> Scenario:
        """The scenario publishing for ``seconds`` (the fault at the same share of the run)."""
        if seconds is None or seconds == self.seconds:
            return self
        return replace(self, seconds=seconds,
                       fault_at_s=round(self.fault_at_s * seconds / self.seconds, 1))

    @property
    def process_count(self) -> int:
        """How many role processes run."""
        return sum(p.count for p in self.processes)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("kill-align", "SIGKILL one of two align processes; restart it 2 s later",
             KillRole("align")),
    Scenario("kill-route", "SIGKILL the route process; restart it 2 s later",
             KillRole("route")),
    Scenario("kill-worker", "SIGKILL one of two vl workers; restart it 2 s later",
             KillRole("worker:vl")),
    Scenario("broker-sigterm", "SIGTERM the broker; start it on its log dir 3 s later",
             BrokerDown(hard=False)),
    Scenario("broker-sigkill", "SIGKILL the broker; start it on its log dir 3 s later",
             BrokerDown(hard=True)),
    Scenario("cluster-broker-kill", "3-broker KRaft cluster (replication 3, min.insync 2): "
             "SIGKILL one broker, start it again 3 s later", BrokerDown(hard=True, node=1),
             brokers=3),
    Scenario("hostile", "hostile records of every kind at each live stream, 15 s long",
             HostileInput()),
    Scenario("flood", "50,000 new stream ids of 3 tokens each, then quiet; align RSS",
             # Every flood token is aligned (none shed as stale): each stream gets state.
             Flood(), settings={"LOCKSTEP_ALIGN__STALE_AFTER_BUDGETS": "0"}),
)


def select(names: Iterable[str], scenarios: Iterable[Scenario] = SCENARIOS) -> list[Scenario]:
    """The scenarios named (all when none is), in the order given.

    Raises:
        ConfigError: A name is unknown (the message lists the known ones).
    """
    known = {s.name: s for s in scenarios}
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ConfigError(f"unknown chaos scenario {', '.join(unknown)}; "
                          f"choose from {', '.join(known)}")
    return [known[n] for n in wanted] if wanted else list(known.values())
