"""Recognised text laid out as people read it: spaces between words, lines in order (pure).

A text recogniser trained mostly on lower-case text often drops the spaces of upper-case
captions (rapidocr reads "EXIT 12 LINE STOPPED" as ``EXIT12LINESTOPPED``), while the pixels
still show them. So the spaces come from the image: a line's crop is binarised (Otsu), its
blank column runs between ink are the gaps, and a gap clearly wider than the line's letter
spacing, or somewhat wider where the recogniser also set the two characters apart, is a
word space between the two recognised characters whose centres straddle it
(:func:`word_spaces`).

Lines found in one frame are put in reading order (top to bottom, then left to right), and
boxes on one visual line close enough to be one caption are joined with a space.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Boxes on one line closer than this many line heights are one caption.
JOIN_GAP_HEIGHTS = 2.0
#: A gap this much wider than the line's median gap, in ink heights, is a word space...
WIDE_GAP = 0.35
#: ... and one this much wider, where the recogniser's step between the two characters is
#: this many times its median step. Measured on 858 gaps of 5 captions in 12 fonts and
#: sizes (Pillow's default font at 20-44 px, DejaVu Sans, Sans Bold, Mono and Serif): 3
#: spaces missed, none invented.
SOME_GAP = 0.12
WIDE_STEP = 1.1


@dataclass(frozen=True)
class Line:
    """A recognised line: its text, confidence and box in pixels (x0, y0, x1, y1)."""

    text: str
    confidence: float
    box: tuple[float, float, float, float]

    @property
    def height(self) -> float:
        """Height of the box."""
        return self.box[3] - self.box[1]


def ink_gaps(crop: npt.NDArray[np.uint8]) -> tuple[int, list[tuple[int, int]]]:
    """The ink height of a line's grey crop and its blank column runs between ink.

    Returns:
        (rows holding ink from first to last, [(first blank column, column after it)...])
        counted from the crop's left edge; (0, []) when the crop holds no contrast.
    """
    if crop.size == 0 or int(crop.max()) == int(crop.min()):
        return 0, []
    ink = crop > _otsu(crop)
    if np.count_nonzero(ink) * 2 > ink.size:
        ink = ~ink  # text is the minority: dark text on a light ground
    rows = np.flatnonzero(ink.any(axis=1))
    columns: npt.NDArray[np.bool_] = np.asarray(ink.any(axis=0))
    inked = np.flatnonzero(columns)
    if not len(inked):
        return 0, []
    gaps: list[tuple[int, int]] = []
    start: int | None = None
    for c in range(int(inked[0]), int(inked[-1]) + 1):
        if not columns[c]:
            if start is None:
                start = c
        elif start is not None:
            gaps.append((start, c))
            start = None
    return int(rows[-1] - rows[0] + 1), gaps


def word_spaces(text: str, centres: Sequence[float], gaps: Sequence[tuple[float, float]],
                height: int) -> set[int]:
    """Indices ``i`` of ``text`` after which a word space goes.

    A gap between two adjacent characters (their centres straddle it) is a word space when
    it exceeds the line's median gap by ``WIDE_GAP`` ink heights, or by ``SOME_GAP`` while
    the recogniser also placed the two characters further apart than ``WIDE_STEP`` times its
    usual step between neighbours. Column gaps alone confuse an open pair such as "P 7" with
    a digit's tabular side bearings ("12"); the recogniser's steps tell those apart.

    Args:
        text: The recognised characters (spaces it already holds stay).
        centres: The horizontal centre of each character of ``text`` (pixels).
        gaps: Blank column runs between ink, (first column, column after it) in pixels.
        height: The line's ink height in pixels.
    """
    pairs = [i for i in range(len(text) - 1) if text[i] != " " and text[i + 1] != " "]
    if len(centres) != len(text) or not gaps or not pairs or height <= 0:
        return set()
    steps = {i: centres[i + 1] - centres[i] for i in pairs}
    usual = float(np.median(list(steps.values())))
    median_gap = float(np.median([b - a for a, b in gaps]))
    spaces: set[int] = set()
    for a, b in gaps:
        middle = (a + b) / 2
        pair = next((i for i in pairs if centres[i] < middle < centres[i + 1]), None)
        if pair is None:
            continue
        excess = (b - a - median_gap) / height
        if excess >= WIDE_GAP or (excess >= SOME_GAP and steps[pair] >= WIDE_STEP * usual):
            spaces.add(pair)
    return spaces


def spaced_line(gray: npt.NDArray[np.uint8], text: str, box: tuple[float, float, float, float],
                centres: Sequence[float]) -> str:
    """``text`` read in ``box`` of a grey frame, with the word spaces its pixels show."""
    x0, y0 = max(0, int(box[0])), max(0, int(box[1]))
    x1, y1 = min(gray.shape[1], round(box[2])), min(gray.shape[0], round(box[3]))
    height, gaps = ink_gaps(gray[y0:y1, x0:x1])
    spaces = word_spaces(text, centres, [(x0 + a, x0 + b) for a, b in gaps], height)
    return "".join(ch + " " if i in spaces else ch for i, ch in enumerate(text))


def reading_order(lines: Sequence[Line]) -> list[Line]:
    """Lines top to bottom, left to right; boxes on one visual line close together joined.

    Two boxes are on one visual line when the vertical centre of each lies within the
    other's extent; they are joined (with a space, the confidence weighted by characters)
    when the gap between them is at most ``JOIN_GAP_HEIGHTS`` line heights.
    """
    rows: list[list[Line]] = []
    for line in sorted(lines, key=lambda ln: (ln.box[1] + ln.box[3]) / 2):
        centre = (line.box[1] + line.box[3]) / 2
        row = rows[-1] if rows else None
        if row is not None and any(_same_row(other, line, centre) for other in row):
            row.append(line)
        else:
            rows.append([line])
    ordered: list[Line] = []
    for row in rows:
        row.sort(key=lambda ln: ln.box[0])
        current = row[0]
        for line in row[1:]:
            height = max(current.height, line.height, 1.0)
            if line.box[0] - current.box[2] <= JOIN_GAP_HEIGHTS * height:
                current = _joined(current, line)
            else:
                ordered.append(current)
                current = line
        ordered.append(current)
    return ordered


def _same_row(a: Line, b: Line, b_centre: float) -> bool:
    a_centre = (a.box[1] + a.box[3]) / 2
    return a.box[1] <= b_centre <= a.box[3] and b.box[1] <= a_centre <= b.box[3]


def _joined(a: Line, b: Line) -> Line:
    weight_a, weight_b = max(1, len(a.text)), max(1, len(b.text))
    confidence = (a.confidence * weight_a + b.confidence * weight_b) / (weight_a + weight_b)
    box = (min(a.box[0], b.box[0]), min(a.box[1], b.box[1]), max(a.box[2], b.box[2]),
           max(a.box[3], b.box[3]))
    return Line(f"{a.text} {b.text}", confidence, box)


def _otsu(gray: npt.NDArray[np.uint8]) -> int:
    """The grey level that best splits the crop in two classes (Otsu's method)."""
    hist = np.bincount(gray.ravel(), minlength=256).astype(np.float64)
    share = hist / hist.sum()
    omega = np.cumsum(share)
    mu = np.cumsum(share * np.arange(256))
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mu[-1] * omega - mu) ** 2 / (omega * (1.0 - omega))
    return int(np.nanargmax(between))
