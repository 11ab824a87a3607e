"""``lockstep`` CLI processes for integration tests: started, signalled, and always reaped.

:func:`lockstep_run` starts ``lockstep run`` as a :class:`~lockstep.agents.children.Child`
(the runner ``lockstep chaos`` and the benches use) with its settings from the environment
only (the caller's ``LOCKSTEP_*`` variables are dropped), its output in a log file for
diagnostics, and kills and reaps it on the way out, whatever happened in between.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from lockstep.agents.children import Child, without_settings
from tests.clirun import lockstep_path


@contextmanager
def lockstep_run(args: list[str], env: Mapping[str, str], log: Path) -> Iterator[Child]:
    """Run ``lockstep *args`` for the duration of the block; kill and reap it on exit.

    Args:
        args: The command line after ``lockstep``.
        env: ``LOCKSTEP_*`` settings of the process (the caller's are not inherited).
        log: File that receives the process's stdout and stderr.
    """
    child = Child(log.stem, [lockstep_path(), *args], without_settings(env), log).start()
    try:
        yield child
    finally:
        child.kill()
