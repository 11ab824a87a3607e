"""Repetition statistics, the machine's state and the virtual clock of the benches."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest

from lockstep.bench.cells import spread_cell, table
from lockstep.bench.machine import (
    MachineWatch,
    cpu_model,
    machine_line,
    parse_cpu_line,
    read_cpu_times,
    reference_rate,
)
from lockstep.bench.stats import divide, median_of, ratio_spread, spread, spread_json, stable
from lockstep.bench.vclock import run_virtual

pytestmark = pytest.mark.unit


def test_spread_reports_median_range_and_quartiles_of_the_repetitions() -> None:
    s = spread([3.0, 1.0, 2.0, 10.0, None])
    assert s is not None
    assert (s.median, s.low, s.high, s.n) == (2.5, 1.0, 10.0, 4)
    assert s.q1 == pytest.approx(1.75) and s.q3 == pytest.approx(4.75)
    assert s.relative == pytest.approx(9.0 / 2.5)
    assert s.as_json() == {"median": 2.5, "min": 1.0, "max": 10.0, "iqr": [1.75, 4.75],
                           "n": 4, "values": [3.0, 1.0, 2.0, 10.0]}


def test_spread_of_nothing_is_none_and_identical_repetitions_have_no_width() -> None:
    assert spread([]) is None and spread_json([None, None]) is None
    same = spread([5.0, 5.0, 5.0])
    assert same is not None and same.relative == 0.0
    assert median_of(None) is None and median_of(spread_json([1.0, 3.0])) == 2.0


def test_ratio_spread_is_taken_within_each_repetition_not_between_medians() -> None:
    runs = [{"a": {"x": 1.0}, "b": {"x": 2.0}},
            {"a": {"x": 10.0}, "b": {"x": 20.0}},
            {"a": {"x": 4.0}, "b": {"x": 0.0}}]
    ratio = ratio_spread(runs, lambda r: divide(r["a"]["x"], r["b"]["x"]))
    # 1/2 and 10/20 are both 0.5; the division by zero is left out, not infinite.
    assert ratio is not None and ratio["values"] == [0.5, 0.5] and ratio["median"] == 0.5


def test_a_measurement_is_stable_only_within_its_tolerance() -> None:
    assert stable([100.0, 110.0, 105.0], 0.25)
    assert not stable([100.0, 160.0, 105.0], 0.25)
    assert not stable([], 0.25)


def test_proc_stat_cpu_line_splits_busy_idle_and_steal() -> None:
    times = parse_cpu_line(["cpu", "100", "5", "50", "800", "20", "3", "2", "7", "0", "0"])
    assert times is not None
    assert (times.busy, times.idle, times.steal, times.total) == (160, 820, 7, 987)
    # An old kernel without the steal column.
    old = parse_cpu_line(["cpu", "1", "2", "3", "4"])
    assert old is not None and old.steal == 0 and old.idle == 4
    assert parse_cpu_line(["intr", "1", "2"]) is None


def test_unreadable_proc_files_give_no_figures_instead_of_an_error(tmp_path: Path) -> None:
    assert read_cpu_times(tmp_path / "missing") is None
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Example  CPU @ 2.0GHz\n")
    assert cpu_model(info) == "Example CPU @ 2.0GHz"
    assert cpu_model(tmp_path / "missing")  # falls back to platform, never empty


def test_machine_watch_reports_cores_load_steal_and_the_reference_speed() -> None:
    with MachineWatch(interval_s=0.05) as watch:
        watch.reference(repeats=2)
        time.sleep(0.15)
    report = watch.report()
    assert report["cores"] >= 1 and report["usable_cores"] >= 1 and report["cpu_model"]
    assert report["reference_units_per_cpu_s"]["n"] == 2
    assert report["reference_units_per_cpu_s"]["median"] > 0
    assert {"load_before", "load_during", "busy_share", "steal_share"} <= set(report)
    line = machine_line(report)
    assert f"{report['cores']} cores" in line and "steal" in line and "load" in line


def test_reference_rate_counts_units_of_work_per_cpu_second() -> None:
    calls = []
    rates = reference_rate(repeats=3, units=4, work=lambda: calls.append(1) or 1)
    assert len(rates) == 3 and len(calls) == 12 and all(r > 0 for r in rates)


def test_virtual_clock_fires_timers_in_order_without_waiting() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        start, seen = loop.time(), []

        async def after(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            seen.append((name, loop.time() - start))

        await asyncio.gather(after("late", 30.0), after("early", 10.0))
        return seen

    begin = time.monotonic()
    seen = run_virtual(main())
    assert [name for name, _ in seen] == ["early", "late"]
    assert seen[0][1] == pytest.approx(10.0) and seen[1][1] == pytest.approx(30.0)
    assert time.monotonic() - begin < 5.0


def test_spread_cells_show_the_median_and_the_range_unless_it_is_empty() -> None:
    assert spread_cell(spread_json([0.5, 0.25, 0.75]), "pct") == "50.0 % (25.0-75.0)"
    assert spread_cell(spread_json([0.5, 0.5]), "pct") == "50.0 %"
    assert spread_cell(spread_json([0.1, -0.05]), "pts") == "+2.5 (-5.0 to +10.0)"
    assert spread_cell(None, "ms") == "-"
    assert not math.isnan(float(spread_cell(spread_json([2.0]), "f")))


def test_tables_render_aligned_for_a_terminal_or_as_markdown() -> None:
    rows = [["a", "1"], ["bb", "22"]]
    assert table(["", "n"], rows, markdown=True) == [
        "|  | n |", "|---|---|", "| a | 1 |", "| bb | 22 |"]
    text = table(["", "n"], rows)
    assert text[1].endswith(" 1") and text[2].endswith("22") and len(text) == 3
