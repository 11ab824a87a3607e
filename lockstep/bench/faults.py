"""Faulty synthetic feeds with their ground truth kept: what ``lockstep bench align`` scores.

Pure: :func:`generate` takes a :class:`FaultSpec`, a size and a seed and returns the same
:class:`ChaosFeed` every time. The feed is what an aligner sees — ``(arrival_us, token)``
pairs in arrival order, with the device's reported ``t_us`` — and the ground truth is what
it never sees: the true capture time of every capture, delivered or not.

The fault model, per stream (each stream draws from its own child of the seed, so a
stream's faults do not depend on how many streams there are):

- video frames are dropped before publishing, independently (a Bernoulli/Poisson process)
  or in bursts (a two-state Gilbert chain whose mean burst is ``drop_burst_frames``);
- audio has gaps: spans of ``audio_gap_ms`` (uniform) starting as a Poisson process, and
  every chunk that overlaps a gap is lost;
- each modality's device clock has an offset and a drift (ppm of elapsed time) against the
  true clock, and every reported ``t_us`` carries Gaussian jitter;
- transport adds ``delay_min_ms`` plus an exponential tail; without ``reorder`` each
  (stream, modality) stays in order (one Kafka partition), with it tokens may overtake;
- a fraction of the delivered tokens is delivered a second time, later (at-least-once).

Audio, sensor and OCR devices start at a random phase within one period after the camera.
``seq`` counts captures, as a camera's frame counter does: a dropped capture leaves a gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from lockstep.producer.synthetic import SyntheticConfig, SyntheticStream
from lockstep.topics.schemas import MAX_T_US, MIN_T_US, AudioToken, Modality, Token

#: Media shapes of the benchmark: small gray8 frames keep generation fast.
BENCH_MEDIA = SyntheticConfig(fps=30.0, width=16, height=12, sample_rate=16_000,
                              audio_chunk_ms=20.0, ocr_every_ms=500.0, sensor_hz=100.0)
#: True start of stream 0 (2027-01-15); stream ``k`` starts up to a second later.
T0_US = 1_800_000_000_000_000

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

#: The ground-truth identity of a capture: (stream_id, modality, seq).
CaptureKey = tuple[str, Modality, int]


@dataclass(frozen=True)
class Clock:
    """A device clock against the true clock: reported = true + offset + drift * elapsed."""

    offset_ms: float = 0.0
    drift_ppm: float = 0.0


@dataclass(frozen=True)
class FaultSpec:
    """What goes wrong between capture and the aligner. Rates are fractions (0.15 = 15 %)."""

    drop_rate: float = 0.15
    #: Mean length of a run of dropped frames; 1.0 drops frames independently.
    drop_burst_frames: float = 1.0
    audio_gaps_per_s: float = 0.2
    audio_gap_ms: tuple[float, float] = (120.0, 480.0)
    jitter_ms: float = 8.0
    video_clock: Clock = field(default_factory=Clock)
    audio_clock: Clock = field(default_factory=lambda: Clock(offset_ms=25.0, drift_ppm=50.0))
    ocr_clock: Clock = field(default_factory=Clock)
    sensor_clock: Clock = field(default_factory=Clock)
    delay_min_ms: float = 2.0
    #: Mean of the exponential part of the transport delay.
    delay_tail_ms: float = 3.0
    reorder: bool = False
    duplicate_rate: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.drop_rate <= 0.9:
            problems.append("drop_rate must be in [0, 0.9]")
        elif self.drop_burst_frames < 1.0:
            problems.append("drop_burst_frames must be >= 1")
        elif self._gilbert_start() > 1.0:
            problems.append("drop_burst_frames too short for this drop_rate")
        if self.audio_gaps_per_s < 0.0:
            problems.append("audio_gaps_per_s must be >= 0")
        if not 0.0 < self.audio_gap_ms[0] <= self.audio_gap_ms[1]:
            problems.append("audio_gap_ms must be (low, high) with 0 < low <= high")
        if self.jitter_ms < 0.0 or self.delay_min_ms < 0.0 or self.delay_tail_ms < 0.0:
            problems.append("jitter and delays must be >= 0")
        if not 0.0 <= self.duplicate_rate <= 1.0:
            problems.append("duplicate_rate must be in [0, 1]")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def none(cls) -> FaultSpec:
        """No faults: every capture delivered on time, reported at its true time."""
        return cls(drop_rate=0.0, audio_gaps_per_s=0.0, jitter_ms=0.0, audio_clock=Clock(),
                   delay_min_ms=0.0, delay_tail_ms=0.0)

    def clock(self, modality: Modality) -> Clock:
        """The device clock of one modality."""
        return {Modality.VIDEO: self.video_clock, Modality.AUDIO: self.audio_clock,
                Modality.OCR: self.ocr_clock, Modality.SENSOR: self.sensor_clock}[modality]

    def _gilbert_start(self) -> float:
        """P(good -> dropping) of the burst chain whose stationary drop fraction is drop_rate."""
        leave = 1.0 / self.drop_burst_frames
        return self.drop_rate * leave / (1.0 - self.drop_rate)


@dataclass(frozen=True)
class Capture:
    """The truth about one capture."""

    true_us: int
    #: Audio chunks cover [true_us, true_us + duration_us); 0 for point-in-time tokens.
    duration_us: int
    delivered: bool


@dataclass(frozen=True)
class ChaosFeed:
    """What an aligner sees (``feed``) and what really happened (``truth``)."""

    feed: list[tuple[int, Token]]
    truth: dict[CaptureKey, Capture]
    spec: FaultSpec
    seed: int


def generate(spec: FaultSpec, streams: int, seconds: float, seed: int,
             media: SyntheticConfig = BENCH_MEDIA, t0_us: int = T0_US) -> ChaosFeed:
    """Build ``streams`` synthetic streams of ``seconds`` each, inject faults and deliver them.

    Args:
        spec: The faults.
        streams: How many streams (``cam-0``, ``cam-1``...).
        seconds: Capture span of each stream.
        seed: Seeds a numpy Generator per stream; the same arguments give the same feed.
        media: Rates and sizes of the synthetic media.
        t0_us: True start of the first stream.

    Returns:
        The feed in arrival order (ties keep generation order) and the ground truth.
    """
    if streams < 1 or seconds <= 0:
        raise ValueError("need at least one stream and a positive duration")
    deliveries: list[tuple[int, Token]] = []
    truth: dict[CaptureKey, Capture] = {}
    for k, child in enumerate(np.random.SeedSequence(seed).spawn(streams)):
        rng = np.random.default_rng(child)
        start = t0_us + int(rng.integers(0, 1_000_000))
        source = SyntheticStream(f"cam-{k}", start, media)
        captured = source.due(start + int(seconds * 1e6) - 1)
        deliveries += _inject(spec, rng, start, _phases(media, rng), captured, truth)
    order = sorted(range(len(deliveries)), key=lambda i: deliveries[i][0])
    return ChaosFeed(feed=[deliveries[i] for i in order], truth=truth, spec=spec, seed=seed)


def _phases(media: SyntheticConfig, rng: np.random.Generator) -> dict[Modality, int]:
    """When each device started capturing, after the camera, within one of its periods.

    Devices are not phase-locked; without this every third frame would sit on an audio
    chunk boundary to the microsecond, which no aligner could resolve under any jitter.
    """
    periods = {Modality.AUDIO: media.audio_chunk_ms * 1000.0,
               Modality.OCR: media.ocr_every_ms * 1000.0,
               Modality.SENSOR: 1e6 / media.sensor_hz}
    return {m: int(rng.integers(0, max(1, int(p)))) for m, p in periods.items()}


def _inject(spec: FaultSpec, rng: np.random.Generator, start_us: int,
            phases: dict[Modality, int], captured: list[Token],
            truth: dict[CaptureKey, Capture]) -> list[tuple[int, Token]]:
    """Faults for one stream: drops, clocks, jitter, delay, duplicates."""
    out: list[tuple[int, Token]] = []
    for modality in Modality:
        tokens = [t for t in captured if t.modality is modality]  # seq order = capture order
        if not tokens:
            continue
        true_us = np.array([t.t_us for t in tokens], dtype=np.int64) + phases.get(modality, 0)
        duration = np.array([t.duration_us if isinstance(t, AudioToken) else 0
                             for t in tokens], dtype=np.int64)
        kept = _kept(spec, rng, modality, true_us, duration)
        reported = _reported(spec, rng, modality, start_us, true_us)
        # A token can be published once it is complete: an audio chunk at its end.
        arrival = true_us + duration + _delays(spec, rng, len(tokens))
        if not spec.reorder:
            arrival = np.maximum.accumulate(arrival)
        twice = rng.random(len(tokens)) < spec.duplicate_rate
        redelivery = arrival + _delays(spec, rng, len(tokens))
        for i, token in enumerate(tokens):
            truth[(token.stream_id, modality, token.seq)] = Capture(
                int(true_us[i]), int(duration[i]), bool(kept[i]))
            if not kept[i]:
                continue
            sent = token.model_copy(update={"t_us": int(reported[i])})
            out.append((int(arrival[i]), sent))
            if twice[i]:
                out.append((int(redelivery[i]), sent))
    return out


def _kept(spec: FaultSpec, rng: np.random.Generator, modality: Modality,
          true_us: Ints, duration: Ints) -> Bools:
    """Which captures get published."""
    n = len(true_us)
    if modality is Modality.VIDEO:
        return ~_video_drops(spec, rng, n)
    if modality is Modality.AUDIO and spec.audio_gaps_per_s > 0:
        span_us = float(true_us[-1] + duration[-1] - true_us[0])
        count = int(rng.poisson(spec.audio_gaps_per_s * span_us / 1e6))
        if count == 0:
            return np.ones(n, dtype=np.bool_)
        gap_start = np.sort(true_us[0] + rng.random(count) * span_us)
        low, high = spec.audio_gap_ms
        gap_end = gap_start + rng.uniform(low, high, count) * 1000.0
        # A chunk is lost when a gap starts before the chunk ends and ends after it starts.
        # Gaps are sorted by start, so the latest end among those starting before the
        # chunk's end is a running maximum.
        last = np.searchsorted(gap_start, true_us + duration, side="left") - 1
        reach = np.maximum.accumulate(gap_end)[np.clip(last, 0, None)]
        lost: Bools = (last >= 0) & (reach > true_us)
        return ~lost
    return np.ones(n, dtype=np.bool_)


def _video_drops(spec: FaultSpec, rng: np.random.Generator, n: int) -> Bools:
    """Dropped frames: independent, or runs from a Gilbert chain with the same mean rate."""
    draws = rng.random(n)
    if spec.drop_burst_frames <= 1.0:
        return draws < spec.drop_rate
    enter, leave = spec._gilbert_start(), 1.0 / spec.drop_burst_frames
    dropped = np.zeros(n, dtype=np.bool_)
    state = bool(rng.random() < spec.drop_rate)  # start in the stationary distribution
    for i in range(n):
        dropped[i] = state
        state = draws[i] >= leave if state else draws[i] < enter
    return dropped


def _reported(spec: FaultSpec, rng: np.random.Generator, modality: Modality, start_us: int,
              true_us: Ints) -> Ints:
    """The device's t_us: its clock's offset and drift, plus Gaussian jitter, kept valid."""
    clock = spec.clock(modality)
    elapsed = (true_us - start_us).astype(np.float64)
    noise = rng.normal(0.0, spec.jitter_ms * 1000.0, len(true_us)) if spec.jitter_ms else 0.0
    reported = true_us + clock.offset_ms * 1000.0 + clock.drift_ppm * 1e-6 * elapsed + noise
    return np.clip(np.rint(reported), MIN_T_US, MAX_T_US).astype(np.int64)


def _delays(spec: FaultSpec, rng: np.random.Generator, n: int) -> Ints:
    """Transport delays (µs): a floor plus an exponential tail."""
    tail = rng.exponential(spec.delay_tail_ms * 1000.0, n) if spec.delay_tail_ms else 0.0
    return np.rint(spec.delay_min_ms * 1000.0 + tail).astype(np.int64)
