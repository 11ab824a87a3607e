"""Recognised text laid out as people read it: word spaces from the pixels, reading order."""

from __future__ import annotations

import numpy as np
import pytest

from lockstep.media.reading import Line, ink_gaps, reading_order, word_spaces

pytestmark = pytest.mark.unit


def _strokes(widths_and_gaps: list[int], *, dark_text: bool = False) -> np.ndarray:
    """A 20-row line crop: ink runs and blank runs of the given widths, alternating."""
    columns: list[bool] = []
    for i, width in enumerate(widths_and_gaps):
        columns += [i % 2 == 0] * width
    ink = np.zeros((20, len(columns) + 6), bool)
    ink[4:16, 3:3 + len(columns)] = np.array(columns)
    crop = np.where(ink, 240, 30).astype(np.uint8)
    return 255 - crop if dark_text else crop


@pytest.mark.parametrize("dark_text", [False, True])
def test_ink_gaps_are_the_blank_columns_between_ink_on_either_ground(dark_text: bool) -> None:
    height, gaps = ink_gaps(_strokes([5, 2, 5, 9, 4], dark_text=dark_text))
    assert height == 12
    assert gaps == [(8, 10), (15, 24)]


def test_a_crop_without_contrast_has_no_gaps() -> None:
    assert ink_gaps(np.full((10, 30), 77, np.uint8)) == (0, [])


def test_a_gap_much_wider_than_the_letter_spacing_is_a_word_space() -> None:
    # "EXIT12": letters 12 px apart with 3 px gaps, one 10 px gap between T and 1
    text = "EXIT12"
    centres = [10.0, 25.0, 40.0, 55.0, 77.0, 92.0]
    gaps = [(16.0, 19.0), (31.0, 34.0), (46.0, 49.0), (61.0, 71.0), (83.0, 86.0)]
    assert word_spaces(text, centres, gaps, height=20) == {3}


def test_a_digit_gap_as_wide_as_a_space_is_no_space_at_the_recognisers_usual_step() -> None:
    # "P7" (a word space) and "12" (tabular digits) leave the same 7 px gap; only the
    # recogniser set P and 7 further apart than its usual step
    text = "AP712B"
    centres = [10.0, 25.0, 44.0, 59.0, 74.0, 89.0]
    gaps = [(16.0, 19.0), (31.0, 38.0), (50.0, 53.0), (64.0, 71.0), (80.0, 83.0)]
    assert word_spaces(text, centres, gaps, height=20) == {1}


def test_spaces_the_recogniser_already_read_are_kept_and_not_doubled() -> None:
    text = "GO 4"
    centres = [10.0, 25.0, 40.0, 55.0]
    gaps = [(16.0, 19.0), (31.0, 49.0)]
    assert word_spaces(text, centres, gaps, height=20) == set()


def test_without_character_positions_the_text_is_left_as_read() -> None:
    assert word_spaces("EXIT12", [], [(61.0, 71.0)], height=20) == set()


def test_lines_come_top_to_bottom_and_boxes_on_one_row_join_into_one_caption() -> None:
    lines = [
        Line("STOPPED", 0.9, (130.0, 200.0, 220.0, 230.0)),
        Line("B7", 0.99, (600.0, 10.0, 630.0, 40.0)),
        Line("LINE", 0.8, (60.0, 202.0, 120.0, 228.0)),
        Line("CLOCK", 0.95, (500.0, 205.0, 600.0, 230.0)),  # same row, far right: its own
    ]
    ordered = reading_order(lines)
    assert [line.text for line in ordered] == ["B7", "LINE STOPPED", "CLOCK"]
    joined = ordered[1]
    assert joined.box == (60.0, 200.0, 220.0, 230.0)
    assert joined.confidence == pytest.approx((0.8 * 4 + 0.9 * 7) / 11)


def test_upper_case_captions_are_read_with_the_spaces_between_their_words() -> None:
    from PIL import Image, ImageDraw, ImageFont

    from lockstep.media.recognizers import TextReader

    reader = TextReader()
    font = ImageFont.load_default(size=30)
    for caption in ("EXIT 12 LINE STOPPED", "TEMP 73.5 C PRESSURE 2.1 BAR"):
        image = Image.new("RGB", (640, 360), (40, 60, 90))
        draw = ImageDraw.Draw(image)
        draw.rectangle((0, 250, 640, 300), fill=(12, 12, 12))
        draw.text((24, 258), caption, font=font, fill=(245, 245, 245))
        boxes = reader.read(np.asarray(image))
        assert [b.text for b in boxes] == [caption]
        assert boxes[0].confidence > 0.9
