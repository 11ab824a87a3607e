"""Giving memory back to the system after a burst of per-stream state is evicted.

CPython keeps freed objects in its own arenas and glibc keeps freed heap pages, so a
process that held 50k streams' state stays at its peak RSS after evicting them.
:class:`MemoryTrimmer` collects garbage and asks glibc to return free pages
(``malloc_trim``) once many streams have gone, at most once per interval: RSS follows the
live state down instead of staying at the high-water mark.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


class MemoryTrimmer:
    """Trims the heap after the stream count drops by ``threshold`` from its peak.

    A smaller drop (at least a tenth of it) is trimmed too once the count has stopped
    falling for ``min_interval_s``: the tail of an eviction wave is returned as well, not
    held until the next wave. After a trim for evictions, ``follow_ups`` more come
    ``min_interval_s`` apart: what the burst left in flight (fetched records, produces
    waiting for acknowledgement, late records) is freed after its streams are, and pages
    freed after a trim stay with the process until the next one.

    Args:
        threshold: Streams gone since the last trim that justify another.
        min_interval_s: Least time between two trims (a collection costs milliseconds).
        compact: Called first: moves long-lived state out of the small objects that pin
            the allocator's pools (see :meth:`lockstep.streams.align.aligner.Aligner.compact`).
    """

    def __init__(self, threshold: int = 1000, min_interval_s: float = 2.0,
                 compact: Callable[[], None] | None = None, follow_ups: int = 3) -> None:
        self.threshold = threshold
        self.min_interval_s = min_interval_s
        self.follow_ups = follow_ups
        self._follow_ups_left = 0
        self.compact = compact
        self._peak = 0
        self._last = float("-inf")
        self._count = 0
        self._count_since = 0.0
        self._trim = _malloc_trim()
        self.trims = 0

    def observe(self, streams: int, now_s: float | None = None) -> bool:
        """Note the live stream count; trim when enough streams went. Returns whether it did."""
        now_s = time.monotonic() if now_s is None else now_s
        if streams != self._count:
            self._count, self._count_since = streams, now_s
        self._peak = max(self._peak, streams)
        gone = self._peak - streams
        follow_up = False
        if gone < self.threshold:
            settled = now_s - self._count_since >= self.min_interval_s
            if gone < max(1, self.threshold // 10) or not settled:
                if not self._follow_ups_left:
                    return False
                follow_up = True
        if now_s - self._last < self.min_interval_s:
            return False
        if self.compact is not None:
            self.compact()
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        self._last = now_s
        self.trims += 1
        if follow_up:
            self._follow_ups_left -= 1
        else:
            self._follow_ups_left = self.follow_ups
            log.info("returned memory after %d streams were evicted", gone)
        self._peak = streams
        return True


def freeze_startup_heap() -> int:
    """Exempt what exists now from the cyclic collector's passes; returns how many objects.

    The collector's full pass (generation 2) runs whenever the surviving objects have grown
    by a quarter, walks every tracked object, and holds the event loop (every role's reads,
    timers and produces) while it does. Most of a started process's objects are its
    imports, settings and engines, alive until exit: a full pass over them stalled the
    demo's loop for 50 to 110 ms every second or two at 30 streams, and those stalls were
    the stages' P99. Frozen (:func:`gc.freeze`) after the roles have started, they are
    never walked again; refcounting still frees them, and only a reference cycle among
    them, orphaned later, would stay (none is expected: they live as long as the process).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
