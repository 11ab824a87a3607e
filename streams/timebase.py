"""Putting every token of a stream on one timebase: the video capture clock.

Part of the ``align`` stage. A token's corrected time is its capture time as its modality's
recovered clock has it (:class:`~streams.clock.CaptureClock`), shifted by that modality's
clock offset against video: configured, or estimated from the difference of the low
quantiles of the modalities' transport lags (:class:`~streams.clock.LagFloor`).
"""

from __future__ import annotations

from streams.alignstate import Stream
from streams.settings import AlignSettings
from topics.schemas import AudioToken, Modality, Token

#: Lag samples of a modality and of video before an offset estimate is trusted; sparse OCR
#: gives few, noisy samples and needs more.
OFFSET_SAMPLES = 8
OFFSET_SAMPLES_SPARSE = 32


class Timebase:
    """Corrects tokens' capture times and tracks each stream's clock offsets."""

    def __init__(self, settings: AlignSettings) -> None:
        self.configured = {Modality(m): int(v * 1000) for m, v in settings.clock_offsets_ms.items()}
        self.estimate = settings.estimate_offsets
        self.deadband_us = int(settings.offset_min_ms * 1000)

    def correct(self, st: Stream, token: Token, now_us: int, *, learn_lag: bool = True) -> int:
        """Fit the token into its clock; return its corrected capture time (µs).

        ``learn_lag`` false (reading a backlog) keeps its transport lag out of the offset
        estimate: a backlog reaches each topic at its own time, so the lags no longer say
        anything about the clocks.
        """
        m = token.modality
        clock = st.clocks[m]
        # An irregular (event-driven) modality never gets a ready clock: raw stamps stay.
        recovered = clock.update(token.seq, token.t_us)
        lag = st.lags[m]
        if clock.ready and learn_lag:  # raw, jittered times would drag the floor down
            # A chunk can only be sent once it has been captured whole: measure from its end.
            done = recovered + token.duration_us if isinstance(token, AudioToken) else recovered
            lag.push(now_us, done)
        offset = self.configured.get(m)
        if offset is None and (m is Modality.VIDEO or not self.estimate):
            offset = 0
        if offset is None:
            ref = st.lags.get(Modality.VIDEO)
            need = OFFSET_SAMPLES_SPARSE if m is Modality.OCR else OFFSET_SAMPLES
            if (ref is not None and ref.low is not None and lag.low is not None
                    and ref.samples >= OFFSET_SAMPLES and lag.samples >= need):
                offset = ref.low - lag.low
                # Lag floors carry the clocks' residual error (a few ms): below the
                # deadband an estimate is noise, and correcting by it would hurt.
                if abs(offset) < self.deadband_us:
                    offset = 0
        if offset is not None:
            st.offset_known.add(m)
        st.offsets[m] = offset or 0
        return recovered - (offset or 0)
