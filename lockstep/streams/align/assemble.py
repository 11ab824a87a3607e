"""Assembly of an emitted window from the tokens it owns (part of the ``align`` stage).

Pure. Each modality is paired with the window's anchor (:mod:`lockstep.streams.align.matching`); a
pairing the aligner does not trust yet (clocks or offsets not settled) is kept but marked not
present, so the window is partial rather than misaligned; the modalities expected and not
present are named missing. A speech transcript the window owns (an OCR token with
``source="speech"``) is carried as the ASR text of the window's audio, as if the producer had
put it on a chunk; a window without audio carries it in ``ocr``. Records are built without
re-validation (the hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain

from lockstep.streams.align.matching import Item, match_audio, match_ocr, match_sensors, with_speech
from lockstep.streams.align.state import DENSE, Plan, Stream
from lockstep.topics.schemas import (
    AudioToken,
    Modality,
    ModalityState,
    OcrToken,
    Timeline,
    VideoToken,
    Window,
    trusted,
)

_SORTED_DENSE = tuple(sorted(DENSE))


class WindowAssembler:
    """Builds the windows of one aligner.

    Args:
        tolerance_us: Matching tolerance per modality.
        ocr_ttl_us: How long an OCR capture stays valid when nothing replaces it.
        class_of: The SLO class a stream's windows carry.
        max_streams: Streams whose class is cached at most (the aligner's live streams,
            which it forgets on eviction).
    """

    def __init__(self, tolerance_us: dict[Modality, int], ocr_ttl_us: int,
                 class_of: Callable[[str], str], max_streams: int = 100_000) -> None:
        self._tolerance_us = tolerance_us
        self._ocr_ttl_us = ocr_ttl_us
        self._class_of = class_of
        self._max_streams = max_streams
        self._classes: dict[str, str] = {}

    def _slo_class(self, stream_id: str) -> str:
        slo_class = self._classes.get(stream_id)
        if slo_class is None:
            if len(self._classes) >= self._max_streams:  # bounded, whatever ids arrive
                self._classes.clear()
            slo_class = self._classes[stream_id] = self._class_of(stream_id)
        return slo_class

    def forget(self, stream_id: str) -> None:
        """Drop what is cached about a stream (evicted, or no longer owned)."""
        self._classes.pop(stream_id, None)

    def compact(self) -> None:
        """Rebuild the class cache at its present size (a dict never shrinks by itself)."""
        self._classes = dict(self._classes)

    def assemble(self, stream_id: str, st: Stream, plan: Plan, owned: dict[Modality, list[Item]],
                 expected: frozenset[Modality], untrusted: frozenset[Modality],
                 now_us: int) -> Window:
        """The window of ``plan`` over the tokens it ``owned`` (taken from ``st``'s buffers).

        Args:
            stream_id: The stream.
            st: The stream's state: tokens still buffered (audio overlapping the window's
                end, the next sensor reading) and what earlier windows left (the last sensor
                reading and OCR capture), which this updates.
            plan: The window's bounds and anchor.
            owned: Per modality, the tokens the window owns.
            expected: Modalities the window is partial without.
            untrusted: Modalities whose pairing is not trusted yet.
            now_us: The time of emission.
        """
        none: list[Item] = []
        states: dict[Modality, ModalityState] = {}
        video = plan.frame.token if plan.frame is not None else None
        if isinstance(video, VideoToken):
            states[Modality.VIDEO] = trusted(ModalityState,
                present=True, confidence=video.quality, skew_us=0, matched_seq=video.seq,
                tokens=len(owned.get(Modality.VIDEO, none)))
        audio_view = owned.get(Modality.AUDIO, none) + st.peek_before(Modality.AUDIO, plan.end)
        audio_state, audio = match_audio(audio_view, plan.anchor,
                                         plan.start, plan.end, self._tolerance_us[Modality.AUDIO])
        sensor_items = owned.get(Modality.SENSOR, none)
        ocr_items = owned.get(Modality.OCR, none)
        speech: list[OcrToken] = []
        if ocr_items:
            ocr_items, speech = _split_speech(ocr_items)
        sensor_view = sensor_items + st.peek_after(Modality.SENSOR, plan.anchor)
        sensor_state, sensors = match_sensors(
            sensor_view, st.last_sensor, plan.anchor,
            self._tolerance_us[Modality.SENSOR])
        ocr_state, ocr = match_ocr(ocr_items, st.last_ocr, plan.anchor,
                                   self._ocr_ttl_us)
        audio_tokens = ([audio] if audio is not None else
                        [i.token for i in audio_view if isinstance(i.token, AudioToken)])
        if speech:
            if audio_tokens:
                audio_tokens[0] = with_speech(audio_tokens[0], speech)
                if audio_state is not None:
                    audio_state = trusted(ModalityState, **{
                        **audio_state.__dict__, "confidence": audio_tokens[0].asr_confidence})
            else:
                ocr = ocr + speech
        for m, state in ((Modality.AUDIO, audio_state), (Modality.SENSOR, sensor_state),
                         (Modality.OCR, ocr_state)):
            if state is not None:
                if state.present and m in untrusted:
                    # Its offset against video is not known yet, or its clock or the video
                    # clock is still young: the pairing could be off by more than the
                    # tolerance, so the window is partial rather than misaligned.
                    state = trusted(ModalityState, **{**state.__dict__, "present": False})
                states[m] = state
        st.remember(sensor_items, ocr_items)
        missing: list[Modality] = []  # in sorted order; OCR is optional and never missing
        for m in _SORTED_DENSE:
            state = states.get(m)
            if (state is None and m in expected) or (state is not None and not state.present):
                missing.append(m)
        capture = -(1 << 62)
        # The window also carries data of tokens a later window owns: audio cut from a chunk
        # that ends past its end, the sensor reading after the anchor it interpolates
        # towards. The stage starts when the last of its data arrived.
        ingest = max((i.arrival for i in chain(audio_view, sensor_view)), default=capture)
        replay = False
        members: dict[Modality, list[int]] = {}
        for m, items in owned.items():
            members[m] = seqs = []
            for i in items:
                seqs.append(i.seq)
                if i.token.replay:
                    replay = True
                t_us = i.token.t_us
                if t_us > capture:
                    capture = t_us
                if i.arrival > ingest:
                    ingest = i.arrival
            seqs.sort()
        return trusted(Window,
            stream_id=stream_id, window_seq=plan.seq, t_start_us=plan.start,
            t_end_us=plan.end, anchor_t_us=plan.anchor, slo_class=self._slo_class(stream_id),
            modalities=states, missing=missing,
            members=members,
            video=video if isinstance(video, VideoToken) else None,
            audio=audio_tokens,
            ocr=ocr, sensor=sensors,
            timeline=trusted(Timeline,
                capture_us=capture, ingest_us=ingest, aligned_us=now_us,
                routed_us=0, dequeued_us=0, inferred_us=0, responded_us=0),
            replay=replay,
        )


def _split_speech(items: list[Item]) -> tuple[list[Item], list[OcrToken]]:
    """OCR items into scene text and speech transcripts (in ``seq`` order)."""
    scene: list[Item] = []
    speech: list[Item] = []
    for i in items:
        token = i.token
        (speech if isinstance(token, OcrToken) and token.source == "speech" else scene).append(i)
    speech.sort(key=lambda i: i.seq)
    return scene, [i.token for i in speech if isinstance(i.token, OcrToken)]
