"""Putting every token of a stream on one timebase: the video capture clock.

Part of the ``align`` stage. A token's corrected time is its capture time as its modality's
recovered clock has it (:class:`~lockstep.streams.align.clock.CaptureClock`), shifted by that
modality's clock offset against video: configured, or estimated from the difference of the low
quantiles of the modalities' transport lags measured on the current fits
(:class:`~lockstep.streams.align.clock.ClockLag`). An estimated offset also absorbs the fits'
residual intercept error, so tokens of two modalities land where their arrivals put them relative to
each other, to within the fits' slope error over a few captures.
"""

from __future__ import annotations

from typing import cast

from lockstep.config.settings import AlignSettings
from lockstep.streams.align.state import Stream
from lockstep.topics.schemas import AudioToken, Modality, Token

#: Lag samples of a modality and of video before an offset estimate is trusted.
OFFSET_SAMPLES = 8


class Timebase:
    """Corrects tokens' capture times and tracks each stream's clock offsets."""

    def __init__(self, settings: AlignSettings) -> None:
        self.configured = {Modality(m): int(v * 1000) for m, v in settings.clock_offsets_ms.items()}
        self.estimate = settings.estimate_offsets
        self.deadband_us = int(settings.offset_min_ms * 1000)
        #: Modalities whose offset is not estimated: configured, else 0 (video is the
        #: reference; without estimation every clock is taken as video's).
        self._fixed = {m: self.configured.get(m, 0) for m in Modality
                       if m in self.configured or m is Modality.VIDEO or not self.estimate}

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
        if not learn_lag:
            low = lag.current(clock)
        elif m is Modality.AUDIO:
            # A chunk can only be sent once it has been captured whole: measure from its end.
            low = lag.push(token.seq, now_us - cast(AudioToken, token).duration_us, clock)
        else:
            low = lag.push(token.seq, now_us, clock)
        offset = self._fixed.get(m)
        if offset is None:
            ref = st.lags[Modality.VIDEO]  # its figure is current: only video moves its fit
            if (low is not None and ref.low is not None and ref.samples >= OFFSET_SAMPLES
                    and lag.samples >= OFFSET_SAMPLES):
                offset = ref.low - low
                if abs(offset) < self.deadband_us:
                    offset = 0
            elif m in st.offset_known:
                offset = st.offsets[m]  # the clock restarted: keep the last estimate
            else:
                st.offsets[m] = 0  # not known yet: the modality is not paired (see settling)
                return recovered
        st.offset_known.add(m)
        st.offsets[m] = offset
        return recovered - offset
