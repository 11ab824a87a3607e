"""Settings of the Kafka clients (``LOCKSTEP_KAFKA__…``): cluster, security, client knobs.

Re-exported by :mod:`lockstep.config.settings`; the same section gives options to aiokafka
(:meth:`KafkaSettings.aiokafka_options`) and to confluent-kafka
(:meth:`KafkaSettings.confluent_config`) clients.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, model_validator

from lockstep.config.section import Section
from lockstep.errors import ConfigError


class KafkaSettings(Section):
    """Kafka client options shared by every client Lockstep creates."""

    bootstrap_servers: str | None = None
    client_id: str = "lockstep"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    session_timeout_ms: Annotated[int, Field(ge=3000)] = 10_000
    #: How long a group member may take to hand its partitions over in a rebalance. It
    #: waits up to 80 % of this for the records it produced from them to be acknowledged
    #: (through a broker outage or a leader move): released earlier, their inputs would be
    #: decided again by the next owner while the first outputs are still being re-sent. A
    #: dead member is still removed after ``session_timeout_ms``.
    rebalance_timeout_ms: Annotated[int, Field(ge=3000)] = 30_000
    max_record_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    #: How long a consumer's fetch may wait for data. Kafka answers as soon as data
    #: arrives; the embedded broker holds the fetch for the whole wait, so keep it small there.
    fetch_max_wait_ms: Annotated[int, Field(ge=1, le=30_000)] = 500
    #: How long Lockstep's aiokafka producers (the roles', the synthetic publisher's) wait
    #: for more records before sending a batch. At 0 a record goes out at once, and those
    #: sent while a request is in flight go together in the next one, so batches still grow
    #: with the load. On Apache Kafka at 11 streams, 2 ms cost more CPU per token (0.49 to
    #: 0.54 ms over the roles, against 0.41 to 0.46) and more latency (docs/bench.md).
    linger_ms: Annotated[float, Field(ge=0, le=1000)] = 0.0
    #: The client Lockstep's asyncio producers use (the roles' outbox, the synthetic
    #: publisher): ``aiokafka`` (pure Python) or ``librdkafka`` (confluent-kafka: records
    #: queued from the loop, batched and sent in C threads). Same delivery, acknowledgement
    #: and retry semantics (docs/bench.md). Media files always publish on librdkafka.
    producer_client: Literal["aiokafka", "librdkafka"] = "aiokafka"
    #: Where a consumer group that has never committed starts: ``earliest`` (everything
    #: retained, so every published token is accounted for; media older than its SLO
    #: budget is shed to ``late`` as ``stale``) or ``latest`` (live data only). A new group
    #: commits this position at once, so it holds across restarts; an existing group
    #: resumes from its committed offsets either way.
    new_group_offset: Literal["earliest", "latest"] = "earliest"
    #: Pause before a client retries a failed request (aiokafka clients). Through a broker
    #: restart every in-flight batch is retried at this pace: 100 ms (the client's default)
    #: made a publisher send thousands of doomed requests a second.
    retry_backoff_ms: Annotated[int, Field(ge=10, le=10_000)] = 250
    #: Extra librdkafka options for the confluent-kafka clients (admin, publisher).
    confluent_extra: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSettings:
        # Names what is missing, never a value: the password must not reach an error.
        missing = [name for name in ("sasl_mechanism", "sasl_username", "sasl_password")
                   if not getattr(self, name)]
        if self.security_protocol.startswith("SASL") and missing:
            raise ValueError(
                f"security_protocol {self.security_protocol} needs "
                + ", ".join(f"kafka.{n} (LOCKSTEP_KAFKA__{n.upper()})" for n in missing))
        return self

    def require_bootstrap(self) -> str:
        """Return the bootstrap servers or raise a :class:`ConfigError` saying how to set them."""
        if not self.bootstrap_servers:
            raise ConfigError(
                "no Kafka bootstrap servers: pass --bootstrap HOST:PORT "
                "or set LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS"
            )
        return self.bootstrap_servers

    def ssl_context(self) -> ssl.SSLContext | None:
        """Build the TLS context for SSL / SASL_SSL, or None for plaintext."""
        if not self.security_protocol.endswith("SSL"):
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def aiokafka_options(self) -> dict[str, Any]:
        """Connection options for aiokafka clients."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.require_bootstrap(),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "retry_backoff_ms": self.retry_backoff_ms,
        }
        context = self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.sasl_mechanism:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = (
                self.sasl_password.get_secret_value() if self.sasl_password else None
            )
        return options

    def confluent_config(self) -> dict[str, str]:
        """Connection options for confluent-kafka (librdkafka) clients."""
        config = {
            "bootstrap.servers": self.require_bootstrap(),
            "client.id": self.client_id,
            "security.protocol": self.security_protocol.lower(),
        }
        if self.ssl_cafile:
            config["ssl.ca.location"] = str(self.ssl_cafile)
        if self.ssl_certfile:
            config["ssl.certificate.location"] = str(self.ssl_certfile)
        if self.ssl_keyfile:
            config["ssl.key.location"] = str(self.ssl_keyfile)
        if self.sasl_mechanism and self.sasl_username and self.sasl_password:
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = self.sasl_password.get_secret_value()
        config.update(self.confluent_extra)
        return config
