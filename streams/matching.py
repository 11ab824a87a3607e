"""Pairing of buffered tokens with a window's anchor (part of the ``align`` stage).

Pure functions over tokens whose capture times are already recovered (``t`` below is the
corrected capture time, µs). Audio is cut sample-accurately to the window, sensors are
interpolated at the anchor, OCR holds until replaced or until its TTL. Records built here
come from validated tokens and are constructed without re-validation (the hot path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topics.media import PCM_FORMATS
from topics.schemas import AudioToken, ModalityState, OcrToken, SensorToken, Token, trusted


@dataclass(slots=True)
class Item:
    """A buffered token with its corrected capture time and its arrival.

    ``end`` is the corrected end of the capture (audio chunks last; the rest are instants);
    ``own`` the time that decides which window owns the token (a chunk's last sample).
    """

    t: int
    token: Token
    arrival: int
    end: int
    own: int

    @classmethod
    def of(cls, t: int, token: Token, arrival: int) -> Item:
        """The item of a token captured at corrected time ``t``."""
        if isinstance(token, AudioToken):
            end = t + token.duration_us
            return cls(t, token, arrival, end, end - 1)
        return cls(t, token, arrival, t, t)



def distance(point: int, start: int, end: int) -> int:
    """Distance from a point to the interval [start, end] (0 inside)."""
    if point < start:
        return start - point
    return max(0, point - end)


def match_audio(items: Sequence[Item], anchor: int, start: int, end: int,
                tolerance: int) -> tuple[ModalityState | None, AudioToken | None]:
    """Pair audio with the anchor and cut the window's audio out of the chunks.

    PCM chunks are cut to exactly ``[start, end)`` at sample resolution, with silence where
    no chunk covers; compressed chunks are passed whole.
    """
    chunks = [i for i in items if i.end > start and i.t < end]
    if not chunks:
        return None, None
    best = min(chunks, key=lambda i: (distance(anchor, i.t, i.end), i.t))
    skew = distance(anchor, best.t, best.end)
    token = best.token
    assert isinstance(token, AudioToken)
    confs = [c.token.asr_confidence for c in chunks if isinstance(c.token, AudioToken)
             and c.token.asr_confidence is not None]
    state = trusted(ModalityState,
        present=skew <= tolerance, confidence=max(confs) if confs else None, skew_us=skew,
        matched_seq=token.seq, tokens=len(chunks))
    return state, _cut(chunks, start, end)


def _cut(chunks: Sequence[Item], start: int, end: int) -> AudioToken | None:
    first = chunks[0].token
    assert isinstance(first, AudioToken)
    spec = PCM_FORMATS.get(first.encoding)
    dtype = spec[0] if spec is not None else None
    same = all(isinstance(c.token, AudioToken) and c.token.encoding == first.encoding
               and c.token.sample_rate == first.sample_rate
               and c.token.channels == first.channels for c in chunks)
    if dtype is None or not same:
        return None
    rate, channels = first.sample_rate, first.channels
    n = max(1, round((end - start) * rate / 1_000_000))
    out = np.zeros((n, channels), dtype=dtype)
    for c in chunks:
        tok = c.token
        assert isinstance(tok, AudioToken)
        pcm = np.frombuffer(tok.data, dtype=dtype).reshape(-1, channels)
        offset = round((c.t - start) * rate / 1_000_000)  # chunk's first sample in the window
        lo, hi = max(0, offset), min(n, offset + len(pcm))
        if lo < hi:
            out[lo:hi] = pcm[lo - offset:hi - offset]
    duration = round(n * 1_000_000 / rate)
    return trusted(AudioToken, stream_id=first.stream_id, seq=first.seq, t_us=start,
                      encoding=first.encoding, sample_rate=rate, channels=channels,
                      duration_us=duration, data=out.tobytes(), modality=first.modality,
                      asr_confidence=max((c.token.asr_confidence for c in chunks
                                          if isinstance(c.token, AudioToken)
                                          and c.token.asr_confidence is not None), default=None),
                      asr_text=" ".join(c.token.asr_text for c in chunks
                                        if isinstance(c.token, AudioToken) and c.token.asr_text)
                      or None)


def match_sensors(items: Sequence[Item], previous: dict[str, Item], anchor: int,
                  tolerance: int) -> tuple[ModalityState | None, list[SensorToken]]:
    """Per sensor name, the value at the anchor.

    Interpolated linearly between the readings just before and after the anchor when they
    are within ``tolerance``·4 of each other; else the nearest reading within tolerance.
    """
    around: dict[str, list[Item | None]] = {}  # name -> [last at or before, first after]
    for item in (*previous.values(), *items):
        token = item.token
        if not isinstance(token, SensorToken):
            continue
        slot = around.get(token.name)
        if slot is None:
            slot = around[token.name] = [None, None]
        if item.t <= anchor:
            if slot[0] is None or item.t > slot[0].t:
                slot[0] = item
        elif slot[1] is None or item.t < slot[1].t:
            slot[1] = item
    values: list[SensorToken] = []
    nearest: Item | None = None  # the reported match: the reading nearest the anchor
    skew: int | None = None  # 0 for a value interpolated at the anchor
    for name in sorted(around):
        before, after = around[name]
        near = min((i for i in (before, after) if i is not None),
                   key=lambda i: abs(i.t - anchor))
        value = _interpolate(before, after, anchor, tolerance)
        if nearest is None or abs(near.t - anchor) < abs(nearest.t - anchor):
            nearest = near
        if value is None and abs(near.t - anchor) <= tolerance:
            token = near.token
            assert isinstance(token, SensorToken)
            value, gap = token, abs(near.t - anchor)
        else:
            gap = 0
        if value is not None:
            values.append(value)
            skew = gap if skew is None else min(skew, gap)
    if nearest is None:
        return None, []
    near_token = nearest.token
    assert isinstance(near_token, SensorToken)
    confs = [v.confidence for v in values if v.confidence is not None]
    state = trusted(
        ModalityState, present=bool(values), confidence=min(confs) if confs else None,
        skew_us=abs(nearest.t - anchor) if skew is None else skew, matched_seq=near_token.seq,
        tokens=sum(1 for i in items if isinstance(i.token, SensorToken)))
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
    vals = [float(x + w * (y - x)) for x, y in zip(bt.values, at.values, strict=True)]
    return trusted(SensorToken, **{**bt.__dict__, "t_us": anchor, "values": vals})


def match_ocr(items: Sequence[Item], previous: Sequence[Item], anchor: int,
              ttl: int) -> tuple[ModalityState | None, list[OcrToken]]:
    """The OCR tokens valid at the anchor: the latest capture at or before it, within TTL."""
    candidates = [i for i in (*previous, *items)
                  if isinstance(i.token, OcrToken) and i.t <= anchor and anchor - i.t <= ttl]
    if not candidates:
        return None, []
    latest = max(i.t for i in candidates)
    valid = sorted((i for i in candidates if i.t == latest), key=lambda i: i.token.seq)
    tokens = [i.token for i in valid if isinstance(i.token, OcrToken)]
    state = trusted(ModalityState, present=True,
                          confidence=sum(t.confidence for t in tokens) / len(tokens),
                          skew_us=anchor - latest, matched_seq=tokens[0].seq,
                          tokens=len(tokens))
    return state, tokens
