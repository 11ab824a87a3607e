"""The machine a benchmark ran on: what it is, how busy it was, and a reference speed.

A figure measured on a loaded or throttled machine is not a slow program. Every bench
report carries a ``machine`` object:

- what the machine is: logical cores (and those this process may use), CPU model, Python;
- how busy it was: the 1-minute load average before the run and during it (sampled every
  second), the share of all CPU time that was busy and the share stolen by the hypervisor
  (``/proc/stat``, where readable) over the run;
- a reference speed: a fixed pure-Python workload (:func:`reference_workload`) timed in
  CPU seconds in the same run, so that an absolute throughput can be read as a ratio to
  it (``reference_units_per_cpu_s``).
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from lockstep.bench.stats import spread

_PROC_STAT = Path("/proc/stat")
_CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuTimes:
    """The machine-wide ``cpu`` line of ``/proc/stat``, in clock ticks."""

    busy: int
    idle: int
    steal: int

    @property
    def total(self) -> int:
        """Every tick counted."""
        return self.busy + self.idle + self.steal


def read_cpu_times(path: Path = _PROC_STAT) -> CpuTimes | None:
    """The machine's CPU ticks so far (None where ``/proc/stat`` cannot be read)."""
    try:
        with path.open() as f:
            fields = f.readline().split()
    except OSError:
        return None
    return parse_cpu_line(fields)


def parse_cpu_line(fields: list[str]) -> CpuTimes | None:
    """Parse ``cpu user nice system idle iowait irq softirq steal ...`` (guest is in user)."""
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        return None
    ticks = [int(x) for x in fields[1:9]] + [0] * max(0, 9 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return CpuTimes(busy=user + nice + system + irq + softirq, idle=idle + iowait, steal=steal)


def cpu_model(path: Path = _CPUINFO) -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        for line in path.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("model name", "Processor", "cpu model"):
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def reference_workload() -> int:
    """A fixed pure-Python task (dicts, sorting, string and integer work): one unit.

    It exercises the interpreter the way the pipeline's Python code does, so the ratio of
    a throughput to this workload's rate changes less between machines than the
    throughput itself. Returns a checksum so the work cannot be skipped.
    """
    table: dict[str, int] = {}
    for i in range(3000):
        table[f"stream-{i % 97}-{i}"] = i * 7919 % 10007
    ordered = sorted(table.items(), key=lambda kv: (kv[1], kv[0]))
    total = 0
    for key, value in ordered[::3]:
        total += len(key) + value
    chunks = [list(range(j, j + 16)) for j in range(0, 4000, 16)]
    return total + sum(max(c) - min(c) for c in chunks)


def reference_rate(repeats: int = 5, units: int = 20,
                   work: Callable[[], int] = reference_workload) -> list[float]:
    """Units of ``work`` per CPU second of this thread, once per repeat of ``units`` units.

    CPU time, not wall time: on a shared machine the wall time of a pure-Python loop
    swings with the other processes' load (5x was seen), its CPU time much less.
    """
    rates = []
    for _ in range(max(1, repeats)):
        begin = time.thread_time()
        for _ in range(units):
            work()
        rates.append(units / max(time.thread_time() - begin, 1e-9))
    return rates


@dataclass
class MachineWatch:
    """Watches the machine over a run; use as a context manager, then :meth:`report`.

    Samples the load average every ``interval_s`` in a daemon thread, and reads the CPU
    ticks at the start and the end.
    """

    interval_s: float = 1.0
    load_before: float | None = None
    loads: list[float] = field(default_factory=list)
    references: list[float] = field(default_factory=list)
    _start: CpuTimes | None = None
    _end: CpuTimes | None = None
    _began: float = 0.0
    _seconds: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> MachineWatch:
        self.load_before = load_average()
        self._start = read_cpu_times()
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._sample, name="bench-machine-watch",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._end = read_cpu_times()
        self._seconds = time.monotonic() - self._began

    def reference(self, repeats: int = 3) -> list[float]:
        """Time the reference workload now (call it between a bench's repetitions)."""
        rates = reference_rate(repeats)
        self.references.extend(rates)
        return rates

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            load = load_average()
            if load is not None:
                self.loads.append(load)

    def report(self) -> dict[str, Any]:
        """The ``machine`` object of a bench report."""
        busy = steal = None
        if self._start is not None and self._end is not None:
            total = self._end.total - self._start.total
            if total > 0:
                busy = round((self._end.busy - self._start.busy) / total, 4)
                steal = round((self._end.steal - self._start.steal) / total, 4)
        ref = spread(self.references)
        return {
            **describe(),
            "load_before": self.load_before,
            "load_during": {"mean": round(sum(self.loads) / len(self.loads), 2),
                            "max": max(self.loads)} if self.loads else None,
            "busy_share": busy,
            "steal_share": steal,
            "seconds": round(self._seconds, 1),
            "reference_units_per_cpu_s": None if ref is None else ref.as_json(),
        }


def describe() -> dict[str, Any]:
    """What the machine is: cores, usable cores, CPU model, Python, OS."""
    return {
        "cores": os.cpu_count() or 1,
        "usable_cores": usable_cores(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
    }


def machine_line(machine: dict[str, Any]) -> str:
    """One line a reader can judge the figures by."""
    during = machine.get("load_during") or {}
    parts = [f"{machine['cores']} cores ({machine['usable_cores']} usable), "
             f"{machine['cpu_model']}, Python {machine['python']}"]
    load = f"load {_num(machine.get('load_before'))} before"
    if during:
        load += f", {_num(during.get('mean'))} mean / {_num(during.get('max'))} max during"
    parts.append(load)
    if machine.get("busy_share") is not None:
        parts.append(f"CPU busy {machine['busy_share'] * 100:.0f} %")
    parts.append("steal " + ("n/a" if machine.get("steal_share") is None
                             else f"{machine['steal_share'] * 100:.1f} %"))
    ref = machine.get("reference_units_per_cpu_s")
    if ref:
        parts.append(f"reference {ref['median']:,.0f} units/CPU-s "
                     f"({ref['min']:,.0f}-{ref['max']:,.0f})")
    return "; ".join(parts)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
