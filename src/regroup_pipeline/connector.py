"""Spark's Kafka connector on the classpath: its coordinates (always pyspark's exact version), resolving it
and its transitive jars into regroup's cache, and the one-line :class:`ConnectorError` when that fails.

Why regroup resolves the connector itself instead of listing it in ``spark.jars.packages``: Spark resolves
packages inside its JVM at startup with a resolver chain that looks in ``~/.m2/repository`` first and
trusts a POM it finds there even when the jar beside it is missing (many Java builds leave POMs without
jars behind). The download of that jar then fails, the JVM exits, and Python only learns that the "Java
gateway process exited". A ``spark.jars.ivySettings`` file alone would fix the chain, but a failure would
still surface as a JVM stack trace and a dead gateway. So, before Spark starts:

- the connector is resolved with the Ivy that ships in pyspark's jars (nothing to install: no Maven),
  run in its own short JVM whose output regroup reads, so a failure becomes one line naming the artifact
  and the reason;
- its only resolver is Maven Central (plus the ``spark.jars.repositories`` a user names), never the local
  Maven cache; downloads go through the Ivy cache Spark itself uses (``spark.jars.ivy``, default
  ``~/.ivy2.5.2``), so jars Spark already downloaded there are reused without the network;
- the jars are copied into ``$XDG_CACHE_HOME/regroup/spark-jars/<connector>/`` (default ``~/.cache``)
  with a marker listing them, written last; while every listed jar is there nothing is resolved again, so
  later runs need neither the network nor the Ivy cache;
- Spark gets the jars as plain ``spark.jars`` paths, which cannot fail to resolve at startup, in local
  mode and on a cluster alike (the driver serves them to the executors).

A user's conf wins (:func:`kafka_jars_conf`): a Kafka connector already in ``spark.jars.packages`` or
``spark.jars`` is used as given, and ``spark.jars.ivySettings`` replaces regroup's resolver settings.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit
from xml.sax.saxutils import quoteattr

__all__ = [
    "CONNECTOR_ARTIFACT",
    "MAVEN_CENTRAL",
    "ConnectorError",
    "cache_dir",
    "kafka_jars_conf",
    "kafka_package",
    "resolve",
    "spark_ivy_home",
]

CONNECTOR_GROUP: Final = "org.apache.spark"
# Spark 4 is Scala 2.13 only.
CONNECTOR_ARTIFACT: Final = "spark-sql-kafka-0-10_2.13"
MAVEN_CENTRAL: Final = "https://repo1.maven.org/maven2/"

# Any Scala version: a user who lists a connector picks it.
_CONNECTOR_PREFIX: Final = "spark-sql-kafka-0-10_"
_MARKER: Final = ".complete"
_TIMEOUT_S: Final = 900
# A short-lived JVM: start fast rather than run fast.
_SHORT_JVM: Final = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# What Spark leaves out of the packages it resolves: Scala and Spark's own modules are in pyspark's jars.
_SPARK_MODULES: Final = (
    "catalyst|common-utils|core|graphx|kvstore|launcher|mllib|mllib-local|network-common|network-shuffle"
    "|repl|sketch|sql|sql-api|streaming|tags|unsafe|variant"
)


class ConnectorError(RuntimeError):
    """Spark's Kafka connector could not be put on the classpath; the message is one line naming the
    artifact and the reason."""


def kafka_package(spark_version: str | None = None) -> str:
    """Maven coordinates of Spark's Kafka source for this Spark version (the connector's version must
    equal Spark's exactly)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return f"{CONNECTOR_GROUP}:{CONNECTOR_ARTIFACT}:{spark_version}"


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def spark_ivy_home(conf: Mapping[str, str] | None = None) -> Path:
    """The Ivy directory Spark uses for packages: ``spark.jars.ivy``, else Spark 4's ``~/.ivy2.5.2``."""
    configured = (conf or {}).get("spark.jars.ivy")
    return Path(configured).expanduser() if configured else Path.home() / ".ivy2.5.2"


def cache_dir(coordinate: str) -> Path:
    """Where regroup keeps the jars of ``coordinate`` (``group:artifact:version``)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    group, artifact, version = coordinate.split(":")
    return base / "regroup" / "spark-jars" / f"{group}_{artifact}-{version}"


def _cached_jars(directory: Path, coordinate: str) -> list[Path] | None:
    try:
        marker = json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("coordinate") != coordinate:
        return None
    jars = marker.get("jars")
    if not isinstance(jars, list) or not jars:
        return None
    paths = [directory / str(name) for name in jars]
    return paths if all(p.is_file() for p in paths) else None


def _names_connector(package: str) -> bool:
    parts = package.split(":")
    return len(parts) >= 2 and parts[1].startswith(_CONNECTOR_PREFIX)


def kafka_jars_conf(conf: Mapping[str, str], spark_version: str | None = None) -> dict[str, str]:
    """The conf entries that put the Kafka connector on Spark's classpath, given the user's ``conf``:
    ``spark.jars`` with the user's jars first, then the connector's (resolved by :func:`resolve` with the
    user's ``spark.jars.ivySettings``, ``spark.jars.ivy`` and ``spark.jars.repositories``); nothing when
    ``spark.jars.packages`` or ``spark.jars`` already names a Kafka connector."""
    jars = _split(conf.get("spark.jars"))
    if any(_names_connector(p) for p in _split(conf.get("spark.jars.packages"))):
        return {}
    if any(_CONNECTOR_PREFIX in j.rsplit("/", 1)[-1] for j in jars):
        return {}
    resolved = resolve(
        kafka_package(spark_version),
        ivy_settings=conf.get("spark.jars.ivySettings") or None,
        ivy_home=spark_ivy_home(conf) if conf.get("spark.jars.ivy") else None,
        repositories=_split(conf.get("spark.jars.repositories")),
    )
    return {"spark.jars": ",".join([*jars, *(str(p) for p in resolved)])}


def resolve(
    coordinate: str,
    *,
    ivy_settings: str | None = None,
    ivy_home: Path | None = None,
    repositories: Sequence[str] = (),
) -> list[Path]:
    """The jars of ``coordinate`` and its runtime dependencies, from regroup's cache, else resolved into
    it. ``ivy_settings`` (a file or URL) replaces regroup's resolvers (Maven Central after
    ``repositories``); ``ivy_home`` holds the Ivy cache downloads go through. Safe against concurrent
    callers; raises :class:`ConnectorError`."""
    directory = cache_dir(coordinate)
    jars = _cached_jars(directory, coordinate)
    if jars is not None:
        return jars
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _locked(directory / ".lock"):
            jars = _cached_jars(directory, coordinate)
            if jars is None:
                jars = _resolve_into(directory, coordinate, ivy_settings, ivy_home, repositories)
    except OSError as exc:
        raise ConnectorError(f"cannot resolve Spark's Kafka connector {coordinate}: {exc}") from exc
    return jars


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _ivy_jar() -> Path | None:
    """The Ivy jar among Spark's own jars (``$SPARK_HOME/jars``, else pyspark's)."""
    spark_home = os.environ.get("SPARK_HOME")
    if not spark_home:
        import pyspark

        spark_home = str(Path(pyspark.__file__).parent)
    found = sorted(Path(spark_home, "jars").glob("ivy-*.jar"))
    return found[-1] if found else None


def _settings_xml(cache: Path, resolution_cache: Path, repositories: Sequence[str]) -> str:
    # "central" is also the name of Spark's Maven Central resolver: what Spark downloaded into the same
    # Ivy cache is found there as is.
    central = f'<ibiblio name="central" m2compatible="true" root={quoteattr(MAVEN_CENTRAL)}/>'
    if repositories:
        users = "".join(
            f'<ibiblio name="repository-{i}" m2compatible="true" root={quoteattr(root)}/>'
            for i, root in enumerate(repositories, 1)
        )
        resolvers, default = f'<chain name="regroup" returnFirst="true">{users}{central}</chain>', "regroup"
    else:
        resolvers, default = central, "central"
    return f"""\
<ivysettings>
  <settings defaultResolver="{default}"/>
  <caches defaultCacheDir={quoteattr(str(cache))} resolutionCacheDir={quoteattr(str(resolution_cache))}
          lockStrategy="artifact-lock-nio"/>
  <resolvers>{resolvers}</resolvers>
</ivysettings>
"""


def _module_xml(coordinate: str) -> str:
    group, artifact, version = coordinate.split(":")
    return f"""\
<ivy-module version="2.0">
  <info organisation="regroup" module="spark-connector" revision={quoteattr(version)}/>
  <configurations><conf name="default"/></configurations>
  <dependencies>
    <dependency org={quoteattr(group)} name={quoteattr(artifact)} rev={quoteattr(version)}
                conf="default->default(runtime)"/>
    <exclude org="org.scala-lang" module="scala-library"/>
    <exclude org="org.apache.spark" module="spark-({_SPARK_MODULES})_.*" matcher="regexp"/>
  </dependencies>
</ivy-module>
"""


def _resolve_into(
    directory: Path,
    coordinate: str,
    ivy_settings: str | None,
    ivy_home: Path | None,
    repositories: Sequence[str],
) -> list[Path]:
    def fail(reason: str) -> ConnectorError:
        return ConnectorError(f"cannot resolve Spark's Kafka connector {coordinate}: {reason}")

    java = _java()
    if java is None:
        raise fail("no Java runtime found (set JAVA_HOME or put java on the PATH)")
    ivy_jar = _ivy_jar()
    if ivy_jar is None:
        raise fail("Spark's jars hold no Ivy jar (ivy-*.jar) to resolve it with")
    (directory / _MARKER).unlink(missing_ok=True)
    for stale in directory.glob("*.jar"):
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="regroup-ivy-") as tmp:
        work = Path(tmp)
        module = work / "ivy.xml"
        module.write_text(_module_xml(coordinate))
        cmd = [java, *_SHORT_JVM, "-cp", str(ivy_jar), "org.apache.ivy.Main"]
        if ivy_settings is None:
            home = ivy_home or spark_ivy_home()
            settings = work / "ivysettings.xml"
            settings.write_text(_settings_xml(home / "cache", work / "resolution", repositories))
            cmd += ["-settings", str(settings)]
        else:
            cmd += ["-settings", ivy_settings]
            if ivy_home is not None:
                cmd += ["-cache", str(ivy_home / "cache")]
        pattern = directory / "[organisation]_[artifact]-[revision](-[classifier]).[ext]"
        cmd += ["-ivy", str(module), "-confs", "default", "-retrieve", str(pattern)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise fail(f"Ivy did not finish within {_TIMEOUT_S} s") from exc
    output = done.stdout + "\n" + done.stderr
    if done.returncode != 0:
        raise fail(_failure_reason(output) or f"Ivy exited with status {done.returncode}")
    jars = sorted(p.name for p in directory.glob("*.jar"))
    group, artifact, version = coordinate.split(":")
    if f"{group}_{artifact}-{version}.jar" not in jars:
        raise fail(_failure_reason(output) or f"Ivy retrieved no {artifact}-{version}.jar")
    marker = directory / f".{_MARKER}.{os.getpid()}.tmp"
    marker.write_text(json.dumps({"coordinate": coordinate, "jars": jars}))
    marker.replace(directory / _MARKER)
    return [directory / name for name in jars]


_UNRESOLVED: Final = re.compile(r"^\s*::\s+(\S+#\S+?): (.+?)\s*$")
_FAILED_DOWNLOAD: Final = re.compile(r"^\s*::\s+(\S+#\S+!\S+)\s*$")
_DOWNLOAD_OUTCOME: Final = re.compile(
    r"^\s*\[(NOT FOUND|FAILED)\s*\] (\S+#\S+!\S+?)(?:: (.+?))?(?: \(\d+ms\))?\s*$"
)
_SERVER_ERROR: Final = re.compile(r"Server access error at url (\S+) \((.+)\)\s*$")
_JAVA_ERROR: Final = re.compile(
    r"^\s*(?:Exception in thread \S+ )?((?:[\w$]+\.)+[\w$]*(?:Exception|Error)\b.*)$"
)


def _failure_reason(output: str) -> str | None:
    """One line from Ivy's output: what was not resolved or downloaded, and why."""
    lines = output.splitlines()
    problems: list[str] = []
    outcomes: dict[str, str] = {}
    for line in lines:
        if m := _DOWNLOAD_OUTCOME.match(line):
            outcomes.setdefault(m.group(2), m.group(3) or m.group(1).lower())
    for line in lines:
        if m := _FAILED_DOWNLOAD.match(line):
            why = outcomes.get(m.group(1))
            problems.append(f"download failed: {m.group(1)}" + (f" ({why})" if why else ""))
        elif m := _UNRESOLVED.match(line):
            problems.append(f"{m.group(1)} {m.group(2)}")
    causes: list[str] = []
    for line in lines:
        if m := _SERVER_ERROR.search(line):
            cause = f"{urlsplit(m.group(1)).netloc}: {m.group(2)}"
            if cause not in causes:
                causes.append(cause)
    if not problems:
        errors = [m.group(1) for line in lines if (m := _JAVA_ERROR.match(line))]
        if not errors:
            return None
        problems = errors[:1]
    return "; ".join(dict.fromkeys(problems)) + (f" ({'; '.join(causes)})" if causes else "")
