"""What a chaos scenario measured, and whether it met the acceptance.

Pure: :class:`Outcome` holds the counts read back from the topics and the processes'
fates; :meth:`Outcome.failures` says, one phrase each, what was not met: tokens lost,
keys with two different windows or responses, windows unanswered, role crashes, a
recovery slower than the limit, hostile records not dead-lettered, memory not returned
after a flood, a secret in the output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lockstep.observe.ledger import Key, SeenWindow

#: RSS after a flood's eviction may exceed its start by at most this share.
RSS_TOLERANCE = 0.20


@dataclass(frozen=True)
class Rss:
    """A process's resident set size (kB) before a flood, at its peak and after eviction."""

    start_kb: int
    peak_kb: int
    after_kb: int

    @property
    def returned(self) -> bool:
        """Whether the RSS after eviction is within :data:`RSS_TOLERANCE` of the start."""
        return self.after_kb <= self.start_kb * (1 + RSS_TOLERANCE)


def recovery_s(fault_us: int, streams: Iterable[str], windows: Mapping[Key, SeenWindow],
               produced_ms: Mapping[Key, int]) -> tuple[float | None, list[str]]:
    """How long after the fault every stream had output for data captured after it.

    For each stream, the first record in ``produced_ms`` (windows or responses, by
    produce time) of a window that starts at or after ``fault_us``; the slowest stream
    counts.

    Returns:
        Seconds from the fault (None if a stream never recovered), and the streams that
        did not.
    """
    first: dict[str, int] = {}
    for key, at_ms in produced_ms.items():
        window = windows.get(key)
        if window is None or window.t_start_us < fault_us:
            continue
        sid = key[0]
        if sid not in first or at_ms < first[sid]:
            first[sid] = at_ms
    wanted = list(streams)
    missing = [sid for sid in wanted if sid not in first]
    if missing or not wanted:
        return None, missing
    return max(0.0, max(first[sid] for sid in wanted) / 1000 - fault_us / 1e6), []


def answer_wait_s(fault_us: int, windows: Mapping[Key, SeenWindow],
                  window_at_ms: Mapping[Key, int],
                  response_at_ms: Mapping[Key, int]) -> float | None:
    """The longest a window of data captured after the fault waited for its answer.

    A role whose partitions wait for a new owner shows here even when other streams, or
    another pool, answer at once (None: no such window was answered).
    """
    waits = [response_at_ms[key] - window_at_ms[key] for key, window in windows.items()
             if window.t_start_us >= fault_us and key in response_at_ms and key in window_at_ms]
    return max(waits) / 1000 if waits else None


@dataclass
class Outcome:
    """One scenario's measurements (counts are of the read-back ledger)."""

    scenario: str
    #: The scenario could not run (a broker or the pipeline did not start): why.
    error: str | None = None
    published: int = 0
    #: Tokens the publishers gave up on (never acknowledged: not in the ledger's left side).
    not_delivered: int = 0
    windows: int = 0
    late: int = 0
    dead_letters: int = 0
    #: Records read again with the same bytes (windows, responses, late records).
    duplicates: int = 0
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)
    #: Keys carrying two different windows or responses, and tokens settled twice.
    conflicts: int = 0
    conflict_examples: list[str] = field(default_factory=list)
    settled_twice: int = 0
    settled_twice_examples: list[str] = field(default_factory=list)
    unanswered: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    #: The fault: what, and when (µs since the epoch).
    fault: str = ""
    fault_us: int | None = None
    #: Fault → fresh responses from every live stream, or the longest a window of fresh
    #: data waited for its answer, whichever is longer (None: some stream never recovered).
    recovery_s: float | None = None
    answer_wait_s: float | None = None
    window_recovery_s: float | None = None
    not_recovered: list[str] = field(default_factory=list)
    recovery_limit_s: float | None = None
    hostile_sent: int = 0
    #: Hostile records not dead-lettered: shed to late unread (stale), and the rest
    #: (in a window, or nowhere).
    hostile_late: Counter[str] = field(default_factory=Counter)
    hostile_missed: Counter[str] = field(default_factory=Counter)
    rss: dict[str, Rss] = field(default_factory=dict)
    secret_seen_in: list[str] = field(default_factory=list)
    log_lines: dict[str, int] = field(default_factory=dict)
    drained: bool = False
    wall_s: float = 0.0
    #: Where the scenario's logs were kept (failed scenarios, or when asked).
    logs: str | None = None

    def failures(self) -> list[str]:
        """What was not met, one phrase each (empty: the scenario met the acceptance)."""
        if self.error is not None:
            return [f"did not run: {self.error}"]
        out: list[str] = []
        if not self.published:
            out.append("nothing was published")
        if self.not_delivered:
            out.append(f"{self.not_delivered} tokens never acknowledged by the broker")
        if self.lost:
            examples = f", e.g. {', '.join(self.lost_examples)}" if self.lost_examples else ""
            when = "" if self.drained else " when the drain ended, the ledger still open"
            out.append(f"{self.lost} tokens lost (in no window, late record or dead "
                       f"letter{examples}){when}")
        if self.conflicts:
            examples = (f", e.g. {', '.join(self.conflict_examples)}"
                        if self.conflict_examples else "")
            out.append(f"{self.conflicts} keys with two different windows or "
                       f"responses{examples}")
        if self.settled_twice:
            examples = (f", e.g. {', '.join(self.settled_twice_examples)}"
                        if self.settled_twice_examples else "")
            out.append(f"{self.settled_twice} tokens in two windows or a window and "
                       f"late{examples}")
        if self.unanswered:
            out.append(f"{self.unanswered} windows unanswered")
        if self.crashes:
            out.append(f"{len(self.crashes)} role crashes ({'; '.join(self.crashes)})")
        if self.fault_us is not None and self.recovery_s is None:
            out.append("no fresh response after the fault from "
                       + (", ".join(self.not_recovered) or "any stream"))
        if (self.recovery_s is not None and self.recovery_limit_s is not None
                and self.recovery_s > self.recovery_limit_s):
            out.append(f"recovery {self.recovery_s:.1f} s > {self.recovery_limit_s:.1f} s "
                       f"(session timeout + 5 s)")
        if self.hostile_missed:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.hostile_missed.items()))
            out.append(f"{sum(self.hostile_missed.values())} hostile records neither "
                       f"dead-lettered nor shed as stale ({kinds})")
        for name, rss in sorted(self.rss.items()):
            if not rss.returned:
                out.append(f"{name} RSS {rss.after_kb / 1024:.0f} MB after eviction, over "
                           f"{100 * (1 + RSS_TOLERANCE):.0f} % of {rss.start_kb / 1024:.0f} MB "
                           f"before the flood")
        if self.secret_seen_in:
            out.append(f"a secret appeared in the output of {', '.join(self.secret_seen_in)}")
        return out

    @property
    def ok(self) -> bool:
        """Whether every acceptance criterion was met."""
        return not self.failures()
