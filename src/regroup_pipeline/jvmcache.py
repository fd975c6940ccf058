"""The driver JVM's class archive: the classes a local Spark driver loads, parsed and verified once and kept
in regroup's cache as a class-data-sharing archive (AppCDS), so that later JVMs map them instead of
loading them from Spark's ~280 jars again.

The first session of a setup starts its JVM with ``-XX:ArchiveClassesAtExit``: the JVM writes the archive
of every class it loaded when it exits. Later sessions start with ``-XX:SharedArchiveFile``. An archive
belongs to one setup, named by a key over everything the JVM checks it against or that changes which
classes it holds: the Java runtime (its path and its ``libjvm``), Spark's jars (names, sizes, times), the
driver's class path and Java options a user sets, the driver's memory. A setup that changes gets another
key, so a stale archive is not used; archives of other setups beyond the newest few are removed.

The JVM itself falls back: an archive it cannot use (a mismatch the key misses, a file cut short) is
ignored with ``-Xshare:auto``, the default, and the JVM loads its classes as without one. The first JVM to
map an archive logs where its classes come from; when none came from the archive, :func:`check` removes
it and marks the key so that it is not written again. The header of an archive is the last thing the JVM
writes, so a file whose header does not carry the archive's magic number is still being written (or was
cut short): it is neither used nor written again until it is old.

Nothing is added when the class path holds a directory with files in it (a ``conf`` directory, Hadoop's
configuration: the JVM cannot archive from those and would fail at exit), when the user's Java options
choose class sharing themselves, or when ``REGROUP_JVM_ARCHIVE=0``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "ARCHIVE_MAGIC",
    "Archive",
    "archive_dir",
    "check",
    "plan",
]

# CDS_DYNAMIC_ARCHIVE_MAGIC, the first four bytes (little-endian) of a complete dynamic archive.
ARCHIVE_MAGIC: Final = 0xF00BABA8
# An unfinished archive older than this was cut short (the JVM writes one in seconds).
_UNFINISHED_S: Final = 600.0
_KEEP: Final = 3
# How ``-Xlog:class+load`` names a class taken from a dynamic archive (the top layer over the JDK's own).
_FROM_ARCHIVE: Final = "source: shared objects file (top)"
# Characters that Spark's splitting of Java options or ``-Xlog``'s syntax would take apart.
_UNSAFE_PATH: Final = frozenset(" \t\n\"'\\=:,")
_SHARING_OPTIONS: Final = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "AOTCache", "AOTMode")


@dataclasses.dataclass(frozen=True, slots=True)
class Archive:
    """What :func:`plan` chose: the archive's path, and whether this JVM writes it (else it maps it)."""

    path: Path
    writes: bool
    # Where the JVM logs the classes it loads and where from, until an archive is known to map.
    log: Path | None = None

    @property
    def java_options(self) -> str:
        flag = "ArchiveClassesAtExit" if self.writes else "SharedArchiveFile"
        # The JVM warns about each class it leaves out of the archive (signed jars, old class files).
        options = f"-XX:{flag}={self.path} -Xlog:cds*=off"
        return f"{options} -Xlog:class+load=info:file={self.log}:none" if self.log is not None else options


def archive_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/regroup/jvm`` (default ``~/.cache``)."""
    env = os.environ if env is None else env
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "regroup" / "jvm"


def _java(env: Mapping[str, str]) -> Path | None:
    # The Java that Spark's launch scripts run.
    home = env.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=env.get("PATH"))
    return Path(found).resolve() if found and Path(found).is_file() else None


def _stat(path: Path) -> list[object]:
    st = path.stat()
    return [path.name, st.st_size, st.st_mtime_ns]


def _has_files(directory: str) -> bool:
    path = Path(directory)
    return path.is_dir() and any(path.iterdir())


def _class_path_dirs(spark_home: Path, env: Mapping[str, str], conf: Mapping[str, str]) -> list[str]:
    """The directories Spark's launcher puts on the driver's class path."""
    dirs = [env.get("SPARK_CONF_DIR") or str(spark_home / "conf")]
    dirs += [env[name] for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if env.get(name)]
    dirs += [p for p in conf.get("spark.driver.extraClassPath", "").split(os.pathsep) if p]
    return dirs


def _key(java: Path, spark_home: Path, conf: Mapping[str, str]) -> str | None:
    libjvm = next(iter(sorted(java.parent.parent.glob("lib/*/libjvm.so"))), None)
    jars = spark_home / "jars"
    if libjvm is None or not jars.is_dir():
        return None
    parts = {
        "java": [str(java), *_stat(libjvm)],
        "jars": sorted(_stat(j) for j in jars.iterdir() if j.suffix == ".jar"),
        "class_path": conf.get("spark.driver.extraClassPath", ""),
        "options": conf.get("spark.driver.extraJavaOptions", ""),
        "memory": conf.get("spark.driver.memory", ""),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _complete(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and int.from_bytes(head, "little") == ARCHIVE_MAGIC


def _remove(archive: Path) -> None:
    for path in (archive, archive.with_suffix(".mapped")):
        with contextlib.suppress(OSError):
            path.unlink()


def _prune(directory: Path, keep: Path) -> None:
    dated = []
    for archive in directory.glob("*.jsa"):
        with contextlib.suppress(OSError):
            dated.append((archive.stat().st_mtime, archive))
    others = [a for _, a in sorted(dated, reverse=True) if a != keep]
    for old in others[_KEEP - 1 :]:
        _remove(old)


def plan(
    spark_home: Path,
    conf: Mapping[str, str],
    *,
    env: Mapping[str, str] | None = None,
    now: float | None = None,
) -> Archive | None:
    """The archive a new local driver JVM maps or writes, given the session's ``conf`` (the user's entries
    included); ``None`` to start it without one."""
    env = os.environ if env is None else env
    if env.get("REGROUP_JVM_ARCHIVE", "1") == "0":
        return None
    options = " ".join(
        [
            conf.get("spark.driver.extraJavaOptions", ""),
            env.get("JAVA_TOOL_OPTIONS", ""),
            env.get("_JAVA_OPTIONS", ""),
        ]
    )
    if any(name in options for name in _SHARING_OPTIONS) or env.get("SPARK_DIST_CLASSPATH"):
        return None
    if any(_has_files(d) for d in _class_path_dirs(spark_home, env, conf)):
        return None
    java = _java(env)
    key = _key(java, spark_home, conf) if java is not None else None
    if key is None:
        return None
    directory = archive_dir(env)
    if _UNSAFE_PATH.intersection(str(directory)):
        return None
    path = directory / f"driver-{key}.jsa"
    if path.with_suffix(".refused").exists():
        return None
    if _complete(path):
        if path.with_suffix(".mapped").exists():
            return Archive(path, writes=False)
        return Archive(path, writes=False, log=path.with_suffix(f".{os.getpid()}.log"))
    with contextlib.suppress(FileNotFoundError):
        age = (time.time() if now is None else now) - path.stat().st_mtime
        if age < _UNFINISHED_S:
            return None
    # A new archive is checked again by the first JVM that maps it.
    _remove(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(directory, os.W_OK):
        return None
    _prune(directory, path)
    return Archive(path, writes=True)


def check(archive: Archive) -> bool:
    """After the JVM started: ``False`` when it refused the archive it was given to map; that archive is
    then removed and its key marked, so later sessions neither map it nor write it again. The first JVM to
    map an archive logs where its classes came from; once one came from the archive, it is marked as
    mapping and later JVMs do not log."""
    if archive.log is None:
        return True
    try:
        loaded = archive.log.read_text(errors="replace")
    except OSError:
        loaded = ""
    with contextlib.suppress(OSError):
        archive.log.unlink()
    if _FROM_ARCHIVE in loaded:
        with contextlib.suppress(OSError):
            archive.path.with_suffix(".mapped").touch()
        return True
    with contextlib.suppress(OSError):
        archive.path.with_suffix(".refused").touch()
    _remove(archive.path)
    return False
