"""The align role's allocator environment (lockstep.agents.allocator)."""

import pytest

from lockstep.agents import allocator
from lockstep.agents.allocator import allocator_env

pytestmark = pytest.mark.unit


def test_glibc_malloc_in_one_arena_keeping_other_tunables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("glibc", "2.36"))
    env = allocator_env({"PATH": "/bin"})
    assert env == {"PATH": "/bin", "PYTHONMALLOC": "malloc",
                   "GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
    merged = allocator_env({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"})
    assert merged is not None
    assert merged["GLIBC_TUNABLES"] == "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1"
    kept = allocator_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"})
    assert kept is not None and kept["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=4"


def test_an_operators_pythonmalloc_is_left_alone() -> None:
    assert allocator_env({"PYTHONMALLOC": "pymalloc"}) is None
    assert allocator_env({"PYTHONMALLOC": "malloc"}) is None


def test_nothing_changes_over_another_c_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    assert allocator_env({"PATH": "/bin"}) is None
