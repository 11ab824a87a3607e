"""The allocator of a process that runs the align role: glibc's, in one arena.

CPython's own allocator returns an arena (1 MiB) to the system only once every object in it
is freed. A flood of new stream ids fills arenas with per-stream state, and the long-lived
objects made meanwhile (client buffers, metric values, clock samples of the live streams)
end up spread over them: once every flood stream is evicted, a few live objects keep most
of those arenas, and the process stays near its peak. With ``PYTHONMALLOC=malloc`` the
objects come from glibc, whose ``malloc_trim`` (:mod:`lockstep.agents.memory`) gives back
every free page, even between live objects; one arena (``glibc.malloc.arena_max=1``) keeps
the event loop's helper threads from holding heaps of their own. Measured on the chaos
flood (50,000 stream ids, docs/reliability.md): align RSS after eviction 192 MB with
CPython's allocator, 102-106 MB with glibc's, from 94 MB before; the aligner costs about
4 % more CPU a token (``lockstep bench align``).

The allocator is chosen when the interpreter starts, so ``lockstep run`` re-executes itself
with it (:func:`reexec_with_system_allocator`) before anything else is set up.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence

ARENA_TUNABLE = "glibc.malloc.arena_max"


def allocator_env(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment that runs Python on glibc's allocator in one arena.

    None when there is nothing to change: ``PYTHONMALLOC`` is already set (to this, or to
    something an operator chose), or the C library is not glibc.
    """
    if "PYTHONMALLOC" in environ or platform.libc_ver()[0] != "glibc":
        return None
    env = dict(environ)
    env["PYTHONMALLOC"] = "malloc"
    tunables = environ.get("GLIBC_TUNABLES", "")
    if ARENA_TUNABLE not in tunables:
        env["GLIBC_TUNABLES"] = ":".join(t for t in (tunables, f"{ARENA_TUNABLE}=1") if t)
    return env


def reexec_with_system_allocator(argv: Sequence[str] | None) -> None:
    """Replace this process with ``python -m lockstep ARGV`` on glibc's allocator.

    Returns (doing nothing) when ``argv`` is None (the CLI was not started from its entry
    point, e.g. a test invoking a command in-process) or :func:`allocator_env` has
    nothing to change, which is also the case in the re-executed process.
    """
    if argv is None:
        return
    env = allocator_env(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "lockstep", *argv], env)
