"""Choosing an engine by name (``worker.engine``).

``auto`` picks the best engine this machine can run with a real model: ``trtllm`` where
TensorRT-LLM is installed, torch sees a GPU and ``worker.trtllm.model`` names a model;
else ``cpu`` where torch and transformers are installed and ``worker.cpu.model_dir`` names a
checkpoint; else the numpy ``reference`` engine. It never picks the cpu engine's tiny
random-weights model: that one runs only when asked for by name (``engine=cpu`` without a
``model_dir``), with a warning.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from lockstep.config.worker import BUILT_IN_ENGINES, WorkerSettings
from lockstep.engines.base import Engine
from lockstep.errors import ConfigError, install_hint
from lockstep.telemetry.metrics import Telemetry

log = logging.getLogger(__name__)
CPU_HINT = install_hint("cpu")


@dataclass(frozen=True)
class EngineChoice:
    """The engine a worker's settings resolve to, and why (for the log)."""

    name: str
    reason: str


def choose(settings: WorkerSettings) -> EngineChoice:
    """The concrete engine ``settings.engine`` stands for on this machine (no side effects)."""
    if settings.engine != "auto":
        return EngineChoice(settings.engine, "worker.engine")
    has = importlib.util.find_spec
    if settings.trtllm.model and has("tensorrt_llm") is not None and _cuda():
        return EngineChoice("trtllm", "worker.engine=auto: TensorRT-LLM, a GPU and "
                                      "worker.trtllm.model")
    torch = has("torch") is not None and has("transformers") is not None
    if torch and settings.cpu.model_dir is not None:
        return EngineChoice("cpu", "worker.engine=auto: torch and worker.cpu.model_dir")
    if torch:
        why = ("no model checkpoint is configured (set worker.cpu.model_dir, "
               "LOCKSTEP_WORKER__CPU__MODEL_DIR; the cpu engine without one has random weights)")
    else:
        why = f"torch/transformers are not installed ({CPU_HINT} and set worker.cpu.model_dir)"
    return EngineChoice("reference", f"worker.engine=auto: using the reference engine: {why}")


def resolve(name: str, settings: WorkerSettings | None = None) -> str:
    """The concrete engine ``name`` stands for (``auto`` resolved on this machine)."""
    base = settings or WorkerSettings()
    return choose(base.model_copy(update={"engine": name})).name


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


#: The entry-point group engine plugins register under.
PLUGIN_GROUP = "lockstep.engines"


def plugin_class(name: str) -> type[Engine] | None:
    """The engine class a plugin name stands for (None for a built-in engine).

    ``package.module:Class`` is imported; another name is looked up among the installed
    distributions' ``lockstep.engines`` entry points.

    Raises:
        ConfigError: No such plugin, or it is not an :class:`Engine`.
    """
    if name in BUILT_IN_ENGINES:
        return None
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            found: object = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"worker.engine {name!r}: cannot import it: {exc}") from None
    else:
        points = entry_points(group=PLUGIN_GROUP, name=name)
        if not points:
            known = sorted(p.name for p in entry_points(group=PLUGIN_GROUP))
            raise ConfigError(
                f"worker.engine {name!r} is no built-in engine ({', '.join(BUILT_IN_ENGINES)})"
                f" and no installed plugin (entry points in {PLUGIN_GROUP}: "
                f"{', '.join(known) or 'none'})")
        found = next(iter(points)).load()
    if not (isinstance(found, type) and issubclass(found, Engine)):
        raise ConfigError(f"worker.engine {name!r} is not a lockstep.engines.base.Engine")
    return found


def describe_model(name: str, settings: WorkerSettings) -> str:
    """What an engine serves, in a few words: its model, and where it comes from."""
    if name == "cpu":
        if settings.cpu.model_dir is None:
            return "tiny Qwen2.5-VL with RANDOM weights (no worker.cpu.model_dir)"
        return f"{settings.cpu.model_dir} (device {settings.cpu.device})"
    if name == "trtllm":
        return settings.trtllm.model or "(no worker.trtllm.model)"
    if name == "openai":
        return f"{settings.openai.model} at {settings.openai.base_url}"
    if name not in BUILT_IN_ENGINES:
        return "whatever the plugin serves"
    return "numpy description of the window (no model)"


def create_engine(settings: WorkerSettings, telemetry: Telemetry | None = None) -> Engine:
    """Build the engine a worker's settings name (not started); log which and with what model."""
    common = dict(timeout_s=settings.infer_timeout_ms / 1000.0, telemetry=telemetry,
                  pool=settings.pool)
    choice = choose(settings)
    extra = {"pool": settings.pool, "engine": choice.name}
    if settings.engine == "auto" and choice.name == "reference":
        log.warning("%s", choice.reason, extra=extra)
    if choice.name == "cpu" and settings.cpu.model_dir is None:
        log.warning("worker.engine=cpu without worker.cpu.model_dir: the tiny Qwen2.5-VL has "
                    "RANDOM weights, its answers are noise (set LOCKSTEP_WORKER__CPU__MODEL_DIR "
                    "to a checkpoint)", extra=extra)
    log.info("worker %s: engine %s%s, model %s", settings.pool, choice.name,
             " (auto)" if settings.engine == "auto" else "",
             describe_model(choice.name, settings), extra=extra)
    if choice.name not in BUILT_IN_ENGINES:
        log.info("worker %s: engine plugin %s", settings.pool,
                 plugin_class(choice.name), extra=extra)
    name = choice.name
    plugin = plugin_class(name)
    if plugin is not None:
        # A plugin's constructor takes the common keywords, max_batch and its options.
        factory: Callable[..., Engine] = plugin
        return factory(max_batch=settings.max_batch, options=dict(settings.engine_options),
                       **common)
    if name == "cpu":
        from lockstep.engines.cpu import CpuEngine
        return CpuEngine(settings.cpu, max_batch=settings.max_batch, **common)
    if name == "trtllm":
        from lockstep.engines.trtllm import TrtllmEngine
        return TrtllmEngine(settings.trtllm, max_pixels=settings.cpu.max_pixels, **common)
    if name == "openai":
        from lockstep.engines.openai import OpenAIEngine
        return OpenAIEngine(settings.openai, max_pixels=settings.cpu.max_pixels, **common)
    from lockstep.engines.reference import ReferenceEngine
    return ReferenceEngine(max_batch=settings.max_batch, **common)
