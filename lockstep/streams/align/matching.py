"""Pairing of buffered tokens with a window's anchor (part of the ``align`` stage).

Pure functions over tokens whose capture times are already recovered (``t`` below is the
corrected capture time, µs). Audio is cut sample-accurately to the window, sensors are
interpolated at the anchor, OCR holds until replaced (an empty text clears it) or until its
TTL, and a speech transcript becomes the ASR text of the window's audio. Records built here
come from validated tokens and are constructed without re-validation (the hot path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lockstep.topics.payloads import PCM_FORMATS
from lockstep.topics.schemas import AudioToken, ModalityState, OcrToken, SensorToken, Token, trusted

_SAMPLE_BYTES = {encoding: np.dtype(spec[0]).itemsize for encoding, spec in PCM_FORMATS.items()}


@dataclass(slots=True)
class Item:
    """A buffered token with its corrected capture time and its arrival.

    ``end`` is the corrected end of the capture (audio chunks last; the rest are instants);
    ``own`` the time that decides which window owns the token (a chunk's last sample);
    ``seq`` the token's (kept at hand for the hot path).
    """

    t: int
    token: Token
    arrival: int
    end: int
    own: int
    seq: int

    @classmethod
    def of(cls, t: int, token: Token, arrival: int) -> Item:
        """The item of a token captured at corrected time ``t``."""
        if isinstance(token, AudioToken):
            end = t + token.duration_us
            return cls(t, token, arrival, end, end - 1, token.seq)
        return cls(t, token, arrival, t, t, token.seq)



def distance(point: int, start: int, end: int) -> int:
    """Distance from a point to the interval [start, end] (0 inside)."""
    if point < start:
        return start - point
    return max(0, point - end)


def match_audio(items: Sequence[Item], anchor: int, start: int, end: int,
                tolerance: int) -> tuple[ModalityState | None, AudioToken | None]:
    """Pair audio with the anchor and cut the window's audio out of the chunks.

    PCM chunks are cut to exactly ``[start, end)`` at sample resolution, with silence where
    no chunk covers; compressed chunks are passed whole. The match is the chunk nearest
    the anchor (0 when it covers it), the earlier one on a tie.
    """
    chunks: list[Item] = []
    best: Item | None = None
    skew = 0
    confidence: float | None = None
    for c in items:
        if c.end <= start or c.t >= end:
            continue
        chunks.append(c)
        d = c.t - anchor if anchor < c.t else (anchor - c.end if anchor > c.end else 0)
        if best is None or d < skew or (d == skew and c.t < best.t):
            best, skew = c, d
        conf = c.token.asr_confidence if isinstance(c.token, AudioToken) else None
        if conf is not None and (confidence is None or conf > confidence):
            confidence = conf
    if best is None:
        return None, None
    token = best.token
    assert isinstance(token, AudioToken)
    state = trusted(ModalityState,
        present=skew <= tolerance, confidence=confidence, skew_us=skew,
        matched_seq=token.seq, tokens=len(chunks))
    return state, _cut(chunks, start, end, confidence)


def _cut(chunks: Sequence[Item], start: int, end: int,
         confidence: float | None) -> AudioToken | None:
    first = chunks[0].token
    assert isinstance(first, AudioToken)
    spec = PCM_FORMATS.get(first.encoding)
    if spec is None:
        return None
    rate, channels, encoding = first.sample_rate, first.channels, first.encoding
    texts = []
    frame = _SAMPLE_BYTES[encoding] * channels
    n = max(1, round((end - start) * rate / 1_000_000))
    # Byte slices rather than numpy: the arrays are a few hundred samples, where numpy's
    # per-call overhead is most of the cost.
    out = bytearray(n * frame)
    for c in chunks:
        tok = c.token
        if not (isinstance(tok, AudioToken) and tok.encoding == encoding
                and tok.sample_rate == rate and tok.channels == channels):
            return None  # mixed formats: the chunks are passed whole
        if tok.asr_text:
            texts.append(tok.asr_text)
        pcm = tok.data
        offset = round((c.t - start) * rate / 1_000_000)  # chunk's first sample in the window
        lo = offset if offset > 0 else 0
        hi = offset + len(pcm) // frame
        if hi > n:
            hi = n
        if lo < hi:
            out[lo * frame:hi * frame] = memoryview(pcm)[(lo - offset) * frame:
                                                         (hi - offset) * frame]
    duration = round(n * 1_000_000 / rate)
    return trusted(AudioToken, stream_id=first.stream_id, seq=first.seq, t_us=start,
                   encoding=encoding, sample_rate=rate, channels=channels,
                   duration_us=duration, data=bytes(out), modality=first.modality,
                   asr_confidence=confidence, asr_text=" ".join(texts) or None,
                   replay=first.replay, final=False)


def match_sensors(items: Sequence[Item], previous: dict[str, Item], anchor: int,
                  tolerance: int) -> tuple[ModalityState | None, list[SensorToken]]:
    """Per sensor name, the value at the anchor.

    Interpolated linearly between the readings just before and after the anchor when they
    are within ``tolerance``·4 of each other; else the nearest reading within tolerance.
    """
    around: dict[str, list[Item | None]] = {}  # name -> [last at or before, first after]
    count = 0  # sensor tokens among ``items``
    for source in (previous.values(), items):
        for item in source:
            token = item.token
            if not isinstance(token, SensorToken):
                continue
            count += source is items
            slot = around.get(token.name)
            if slot is None:
                slot = around[token.name] = [None, None]
            t = item.t
            if t <= anchor:
                if slot[0] is None or t > slot[0].t:
                    slot[0] = item
            elif slot[1] is None or t < slot[1].t:
                slot[1] = item
    values: list[SensorToken] = []
    nearest: Item | None = None  # the reported match: the reading nearest the anchor
    nearest_gap = 0
    skew: int | None = None  # 0 for a value interpolated at the anchor
    for name in sorted(around) if len(around) > 1 else around:
        before, after = around[name]
        # Ties go to the reading before the anchor.
        if after is None or (before is not None and anchor - before.t <= after.t - anchor):
            near = before
        else:
            near = after
        assert near is not None
        near_gap = abs(near.t - anchor)
        value = _interpolate(before, after, anchor, tolerance)
        if nearest is None or near_gap < nearest_gap:
            nearest, nearest_gap = near, near_gap
        if value is None and near_gap <= tolerance:
            token = near.token
            assert isinstance(token, SensorToken)
            value, gap = token, near_gap
        else:
            gap = 0
        if value is not None:
            values.append(value)
            skew = gap if skew is None or gap < skew else skew
    if nearest is None:
        return None, []
    near_token = nearest.token
    assert isinstance(near_token, SensorToken)
    confs = [v.confidence for v in values if v.confidence is not None]
    state = trusted(
        ModalityState, present=bool(values), confidence=min(confs) if confs else None,
        skew_us=nearest_gap if skew is None else skew, matched_seq=near_token.seq,
        tokens=count)
    return state, values


def _interpolate(before: Item | None, after: Item | None, anchor: int,
                 tolerance: int) -> SensorToken | None:
    if before is None or after is None or after.t - before.t > 4 * tolerance:
        return None
    bt, at = before.token, after.token
    assert isinstance(bt, SensorToken) and isinstance(at, SensorToken)
    if len(bt.values) != len(at.values):
        return None
    w = (anchor - before.t) / (after.t - before.t)
    values = dict(bt.__dict__)
    values["t_us"] = anchor
    values["final"] = False  # a reading made up at the anchor, not the stream's last
    values["values"] = [float(x + w * (y - x)) for x, y in zip(bt.values, at.values, strict=True)]
    return trusted(SensorToken, **values)


def match_ocr(items: Sequence[Item], previous: Sequence[Item], anchor: int,
              ttl: int) -> tuple[ModalityState | None, list[OcrToken]]:
    """The OCR tokens valid at the anchor: the latest capture at or before it, within TTL.

    A capture whose texts are all empty says the scene shows no text: none is valid. Text
    recognised late (stamped when known, docs/alignment.md "Late perception") that the
    window owns is valid at its anchor when the frame it was read from is: it became known
    after the anchor, but it was on screen then, and the window it joins holds it.
    """
    oldest = anchor - ttl
    latest = oldest - 1
    valid: list[Item] = []  # the captures at ``latest``
    for source in (previous, items):
        for i in source:
            t = i.t
            if oldest <= t and t >= latest and isinstance(i.token, OcrToken) and (
                    t <= anchor or (source is items and _read_by(i, anchor))):
                if t > latest:
                    latest, valid = t, [i]
                else:
                    valid.append(i)
    if not valid:
        return None, []
    if len(valid) > 1:
        valid.sort(key=lambda i: i.seq)
    tokens = [i.token for i in valid if isinstance(i.token, OcrToken) and i.token.text]
    if not tokens:
        return None, []
    state = trusted(ModalityState, present=True,
                          confidence=sum(t.confidence for t in tokens) / len(tokens),
                          skew_us=abs(anchor - latest), matched_seq=tokens[0].seq,
                          tokens=len(tokens))
    return state, tokens


def _read_by(item: Item, anchor: int) -> bool:
    """Whether late text was read from media captured at or before ``anchor``."""
    token = item.token
    span = token.span_us if isinstance(token, OcrToken) else None
    # ``span_us`` is on the producer's clock, as ``t_us`` is; ``item.t`` the corrected time.
    return span is not None and span[0] - (token.t_us - item.t) <= anchor


def with_speech(chunk: AudioToken, speech: Sequence[OcrToken]) -> AudioToken:
    """``chunk`` carrying the transcripts as its ASR text, at the best confidence heard.

    Text the chunk already carries comes first; the confidence is the highest of those
    that come with text.
    """
    texts = [chunk.asr_text] if chunk.asr_text else []
    confidences = ([chunk.asr_confidence] if chunk.asr_text and chunk.asr_confidence is not None
                   else [])
    for t in speech:
        if t.text:
            texts.append(t.text)
            confidences.append(t.confidence)
    if not texts:
        return chunk
    return trusted(AudioToken, **{**chunk.__dict__, "asr_text": " ".join(texts)[:4096],
                                  "asr_confidence": max(confidences, default=None)})
