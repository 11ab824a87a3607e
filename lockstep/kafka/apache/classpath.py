"""Locate the Java runtime and the Apache Kafka broker jars.

The jars come from Maven Central through a pom (``tests/kafka/pom.xml`` in a checkout of
the repository); nothing is fetched at run time beyond what Maven puts in ``~/.m2``. The
resolved classpath is cached per pom content, so only the first run pays for Maven. From
an installed wheel there is no pom: give the jars as a classpath (``lockstep chaos
--kafka-classpath``, ``LOCKSTEP_KAFKA_CLASSPATH``) or name a pom (``--kafka-pom``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from lockstep.errors import KafkaBrokerError
from lockstep.kafka.apache.logtail import tail

__all__ = ["CLASSPATH_HINT", "DEFAULT_POM", "LauncherEnv", "find_java", "resolve_classpath"]

log = logging.getLogger(__name__)

#: lockstep/kafka/apache/classpath.py → the repository root → its pom.
DEFAULT_POM: Final[Path] = Path(__file__).resolve().parents[3] / "tests/kafka/pom.xml"
"""The pom pinning the broker version and its logging binding (in a repository checkout)."""

CLASSPATH_HINT: Final[str] = (
    "give the Kafka broker jars as a Java classpath (--kafka-classpath CP or "
    "LOCKSTEP_KAFKA_CLASSPATH; e.g. `mvn -f pom.xml dependency:build-classpath "
    "-Dmdep.outputFile=cp.txt` with the repository's tests/kafka/pom.xml, or the libs/*.jar "
    "of a Kafka 4.x binary distribution), or a pom that pins them (--kafka-pom FILE)")

_ANSI_ESCAPE: Final[re.Pattern[str]] = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class LauncherEnv:
    """The launcher's environment variables, read in one place (never at import time).

    Attributes:
        classpath: ``LOCKSTEP_KAFKA_CLASSPATH``: ready-made jars; Maven is not run.
        cache_dir: ``LOCKSTEP_KAFKA_CACHE_DIR`` (default ``$XDG_CACHE_HOME`` or
            ``~/.cache``, then ``lockstep-test-kafka``): where resolved classpaths are kept.
        keep_dir: ``LOCKSTEP_KAFKA_KEEP_DIR`` set to anything but ``0``: broker
            directories survive ``stop()`` for a post-mortem.
    """

    classpath: str | None
    cache_dir: Path
    keep_dir: bool

    @classmethod
    def read(cls) -> LauncherEnv:
        """Read the variables now."""
        explicit = os.environ.get("LOCKSTEP_KAFKA_CACHE_DIR")
        xdg = os.environ.get("XDG_CACHE_HOME")
        cache = Path(explicit) if explicit else (
            Path(xdg) if xdg else Path.home() / ".cache") / "lockstep-test-kafka"
        return cls(classpath=os.environ.get("LOCKSTEP_KAFKA_CLASSPATH") or None,
                   cache_dir=cache,
                   keep_dir=os.environ.get("LOCKSTEP_KAFKA_KEEP_DIR", "") not in ("", "0"))


def find_java(java: str | None) -> str:
    """Return the java executable: ``java`` if given, else from JAVA_HOME or PATH.

    Raises:
        KafkaBrokerError: If no java executable is found.
    """
    if java is not None:
        found = shutil.which(java)
    else:
        found = None
        java_home = os.environ.get("JAVA_HOME")
        if java_home:
            candidate = Path(java_home) / "bin" / "java"
            if os.access(candidate, os.X_OK):
                found = str(candidate)
        if found is None:
            found = shutil.which("java")
    if found is None:
        msg = "java executable not found: install a JDK/JRE 17+ and put it on PATH or set JAVA_HOME"
        raise KafkaBrokerError(msg)
    return found


def _classpath_is_usable(classpath: str) -> bool:
    entries = [entry for entry in classpath.split(os.pathsep) if entry]
    return bool(entries) and all(Path(entry).exists() for entry in entries)


def _run_mvn(
    mvn: str, pom: Path, output: Path, *, offline: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    command = [mvn, "-B", "-q", "-Dstyle.color=never"]
    if offline:
        command.append("-o")
    command += ["-f", str(pom), "dependency:build-classpath", f"-Dmdep.outputFile={output}"]
    log.debug("resolving Kafka classpath: %s", command)
    try:
        return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        mode = "offline" if offline else "online"
        msg = f"Maven classpath resolution ({mode}) timed out after {timeout:.0f}s for {pom}"
        raise KafkaBrokerError(msg) from exc


def resolve_classpath(
    pom: Path = DEFAULT_POM,
    *,
    classpath: str | None = None,
    mvn: str | None = None,
    cache_dir: Path | None = None,
    timeout: float = 600.0,
) -> str:
    """Return the Java classpath of the broker described by ``pom``.

    The result is cached in ``cache_dir`` under a key derived from the pom's content, and
    reused as long as every jar it names still exists. On a cache miss Maven runs offline
    first (fast when ``~/.m2`` is warm), then online.

    Args:
        pom: The pom whose dependencies make up the broker classpath.
        classpath: Ready-made jars (``os.pathsep``-separated); returned as they are.
        mvn: Maven executable; defaults to ``mvn`` on ``PATH``.
        cache_dir: Cache directory; defaults to :attr:`LauncherEnv.cache_dir`.
        timeout: Limit in seconds for each Maven invocation.

    Returns:
        An ``os.pathsep``-separated list of jar paths.

    Raises:
        KafkaBrokerError: A given classpath names a missing file, the pom is missing,
            Maven is not installed, or resolution fails both offline and online.
    """
    if classpath:
        if not _classpath_is_usable(classpath):
            missing = next(e for e in classpath.split(os.pathsep) if e and not Path(e).exists())
            raise KafkaBrokerError(f"the Kafka classpath names {missing}, which does not exist")
        return classpath
    try:
        pom_bytes = pom.read_bytes()
    except OSError as exc:
        msg = f"no Kafka pom at {pom} ({exc.strerror}): {CLASSPATH_HINT}"
        raise KafkaBrokerError(msg) from exc
    key = hashlib.sha256(pom_bytes).hexdigest()[:16]
    cache = cache_dir if cache_dir is not None else LauncherEnv.read().cache_dir
    cached = cache / f"classpath-{key}.txt"
    with contextlib.suppress(OSError):
        found = cached.read_text(encoding="utf-8").strip()
        if _classpath_is_usable(found):
            return found
    cache.mkdir(parents=True, exist_ok=True)
    # One resolution at a time: Maven's local repository is not safe for two downloads of
    # the same jar (parallel test workers, two chaos runs on a fresh machine).
    with (cache / f"classpath-{key}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):
            found = cached.read_text(encoding="utf-8").strip()
            if _classpath_is_usable(found):
                return found  # resolved by whoever held the lock before
        return _resolve(pom, cached, mvn, timeout)


def _resolve(pom: Path, cached: Path, mvn: str | None, timeout: float) -> str:
    """Resolve the classpath with Maven (offline, then online) into ``cached``."""
    cache = cached.parent
    mvn_exe = shutil.which(mvn or "mvn")
    if mvn_exe is None:
        msg = (f"mvn executable not found: install Apache Maven (needed once to fetch the "
               f"Kafka jars into ~/.m2), or {CLASSPATH_HINT}")
        raise KafkaBrokerError(msg)
    failures: list[str] = []
    for offline in (True, False):
        fd, tmp_name = tempfile.mkstemp(prefix=cached.name, dir=cache)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            result = _run_mvn(mvn_exe, pom, tmp, offline=offline, timeout=timeout)
            resolved = tmp.read_text(encoding="utf-8").strip()
            if result.returncode == 0 and _classpath_is_usable(resolved):
                tmp.replace(cached)
                return resolved
            mode = "offline" if offline else "online"
            failures.append(f"--- mvn ({mode}) exited {result.returncode} ---\n"
                            + tail(_ANSI_ESCAPE.sub("", result.stdout + result.stderr), 30))
        finally:
            tmp.unlink(missing_ok=True)
    msg = f"Maven could not resolve the Kafka classpath from {pom}:\n" + "\n".join(failures)
    raise KafkaBrokerError(msg)
