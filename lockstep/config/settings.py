"""Lockstep's settings: one pydantic-settings model, env prefix ``LOCKSTEP_``.

Nested per concern with ``__`` (``LOCKSTEP_ALIGN__TOLERANCE_MS=10``), or from a TOML file
given by ``--config`` / ``LOCKSTEP_CONFIG``. Environment variables win over the file.
Nothing is read at import time: call :func:`load_settings`.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from lockstep.config.invalid import describe_errors, redact
from lockstep.config.kafka import KafkaSettings as KafkaSettings
from lockstep.config.section import Section
from lockstep.config.slo import BreachSettings as BreachSettings
from lockstep.config.slo import SloClass as SloClass
from lockstep.config.slo import SloSettings as SloSettings
from lockstep.config.worker import WorkerSettings
from lockstep.errors import ConfigError

log = logging.getLogger(__name__)
Ms = Annotated[float, Field(ge=0.0)]
PoolName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_\-]{0,31}$")]


Partitions = Annotated[int, Field(ge=1, le=1024)]
RetentionMs = Annotated[int, Field(ge=60_000)]


class TopicsSettings(Section):
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


class AlignSettings(Section):
    """Event-time alignment (see lockstep.streams.align.aligner)."""

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
    #: (lockstep.agents.allocator). Ignored where ``PYTHONMALLOC`` is set or the C library is not
    #: glibc.
    system_allocator: bool = True
    #: Per stream: buffered tokens beyond this force the oldest window out.
    max_buffered_tokens: Annotated[int, Field(ge=16)] = 4096
    #: Sample windows down (every n-th frame anchors one) while the SLA is at risk.
    allow_downsampling: bool = True
    max_stride: Annotated[int, Field(ge=1, le=64)] = 4
    #: Records behind the log end on any media partition above which the task is catching
    #: up: windows then close on watermarks, not deadlines (see lockstep.streams.align.aligner).
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


class Domain(Section):
    """Keywords of one domain and how much a hit raises a window's semantic importance."""

    weight: Annotated[float, Field(ge=0.0)]
    keywords: tuple[str, ...]


class RouteSettings(Section):
    """Confidence gating, routes and priorities (see lockstep.streams.route.router)."""

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


#: Default ``/metrics`` port of each role, so that one process per role on one host never
#: clash; the worker of the k-th pool of ``topics.pools`` listens on ``worker`` + k.
ROLE_METRICS_PORTS: Final = {"align": 9464, "route": 9465, "worker": 9466}


class MetricsSettings(Section):
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
        raise ConfigError(redact(f"invalid settings: {describe_errors(exc)}",
                                  overrides)) from None
    except SettingsError as exc:  # a complex value (list, table) that is not JSON
        field = re.search(r'field "(\w+)"', str(exc))
        where = f" (LOCKSTEP_{field[1].upper()}__*: lists and tables are JSON)" if field else ""
        raise ConfigError(redact(f"invalid settings: {exc}{where}", overrides)) from None
    except ValueError as exc:  # a TOML syntax error
        raise ConfigError(redact(f"invalid settings: {exc}", overrides)) from None


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
