"""Modality-aware token drop: mark image patches an engine can skip (``route`` stage).

Pure. A frame is cut into square patches; a patch whose luma barely varies (uniform
background: its standard deviation under ``min_std``) carries no detail and is marked
droppable. The mask is bit-packed row-major over the patch grid (1 = keep), so a vision
encoder can skip the dropped patches' tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lockstep.streams.confidence import luma
from lockstep.topics.schemas import VideoToken


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
        kept = int(np.unpackbits(np.frombuffer(self.keep, np.uint8), count=total).sum())
        return 1.0 - kept / total if total else 0.0


def patch_mask(frame: VideoToken, patch: int = 8, min_std: float = 2.0) -> PatchMask | None:
    """The keep-mask of a raw frame's patches; None for compressed frames.

    Edge patches smaller than ``patch`` are measured as they are.
    """
    y = luma(frame)
    if y is None:
        return None
    rows, cols = -(-y.shape[0] // patch), -(-y.shape[1] // patch)
    grid = np.full((rows * patch, cols * patch), np.nan, dtype=np.float32)
    grid[: y.shape[0], : y.shape[1]] = y
    blocks = grid.reshape(rows, patch, cols, patch)
    keep = np.nanstd(blocks, axis=(1, 3)) >= min_std
    return PatchMask(patch, rows, cols, np.packbits(keep.ravel()).tobytes())
