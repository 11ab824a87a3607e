"""Scoring of aligned windows against the chaos generator's ground truth.

Any aligner's output is first reduced to :class:`Pairing` records — which frame anchors the
window and which token of each modality was paired with it — then :func:`score` compares
each pairing with the ideal one for the anchor frame's true capture time:

- audio: the delivered chunk whose true ``[start, start + duration)`` covers it;
- sensor: the delivered reading nearest in true time (the reading at or before it is
  accepted too, because an interpolating aligner names that one);
- OCR: the latest delivered OCR captured at or before it;
- video: the anchor itself.

A window is *strictly* misaligned when any modality it marks present is paired with another
token than the ideal one. It is *misaligned* (the headline figure) when, in addition, the
token it chose is measurably worse: further from the anchor's true time than the ideal one
by more than ``slack_us`` (2 ms by default). At a chunk boundary two chunks are within a
fraction of a millisecond of the anchor, and no estimator working from jittered stamps can
tell them apart; choosing either is not a misalignment a viewer or a model could notice.
Without an ideal token (an anchor in an audio gap), a token within the matching tolerance
is as good as the pairing contract asks.
Windows without a video anchor are counted apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from lockstep.bench.faults import Capture, CaptureKey
from lockstep.topics.schemas import AudioToken, Modality, OcrToken, SensorToken, Window

#: Modalities scored against the anchor (the anchor itself is video and always right).
SCORED = (Modality.AUDIO, Modality.SENSOR, Modality.OCR)


@dataclass(frozen=True)
class Pairing:
    """What one window paired: the anchor frame and, per present modality, one token."""

    stream_id: str
    anchor_seq: int | None
    matched: Mapping[Modality, int]
    partial: bool
    #: Modalities whose matched token was read off the window's tokens (no matched_seq).
    inferred: int = 0


@dataclass
class Score:
    """Counts and errors of one aligner over one feed."""

    windows: int = 0
    anchorless: int = 0
    misaligned: int = 0
    misaligned_strict: int = 0
    partial: int = 0
    inferred: int = 0
    misaligned_by_modality: dict[Modality, int] = field(
        default_factory=lambda: dict.fromkeys(SCORED, 0))
    errors_us: dict[Modality, list[int]] = field(
        default_factory=lambda: {m: [] for m in SCORED})

    @property
    def anchored(self) -> int:
        """Windows with a video anchor (the denominator of the misaligned rate)."""
        return self.windows - self.anchorless

    def rate(self, count: int, of: int | None = None) -> float:
        """``count`` over ``of`` (default: the anchored windows); 0.0 when there are none."""
        total = self.anchored if of is None else of
        return count / total if total else 0.0

    def errors(self, modality: Modality | None = None) -> list[int]:
        """Alignment errors (µs) of one modality's matches, or of all of them."""
        if modality is not None:
            return self.errors_us[modality]
        return [e for m in SCORED for e in self.errors_us[m]]

    def error_ms(self, q: float, modality: Modality | None = None) -> float | None:
        """The ``q``-th percentile of the alignment error in ms (None without matches)."""
        errors = self.errors(modality)
        return float(np.percentile(errors, q)) / 1000.0 if errors else None


class Truth:
    """Ideal tokens by true time, per (stream, modality), over the delivered captures."""

    def __init__(self, captures: Mapping[CaptureKey, Capture]) -> None:
        self.captures = captures
        rows: dict[tuple[str, Modality], list[tuple[int, int]]] = {}
        for (stream_id, modality, seq), cap in captures.items():
            if cap.delivered:
                rows.setdefault((stream_id, modality), []).append((cap.true_us, seq))
        self._times: dict[tuple[str, Modality], npt.NDArray[np.int64]] = {}
        self._seqs: dict[tuple[str, Modality], list[int]] = {}
        for key, pairs in rows.items():
            pairs.sort()
            self._times[key] = np.array([t for t, _ in pairs], dtype=np.int64)
            self._seqs[key] = [s for _, s in pairs]

    def true_us(self, stream_id: str, modality: Modality, seq: int) -> int | None:
        """True capture time of a token, or None if the generator never made it."""
        cap = self.captures.get((stream_id, modality, seq))
        return None if cap is None else cap.true_us

    def ideal(self, stream_id: str, modality: Modality, at_us: int) -> int | None:
        """The seq of the ideal token of ``modality`` for an anchor captured at ``at_us``."""
        times = self._times.get((stream_id, modality))
        if times is None:
            return None
        seqs = self._seqs[(stream_id, modality)]
        before = int(np.searchsorted(times, at_us, side="right")) - 1  # last start <= at_us
        if modality is Modality.AUDIO:
            if before < 0:
                return None
            seq = seqs[before]
            return seq if at_us < times[before] + self.captures[
                (stream_id, modality, seq)].duration_us else None
        if modality is Modality.SENSOR:
            after = before + 1
            if after < len(times) and (before < 0 or times[after] - at_us < at_us - times[before]):
                return seqs[after]
            return seqs[before] if before >= 0 else None
        return seqs[before] if before >= 0 else None  # OCR; video is its own anchor

    def accepted(self, stream_id: str, modality: Modality, at_us: int) -> frozenset[int]:
        """Every seq counted as right for ``modality`` at ``at_us`` (see the module doc)."""
        ideal = self.ideal(stream_id, modality, at_us)
        right = {ideal} if ideal is not None else set()
        if modality is Modality.SENSOR:
            times = self._times.get((stream_id, modality))
            if times is not None:
                before = int(np.searchsorted(times, at_us, side="right")) - 1
                if before >= 0:
                    right.add(self._seqs[(stream_id, modality)][before])
        return frozenset(right)


def score(pairings: Iterable[Pairing], truth: Truth, slack_us: int = 2000,
          tolerance_us: int = 15_000) -> Score:
    """Score pairings against the truth (see the module doc for the slack and tolerance)."""
    result = Score()
    for p in pairings:
        result.windows += 1
        result.partial += p.partial
        result.inferred += p.inferred
        anchor_us = (None if p.anchor_seq is None
                     else truth.true_us(p.stream_id, Modality.VIDEO, p.anchor_seq))
        if anchor_us is None:
            result.anchorless += 1
            continue
        wrong = strict = False
        for modality in SCORED:
            seq = p.matched.get(modality)
            if seq is None:
                continue
            if seq not in truth.accepted(p.stream_id, modality, anchor_us):
                strict = True
                excess = _excess_us(truth, p.stream_id, modality, seq, anchor_us, tolerance_us)
                if excess > slack_us:
                    wrong = True
                    result.misaligned_by_modality[modality] += 1
            error = _error_us(truth, p.stream_id, modality, seq, anchor_us)
            if error is not None:
                result.errors_us[modality].append(error)
        result.misaligned += wrong
        result.misaligned_strict += strict
    return result


def _distance_us(cap: Capture, at_us: int) -> int:
    """True distance from an instant to a capture (to an audio chunk's interval)."""
    if at_us < cap.true_us:
        return cap.true_us - at_us
    return max(0, at_us - (cap.true_us + cap.duration_us))


def _excess_us(truth: Truth, stream_id: str, modality: Modality, seq: int,
               anchor_us: int, tolerance_us: int) -> int:
    """How much further from the anchor the chosen token is than the ideal one.

    Without an ideal token (the anchor falls in an audio gap, say) any token within the
    matching tolerance is as good as the contract asks: the excess is beyond it.
    """
    cap = truth.captures.get((stream_id, modality, seq))
    if cap is None:
        return 1 << 62
    ideal = truth.ideal(stream_id, modality, anchor_us)
    ideal_cap = None if ideal is None else truth.captures.get((stream_id, modality, ideal))
    if modality is Modality.OCR:
        # Text is valid from its capture on. Taking a capture from after the anchor is wrong
        # by how much later it is; keeping an older one when a newer one was valid is wrong
        # by how long the newer one had been valid at the anchor.
        if cap.true_us > anchor_us:
            return cap.true_us - anchor_us
        return 0 if ideal_cap is None else anchor_us - ideal_cap.true_us
    best = tolerance_us if ideal_cap is None else _distance_us(ideal_cap, anchor_us)
    return _distance_us(cap, anchor_us) - best


def _error_us(truth: Truth, stream_id: str, modality: Modality, seq: int,
              anchor_us: int) -> int | None:
    """|true time of the matched token - true time of the ideal one|.

    Without an ideal token (an audio gap, no OCR yet) the distance to the anchor instead
    (to an audio chunk's true interval).
    """
    cap = truth.captures.get((stream_id, modality, seq))
    if cap is None:
        return None
    ideal = truth.ideal(stream_id, modality, anchor_us)
    ideal_us = None if ideal is None else truth.true_us(stream_id, modality, ideal)
    if ideal_us is not None:
        return abs(cap.true_us - ideal_us)
    if anchor_us < cap.true_us:
        return cap.true_us - anchor_us
    return max(0, anchor_us - (cap.true_us + cap.duration_us))


def pairing_from_window(window: Window) -> Pairing:
    """The pairing a Lockstep window made.

    Uses each present modality's ``matched_seq``; where the aligner left it unset, reads
    the match off the window's tokens (audio: the chunk nearest the anchor, sensor: the
    reading nearest it, OCR: the latest at or before it, else the earliest) and counts the
    modality as inferred.
    """
    matched: dict[Modality, int] = {}
    inferred = 0
    anchor = window.anchor_t_us
    for modality, state in window.modalities.items():
        if modality is Modality.VIDEO or not state.present:
            continue
        if state.matched_seq is not None:
            matched[modality] = state.matched_seq
            continue
        guess = _infer(window, modality, anchor)
        if guess is not None:
            matched[modality] = guess
            inferred += 1
    return Pairing(stream_id=window.stream_id,
                   anchor_seq=window.video.seq if window.video is not None else None,
                   matched=matched, partial=bool(window.missing), inferred=inferred)


def _infer(window: Window, modality: Modality, anchor: int) -> int | None:
    if modality is Modality.AUDIO and window.audio:
        best_a: AudioToken = min(window.audio, key=lambda a: _gap(anchor, a))
        return best_a.seq
    if modality is Modality.SENSOR and window.sensor:
        best_s: SensorToken = min(window.sensor, key=lambda s: abs(s.t_us - anchor))
        return best_s.seq
    if modality is Modality.OCR and window.ocr:
        before: list[OcrToken] = [o for o in window.ocr if o.t_us <= anchor]
        pick = (max(before, key=lambda o: o.t_us) if before
                else min(window.ocr, key=lambda o: o.t_us))
        return pick.seq
    return None


def _gap(point: int, chunk: AudioToken) -> int:
    """Distance from a point to a chunk's reported interval (0 inside)."""
    if point < chunk.t_us:
        return chunk.t_us - point
    return max(0, point - (chunk.t_us + chunk.duration_us))
