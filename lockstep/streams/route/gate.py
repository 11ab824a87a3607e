"""The confidence gate: how far a window's modalities can be trusted together (``route``).

Pure. Two fusions from the seeds, both configurable:

- the weighted text/image confidence, ``w_t·text + w_i·image`` (0.45 and 0.55);
- the dynamic alignment gate, ``fused = alpha·audio + (1 - alpha)/2·(vision + text)`` and
  ``gate = sigmoid(k·(fused - 0.5))`` with alpha = 0.3. The seeds write ``sigmoid(fused - 0.5)``;
  over fused in [0, 1] that spans only 0.38-0.62, so a steepness ``k`` (10) spreads it; k = 1
  is the seeds' form.

:class:`GateCalibrator` recalibrates per stream: after 3 consecutive windows whose
alignment error exceeds 80 ms, the audio weight alpha is halved (audio is the modality that
drifts), and restored after 3 consecutive windows within bounds. Its per-stream state is
bounded: at most ``max_streams`` streams (the least recently seen is forgotten first), and a
stream silent for ``idle_ttl_us`` (measured on the ``now_us`` passed in) starts afresh. Only
streams whose state differs from a fresh one's (recalibrated, or in a misaligned run) are
held.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final, NamedTuple

#: Streams whose calibration is kept; past it the least recently seen stream is forgotten.
MAX_STREAMS: Final = 10_000
#: A stream unseen this long (µs, on the routing clock passed in) starts afresh.
IDLE_TTL_US: Final = 300_000_000


def alignment_gate(audio: float, vision: float, text: float, *, alpha: float = 0.3,
                   steepness: float = 10.0) -> float:
    """The dynamic alignment gate in (0, 1); 0.5 at a fused confidence of 0.5."""
    fused = alpha * audio + (1.0 - alpha) / 2.0 * (vision + text)
    return 1.0 / (1.0 + math.exp(-steepness * (fused - 0.5)))


class _Run(NamedTuple):
    """One stream's calibration: whether alpha is halved, the current runs, when last seen."""

    recalibrated: bool
    over: int
    under: int
    seen_us: int


_FRESH = _Run(False, 0, 0, 0)


@dataclass
class GateCalibrator:
    """Per-stream recalibration of the audio weight from observed alignment error.

    Attributes:
        alpha: The configured audio weight.
        threshold_us: Alignment error above which a window counts as misaligned.
        run: Consecutive windows that trigger (or lift) the recalibration.
        max_streams: Streams whose state is kept (least recently seen forgotten first).
        idle_ttl_us: A stream unseen this long (on the ``now_us`` passed in) starts afresh.
    """

    alpha: float = 0.3
    threshold_us: int = 80_000
    run: int = 3
    max_streams: int = MAX_STREAMS
    idle_ttl_us: int = IDLE_TTL_US
    _state: OrderedDict[str, _Run] = field(default_factory=OrderedDict, repr=False)

    def __post_init__(self) -> None:
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be at least 1, got {self.max_streams}")
        if self.idle_ttl_us <= 0:
            raise ValueError(f"idle_ttl_us must be positive, got {self.idle_ttl_us}")

    def __len__(self) -> int:
        """Streams whose state is held (recalibrated, or in a misaligned run)."""
        return len(self._state)

    def observe(self, stream_id: str, error_us: int, now_us: int = 0) -> float:
        """Record one window's alignment error; return the stream's audio weight now.

        Args:
            stream_id: The window's stream.
            error_us: The window's alignment error (its largest pairing skew).
            now_us: The routing clock, for the idle expiry of streams.
        """
        state = self._state.pop(stream_id, None)
        if state is None or now_us - state.seen_us > self.idle_ttl_us:
            state = _FRESH
        recalibrated, over, under = state.recalibrated, state.over, state.under
        if error_us > self.threshold_us:
            over, under = over + 1, 0
        else:
            over, under = 0, under + 1
        if not recalibrated and over >= self.run:
            recalibrated, over = True, 0
        elif recalibrated and under >= self.run:
            recalibrated, under = False, 0
        # Not recalibrated and no misaligned run under way: the state is a fresh one's
        # (``under`` counts only once recalibrated), so nothing is kept. A stream that
        # stays aligned, or a flood of new ids, holds no state at all.
        if recalibrated or over:
            self._state[stream_id] = _Run(recalibrated, over, under, now_us)  # most recent last
        self._expire(now_us)
        return self.alpha / 2.0 if recalibrated else self.alpha

    def forget(self, stream_id: str) -> None:
        """Drop a stream's state."""
        self._state.pop(stream_id, None)

    def _expire(self, now_us: int) -> None:
        # The least recently seen stream is first, so both sweeps stop at the first keeper;
        # a clock that steps back only delays an expiry, the entry is reset when next seen.
        state = self._state
        while len(state) > self.max_streams:
            state.popitem(last=False)
        while state:
            oldest = next(iter(state.values()))
            if now_us - oldest.seen_us <= self.idle_ttl_us:
                break
            state.popitem(last=False)
