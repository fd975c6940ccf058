"""Spark's Kafka connector on the classpath (``regroup_pipeline.connector``): a POM without its jar in
``~/.m2`` cannot break it, a resolved connector works offline, the user's conf wins, and ``regroup
pipeline`` says in one line which artifact failed and why.

Sessions run in subprocesses (a Spark JVM's classpath is fixed when it starts) under a home of their own
whose ``~/.m2/repository`` holds slf4j-api 2.0.16's POM without its jar (a dependency of the connector of
Spark 4.0) — the trap Spark's own resolver falls into. Their Ivy cache is a copy of this machine's minus
slf4j-api, so slf4j-api really is resolved (about 70 kB from Maven Central) and, when the machine's cache
is warm, nothing else is downloaded."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from regroup_pipeline.connector import (
    CONNECTOR_ARTIFACT,
    ConnectorError,
    cache_dir,
    kafka_jars_conf,
    kafka_package,
    spark_ivy_home,
)

pytestmark = pytest.mark.spark

SLF4J_POM_ONLY = "org/slf4j/slf4j-api/2.0.16/slf4j-api-2.0.16.pom"
SLF4J_JAR = "org.slf4j_slf4j-api-2.0.16.jar"
CONNECTOR_JAR = f"org.apache.spark_{CONNECTOR_ARTIFACT}-{kafka_package().rsplit(':', 1)[1]}.jar"
KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]

# Builds a session, loads a Kafka relation (this needs the connector's classes but no broker), and prints
# the columns and Spark's jars as one JSON line.
SESSION_SCRIPT = """
import json, sys
from regroup_pipeline.session import build_session
spark = build_session("local[1]", conf=json.loads(sys.argv[1]), log_level="ERROR")
df = (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1")
      .option("subscribe", "t").load())
print(json.dumps({"columns": df.columns, "jars": spark.conf.get("spark.jars", "")}))
spark.stop()
"""


def _home_with_pom_only_slf4j(root: Path) -> Path:
    home = root / "home"
    pom = home / ".m2" / "repository" / SLF4J_POM_ONLY
    pom.parent.mkdir(parents=True)
    pom.write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.16</version></project>"
    )
    return home


def _link_or_copy(src: str, dst: str) -> None:
    # Ivy rewrites its metadata files in place, so only jars (which it never rewrites) are shared.
    if src.endswith(".jar"):
        with contextlib.suppress(OSError):  # another file system: copy
            os.link(src, dst)
            return
    shutil.copy2(src, dst)


def _ivy_home_without_slf4j(root: Path) -> Path:
    """A copy of the Ivy cache Spark and regroup use here, without slf4j-api."""
    ivy = root / "ivy"
    cache = ivy / "cache"
    cache.mkdir(parents=True)
    source = spark_ivy_home() / "cache"
    modules = sorted(p for p in source.glob("*/*") if p.is_dir()) if source.is_dir() else []
    for module in modules:
        if (module.parent.name, module.name) != ("org.slf4j", "slf4j-api"):
            shutil.copytree(module, cache / module.parent.name / module.name, copy_function=_link_or_copy)
    return ivy


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, so nothing else takes it): a proxy there is no network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _env(home: Path, *, no_network_via: int | None = None) -> dict[str, str]:
    java_options = [f"-Duser.home={home}"]
    if no_network_via is not None:
        for scheme in ("http", "https"):
            java_options += [f"-D{scheme}.proxyHost=127.0.0.1", f"-D{scheme}.proxyPort={no_network_via}"]
    inherited = os.environ.get("JAVA_TOOL_OPTIONS")
    return {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "JAVA_TOOL_OPTIONS": " ".join([*([inherited] if inherited else []), *java_options]),
        # Each of these JVMs has a home of its own: none would map the class archive it wrote at exit.
        "REGROUP_JVM_ARCHIVE": "0",
    }


def _session(conf: dict[str, str], env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT, json.dumps(conf)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the session failed:\n{done.stderr[-4000:]}"
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_pom_without_its_jar_in_m2_neither_breaks_the_connector_nor_needs_the_network_later(
    tmp_path: Path, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home_with_pom_only_slf4j(tmp_path)
    ivy = _ivy_home_without_slf4j(tmp_path)

    first = _session({"spark.jars.ivy": str(ivy)}, _env(home))
    assert first["columns"] == KAFKA_COLUMNS
    jars = [Path(urlsplit(j).path) for j in str(first["jars"]).split(",")]
    assert {CONNECTOR_JAR, SLF4J_JAR} <= {j.name for j in jars}
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    assert {j.parent for j in jars} == {cache_dir(kafka_package())}

    # Offline, and with an empty Ivy cache: the connector comes from regroup's cache alone.
    empty_ivy = tmp_path / "empty-ivy"
    empty_ivy.mkdir()
    second = _session({"spark.jars.ivy": str(empty_ivy)}, _env(home, no_network_via=closed_port))
    assert second == first
    assert not any(empty_ivy.iterdir())
    shutil.rmtree(home / ".cache")


def _offline_cli(tmp_path: Path, closed_port: int, *conf: str) -> subprocess.CompletedProcess[str]:
    """``regroup pipeline offsets`` from a cluster, with no network and an empty Ivy cache."""
    confs = [arg for c in (f"spark.jars.ivy={tmp_path / 'empty-ivy'}", *conf) for arg in ("--conf", c)]
    return subprocess.run(
        [
            sys.executable, "-m", "regroup_pipeline", "offsets",
            "--bootstrap-server", "127.0.0.1:1", "--master", "local[1]", "--output", str(tmp_path / "out"),
            *confs,
        ],
        capture_output=True,
        text=True,
        env=_env(_home_with_pom_only_slf4j(tmp_path), no_network_via=closed_port),
        timeout=300,
        check=False,
    )  # fmt: skip


def test_the_cli_names_the_artifact_and_the_reason_in_one_line(tmp_path: Path, closed_port: int) -> None:
    done = _offline_cli(tmp_path, closed_port)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"regroup pipeline: cannot resolve Spark's Kafka connector {kafka_package()}: "
        f"org.apache.spark#{CONNECTOR_ARTIFACT};{kafka_package().rsplit(':', 1)[1]} not found "
        "(repo1.maven.org: java.net.ConnectException: Connection refused)"
    ]


def test_the_cli_ends_a_failed_spark_resolution_with_one_line(tmp_path: Path, closed_port: int) -> None:
    """A connector the user lists in spark.jars.packages is Spark's to resolve: when Spark's JVM exits,
    its own report stays above one line from regroup instead of a Python traceback."""
    missing = f"org.apache.spark:{CONNECTOR_ARTIFACT}:0.0.0-missing"
    done = _offline_cli(tmp_path, closed_port, f"spark.jars.packages={missing}")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"regroup pipeline: Spark's JVM exited while starting (spark.jars.packages={missing}); "
        "its output above says why"
    )


def test_the_users_ivy_settings_replace_regroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings that put a Maven cache with a POM-only slf4j-api first, as Spark's default chain does,
    fail the way Spark does — and say so in one line."""
    home = _home_with_pom_only_slf4j(tmp_path)
    ivy = _ivy_home_without_slf4j(tmp_path)
    settings = tmp_path / "ivysettings.xml"
    settings.write_text(f"""\
<ivysettings>
  <settings defaultResolver="chain"/>
  <resolvers>
    <chain name="chain">
      <ibiblio name="local-m2-cache" m2compatible="true" root="{(home / ".m2" / "repository").as_uri()}"/>
      <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
    </chain>
  </resolvers>
</ivysettings>
""")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(ConnectorError) as failed:
        kafka_jars_conf({"spark.jars.ivySettings": str(settings), "spark.jars.ivy": str(ivy)})
    assert str(failed.value) == (
        f"cannot resolve Spark's Kafka connector {kafka_package()}: "
        "download failed: org.slf4j#slf4j-api;2.0.16!slf4j-api.jar (not found)"
    )


def test_a_connector_the_user_names_is_used_as_given() -> None:
    mine = f"org.apache.spark:{CONNECTOR_ARTIFACT}:4.0.0-custom"
    assert kafka_jars_conf({"spark.jars.packages": f"org.example:other:1.0,{mine}"}) == {}
    assert kafka_jars_conf({"spark.jars": f"/opt/jars/{CONNECTOR_ARTIFACT}-4.0.0.jar"}) == {}


def test_the_users_jars_come_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = cache_dir(kafka_package())
    cached.mkdir(parents=True)
    for name in (CONNECTOR_JAR, SLF4J_JAR):
        (cached / name).write_bytes(b"")
    (cached / ".complete").write_text(
        json.dumps({"coordinate": kafka_package(), "jars": [CONNECTOR_JAR, SLF4J_JAR]})
    )
    assert kafka_jars_conf({"spark.jars": "/opt/a.jar,/opt/b.jar"}) == {
        "spark.jars": f"/opt/a.jar,/opt/b.jar,{cached / CONNECTOR_JAR},{cached / SLF4J_JAR}"
    }
