"""The confidence gate: how far a window's modalities can be trusted together (``route``).

Pure. Two fusions from the seeds, both configurable:

- the weighted text/image confidence, ``w_t·text + w_i·image`` (0.45 and 0.55);
- the dynamic alignment gate, ``fused = alpha·audio + (1 - alpha)/2·(vision + text)`` and
  ``gate = sigmoid(k·(fused - 0.5))`` with alpha = 0.3. The seeds write ``sigmoid(fused - 0.5)``;
  over fused in [0, 1] that spans only 0.38-0.62, so a steepness ``k`` (10) spreads it; k = 1
  is the seeds' form.

:class:`GateCalibrator` recalibrates per stream: after 3 consecutive windows whose
alignment error exceeds 80 ms, the audio weight alpha is halved (audio is the modality that
drifts), and restored after 3 consecutive windows within bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def weighted_confidence(text: float, image: float, *, text_weight: float = 0.45,
                        image_weight: float = 0.55) -> float:
    """The seeds' weighted text/image confidence, normalised by the weights' sum."""
    total = text_weight + image_weight
    return (text_weight * text + image_weight * image) / total if total > 0 else 0.0


def alignment_gate(audio: float, vision: float, text: float, *, alpha: float = 0.3,
                   steepness: float = 10.0) -> float:
    """The dynamic alignment gate in (0, 1); 0.5 at a fused confidence of 0.5."""
    fused = alpha * audio + (1.0 - alpha) / 2.0 * (vision + text)
    return 1.0 / (1.0 + math.exp(-steepness * (fused - 0.5)))


@dataclass
class GateCalibrator:
    """Per-stream recalibration of the audio weight from observed alignment error.

    Attributes:
        alpha: The configured audio weight.
        threshold_us: Alignment error above which a window counts as misaligned.
        run: Consecutive windows that trigger (or lift) the recalibration.
    """

    alpha: float = 0.3
    threshold_us: int = 80_000
    run: int = 3
    _state: dict[str, tuple[bool, int, int]] = field(default_factory=dict)

    def observe(self, stream_id: str, error_us: int) -> float:
        """Record one window's alignment error; return the stream's audio weight now."""
        recalibrated, over, under = self._state.get(stream_id, (False, 0, 0))
        if error_us > self.threshold_us:
            over, under = over + 1, 0
        else:
            over, under = 0, under + 1
        if not recalibrated and over >= self.run:
            recalibrated, over = True, 0
        elif recalibrated and under >= self.run:
            recalibrated, under = False, 0
        self._state[stream_id] = (recalibrated, over, under)
        return self.alpha / 2.0 if recalibrated else self.alpha

    def forget(self, stream_id: str) -> None:
        """Drop a stream's state."""
        self._state.pop(stream_id, None)
