"""Lockstep's settings: one pydantic-settings model, env prefix ``LOCKSTEP_``.

Nested per concern with ``__`` (``LOCKSTEP_ALIGN__TOLERANCE_MS=10``), or from a TOML file
given by ``--config`` / ``LOCKSTEP_CONFIG``. Environment variables win over the file.
Nothing is read at import time: call :func:`load_settings`.
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from lockstep.errors import ConfigError
from lockstep.streams.worker_settings import WorkerSettings

log = logging.getLogger(__name__)
Ms = Annotated[float, Field(ge=0.0)]
PoolName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_\-]{0,31}$")]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Section):
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
                + ", ".join(f"kafka.{n} ({env_name(('kafka', n))})" for n in missing))
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


Partitions = Annotated[int, Field(ge=1, le=1024)]
RetentionMs = Annotated[int, Field(ge=60_000)]


class TopicsSettings(_Section):
    """The topic catalog's layout: partitions, replication and retention per class of topic.

    Classes: ``media`` (the co-partitioned ``media.*``), ``pipeline`` (``aligned.windows``,
    every ``requests.<pool>``, ``responses``) and ``side`` (``deadletter``, ``late``,
    ``slo.events``).
    """

    media_partitions: Partitions = 4
    pipeline_partitions: Partitions = 4
    side_partitions: Partitions = 1
    replication_factor: Annotated[int, Field(ge=1, le=16)] = 1
    #: ``min.insync.replicas`` of every topic; unset: ``replication_factor - 1`` (at least
    #: 1), and not set on the topics at all while ``replication_factor`` is 1.
    min_insync_replicas: Annotated[int, Field(ge=1, le=16)] | None = None
    #: Pools whose ``requests.<pool>`` topic the catalog holds (each worker adds its own).
    pools: tuple[PoolName, ...] = ("vl", "text")
    media_retention_ms: RetentionMs = 3_600_000
    pipeline_retention_ms: RetentionMs = 3_600_000
    side_retention_ms: RetentionMs = 7 * 86_400_000

    @model_validator(mode="after")
    def _insync_fits(self) -> TopicsSettings:
        if self.min_insync_replicas is not None and (
                self.min_insync_replicas > self.replication_factor):
            raise ValueError("topics.min_insync_replicas must not exceed "
                             "topics.replication_factor")
        return self

    def insync_replicas(self) -> int | None:
        """The ``min.insync.replicas`` to set on every topic (None: leave the broker's)."""
        if self.min_insync_replicas is not None:
            return self.min_insync_replicas
        return max(1, self.replication_factor - 1) if self.replication_factor > 1 else None


ModalityName = Literal["video", "audio", "ocr", "sensor"]


class AlignSettings(_Section):
    """Event-time alignment (see lockstep.streams.aligner)."""

    #: Window length for streams without video (with video, windows follow the frames).
    hop_ms: Annotated[float, Field(gt=1.0, le=10_000.0)] = 100.0
    #: How far a matched token may be from the anchor, by default and per modality.
    tolerance_ms: Ms = 15.0
    tolerances_ms: dict[ModalityName, Ms] = Field(default_factory=dict)
    #: How early a dense modality's next capture may land against its fitted cadence (at
    #: most its tolerance). A window is done with a modality once its next capture, due one
    #: period after the last, falls past the window's end even this early; the pairing
    #: tolerance is about how far a match may be, not about when captures come.
    early_ms: Ms = 3.0
    #: Longest wait past a window's end (in the stream's own transport lag) before it goes
    #: out partial.
    max_wait_ms: Ms = 60.0
    #: How far past a window's end a watermark must be when no cadence is known.
    grace_ms: Ms = 10.0
    #: Modalities a window is partial without, even before the stream ever sent them.
    required: tuple[ModalityName, ...] = ("video", "audio")
    #: A dense modality silent this long is idle: named missing, no longer waited for.
    idle_ms: Annotated[float, Field(gt=0.0)] = 500.0
    #: How long an OCR capture stays valid when nothing replaces it.
    ocr_ttl_ms: Annotated[float, Field(gt=0.0)] = 2000.0
    #: Known clock offsets against video (a modality whose clock runs ahead is positive).
    clock_offsets_ms: dict[ModalityName, float] = Field(default_factory=dict)
    #: Estimate the offsets not configured from the floors of the modalities' transport lag.
    estimate_offsets: bool = True
    #: Captures a recovered clock (and the video clock) must have fitted before a pairing
    #: with it is trusted; younger pairings leave the modality missing (a partial window).
    settle_points: Annotated[int, Field(ge=1)] = 32
    #: Estimated offsets smaller than this are treated as zero. 0: every estimate is
    #: applied, which also cancels what is left of the clock fits' intercept error.
    offset_min_ms: Ms = 0.0
    #: Tokens from further than this in the future (by the task's clock) are dead-lettered.
    max_future_ms: Ms = 5_000.0
    #: A process running the align role re-executes itself on glibc's allocator in one
    #: arena (``PYTHONMALLOC=malloc``, ``GLIBC_TUNABLES=glibc.malloc.arena_max=1``), so
    #: the memory of a flood of stream ids goes back to the system once they are evicted
    #: (lockstep.allocator). Ignored where ``PYTHONMALLOC`` is set or the C library is not
    #: glibc.
    system_allocator: bool = True
    #: Per stream: buffered tokens beyond this force the oldest window out.
    max_buffered_tokens: Annotated[int, Field(ge=16)] = 4096
    #: Sample windows down (every n-th frame anchors one) while the SLA is at risk.
    allow_downsampling: bool = True
    max_stride: Annotated[int, Field(ge=1, le=64)] = 4
    #: Records behind the log end on any media partition above which the task is catching
    #: up: windows then close on watermarks, not deadlines (see lockstep.streams.aligner).
    catchup_records: Annotated[int, Field(ge=1)] = 200
    #: ... or reading records produced longer ago than this.
    catchup_lag_ms: Annotated[float, Field(gt=0.0)] = 1000.0
    #: Share of a window's e2e budget that may be spent by the time it is aligned; above
    #: it the SLA counts as at risk.
    budget_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    #: A token read this many e2e budgets of its stream's SLO class after its capture is
    #: stale: no window holding it can be answered in time, so it goes to ``late``
    #: (reason ``stale``) without being aligned, and a backlog (an outage, an overload) is
    #: crossed quickly to the fresh data. 0 keeps every token, however old.
    stale_after_budgets: Annotated[float, Field(ge=0.0)] = 1.0
    #: Once a media partition's token is read stale, its tokens are shed (``stale``, a
    #: fast-forward) until one is read within this share of the stale age, or the partition
    #: is read to the log end: a backlog is crossed to the newest data instead of being
    #: served at the edge of staleness, where every window formed would still miss.
    #: 1.0 sheds only the stale tokens themselves.
    stale_resume_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    #: No window spans more than this: a longer stretch is cut into hop windows (its audio
    #: must fit an AudioToken, at most 10 s). Longer than ``hop_ms``.
    max_window_ms: Annotated[float, Field(gt=1.0, le=10_000.0)] = 1000.0
    #: A token whose ``t_us`` is further than this from its modality's fitted clock at its
    #: ``seq`` (plus the fit's slope uncertainty over the captures extrapolated) is
    #: dead-lettered: a spoofed or corrupt ``seq`` or ``t_us``.
    max_clock_error_ms: Annotated[float, Field(gt=0.0)] = 1000.0
    #: While a modality's clock is not fitted yet (or never is: event-driven captures), a
    #: ``seq`` further than this from the last accepted one is dead-lettered.
    max_seq_jump: Annotated[int, Field(ge=1)] = 1_000_000
    #: This many consecutive tokens off the clock that agree with each other mean the
    #: producer re-based: the clock restarts from them and the last one is accepted.
    rebase_after: Annotated[int, Field(ge=2, le=64)] = 4
    #: Streams with live state at most; beyond it the least recently active is evicted
    #: (its buffered tokens emitted first).
    max_streams: Annotated[int, Field(ge=1)] = 10_000
    #: A stream that has sent nothing for this long is evicted (its tokens emitted first).
    stream_ttl_ms: Annotated[float, Field(gt=0.0)] = 30_000.0
    #: Evicted streams whose last window is remembered (so a straggler goes late, and
    #: window keys are not reused); the oldest are forgotten beyond this.
    max_evicted_streams: Annotated[int, Field(ge=1)] = 100_000

    @model_validator(mode="after")
    def _window_fits_a_hop(self) -> AlignSettings:
        if self.max_window_ms <= self.hop_ms:
            raise ValueError(
                f"align.max_window_ms ({self.max_window_ms:g}) must be longer than "
                f"align.hop_ms ({self.hop_ms:g})")
        return self


RouteName = Literal["full", "vision_only", "text_only", "early_exit"]


def _default_route_pools() -> dict[RouteName, PoolName]:
    return {"full": "vl", "vision_only": "vl", "text_only": "text", "early_exit": "text"}


def _default_domains() -> dict[str, Domain]:
    return {
        "medical": Domain(weight=2.3, keywords=("pain", "bleeding", "heart", "pulse", "doctor",
                                                 "ambulance", "breath", "dose", "allergy")),
        "finance": Domain(weight=2.3, keywords=("pay", "payment", "transfer", "account",
                                                 "invoice", "price", "refund", "balance")),
        "safety": Domain(weight=1.5, keywords=("stop", "exit", "fire", "warning", "danger",
                                                "help", "brake", "emergency")),
        "command": Domain(weight=1.0, keywords=("open", "close", "call", "navigate", "play",
                                                 "turn", "set", "show", "start")),
    }


class Domain(_Section):
    """Keywords of one domain and how much a hit raises a window's semantic importance."""

    weight: Annotated[float, Field(ge=0.0)]
    keywords: tuple[str, ...]


class RouteSettings(_Section):
    """Confidence gating, routes and priorities (see lockstep.streams.router)."""

    #: Engine pool of each route; a pool is a topic ``requests.<pool>``.
    pools: dict[RouteName, PoolName] = Field(default_factory=_default_route_pools)
    #: A modality below this confidence is untrustworthy and routed around.
    min_confidence: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    #: The full route needs the alignment gate at least this open.
    gate_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    #: ASR confidence above which a window with a clear intent exits early (text only).
    early_exit_asr: Annotated[float, Field(ge=0.0, le=1.0)] = 0.95
    text_weight: Annotated[float, Field(ge=0.0)] = 0.45
    image_weight: Annotated[float, Field(ge=0.0)] = 0.55
    audio_weight: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    gate_steepness: Annotated[float, Field(gt=0.0)] = 10.0
    #: Alignment error (largest pairing skew) that counts against a stream's gate.
    recalibrate_error_ms: Annotated[float, Field(gt=0.0)] = 80.0
    #: ``a`` in priority = a * semantic importance + (1 - a) * SLA risk.
    priority_weight: Annotated[float, Field(ge=0.0, le=1.0)] = 0.65
    domains: dict[str, Domain] = Field(default_factory=_default_domains)
    #: Token drop: image patches of this size whose luma varies less than the threshold
    #: (standard deviation) are marked for the engine to skip; 0 turns it off.
    patch_size: Annotated[int, Field(ge=0, le=256)] = 8
    patch_min_std: Annotated[float, Field(ge=0.0)] = 2.0
    #: Streams whose gate calibration route keeps (least recently seen evicted beyond), and
    #: how long an idle stream's calibration is kept.
    max_streams: Annotated[int, Field(ge=1)] = 10_000
    stream_ttl_ms: Annotated[float, Field(gt=0.0)] = 300_000.0
    #: Valid range of each sensor's values; a reading outside is untrustworthy.
    sensor_ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)


class SloClass(_Section):
    """An SLO class: end-to-end budget and the frame rate it was set for."""

    e2e_ms: Annotated[float, Field(gt=0.0)]
    fps: Annotated[float, Field(gt=0.0)]
    drop_frames: bool = True


def _default_slo_classes() -> dict[str, SloClass]:
    return {
        "cabin": SloClass(e2e_ms=120.0, fps=30.0),
        "surgical": SloClass(e2e_ms=80.0, fps=60.0, drop_frames=False),
        "ar": SloClass(e2e_ms=200.0, fps=25.0),
    }


class BreachSettings(_Section):
    """Breach detection and degraded mode (see lockstep.streams.slo)."""

    #: The sliding window the P99 is taken over, and how often it is evaluated.
    window_ms: Annotated[float, Field(gt=0.0)] = 5_000.0
    evaluate_ms: Annotated[float, Field(gt=0.0)] = 250.0
    #: Fewer samples in the window than this hold the verdict (no evidence either way).
    min_samples: Annotated[int, Field(ge=1)] = 20
    #: Consecutive evaluations over budget that raise a breach, and under
    #: ``recover_ratio`` x budget that clear it (between the two nothing changes).
    breach_after: Annotated[int, Field(ge=1)] = 4
    recover_after: Annotated[int, Field(ge=1)] = 3
    recover_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.8
    #: When the median of the samples since the last evaluation (at least ``min_samples``)
    #: is over this many times the budget, most of what runs now misses, not a tail: the
    #: breach is raised at that evaluation, without waiting for ``breach_after`` of them.
    breach_at_once_ratio: Annotated[float, Field(gt=0.0)] = 1.0
    #: A breach lasts at least ``hold_ms``; one raised again within the hold after its
    #: recovery holds twice as long as the last (up to ``hold_max_ms``), so a load that
    #: only fits in degraded mode does not flap between the modes.
    hold_ms: Annotated[float, Field(ge=0.0)] = 5_000.0
    hold_max_ms: Annotated[float, Field(ge=0.0)] = 30_000.0
    #: Stages whose breach switches their class to its degraded mode (others only report).
    degrade_on: tuple[str, ...] = ("e2e",)
    #: Degraded mode: windows that would take the full route take this partial route, and
    #: the aligner keeps one window per ``degraded_stride`` frames (classes that may drop them).
    degraded_route: Literal["text_only", "vision_only"] = "text_only"
    degraded_stride: Annotated[int, Field(ge=1, le=64)] = 2
    #: A breach not re-announced for this long is forgotten (its process may have died).
    ttl_ms: Annotated[float, Field(gt=0.0)] = 30_000.0


#: The stages an e2e latency is made of (``publish`` overlaps ``transport``).
E2E_STAGES = ("transport", "align", "route", "queue", "infer", "respond")


class SloSettings(_Section):
    """SLO classes and the per-stage budget tree (stages other than inference: 12 ms P99)."""

    classes: dict[str, SloClass] = Field(default_factory=_default_slo_classes)
    default_class: str = "cabin"
    #: Share of windows that must be answered within their class's e2e budget (shed ones
    #: count as misses): the SLA the demo's verdict and the burn-rate alerts hold a run to.
    objective: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.99
    stage_p99_ms: Annotated[float, Field(gt=0.0)] = 12.0
    #: Per-stage P99 budgets that replace ``stage_p99_ms`` (``infer`` defaults to what the
    #: class's e2e budget leaves after the other stages of :data:`E2E_STAGES`).
    stages_ms: dict[str, Annotated[float, Field(gt=0.0)]] = Field(default_factory=dict)
    breach: BreachSettings = Field(default_factory=BreachSettings)
    #: The class each stream declares: stream-id glob pattern → class, first match wins
    #: (``{"or-*" = "surgical", "hud-*" = "ar"}``); other streams take ``default_class``.
    streams: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _merge_classes(cls, data: Any) -> Any:
        """Given classes add to the built-in ones; a built-in one given in part keeps the rest.

        ``LOCKSTEP_SLO__CLASSES__CABIN__E2E_MS=150`` changes cabin's budget alone, and a
        class ``warehouse`` given in full joins cabin, surgical and ar.
        """
        if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
            return data
        merged: dict[str, Any] = {name: c.model_dump() for name, c in
                                  _default_slo_classes().items()}
        for name, given in data["classes"].items():
            if isinstance(given, dict) and name in merged:
                merged[name] = {**merged[name], **given}
            else:
                merged[name] = given
        return {**data, "classes": merged}

    @model_validator(mode="after")
    def _default_exists(self) -> SloSettings:
        if self.default_class not in self.classes:
            raise ValueError(f"slo.default_class {self.default_class!r} is not in slo.classes")
        unknown = sorted(set(self.streams.values()) - set(self.classes))
        if unknown:
            raise ValueError(f"slo.streams names classes not in slo.classes: {unknown}")
        for name in self.classes:
            if self.stage_budget_ms("infer", name) <= 0:
                raise ValueError(f"slo class {name!r}: the stage budgets exceed its e2e budget")
        return self

    def class_of(self, stream_id: str) -> str:
        """The SLO class ``stream_id`` declares through ``slo.streams`` (or the default)."""
        for pattern, slo_class in self.streams.items():
            if fnmatch.fnmatchcase(stream_id, pattern):
                return slo_class
        return self.default_class

    def budget_ms(self, slo_class: str) -> float:
        """The e2e budget of a class, falling back to the default class."""
        return self.classes.get(slo_class, self.classes[self.default_class]).e2e_ms

    def stage_budget_ms(self, stage: str, slo_class: str) -> float:
        """The P99 budget of one stage in a class (``e2e``: the class's budget)."""
        if stage == "e2e":
            return self.budget_ms(slo_class)
        if stage in self.stages_ms:
            return self.stages_ms[stage]
        if stage == "infer":
            others = sum(self.stage_budget_ms(s, slo_class) for s in E2E_STAGES if s != "infer")
            return self.budget_ms(slo_class) - others
        return self.stage_p99_ms

    def budget_tree(self, slo_class: str) -> dict[str, float]:
        """The e2e budget of a class and the P99 budget of each stage it is made of."""
        return {s: self.stage_budget_ms(s, slo_class) for s in ("e2e", "publish", *E2E_STAGES)}


#: Default ``/metrics`` port of each role, so that one process per role on one host never
#: clash; the worker of the k-th pool of ``topics.pools`` listens on ``worker`` + k.
ROLE_METRICS_PORTS: Final = {"align": 9464, "route": 9465, "worker": 9466}


class MetricsSettings(_Section):
    """The Prometheus endpoint each process serves."""

    enabled: bool = True
    #: Loopback by default; containers and pods set 0.0.0.0 to be scraped from elsewhere.
    host: str = "127.0.0.1"
    #: Unset: the port of the process's first role (:data:`ROLE_METRICS_PORTS`); 0: any
    #: free port (the one chosen is printed at start).
    port: Annotated[int, Field(ge=0, le=65535)] | None = None

    def port_for(self, roles: Sequence[str], pools: Sequence[str],
                 known_pools: Sequence[str]) -> int:
        """The port a process running ``roles`` (in pipeline order) serves on.

        Args:
            roles: The process's roles, in pipeline order.
            pools: The pools of its worker role.
            known_pools: ``topics.pools``; a worker of another pool takes any free port.
        """
        if self.port is not None:
            return self.port
        first = roles[0] if roles else "align"
        if first != "worker":
            return ROLE_METRICS_PORTS.get(first, 0)
        pool = pools[0] if pools else ""
        if pool not in known_pools:
            return 0
        return ROLE_METRICS_PORTS["worker"] + list(known_pools).index(pool)


class Settings(BaseSettings):
    """Every setting of a Lockstep process."""

    model_config = SettingsConfigDict(
        env_prefix="LOCKSTEP_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    topics: TopicsSettings = Field(default_factory=TopicsSettings)
    align: AlignSettings = Field(default_factory=AlignSettings)
    route: RouteSettings = Field(default_factory=RouteSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    slo: SloSettings = Field(default_factory=SloSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    app_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._\-]+$")] = "lockstep"
    #: Faust's working directory (Lockstep keeps no state on disk; this holds nothing).
    data_dir: Path = Field(default_factory=lambda: Path(tempfile.gettempdir()) / "lockstep")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Order: explicit arguments, environment, then the TOML file if one is named."""
        del dotenv_settings, file_secret_settings
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)


class _MappingEnvSource(EnvSettingsSource):
    """``LOCKSTEP_*`` variables read from a mapping instead of this process's environment."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)  # read by the base class's constructor
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._environ.items()}  # names are case-insensitive


def load_settings(config: Path | None = None, *, environ: Mapping[str, str] | None = None,
                  **overrides: Any) -> Settings:
    """Load settings from the environment, an optional TOML file and explicit overrides.

    Args:
        config: A TOML file whose tables mirror the sections (``[align]``, ``[kafka]``...).
        environ: Read the ``LOCKSTEP_*`` variables from this mapping instead of the
            process's environment (the settings a pod with these variables would see).
        **overrides: Section values that win over everything (the CLI's flags).

    Raises:
        ConfigError: The file is missing or a value is invalid (the message names the
            settings, never their values).
    """
    _warn_unknown_sections(os.environ if environ is None else environ)
    settings_cls: type[Settings] = Settings
    if config is not None:
        if not config.is_file():
            raise ConfigError(f"config file {config} does not exist")

        class _FromFile(Settings):
            model_config = SettingsConfigDict(toml_file=config)

        settings_cls = _FromFile
    if environ is not None:
        variables = environ

        class _FromMapping(settings_cls):  # type: ignore[valid-type,misc]
            @classmethod
            def settings_customise_sources(
                cls,
                settings_cls: type[BaseSettings],
                init_settings: PydanticBaseSettingsSource,
                env_settings: PydanticBaseSettingsSource,
                dotenv_settings: PydanticBaseSettingsSource,
                file_secret_settings: PydanticBaseSettingsSource,
            ) -> tuple[PydanticBaseSettingsSource, ...]:
                """Order: explicit arguments, the given variables, then the TOML file."""
                return (init_settings, _MappingEnvSource(settings_cls, variables),
                        TomlConfigSettingsSource(settings_cls))

        settings_cls = _FromMapping
    try:
        return settings_cls(**overrides)
    except ValidationError as exc:
        raise ConfigError(_redact(f"invalid settings: {describe_errors(exc)}",
                                  overrides)) from None
    except SettingsError as exc:  # a complex value (list, table) that is not JSON
        field = re.search(r'field "(\w+)"', str(exc))
        where = f" (LOCKSTEP_{field[1].upper()}__*: lists and tables are JSON)" if field else ""
        raise ConfigError(_redact(f"invalid settings: {exc}{where}", overrides)) from None
    except ValueError as exc:  # a TOML syntax error
        raise ConfigError(_redact(f"invalid settings: {exc}", overrides)) from None


#: Field names whose values are never shown, whatever their type.
_SECRET_NAME = re.compile(r"password|secret|token|api_key|credential|private", re.IGNORECASE)


def env_name(loc: Sequence[str | int]) -> str:
    """The environment variable of a setting's path (``("kafka", "sasl_password")``)."""
    parts = [str(p) for p in itertools.takewhile(lambda p: isinstance(p, str), loc)]
    return "LOCKSTEP_" + "__".join(p.upper() for p in parts)


def describe_errors(exc: ValidationError) -> str:
    """One line naming each invalid setting (dotted path and variable), never its value.

    pydantic's own message repeats the input (``input_value``), which may hold a secret.
    """
    parts = []
    for error in exc.errors(include_input=False, include_url=False, include_context=False):
        loc = [p for p in error["loc"] if isinstance(p, str | int)]
        path = ".".join(str(p) for p in loc) or "settings"
        message = str(error["msg"]).removeprefix("Value error, ")
        # A validator's own message names the settings it is about; a type or range
        # error names the variable that sets the field.
        own = error["type"] == "value_error"
        env = f" ({env_name(loc)})" if loc and isinstance(loc[0], str) and not own else ""
        parts.append(f"{path}{env}: {message}")
    return " ".join("; ".join(parts).split())


def _redact(message: str, overrides: Mapping[str, Any]) -> str:
    """``message`` with every secret-looking value of ``overrides`` replaced by ``***``.

    A second line of defence behind :func:`describe_errors`, for messages raised by a
    validator or a parser.
    """
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, secret or bool(_SECRET_NAME.search(str(key))))
        elif isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif secret and isinstance(value, str):
            found.add(value)

    walk(overrides, False)
    # Short values would blank out ordinary words; they are not credentials anyway.
    for value in sorted((v for v in found if len(v) >= 4), key=len, reverse=True):
        message = message.replace(value, "***")
    return message


#: ``LOCKSTEP_*`` variables that are not settings (read by the CLI and the test tooling).
_NOT_SETTINGS = frozenset({"config", "kafka_classpath", "kafka_keep_dir"})


def _warn_unknown_sections(environ: Mapping[str, str]) -> None:
    """Warn about ``LOCKSTEP_*`` variables that name no setting (they are ignored)."""
    known = set(Settings.model_fields)
    for name in environ:
        if not name.upper().startswith("LOCKSTEP_"):
            continue
        head = name[len("LOCKSTEP_"):].lower().split("__", 1)[0]
        if head in known or head in _NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(head, sorted(known), n=1)
        hint = f" (did you mean LOCKSTEP_{close[0].upper()}?)" if close else ""
        log.warning("ignoring %s: no setting %r%s; the sections are %s", name, head, hint,
                    ", ".join(sorted(known)))
