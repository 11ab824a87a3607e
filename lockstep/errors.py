"""Lockstep's exception tree.

::

    LockstepError
    ├── ConfigError                 bad settings or arguments (not retriable)
    ├── RoleCrashed                 an agent failed and took its roles down (restart them)
    ├── MediaError                  a media source or sidecar cannot be read (not retriable)
    ├── BadInput                    a record that cannot be processed; dead-lettered with
    │   │                           a stable :class:`ReasonCode`
    │   ├── DecodeError             not our wire format, wrong version, oversize, bad msgpack
    │   └── SchemaError             decoded, but violates the message contract
    ├── RecordMismatch              a JSON record and the bytes given with it disagree
    ├── BrokerError                 talking to Kafka failed (retriable unless said otherwise)
    │   ├── EmbeddedBrokerError     the embedded tansu broker could not start
    │   ├── KafkaBrokerError        an Apache Kafka broker could not be set up or started
    │   └── TopicMismatchError      topics exist with the wrong layout (not retriable)
    ├── EngineError                 inference failed
    │   ├── EngineTimeout           the engine did not answer in time (retriable)
    │   ├── EngineUnavailable       the engine's extra is not installed or has no device
    │   └── ServerUnavailable       an engine's server did not answer, or answered 5xx
    ├── ScrapeError                 a role's /metrics could not be read (retriable)
    ├── ProcessError                a child process failed, or was not ready in time
    └── BenchFailed                 one bench of ``bench all`` exited with an error
"""

from __future__ import annotations

from enum import StrEnum


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


class ReasonCode(StrEnum):
    """Why a record was dead-lettered or went late: stable codes beside the human text.

    Clients match on these (docs/wire-format.md §9); the text may change between releases.
    New codes may appear within a wire version: a reader must accept codes it does not know.
    """

    # Not a Lockstep record (DecodeError)
    TOMBSTONE = "tombstone"
    BAD_MAGIC = "bad_magic"
    BAD_VERSION = "bad_version"
    UNKNOWN_KIND = "unknown_kind"
    OVERSIZE = "oversize"
    BAD_MSGPACK = "bad_msgpack"
    NOT_A_MAP = "not_a_map"
    # A record, but not one this topic takes (DecodeError)
    WRONG_KIND = "wrong_kind"
    WRONG_TOPIC = "wrong_topic"
    KEY_MISMATCH = "key_mismatch"
    # Breaks the contract of its kind (SchemaError)
    SCHEMA = "schema"
    # Valid, but unusable (BadInput)
    BAD_MEDIA = "bad_media"
    FUTURE_T_US = "future_t_us"
    OFF_CLOCK = "off_clock"
    SEQ_JUMP = "seq_jump"
    WINDOW_TOO_LARGE = "window_too_large"
    CONTRADICTORY = "contradictory"
    ENGINE_FAILED = "engine_failed"
    #: Unusable for a reason without a code of its own (none of Lockstep's paths use it).
    BAD_INPUT = "bad_input"
    # Late records (LateToken.code)
    STALE = "stale"
    WINDOW_EMITTED = "window_emitted"


class BadInput(LockstepError):
    """A record that no retry can fix; it goes to the dead-letter topic with this reason.

    Args:
        reason: What is wrong, for people (names the field and the value).
        code: The stable code clients match on.
        field: The field that fails, dotted (``values.0``), where one does.
    """

    def __init__(self, reason: str, code: ReasonCode = ReasonCode.BAD_INPUT,
                 field: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.field = field


class DecodeError(BadInput):
    """The bytes are not a record of the Lockstep wire format."""


class SchemaError(BadInput):
    """The record decodes but breaks the message contract."""


class RecordMismatch(LockstepError):
    """A JSON record and the bytes given with it disagree (``lockstep validate``)."""


class BrokerError(LockstepError):
    """A Kafka operation failed."""

    retriable = True


class DeliveryFailed(BrokerError):
    """A record the broker did not take; ``retriable``: sending it again may succeed."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class EmbeddedBrokerError(BrokerError):
    """The embedded broker could not be found, started or reached."""

    retriable = False


class KafkaBrokerError(BrokerError):
    """An Apache Kafka broker could not be provisioned, started or stopped."""

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


class ServerUnavailable(EngineError):
    """An engine's server did not answer or answered 5xx; retry later."""

    retriable = True


class ScrapeError(LockstepError):
    """A ``/metrics`` endpoint could not be read."""

    retriable = True


class ProcessError(LockstepError):
    """A child process (a role, a producer) failed, or was not ready in time."""


class BenchFailed(LockstepError):
    """One bench of ``bench all`` exited with an error."""


def install_hint(extra: str) -> str:
    """How to install an optional extra: Lockstep installs from its checkout, not an index."""
    return f"pip install -e '.[{extra}]' in the Lockstep checkout"
