"""The log excerpts the Apache Kafka launcher's errors carry."""

from __future__ import annotations

from typing import Final

LOG_TAIL_LINES: Final[int] = 60


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])
