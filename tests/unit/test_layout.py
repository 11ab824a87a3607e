"""The package's layout shows its layers (docs/architecture.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lockstep"
#: The public nouns at the root: the API, the error tree and the layers.
NOUNS = {"api.py", "errors.py", "config", "topics", "streams", "telemetry", "engines", "kafka",
         "agents", "producer", "media", "observe", "bench", "chaos", "cli"}
#: What makes it a typed, runnable package.
MACHINERY = {"__init__.py", "__main__.py", "py.typed"}
_CLIENT = re.compile(r"^\s*(import|from)\s+(aiokafka|confluent_kafka)\b", re.M)


def test_the_package_root_holds_the_api_the_errors_and_the_layers_only() -> None:
    entries = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert entries - MACHINERY == NOUNS
    assert len(NOUNS) <= 15


def test_only_the_kafka_layer_imports_a_kafka_client() -> None:
    importers = {p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py")
                 if _CLIENT.search(p.read_text(encoding="utf-8"))}
    assert importers == {"kafka"}


def test_every_command_lives_in_a_module_of_its_own_named_after_it() -> None:
    from lockstep.cli.main import cli

    for name, command in cli.commands.items():
        assert command.callback is not None
        assert command.callback.__module__ == f"lockstep.cli.{name}", name


def test_the_design_cards_folders_are_links_to_the_layers_of_the_same_names() -> None:
    for name in ("streams", "agents", "topics", "engines"):
        link = ROOT / name
        assert link.is_symlink() and link.resolve() == (PACKAGE / name).resolve(), name


def test_the_layers_contract_holds() -> None:
    done = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.count("KEPT") == 3
