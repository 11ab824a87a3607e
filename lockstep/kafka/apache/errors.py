"""The error the Apache Kafka launcher raises, and the log excerpts its messages carry."""

from __future__ import annotations

from typing import Final

from lockstep.errors import LockstepError

LOG_TAIL_LINES: Final[int] = 60


class KafkaBrokerError(LockstepError):
    """An Apache Kafka broker could not be provisioned, started or stopped (not retriable)."""


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])
