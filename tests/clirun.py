"""Running the ``lockstep`` CLI from tests as a user would.

The caller's ``LOCKSTEP_*`` settings are dropped, so only what a test passes reaches the
process.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence

from lockstep.agents.children import without_settings

LOCKSTEP = shutil.which("lockstep") or ""


def lockstep_path() -> str:
    """The installed console script."""
    assert LOCKSTEP, "the lockstep console script is not installed (pip install -e .)"
    return LOCKSTEP


def clean_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``LOCKSTEP_*``, plus ``env``."""
    return without_settings(env)


def run(argv: Sequence[str], *, timeout: float = 120,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion in a clean environment; capture its output."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          env=clean_env(env), check=False)


def lockstep(*args: str, timeout: float = 120,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``lockstep *args`` to completion in a clean environment."""
    return run([lockstep_path(), *args], timeout=timeout, env=env)
