"""Message contracts: media tokens, windows, requests, responses, dead letters, late records.

Every record on a Lockstep topic is one of these models, encoded by :mod:`lockstep.topics.codec`.
The models are frozen and reject unknown fields, NaN and infinities, and event times
outside the years 2000-2100, so that a record that validates is safe for every stage.
Times are integer microseconds: ``t_us`` is capture (event) time set by the producer;
the ``*_us`` fields of :class:`Timeline` are wall-clock times taken by the stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FiniteFloat,
    Strict,
    StrictBool,
    StrictBytes,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from lockstep.errors import ReasonCode

#: Earliest and latest accepted event time (2000-01-01 and 2100-01-01 UTC, in µs).
MIN_T_US = 946_684_800_000_000
MAX_T_US = 4_102_444_800_000_000


class Modality(StrEnum):
    """The four kinds of media token."""

    VIDEO = "video"
    AUDIO = "audio"
    OCR = "ocr"
    SENSOR = "sensor"


# Wire fields are strict: a string is not an int, text is not bytes (no base64 smuggled in
# a bin field), and a float field takes only numbers.
StreamId = Annotated[
    StrictStr, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@/\-]+$")
]
EventTime = Annotated[StrictInt, Field(ge=MIN_T_US, le=MAX_T_US)]
Seq = Annotated[StrictInt, Field(ge=0, lt=2**63)]
#: A token's ``seq``: below 2^62, where the keys of hop windows (streams without video) begin.
TokenSeq = Annotated[StrictInt, Field(ge=0, lt=2**62)]
Number = Annotated[FiniteFloat, Strict()]
Confidence = Annotated[Number, Field(ge=0.0, le=1.0)]
Text = Annotated[StrictStr, StringConstraints(max_length=4096)]

#: A reason code (:class:`~lockstep.errors.ReasonCode`); readers accept codes they do not
#: know (new ones appear within a wire version), and "" from writers that predate codes.
Code = Annotated[StrictStr, StringConstraints(max_length=64, pattern=r"^([a-z][a-z0-9_]*)?$")]
_DEAD_CODES = [c.value for c in ReasonCode if c not in (ReasonCode.STALE,
                                                         ReasonCode.WINDOW_EMITTED)]
_LATE_CODES = [ReasonCode.STALE.value, ReasonCode.WINDOW_EMITTED.value]

_BYTES_PER_PIXEL = {"gray8": 1, "rgb24": 3}
_BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4}


class _Record(BaseModel):
    # The JSON form of a record (test vectors, `lockstep validate`) carries bytes as base64;
    # on the wire they are MessagePack bin.
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64",
                              val_json_bytes="base64")


class _Token(_Record):
    stream_id: StreamId
    seq: TokenSeq
    t_us: EventTime
    #: Replayed media (recorded long before it is published, or published faster than
    #: captured): its windows are answered but kept out of the live SLO figures. Sent only
    #: when true (docs/wire-format.md §4).
    replay: StrictBool = False
    #: The last token of its modality in this stream (a camera or file that stops): align
    #: waits for no more of the modality, so the stream's last window closes at once
    #: instead of at its deadline. Sent only when true (docs/wire-format.md §4).
    final: StrictBool = False


class VideoToken(_Token):
    """One video frame. Raw formats carry exactly ``width*height*channels`` bytes."""

    modality: Literal[Modality.VIDEO] = Modality.VIDEO
    format: Literal["gray8", "rgb24", "jpeg", "png", "h264"]
    width: Annotated[StrictInt, Field(ge=1, le=16384)]
    height: Annotated[StrictInt, Field(ge=1, le=16384)]
    data: Annotated[StrictBytes, Field(min_length=1)]
    quality: Confidence | None = None
    keyframe: StrictBool = True

    @field_validator("data")
    @classmethod
    def _raw_size_matches(cls, data: bytes, info: ValidationInfo) -> bytes:
        fields = info.data  # the fields before ``data``, where they validated
        per_pixel = _BYTES_PER_PIXEL.get(fields.get("format", ""))
        if per_pixel is None or "width" not in fields or "height" not in fields:
            return data
        width, height = fields["width"], fields["height"]
        if len(data) != width * height * per_pixel:
            raise ValueError(f"{fields['format']} frame {width}x{height} needs "
                             f"{width * height * per_pixel} bytes, got {len(data)}")
        return data


class AudioToken(_Token):
    """One audio chunk starting at ``t_us``; PCM chunks must match their duration."""

    modality: Literal[Modality.AUDIO] = Modality.AUDIO
    encoding: Literal["pcm_s16le", "pcm_f32le", "opus", "aac"]
    sample_rate: Annotated[StrictInt, Field(ge=1000, le=384_000)]
    channels: Annotated[StrictInt, Field(ge=1, le=8)]
    duration_us: Annotated[StrictInt, Field(gt=0, le=10_000_000)]
    data: Annotated[StrictBytes, Field(min_length=1)]
    asr_text: Text | None = None
    asr_confidence: Confidence | None = None

    @field_validator("data")
    @classmethod
    def _pcm_size_matches(cls, data: bytes, info: ValidationInfo) -> bytes:
        fields = info.data  # the fields before ``data``, where they validated
        encoding = fields.get("encoding", "")
        per_sample = _BYTES_PER_SAMPLE.get(encoding)
        if per_sample is None or not {"channels", "duration_us", "sample_rate"} <= fields.keys():
            return data
        frame = per_sample * fields["channels"]
        if len(data) % frame:
            raise ValueError(f"{encoding} chunk is not a whole number of samples")
        rate, duration_us = fields["sample_rate"], fields["duration_us"]
        if abs(len(data) // frame - round(duration_us * rate / 1_000_000)) > 1:
            raise ValueError(f"{encoding} chunk of {len(data) // frame} samples does not "
                             f"match duration_us={duration_us} at {rate} Hz")
        return data


class OcrToken(_Token):
    """Text read in the scene (valid from ``t_us`` until replaced), or a speech transcript.

    ``t_us`` is when the text is known on the stream's capture clock: a producer that
    recognises after capture stamps the newest media it has sent, and ``span_us`` says
    what the text was recognised from (docs/wire-format.md §4).
    """

    modality: Literal[Modality.OCR] = Modality.OCR
    text: Text
    #: x, y, width, height of the text in the frame, normalised to 0..1.
    bbox: tuple[Number, Number, Number, Number]
    confidence: Confidence
    #: ``scene``: read on screen, held until replaced; ``speech``: a transcript of the audio.
    source: Literal["scene", "speech"] = "scene"
    #: Capture times (µs) of the media the text was recognised from: the frame read
    #: ``[t, t]`` or the utterance ``[start, end]``; None: ``t_us``.
    span_us: tuple[EventTime, EventTime] | None = None


class SensorToken(_Token):
    """One reading of a named sensor (a vector of finite values)."""

    modality: Literal[Modality.SENSOR] = Modality.SENSOR
    name: Annotated[StrictStr, StringConstraints(min_length=1, max_length=128)]
    values: Annotated[list[Number], Field(min_length=1, max_length=1024)]
    unit: Annotated[StrictStr, StringConstraints(max_length=32)] = ""
    confidence: Confidence | None = None


Token = Annotated[VideoToken | AudioToken | OcrToken | SensorToken, Field(discriminator="modality")]


class Timeline(_Record):
    """When a window passed each stage (µs since the epoch; 0 means not yet).

    ``capture_us`` is event time: the producer's ``t_us`` of the newest token in the window.
    The others are the wall clock of the stage that set them; ``ingest_us`` is when align
    received the last token whose data the window carries, a member or a token a later
    window owns (an audio chunk it cuts samples from, the sensor reading after its anchor).
    """

    capture_us: int = 0
    ingest_us: int = 0
    aligned_us: int = 0
    routed_us: int = 0
    dequeued_us: int = 0
    inferred_us: int = 0
    responded_us: int = 0


class ModalityState(_Record):
    """How a modality was matched in a window.

    ``matched_seq`` is the token the aligner paired with the anchor (for a sensor, the
    reading nearest it, even when the value is interpolated); ``skew_us`` its distance from
    the anchor, 0 for an interpolated value.
    """

    present: bool
    confidence: Confidence | None = None
    skew_us: int | None = None
    matched_seq: Seq | None = None
    tokens: Annotated[int, Field(ge=0)] = 0


class Window(_Record):
    """Tokens of one stream aligned on one event-time interval ``[t_start_us, t_end_us)``.

    ``members`` lists the ``seq`` of every token the window consumed, per modality, so the
    ledger (window, late or dead letter for every token) can be checked from the outside.
    """

    stream_id: StreamId
    window_seq: Seq
    t_start_us: EventTime
    t_end_us: EventTime
    anchor_t_us: EventTime
    slo_class: str
    modalities: dict[Modality, ModalityState]
    missing: list[Modality]
    members: dict[Modality, list[int]]
    video: VideoToken | None = None
    audio: list[AudioToken] = Field(default_factory=list)
    ocr: list[OcrToken] = Field(default_factory=list)
    sensor: list[SensorToken] = Field(default_factory=list)
    timeline: Timeline = Field(default_factory=Timeline)
    #: Built from replayed media (a member token has ``replay``).
    replay: StrictBool = False

    @property
    def partial(self) -> bool:
        """True when at least one modality is missing."""
        return bool(self.missing)

    @property
    def budget_start_us(self) -> int:
        """Where the window's SLO budget starts (µs): its newest token's capture time.

        A replay's media was captured long before it was published, so its budget starts
        when align received its newest token (``timeline.ingest_us``).
        """
        return self.timeline.ingest_us if self.replay else self.timeline.capture_us


class TokenDrop(_Record):
    """Image patches an engine may skip: ``keep`` is the bit-packed row-major keep mask."""

    patch: Annotated[int, Field(ge=1)]
    rows: Annotated[int, Field(ge=0)]
    cols: Annotated[int, Field(ge=0)]
    keep: bytes
    dropped: Confidence


class Request(_Record):
    """A window routed to an engine pool, with its priority and deadline."""

    window: Window
    route: str
    pool: str
    priority: Annotated[FiniteFloat, Field(ge=0.0, le=1.0)]
    deadline_us: int
    #: Where the worker writes the response: ``responses`` or a topic under ``responses.``
    #: (which must exist); anything else is refused at decoding.
    reply_topic: Annotated[StrictStr, StringConstraints(
        pattern=r"^responses(\.[A-Za-z0-9._\-]{1,200})?$")] = "responses"
    #: Why the window took its route (see docs/routing.md).
    reason: str = ""
    #: Per-modality confidences the gate saw, plus "text" and "gate".
    confidence: dict[str, Confidence] = Field(default_factory=dict)
    #: Uniform image patches the engine may skip (routes that use vision).
    token_drop: TokenDrop | None = None


class Response(_Record):
    """The engine's answer for one window; idempotent on (stream_id, window_seq)."""

    stream_id: StreamId
    window_seq: Seq
    route: str
    pool: str
    engine: str
    slo_class: str
    output: str
    scores: dict[str, FiniteFloat]
    missing: list[Modality]
    deadline_us: int
    timeline: Timeline
    #: ``ok``; ``dropped`` when routing found nothing usable; ``expired`` when the worker
    #: shed the request because it could no longer meet its deadline.
    status: Literal["ok", "dropped", "expired"] = "ok"
    #: Why the window took its route, or was dropped (docs/routing.md).
    reason: str = ""
    #: For ``expired``: why the worker shed it (how late it was, or how little time was left).
    detail: str = ""
    #: Degradation level the worker served at (0: full service; see docs/engines.md).
    degraded: Annotated[StrictInt, Field(ge=0, le=16)] = 0
    #: Output tokens the engine was allowed to generate for this window.
    max_new_tokens: Annotated[StrictInt, Field(ge=0)] = 0
    #: End-to-end latency, µs: ``timeline.responded_us - timeline.capture_us`` (capture of
    #: the window's newest token, producer clock, to the response produced); 0 if unknown.
    e2e_us: Annotated[StrictInt, Field(description=(
        "timeline.responded_us - timeline.capture_us: capture of the window's newest token "
        "(producer clock) to the response produced (µs); 0 when not measured"))] = 0
    #: The window was built from replayed media: not scored against the live SLO.
    replay: StrictBool = False


class DeadLetter(_Record):
    """A record no stage could process, with where it came from and why.

    A dead letter always fits its topic: a payload too large to carry whole is truncated
    (``truncated``), and ``value_size`` and ``value_sha256`` identify the original.
    """

    stage: str
    topic: str
    partition: int
    offset: int
    reason: str
    error: str
    key: bytes | None
    value: bytes | None
    at_us: int
    #: Size and SHA-256 (hex) of the original value (0 and "" for a tombstone).
    value_size: Annotated[StrictInt, Field(ge=0)] = 0
    value_sha256: str = ""
    #: Whether ``value`` (or ``key``) holds only the start of the original.
    truncated: StrictBool = False
    #: Why, as a stable code (``reason`` is the text for people).
    code: Annotated[Code, Field(examples=_DEAD_CODES, description=(
        "stable reason code; readers must accept codes they do not know"))] = ""


#: Most tokens one late record settles (its ``seq`` and ``more_seqs`` together).
MAX_LATE_BATCH = 4096


class LateToken(_Record):
    """A token that arrived after its window had been emitted, or was read too late to wait.

    A stale record settles a run of tokens: ``seq`` and ``more_seqs``, all of one stream and
    modality, shed together from one batch read (``t_us`` is the first one's capture time,
    ``value_size`` the bytes of all of them). Every reader that counts late tokens counts
    every seq a record names (:func:`late_seqs`).
    """

    stream_id: StreamId
    modality: Modality
    seq: Seq
    t_us: EventTime
    watermark_us: int
    reason: str
    at_us: int
    value: bytes | None = None
    #: Size and SHA-256 (hex) of the original record; ``truncated`` when ``value`` holds
    #: only its start (a late record always fits its topic).
    value_size: Annotated[StrictInt, Field(ge=0)] = 0
    value_sha256: str = ""
    truncated: StrictBool = False
    #: Why, as a stable code: ``window_emitted`` or ``stale``.
    code: Annotated[Code, Field(examples=_LATE_CODES, description=(
        "stable reason code; readers must accept codes they do not know"))] = ""
    #: Further tokens of this stream and modality this record settles, for the same reason.
    more_seqs: Annotated[list[Seq], Field(max_length=MAX_LATE_BATCH - 1, description=(
        "further seqs of the same stream and modality settled by this record"))] = []


def late_seqs(body: Mapping[str, Any]) -> list[int]:
    """Every seq a late record settles, from its MessagePack fields (``seq`` first)."""
    return [int(body["seq"]), *(int(s) for s in body.get("more_seqs") or ())]


class SloEvent(_Record):
    """A stage's sliding-window P99 over its budget (``breach``) or back under (``recovered``).

    Written to ``slo.events`` (key: the SLO class) by the process that observed the stage;
    ``degrade`` says whether the class switches to (or leaves) its degraded mode.
    """

    kind: Literal["breach", "recovered"]
    stage: Annotated[StrictStr, StringConstraints(min_length=1, max_length=32)]
    slo_class: Annotated[StrictStr, StringConstraints(min_length=1, max_length=64)]
    p99_ms: Annotated[Number, Field(ge=0.0)]
    budget_ms: Annotated[Number, Field(gt=0.0)]
    samples: Annotated[StrictInt, Field(ge=0)]
    consecutive: Annotated[StrictInt, Field(ge=0)]
    degrade: StrictBool
    source: Annotated[StrictStr, StringConstraints(min_length=1, max_length=255)]
    at_us: StrictInt


_M = TypeVar("_M", bound=BaseModel)


def trusted(cls: type[_M], **values: Any) -> _M:
    """Build a record from values that are already valid, without validating them again.

    The aligner's hot path assembles windows from validated tokens; pydantic's
    ``model_construct`` costs several µs per record for alias and default handling that a
    record given every field does not need. Every field must be given.

    Raises:
        TypeError: A field is missing or unknown.
    """
    if values.keys() != cls.__pydantic_fields__.keys():
        missing = sorted(cls.__pydantic_fields__.keys() - values.keys())
        extra = sorted(values.keys() - cls.__pydantic_fields__.keys())
        raise TypeError(f"{cls.__name__}: missing fields {missing}, unknown fields {extra}")
    record = cls.__new__(cls)
    object.__setattr__(record, "__dict__", values)
    object.__setattr__(record, "__pydantic_fields_set__", set(values))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record
