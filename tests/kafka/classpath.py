"""Locate the Java runtime and the Kafka broker jars.

The jars come from Maven Central through ``tests/kafka/pom.xml``; the resolved
classpath is cached per pom content so only the first session pays for the
Maven round trip.

Environment variables:
    LOCKSTEP_KAFKA_CLASSPATH: Ready-made Java classpath; skips Maven entirely.
    LOCKSTEP_KAFKA_CACHE_DIR: Where the resolved classpath is cached
        (default ``$XDG_CACHE_HOME/lockstep-test-kafka`` or
        ``~/.cache/lockstep-test-kafka``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from tests.kafka.errors import KafkaBrokerError, tail

__all__ = ["DEFAULT_POM", "find_java", "resolve_classpath"]

_log = logging.getLogger(__name__)

DEFAULT_POM: Final[Path] = Path(__file__).resolve().with_name("pom.xml")
"""The pom pinning the broker version and its logging binding."""

_ANSI_ESCAPE: Final[re.Pattern[str]] = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _cache_dir() -> Path:
    explicit = os.environ.get("LOCKSTEP_KAFKA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "lockstep-test-kafka"


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
    command += [
        "-f",
        str(pom),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={output}",
    ]
    _log.debug("resolving Kafka classpath: %s", command)
    try:
        return subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        mode = "offline" if offline else "online"
        msg = f"Maven classpath resolution ({mode}) timed out after {timeout:.0f}s for {pom}"
        raise KafkaBrokerError(msg) from exc


def resolve_classpath(
    pom: Path = DEFAULT_POM,
    *,
    mvn: str | None = None,
    cache_dir: Path | None = None,
    timeout: float = 600.0,
) -> str:
    """Return the Java classpath for the broker described by ``pom``.

    The result is cached in ``cache_dir`` under a key derived from the pom's
    content, and reused as long as every jar it names still exists. On a
    cache miss Maven is run offline first (fast when ``~/.m2`` is warm) and
    then online.

    Args:
        pom: The pom whose dependencies make up the broker classpath.
        mvn: Maven executable; defaults to ``mvn`` on ``PATH``.
        cache_dir: Cache directory; defaults to ``LOCKSTEP_KAFKA_CACHE_DIR``
            or the user cache directory.
        timeout: Limit in seconds for each Maven invocation.

    Returns:
        An ``os.pathsep``-separated list of jar paths.

    Raises:
        KafkaBrokerError: If the pom is missing, Maven is not installed, or
            resolution fails both offline and online.
    """
    override = os.environ.get("LOCKSTEP_KAFKA_CLASSPATH")
    if override:
        return override
    try:
        pom_bytes = pom.read_bytes()
    except OSError as exc:
        msg = f"cannot read Kafka pom {pom}: {exc}"
        raise KafkaBrokerError(msg) from exc
    key = hashlib.sha256(pom_bytes).hexdigest()[:16]
    cache = cache_dir if cache_dir is not None else _cache_dir()
    cached = cache / f"classpath-{key}.txt"
    with contextlib.suppress(OSError):
        classpath = cached.read_text(encoding="utf-8").strip()
        if _classpath_is_usable(classpath):
            return classpath

    mvn_exe = shutil.which(mvn or "mvn")
    if mvn_exe is None:
        msg = (
            "mvn executable not found: install Apache Maven (needed once to "
            "fetch the Kafka jars) or set LOCKSTEP_KAFKA_CLASSPATH"
        )
        raise KafkaBrokerError(msg)
    cache.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for offline in (True, False):
        fd, tmp_name = tempfile.mkstemp(prefix=cached.name, dir=cache)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            result = _run_mvn(mvn_exe, pom, tmp, offline=offline, timeout=timeout)
            classpath = tmp.read_text(encoding="utf-8").strip()
            if result.returncode == 0 and _classpath_is_usable(classpath):
                tmp.replace(cached)
                return classpath
            mode = "offline" if offline else "online"
            failures.append(
                f"--- mvn ({mode}) exited {result.returncode} ---\n"
                + tail(_ANSI_ESCAPE.sub("", result.stdout + result.stderr), 30)
            )
        finally:
            tmp.unlink(missing_ok=True)
    msg = f"Maven could not resolve the Kafka classpath from {pom}:\n" + "\n".join(failures)
    raise KafkaBrokerError(msg)
