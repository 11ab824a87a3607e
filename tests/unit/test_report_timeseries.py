"""Scrapes over time: rounds, intervals, restarts, saved scrapes and live sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

from lockstep.errors import ConfigError, ScrapeError
from lockstep.observe.timeseries import (
    HEADER,
    TimedScrape,
    build_run,
    collect,
    load,
    parse_duration,
    sample,
    save_log,
)
from lockstep.telemetry.metrics import Telemetry
from tests.reportscenario import EVERY_S, ROUNDS, START, scrapes, write_files

pytestmark = pytest.mark.unit


def _infer_count(scrape_hist: dict[tuple[str, ...], object]) -> float:
    return sum(getattr(h, "total", 0.0) for h in scrape_hist.values())


def test_two_roles_scraped_together_form_one_round_per_time_and_an_interval_between() -> None:
    run = build_run(scrapes())
    assert len(run.rounds) == ROUNDS and len(run.intervals) == ROUNDS - 1
    assert [i.end - i.start for i in run.intervals] == pytest.approx([EVERY_S] * (ROUNDS - 1))
    assert run.start == pytest.approx(START, abs=0.1)
    infer = run.intervals[0].scrape.histogram("lockstep_stage_latency_seconds",
                                              where={"stage": "infer"})
    assert _infer_count(infer) == 60  # one interval's observations, not the totals
    span = run.span.histogram("lockstep_stage_latency_seconds", where={"stage": "infer"})
    assert _infer_count(span) == 60 * (ROUNDS - 1)
    # gauges as the last round has them
    assert run.span.values("lockstep_queue_depth", ("pool",))[("vl",)] == 3


def _text(t: Telemetry) -> str:
    return generate_latest(t.registry).decode()


def test_a_process_that_restarts_counts_from_zero_instead_of_going_negative() -> None:
    before, after = Telemetry(), Telemetry()
    for _ in range(50):
        before.stage("infer", 0.02, pool="vl")
    for _ in range(7):
        after.stage("infer", 0.02, pool="vl")  # the restarted process
    run = build_run([TimedScrape.of_text(_text(before), at=0.0, source="w"),
                     TimedScrape.of_text(_text(after), at=5.0, source="w")])
    [interval] = run.intervals
    [hist] = interval.scrape.histogram("lockstep_stage_latency_seconds").values()
    assert hist.total == 7 and all(c >= 0 for _, c in hist.buckets)


def test_a_source_that_comes_up_later_starts_from_its_first_scrape() -> None:
    early, late = Telemetry(), Telemetry()
    for _ in range(100):
        late.stage("infer", 0.02, pool="vl")  # counted before the run was sampled
    run = build_run([TimedScrape.of_text(_text(early), at=0.0, source="a"),
                     TimedScrape.of_text(_text(early), at=5.0, source="a"),
                     TimedScrape.of_text(_text(late), at=5.1, source="b")])
    span = run.span.histogram("lockstep_stage_latency_seconds")
    assert _infer_count(span) == 0  # its 100 came before the run: not in the span


def test_saved_scrapes_carry_their_time_in_a_first_line_or_in_a_scrape_log(
        tmp_path: Path) -> None:
    files = write_files(tmp_path, rounds=3)
    loaded = load(files)
    assert not loaded.untimed and len(loaded.timed) == 6
    assert {s.source for s in loaded.timed} == {"align", "worker"}
    log = save_log(tmp_path / "run.jsonl", loaded.timed)
    again = load([log])
    assert [(s.at, s.source) for s in again.timed] == [(s.at, s.source) for s in loaded.timed]
    iso = tmp_path / "iso.prom"
    iso.write_text(f"{HEADER} at=2024-06-01T12:00:00Z source=align\n" + loaded.timed[0].text)
    [timed] = load([iso]).timed
    assert timed.at == 1717243200.0 and timed.source == "align"


def test_a_broken_scrape_log_line_names_the_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"at": 1, "text": ""}\n{"text": 3}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2"):
        load([log])


def test_sample_scrapes_every_url_each_round_on_the_given_clock() -> None:
    now = [100.0]
    slept: list[float] = []
    t = Telemetry()
    rounds: list[tuple[int, int, list[str]]] = []

    def read(url: str) -> str:
        if url.endswith("down"):
            raise ScrapeError(f"cannot scrape {url}: refused")
        t.stage("infer", 0.01, pool="vl")
        return _text(t)

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    out = sample(["http://a", "http://down"], every_s=5, for_s=20, clock=lambda: now[0],
                 sleep=sleep, read=read, on_round=lambda *r: rounds.append(r))
    assert [s.at for s in out] == [100.0, 105.0, 110.0, 115.0, 120.0]
    assert {s.source for s in out} == {"http://a"}
    assert [r[:2] for r in rounds] == [(n, 5) for n in range(1, 6)]
    assert "refused" in rounds[0][2][0]
    with pytest.raises(ScrapeError, match="refused"):
        sample(["http://down"], every_s=1, for_s=1, clock=lambda: now[0], sleep=sleep,
               read=read)


@pytest.mark.parametrize(("text", "seconds"), [("5s", 5.0), ("500ms", 0.5), ("2m", 120.0),
                                               ("1h", 3600.0), ("7", 7.0), ("1.5min", 90.0)])
def test_durations_read_with_their_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-1s", "5 parsecs", "s"])
def test_a_bad_duration_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration(text)


def test_untimed_texts_are_one_moment_and_cannot_join_scrapes_over_time(
        tmp_path: Path) -> None:
    plain = tmp_path / "worker.prom"
    plain.write_text(_text(Telemetry()))
    texts, timed = collect([plain], [])
    assert len(texts) == 1 and not timed
    with pytest.raises(ConfigError, match="carry no time"):
        collect([plain, *write_files(tmp_path, rounds=2)], [])
    with pytest.raises(ConfigError, match="--url"):
        collect([], [])
    with pytest.raises(ConfigError, match="--every"):
        collect([plain], [], every_s=5.0)
    with pytest.raises(ConfigError, match="--for goes with --every"):
        collect([plain], [], for_s=5.0)
