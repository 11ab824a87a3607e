"""The one-process shape's capacity: ``lockstep demo`` ramped the same way as the pipeline.

Each step runs ``lockstep demo --json --streams N --seconds S`` (every role in one process,
the embedded broker unless a bootstrap is given, the producer in a child process) and
reads its report: SLO attainment (shed requests count as misses), whether the ledger
closed, and responses per video frame. CPU is what the demo and its children (the broker,
the producer) used, from the bench's child resource usage; it includes the start-up, which
the slope over the steps (``marginal_cpu_ms_per_token``) leaves out.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from lockstep.agents.children import Child, lockstep_argv
from lockstep.bench.machine import MachineWatch
from lockstep.bench.pipeline import ramp
from lockstep.bench.pipeline.course import PipelineOptions

log = logging.getLogger(__name__)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def demo_env(config: Path | None) -> dict[str, str]:
    """The demo's environment: the caller's, and its --config file."""
    env = dict(os.environ)
    if config is not None:
        env["LOCKSTEP_CONFIG"] = str(config)
    return env


async def demo_step(streams: int, options: PipelineOptions, env: dict[str, str],
                    bootstrap: str | None) -> dict[str, Any]:
    """One ``lockstep demo`` run; its figures."""
    argv = [*lockstep_argv(), "demo", "--json", "--streams", str(streams), "--seconds",
            f"{options.step_seconds:g}", "--drain", f"{options.drain_s:g}",
            "--engine", "reference"]
    if bootstrap:
        argv += ["--bootstrap", bootstrap]
    cpu0 = _children_cpu()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-demo-") as logs:
        child = Child(f"demo {streams}", argv, env, Path(logs) / "demo.log",
                      keep_stdout=True).start()
        try:
            await child.wait(options.step_seconds + options.drain_s + 180.0)
        finally:
            await child.stop()
        try:
            report = json.loads(child.stdout.decode(errors="replace"))
        except ValueError:
            report = {}
        tail = child.last_lines()
    cpu = _children_cpu() - cpu0
    frames = report.get("tokens_by_modality", {}).get("video", 0)
    published = report.get("tokens_published", 0)
    attainment = (report.get("slo") or {}).get("attainment")
    coverage = report.get("responses", 0) / frames if frames else None
    ok, why = ramp.held(attainment, coverage, options.target, options.min_coverage,
                        bool(report.get("ok")))
    if not report:
        why = f"the demo printed no report: {tail}"
    return {"streams": streams, "held": ok and bool(report), "why": why,
            "attainment": attainment, "coverage": coverage, "tokens_published": published,
            "tokens_per_s": published / options.step_seconds,
            "responses_by_status": report.get("responses_by_status"),
            "stages": report.get("stages"),
            "cpu_seconds": round(cpu, 3),
            "cpu_ms_per_token": round(cpu * 1000 / published, 4) if published else None}


def marginal_cpu_ms(steps: list[dict[str, Any]]) -> float | None:
    """CPU ms per extra token across steps (a least-squares slope): start-up cancels out."""
    points = [(s["tokens_published"], s["cpu_seconds"]) for s in steps if s["tokens_published"]]
    if len({x for x, _ in points}) < 2:
        return None
    slope = float(np.polyfit([x for x, _ in points], [y for _, y in points], 1)[0])
    return round(slope * 1000, 4)


async def run_demo_shape(options: PipelineOptions, config: Path | None,
                         bootstrap: str | None) -> dict[str, Any]:
    """Ramp ``lockstep demo`` to its capacity; the report."""
    env = demo_env(config)
    steps: list[tuple[ramp.Step, dict[str, Any]]] = []
    with MachineWatch() as watch:
        watch.reference()
        limit = min(options.max_streams, 64)  # the demo's own bound on --streams
        while (n := ramp.plan_next([s for s, _ in steps], options.start_streams, limit,
                                   options.confirm)) is not None:
            report = await demo_step(n, options, env, bootstrap)
            log.info("demo step %d streams: %s", n, "held" if report["held"] else report["why"])
            steps.append((ramp.Step(n, report["held"], report["why"]), report))
        watch.reference()
    return {"shape": "demo", "options": {"step_seconds": options.step_seconds,
                                         "target": options.target, "confirm": options.confirm},
            "steps": [r for _, r in steps],
            "capacity_streams": ramp.capacity(ramp.aggregate([s for s, _ in steps])),
            "marginal_cpu_ms_per_token": marginal_cpu_ms([r for _, r in steps]),
            "machine": watch.report()}
