"""The error raised by the test broker, and the log excerpts its messages carry."""

from __future__ import annotations

from typing import Final

LOG_TAIL_LINES: Final[int] = 60


class KafkaBrokerError(RuntimeError):
    """The test broker could not be provisioned, started or stopped."""


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])
