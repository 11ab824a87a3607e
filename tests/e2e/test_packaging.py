"""The wheel as pip installs it: one import namespace, nothing else at the top."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from tests.clirun import run

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_wheel_installs_only_the_lockstep_namespace(tmp_path: Path) -> None:
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--quiet", "--wheel-dir", str(tmp_path), str(ROOT)], timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("lockstep_stream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"lockstep"}
    for package in ("agents", "streams", "topics", "engines"):
        assert f"lockstep/{package}/__init__.py" in names
        assert f"lockstep/{package}/py.typed" in names
    assert "lockstep/py.typed" in names
