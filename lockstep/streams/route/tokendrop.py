"""Modality-aware token drop: mark image patches an engine can skip (``route`` stage).

Pure. A frame is cut into square patches; a patch whose luma barely varies (uniform
background: its standard deviation under ``min_std``) carries no detail and is marked
droppable. The mask is bit-packed row-major over the patch grid (1 = keep), so a vision
encoder can skip the dropped patches' tokens.

The standard deviation is defined as numpy's float32 ``nanstd`` over each patch of the float32
luma (:func:`_keep_float32`). The fast path takes each patch's exact variance from integer
(gray8) or float64 (rgb24) sums, and decides every patch whose float32 value provably falls
on the same side of ``min_std``; a frame with a patch too close to call is decided the
defining way.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lockstep.streams.route.confidence import Luma
from lockstep.topics.schemas import VideoToken

_U32 = 2.0**-24  # unit roundoff of float32
_U64 = 2.0**-53  # unit roundoff of float64
_LUMA_MAX = 256.0  # bounds the luma, rgb24's weights summing to a shade over 1
# Up to this patch size the integer sums stay exact in float64 (count**2 * var < 2**53) and
# float32's relative error stays small; larger patches are measured the defining way.
_MAX_PATCH = 256


@dataclass(frozen=True)
class PatchMask:
    """Which patches of a frame to keep."""

    patch: int
    rows: int
    cols: int
    keep: bytes  # numpy.packbits of the row-major keep flags

    @property
    def dropped(self) -> float:
        """Share of patches marked droppable."""
        total = self.rows * self.cols
        if not total:
            return 0.0
        bits = int.from_bytes(self.keep, "big")  # the first ``total`` bits, zero-padded
        spare = 8 * len(self.keep) - total
        kept = (bits >> spare if spare >= 0 else bits << -spare).bit_count()
        return 1.0 - kept / total


def patch_mask(frame: VideoToken, patch: int = 8, min_std: float = 2.0, *,
               decoded: Luma | None = None) -> PatchMask | None:
    """The keep-mask of a raw frame's patches; None for compressed frames.

    Edge patches smaller than ``patch`` are measured as they are.

    Args:
        frame: The frame.
        patch: Side of a patch, in pixels.
        min_std: Luma standard deviation below which a patch is droppable.
        decoded: The frame already decoded (shared with the confidence measures).
    """
    lum = decoded if decoded is not None else Luma.of(frame)
    if lum is None:
        return None
    height, width = lum.shape
    rows, cols = -(-height // patch), -(-width // patch)
    keep = _keep(lum, patch, rows, cols, min_std)
    return PatchMask(patch, rows, cols, np.packbits(keep).tobytes())  # flattened row-major


def _keep(lum: Luma, patch: int, rows: int, cols: int, min_std: float) -> npt.NDArray[np.bool_]:
    """Keep flags per patch, equal to :func:`_keep_float32`'s."""
    height, width = lum.shape
    bounds = _bounds(min_std, patch, lum.gray is not None)
    if bounds is None:
        return _keep_float32(lum.y, patch, rows, cols, min_std)
    grid = _grid(height, width, patch)
    ones, squares = _block_sums(lum, grid)
    # count**2 * variance (exact for gray8, where the sums are exact integers).
    squares *= grid.count
    spread = np.subtract(squares, np.square(ones, out=ones), out=squares)
    keep: npt.NDArray[np.bool_] = spread >= bounds[0] * grid.squared
    if np.count_nonzero(spread >= bounds[1] * grid.squared) != np.count_nonzero(keep):
        return _keep_float32(lum.y, patch, rows, cols, min_std)  # a patch too close to call
    return keep


@functools.lru_cache(maxsize=64)
def _bounds(min_std: float, patch: int, exact: bool) -> tuple[float, float] | None:
    """Variances at or above which a patch is surely kept, and below which surely dropped.

    Float32's variance of a patch is within ``theta`` (relative) of the exact variance about
    its float32 mean, which exceeds the exact variance by at most the square of that mean's
    error (``shift``); the square root adds a rounding, and for rgb24 the float64 sums their
    cancellation (``error``). None where the fast path does not apply: a threshold that is
    no float32, or patches too large for exact sums.

    Args:
        min_std: The standard deviation threshold.
        patch: The patch side.
        exact: Whether the variance is exact (gray8) or from float64 sums (rgb24).
    """
    with np.errstate(over="ignore"):
        threshold = float(np.float32(min_std))  # numpy compares a float32 std in float32
    if not math.isfinite(threshold) or patch > _MAX_PATCH:
        return None
    if threshold <= 0.0:  # a standard deviation is never below 0: every patch is kept
        return -math.inf, -math.inf
    cells = patch * patch  # terms of each float32 sum, padding included
    theta = 2.0 * (cells + 8) * _U32
    shift = 2.0 * (cells + 2) * _U32 * _LUMA_MAX
    error = 0.0 if exact else 8.0 * (cells + 2) * _LUMA_MAX * _LUMA_MAX * _U64
    square = threshold * threshold
    above = square / ((1.0 - theta) * (1.0 - _U32) ** 2) + error
    below = square / ((1.0 + theta) * (1.0 + _U32) ** 2) - error - shift * shift
    return above, below


@dataclass(frozen=True)
class _Grid:
    """The patch grid of a frame size: pixels per patch, and how to sum over patches."""

    patch: int
    count: float | npt.NDArray[np.float64]  # pixels per patch (an array if edges are short)
    squared: float | npt.NDArray[np.float64]
    # 0/1 matrices (small frames only): down (rows, height) sums the pixel rows of each
    # patch row, across (width, cols) the pixel columns of each patch column.
    down: npt.NDArray[np.float64] | None = None
    across: npt.NDArray[np.float64] | None = None
    down32: npt.NDArray[np.float32] | None = None  # the same, for exact float32 sums
    across32: npt.NDArray[np.float32] | None = None


# Above this many pixels reshaped adds beat the 0/1 matrix products (whose size, cached per
# frame size, is bounded by a quarter of it).
_MATMUL_PIXELS = 1 << 16


@functools.lru_cache(maxsize=32)
def _grid(height: int, width: int, patch: int) -> _Grid:
    rows, cols = -(-height // patch), -(-width // patch)
    down = (np.arange(height)[None, :] // patch == np.arange(rows)[:, None]).astype(np.float64)
    across = (np.arange(width)[:, None] // patch == np.arange(cols)[None, :]).astype(np.float64)
    counts = np.outer(down.sum(axis=1), across.sum(axis=0))
    count: float | npt.NDArray[np.float64] = float(patch * patch)
    if height % patch or width % patch:
        count = counts
    squared = count * count
    if height * width > _MATMUL_PIXELS or down.size + across.size > _MATMUL_PIXELS // 4:
        return _Grid(patch, count, squared)  # large frames, or tiny patches: reshaped adds
    down32, across32 = down.astype(np.float32), across.astype(np.float32)
    for array in (down, across, down32, across32, counts, squared):
        if isinstance(array, np.ndarray):
            array.flags.writeable = False
    return _Grid(patch, count, squared, down, across, down32, across32)


def _block_sums(lum: Luma, grid: _Grid
                ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per-patch sums of the luma and of its square, in float64.

    Exact for gray8: integers whose every partial sum stays below 2**24 (float32) or 2**53
    (float64), whatever the order of the adds. For rgb24, float64 sums of the float32 luma
    and of its exact squares. A small frame goes through products with 0/1 matrices, a
    large one through reshaped adds (rows of pixels first).
    """
    gray = lum.gray
    if grid.down32 is not None and grid.across32 is not None and gray is not None \
            and grid.patch <= 16:  # float32 is exact: 16**2 * 255**2 < 2**24
        y32: np.ndarray = lum.y
        down32, across32 = grid.down32, grid.across32
        return ((down32 @ y32 @ across32).astype(np.float64),
                (down32 @ (y32 * y32) @ across32).astype(np.float64))
    if grid.down is not None and grid.across is not None:
        wide = lum.wide
        return grid.down @ wide @ grid.across, grid.down @ (wide * wide) @ grid.across
    image: np.ndarray = gray if gray is not None else lum.y
    height, width = image.shape
    patch = grid.patch
    rows, cols = -(-height // patch), -(-width // patch)
    if height % patch or width % patch:  # zero padding to whole patches adds nothing
        padded = np.zeros((rows * patch, cols * patch), image.dtype)
        padded[:height, :width] = image
        image = padded
    if gray is not None:  # exact: 256 * 255 < 2**16 and 256 * 255**2 < 2**32
        square = np.multiply(image, image, dtype=np.uint16)
        return (_reduce(image, patch, rows, cols, np.uint16),
                _reduce(square, patch, rows, cols, np.uint32))
    square = np.multiply(image, image, dtype=np.float64)  # of float32 values: exact
    return (_reduce(image, patch, rows, cols, np.float64),
            _reduce(square, patch, rows, cols, np.float64))


def _reduce(image: np.ndarray, patch: int, rows: int, cols: int,
            dtype: type[np.generic]) -> npt.NDArray[np.float64]:
    """Per-patch sums: rows of pixels first (long contiguous adds), then the short runs."""
    strips = np.add.reduce(image.reshape(rows, patch, -1), axis=1, dtype=dtype)
    sums: npt.NDArray[np.float64] = np.add.reduce(
        strips.reshape(rows, cols, patch), axis=2, dtype=np.float64)
    return sums


def _keep_float32(y: npt.NDArray[np.float32], patch: int, rows: int, cols: int,
                  min_std: float) -> npt.NDArray[np.bool_]:
    """The defining measure: numpy's float32 ``nanstd`` of each patch against ``min_std``."""
    grid = np.full((rows * patch, cols * patch), np.nan, dtype=np.float32)
    grid[: y.shape[0], : y.shape[1]] = y
    blocks = grid.reshape(rows, patch, cols, patch)
    keep: npt.NDArray[np.bool_] = np.nanstd(blocks, axis=(1, 3)) >= min_std
    return keep
