"""Lockstep's exception tree.

::

    LockstepError
    ├── ConfigError                 bad settings or arguments (not retriable)
    ├── RoleCrashed                 an agent failed and took its roles down (restart them)
    ├── MediaError                  a media source or sidecar cannot be read (not retriable)
    ├── BadInput                    a record that cannot be processed; dead-lettered
    │   ├── DecodeError             not our wire format, wrong version, oversize, bad msgpack
    │   └── SchemaError             decoded, but violates the message contract
    ├── BrokerError                 talking to Kafka failed (retriable unless said otherwise)
    │   ├── EmbeddedBrokerError     the embedded tansu broker could not start
    │   └── TopicMismatchError      topics exist with the wrong layout (not retriable)
    └── EngineError                 inference failed
        ├── EngineTimeout           the engine did not answer in time (retriable)
        └── EngineUnavailable       the engine's extra is not installed or has no device
"""

from __future__ import annotations


class LockstepError(Exception):
    """Base of every error Lockstep raises on purpose."""

    retriable: bool = False


class ConfigError(LockstepError):
    """Settings or command-line arguments are invalid."""


class RoleCrashed(LockstepError):
    """An agent failed; the process's roles stopped. A supervisor should restart them."""

    retriable = True


class MediaError(LockstepError):
    """A media source or sidecar cannot be opened, decoded or parsed; says what and where."""


class BadInput(LockstepError):
    """A record that no retry can fix; it goes to the dead-letter topic with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DecodeError(BadInput):
    """The bytes are not a record of the Lockstep wire format."""


class SchemaError(BadInput):
    """The record decodes but breaks the message contract."""


class BrokerError(LockstepError):
    """A Kafka operation failed."""

    retriable = True


class EmbeddedBrokerError(BrokerError):
    """The embedded broker could not be found, started or reached."""

    retriable = False


class TopicMismatchError(BrokerError):
    """Topics exist but do not match the catalog (partition counts, co-partitioning)."""

    retriable = False


class EngineError(LockstepError):
    """An inference engine failed on a batch."""


class EngineTimeout(EngineError):
    """The engine did not finish a batch within its timeout."""

    retriable = True


class EngineUnavailable(EngineError):
    """The engine cannot run here: its extra is missing or it needs a device that is absent."""
