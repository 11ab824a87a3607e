"""Scrapes over time: timed ``/metrics`` samples, scrape logs, rounds and rolling windows.

``lockstep report`` turns several scrapes taken over a run into a time axis, and
``lockstep top`` keeps a rolling window of its own. A :class:`TimedScrape` is one scrape of
one source (a URL, a role) at a wall-clock time. They come from :func:`sample` (live URLs
every few seconds), from a scrape log (JSON lines written by :func:`save_log`), or from saved
Prometheus texts whose first line says when they were taken::

    # lockstep-scrape at=1717171717.5 source=align

Counters and histograms are differenced per source, so a process that restarts (its
counters fall back to zero) starts a new base instead of giving negative counts.
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from lockstep.errors import ConfigError, ScrapeError
from lockstep.observe.metrics import Hist, Labels, Scrape, fetch, merge, parse

HEADER = "# lockstep-scrape"
_HEADER_RE = re.compile(r"^# lockstep-scrape\s+(?P<fields>.*)$")


@dataclass(frozen=True)
class TimedScrape:
    """One scrape of one source at a wall-clock time (seconds since the epoch)."""

    at: float
    source: str
    scrape: Scrape
    #: The exposition text, kept so that the scrape can be saved again.
    text: str = ""

    @classmethod
    def of_text(cls, text: str, *, at: float, source: str) -> TimedScrape:
        """Parse a ``/metrics`` text taken at ``at`` from ``source``."""
        return cls(at, source, parse(text), text)


@dataclass(frozen=True)
class Loaded:
    """What a set of saved scrape files holds: timed scrapes, and texts without a time."""

    timed: list[TimedScrape]
    untimed: list[str]


def _parse_time(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ConfigError(f"bad time {value!r} in a {HEADER} line (epoch seconds or "
                          "ISO 8601)") from exc


def header_fields(text: str) -> dict[str, str] | None:
    """The ``key=value`` fields of a text's ``# lockstep-scrape`` first line, if it has one."""
    first = text.split("\n", 1)[0].strip()
    match = _HEADER_RE.match(first)
    if match is None:
        return None
    return dict(part.split("=", 1) for part in match["fields"].split() if "=" in part)


def load(paths: Sequence[Path]) -> Loaded:
    """Read saved scrapes: scrape logs (``.jsonl``) and Prometheus texts.

    Raises:
        ConfigError: A file is neither, or names no time where one is needed.
    """
    timed: list[TimedScrape] = []
    untimed: list[str] = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            timed.extend(_load_log(path, text))
            continue
        fields = header_fields(text)
        if fields is None:
            parse(text)  # fails early, naming the problem, if it is not metrics text
            untimed.append(text)
        elif "at" not in fields:
            raise ConfigError(f"{path}: its {HEADER} line has no at=TIME")
        else:
            timed.append(TimedScrape.of_text(text, at=_parse_time(fields["at"]),
                                             source=fields.get("source", path.stem)))
    return Loaded(timed, untimed)


def _load_log(path: Path, text: str) -> list[TimedScrape]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            out.append(TimedScrape.of_text(str(entry["text"]), at=float(entry["at"]),
                                           source=str(entry.get("source", path.stem))))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}:{number}: not a scrape log line "
                              f'({{"at": seconds, "source": ..., "text": ...}}): {exc}') from exc
    return out


def save_log(path: Path, scrapes: Iterable[TimedScrape]) -> Path:
    """Write scrapes as a scrape log (one JSON object per line), for ``lockstep report``."""
    with path.open("w", encoding="utf-8") as out:
        for s in scrapes:
            out.write(json.dumps({"at": s.at, "source": s.source, "text": s.text}) + "\n")
    return path


def sample(urls: Sequence[str], *, every_s: float, for_s: float,
           clock: Callable[[], float] = time.time,
           sleep: Callable[[float], None] = time.sleep,
           on_round: Callable[[int, int, list[str]], None] | None = None,
           read: Callable[[str], str] = fetch) -> list[TimedScrape]:
    """Scrape every URL every ``every_s`` seconds for ``for_s`` seconds (both ends included).

    Args:
        urls: The ``/metrics`` URLs.
        every_s: Seconds between rounds.
        for_s: How long to sample.
        clock: Wall-clock time in seconds.
        sleep: Waits that many seconds.
        on_round: Called after each round with its number, the number of rounds and the
            errors of the URLs that did not answer.
        read: Returns the text of a URL (raises :class:`ScrapeError`).

    Raises:
        ScrapeError: No URL answered in any round.
    """
    rounds = int(for_s // every_s) + 1
    start = clock()
    out: list[TimedScrape] = []
    errors: list[str] = []
    for n in range(rounds):
        wait = start + n * every_s - clock()
        if wait > 0:
            sleep(wait)
        at = clock()
        errors = []
        for url in urls:
            try:
                out.append(TimedScrape.of_text(read(url), at=at, source=url))
            except ScrapeError as error:
                errors.append(str(error))
        if on_round is not None:
            on_round(n + 1, rounds, errors)
    if not out:
        raise ScrapeError("; ".join(errors) or "nothing to scrape")
    return out


_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in ``5s``, ``500ms``, ``2m``, ``1h`` or a plain number of seconds.

    Raises:
        ConfigError: Not a positive duration.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h)?\s*", text)
    if match is None or float(match[1]) <= 0:
        raise ConfigError(f"not a duration: {text!r} (e.g. 5s, 500ms, 2m)")
    return float(match[1]) * _UNITS[match[2] or "s"]


def collect(paths: Sequence[Path], urls: Sequence[str], *, every_s: float | None = None,
            for_s: float | None = None,
            on_round: Callable[[int, int, list[str]], None] | None = None,
            ) -> tuple[list[str], list[TimedScrape]]:
    """The report's input: texts of one moment, or scrapes over time (never both).

    Saved files with a time, a scrape log, or ``every_s`` make it scrapes over time; then
    every saved file must carry its time. URLs are scraped once, or every ``every_s`` for
    ``for_s`` seconds (60 by default).

    Raises:
        ConfigError: Nothing to read, or files without a time among scrapes over time.
        ScrapeError: A URL did not answer (once), or none ever did (over time).
    """
    if not paths and not urls:
        raise ConfigError("give saved /metrics files or --url URL")
    if every_s is not None and not urls:
        raise ConfigError("--every samples live URLs: give --url URL")
    if for_s is not None and every_s is None:
        raise ConfigError("--for goes with --every")
    loaded = load(paths)
    if every_s is None and not loaded.timed:
        return loaded.untimed + [fetch(u) for u in urls], []
    if loaded.untimed:
        raise ConfigError(f"{len(loaded.untimed)} saved scrape(s) carry no time (a first line "
                          f"'{HEADER} at=SECONDS'), so they cannot join scrapes over time")
    if every_s is None:
        now = time.time()
        live = [TimedScrape.of_text(fetch(u), at=now, source=u) for u in urls]
    else:
        live = sample(urls, every_s=every_s, for_s=60.0 if for_s is None else for_s,
                      on_round=on_round)
    return [], loaded.timed + live


def delta(later: Scrape, earlier: Scrape) -> Scrape:
    """What one source observed between two of its scrapes (gauges as ``later`` has them).

    A series that went down was reset (the process restarted): it counts from zero.
    """
    hists: dict[str, dict[Labels, Hist]] = {}
    for name, series in later.histograms.items():
        before = earlier.histograms.get(name, {})
        hists[name] = {labels: h - before[labels] if labels in before
                       and before[labels].total <= h.total else h
                       for labels, h in series.items()}
    counters: dict[str, dict[Labels, float]] = {}
    for name, values in later.counters.items():
        old = earlier.counters.get(name, {})
        counters[name] = {labels: v - old.get(labels, 0.0) if old.get(labels, 0.0) <= v else v
                          for labels, v in values.items()}
    return Scrape(hists, counters, dict(later.gauges))


@dataclass(frozen=True)
class Round:
    """The scrapes of every source taken at about one time (the latest of each)."""

    at: float
    by_source: dict[str, Scrape]


def rounds(scrapes: Sequence[TimedScrape]) -> list[Round]:
    """Group scrapes into rounds: a source scraped again starts the next round.

    A source missing from a round keeps its previous scrape there (it observed nothing new).
    """
    ordered = sorted(scrapes, key=lambda s: s.at)
    groups: list[dict[str, TimedScrape]] = []
    for s in ordered:
        if not groups or s.source in groups[-1]:
            groups.append({})
        groups[-1][s.source] = s
    out: list[Round] = []
    carried: dict[str, Scrape] = {}
    for group in groups:
        carried = {**carried, **{src: s.scrape for src, s in group.items()}}
        out.append(Round(max(s.at for s in group.values()), dict(carried)))
    return out


@dataclass(frozen=True)
class Interval:
    """What every source observed between two rounds, merged."""

    start: float
    end: float
    scrape: Scrape

    @property
    def seconds(self) -> float:
        """Its length (at least a millisecond, so that rates stay finite)."""
        return max(self.end - self.start, 1e-3)


@dataclass(frozen=True)
class Run:
    """A run seen through scrapes over time: its intervals and its whole span."""

    rounds: list[Round]
    intervals: list[Interval]
    #: From the first round to the last (counters differenced, gauges of the last round);
    #: with one round, that round (totals since the processes started).
    span: Scrape

    @property
    def start(self) -> float:
        """When the first round was taken."""
        return self.rounds[0].at

    @property
    def end(self) -> float:
        """When the last round was taken."""
        return self.rounds[-1].at


def _between(a: Round, b: Round) -> Scrape:
    return merge(delta(s, a.by_source[src]) if src in a.by_source else delta(s, s)
                 for src, s in b.by_source.items())


def build_run(scrapes: Sequence[TimedScrape]) -> Run:
    """Rounds, the interval between each pair, and the span of the whole run.

    Raises:
        ConfigError: No scrapes.
    """
    if not scrapes:
        raise ConfigError("no scrapes to report on")
    rs = rounds(scrapes)
    intervals = [Interval(a.at, b.at, _between(a, b)) for a, b in pairwise(rs)]
    last = merge(rs[-1].by_source.values())
    if not intervals:
        return Run(rs, intervals, last)
    # The sum of the intervals, so that a restart inside the run loses nothing before it.
    span = merge(i.scrape for i in intervals)
    return Run(rs, intervals, Scrape(span.histograms, span.counters, last.gauges))


class RollingWindow:
    """The last ``window_s`` seconds of each source's scrapes (``lockstep top``)."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._history: dict[str, deque[tuple[float, Scrape]]] = {}

    def add(self, at: float, scrapes: Mapping[str, Scrape]) -> None:
        """Record this refresh's scrapes (sources that did not answer are left out)."""
        for source, scrape in scrapes.items():
            history = self._history.setdefault(source, deque())
            history.append((at, scrape))
            # Keep one sample at or before the window's start: the base to difference from.
            while len(history) > 2 and history[1][0] <= at - self.window_s:
                history.popleft()

    def window(self, sources: Iterable[str]) -> tuple[Scrape, float]:
        """What ``sources`` observed over the window, and the seconds it spans.

        Before any source has two scrapes the span is 0 and the figures are the totals since
        the processes started; after that, a source with a single scrape (it just came up)
        adds only its gauges.
        """
        histories = [h for src in sources if (h := self._history.get(src))]
        span = max((h[-1][0] - h[0][0] for h in histories), default=0.0)
        parts = []
        for history in histories:
            (t0, base), (t1, last) = history[0], history[-1]
            parts.append(delta(last, base) if t1 > t0 or span > 0 else last)
        return merge(parts), span
