"""Every refused or late record carries a stable reason code beside its text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockstep.chaos.hostile import Hostile, hostile_records
from lockstep.config.settings import AlignSettings
from lockstep.errors import BadInput, ReasonCode
from lockstep.kafka.outbox import dead_letter_record
from lockstep.streams.align.aligner import Aligner
from lockstep.topics.codec import decode, decode_as, encode
from lockstep.topics.edge import decode_token
from lockstep.topics.schemas import LateToken, Modality, Token, Window
from tests.factories import T0, video

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"
LIVE = "live-1"
NOW = T0 + 10_000_000
PERIOD = 33_333
#: What each hostile record (lockstep.chaos.hostile) is refused with, and where.
HOSTILE_CODES: dict[str, tuple[ReasonCode, str | None]] = {
    "random_bytes": (ReasonCode.BAD_MAGIC, None),
    "tombstone": (ReasonCode.TOMBSTONE, None),
    "empty": (ReasonCode.BAD_MAGIC, None),
    "bad_magic": (ReasonCode.BAD_MAGIC, None),
    "bad_version": (ReasonCode.BAD_VERSION, None),
    "unknown_kind": (ReasonCode.UNKNOWN_KIND, None),
    "broken_msgpack": (ReasonCode.BAD_MSGPACK, None),
    "not_a_map": (ReasonCode.NOT_A_MAP, None),
    "wrong_types": (ReasonCode.SCHEMA, "seq"),
    "nan_values": (ReasonCode.SCHEMA, "values.0"),
    "inf_values": (ReasonCode.SCHEMA, "values.0"),
    "ancient_t_us": (ReasonCode.SCHEMA, "t_us"),
    "future_t_us": (ReasonCode.FUTURE_T_US, None),
    "wrong_topic": (ReasonCode.WRONG_TOPIC, None),
    "key_mismatch": (ReasonCode.KEY_MISMATCH, "stream_id"),
    "pcm_size_mismatch": (ReasonCode.SCHEMA, "data"),
    "spoofed_seq": (ReasonCode.OFF_CLOCK, None),
    "off_clock_seq": (ReasonCode.OFF_CLOCK, None),
    "oversize_frame": (ReasonCode.BAD_MEDIA, "data"),  # random bytes declared as JPEG
    "max_size_garbage": (ReasonCode.BAD_VERSION, None),
}


def _live_aligner(skip: int | None = None) -> Aligner:
    """An aligner whose stream LIVE has a fitted 30 fps video clock up to NOW."""
    aligner = Aligner(AlignSettings(), "cabin")
    for seq in range(90):
        if seq == skip:
            continue
        t_us = NOW - (90 - seq) * PERIOD
        aligner.add(video(stream=LIVE, seq=seq, t_us=t_us), t_us + 5_000)
    return aligner


def _refusal(aligner: Aligner, hostile: Hostile) -> BadInput:
    """What the align stage does with one hostile record: the BadInput it is refused with."""
    try:
        token: Token = decode_token(hostile.topic, hostile.key, hostile.value)
    except BadInput as error:
        return error
    out = aligner.add(token, NOW)
    assert out.rejected, f"{hostile.kind} was not refused"
    return BadInput(out.rejected[0].reason, out.rejected[0].code)


def test_every_hostile_record_is_refused_with_its_documented_code() -> None:
    aligner = _live_aligner()
    records = hostile_records(LIVE, NOW, seed=7, live_seq=90)
    assert {h.kind for h in records} == set(HOSTILE_CODES)
    for hostile in records:
        error = _refusal(aligner, hostile)
        code, field = HOSTILE_CODES[hostile.kind]
        assert (error.code, hostile.kind) == (code, hostile.kind), error.reason
        if field is not None:
            assert error.field == field, hostile.kind


def test_a_seq_far_from_a_young_clock_is_a_seq_jump() -> None:
    aligner = Aligner(AlignSettings(), "cabin")
    assert not aligner.add(video(stream="young", seq=0, t_us=NOW), NOW).rejected
    out = aligner.add(video(stream="young", seq=5_000_000, t_us=NOW + PERIOD), NOW + PERIOD)
    assert [r.code for r in out.rejected] == [ReasonCode.SEQ_JUMP]
    assert "max_seq_jump" in out.rejected[0].reason


def test_a_token_behind_an_emitted_window_is_late_with_window_emitted() -> None:
    aligner = _live_aligner(skip=50)
    aligner.poll(NOW + 500_000)
    frame = video(stream=LIVE, seq=50, t_us=NOW - 40 * PERIOD)  # the frame that was missing
    out = aligner.add(frame, NOW + 500_000)
    assert [late.code for late in out.late] == [ReasonCode.WINDOW_EMITTED]
    assert out.late[0].reason == "window already emitted"


def test_a_window_of_another_kind_on_a_pipeline_topic_is_wrong_kind() -> None:
    with pytest.raises(BadInput) as caught:
        decode_as(Window, encode(video()))
    assert caught.value.code is ReasonCode.WRONG_KIND


def test_a_dead_letter_carries_the_code_of_its_error_and_round_trips() -> None:
    error = BadInput("its window would be too large", ReasonCode.WINDOW_TOO_LARGE)
    letter = dead_letter_record(stage="align", topic="media.video", partition=0, offset=9,
                                error=error, key=b"k", value=b"v", max_record_bytes=1 << 20)
    assert letter.code == "window_too_large"
    assert decode(encode(letter)) == letter


def test_readers_accept_codes_they_do_not_know_and_records_without_one() -> None:
    late = LateToken(stream_id="s", modality=Modality.VIDEO, seq=1, t_us=T0, watermark_us=T0,
                     reason="a reason from a newer release", at_us=T0, code="brand_new_code")
    assert decode(encode(late)) == late
    older = late.model_copy(update={"code": ""})
    assert decode(encode(older)).code == ""  # type: ignore[attr-defined]


def test_every_code_is_in_the_documented_enum_and_nothing_else_is() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = re.search(r"<!-- reason-codes -->(.*?)<!-- /reason-codes -->", text, re.S)
    assert table is not None, "the reason code table is missing from docs/wire-format.md"
    documented = set(re.findall(r"^\| `([a-z_]+)` \| (?:dead letter|late) \|", table.group(1),
                                re.M))
    assert documented == {c.value for c in ReasonCode}

