"""The docs, the README and the module docstrings name only files and modules that exist."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MODULES = sorted((ROOT / "lockstep").rglob("*.py"))
#: lockstep.x.y, but not a file name such as lockstep.toml
_DOTTED = re.compile(r"(?<![\w./-])lockstep(?:\.[A-Za-z_]\w*)+(?!\.?\w)(?<!\.toml)(?<!\.yaml)")
_PATH = re.compile(r"(?<![\w./-])((?:lockstep|tests|docs|docker|k8s|scripts)/[\w./-]*\w)")
_DOC = re.compile(r"(?<![\w./-])((?:docs/)?[\w-]+\.md)\b")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            obj: object = importlib.import_module(name)
            for attr in parts[end:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def _docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return "\n".join(doc for n in nodes if (doc := ast.get_docstring(n)))


def test_every_module_and_path_the_docs_name_exists() -> None:
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        missing += [f"{doc.name}: {m}" for m in set(_DOTTED.findall(text)) if not _resolves(m)]
        missing += [f"{doc.name}: {p}" for p in set(_PATH.findall(text))
                    if not any((ROOT / p).parent.glob((ROOT / p).name + "*"))]
    assert not missing, "\n".join(sorted(missing))


def test_every_document_a_module_docstring_cites_exists() -> None:
    missing = []
    for module in MODULES:
        for cited in set(_DOC.findall(_docstrings(module))):
            if not (ROOT / cited).exists():
                missing.append(f"{module.relative_to(ROOT)}: {cited}")
        missing += [f"{module.relative_to(ROOT)}: {m}"
                    for m in set(_DOTTED.findall(_docstrings(module))) if not _resolves(m)]
    assert not missing, "\n".join(sorted(missing))


def test_no_install_hint_names_a_package_index_lockstep_is_not_on() -> None:
    # Lockstep installs from its checkout (pip install -e '.[extra]'); no index has it.
    from_index = re.compile(r"pip install\s+['\"]?lockstep-stream")
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in [*DOCS, *MODULES]
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if from_index.search(line)]
    assert offenders == []
