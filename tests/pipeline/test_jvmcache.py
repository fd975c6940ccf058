"""The driver JVM's class archive: which archive a new JVM maps or writes, and the fallbacks when one is
stale, unfinished or refused (no JVM started here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from regroup_pipeline import jvmcache
from regroup_pipeline.jvmcache import ARCHIVE_MAGIC, Archive


def _setup(root: Path) -> tuple[Path, dict[str, str]]:
    """A Spark home with two jars and a Java runtime with its libjvm, as the environment names them."""
    spark_home = root / "spark"
    (spark_home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "scala-library.jar"):
        (spark_home / "jars" / name).write_bytes(b"jar")
    java_home = root / "jdk"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("#!/bin/sh\n")
    (java_home / "lib" / "server").mkdir(parents=True)
    (java_home / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
    env = {"JAVA_HOME": str(java_home), "XDG_CACHE_HOME": str(root / "cache"), "PATH": ""}
    return spark_home, env


def _complete(path: Path) -> None:
    path.write_bytes(ARCHIVE_MAGIC.to_bytes(4, "little") + b"\0" * 60)


def test_the_first_jvm_writes_the_archive_and_the_next_maps_it(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    first = jvmcache.plan(spark_home, {}, env=env)
    assert first is not None
    assert first.writes
    assert first.path.parent == jvmcache.archive_dir(env)
    assert f"-XX:ArchiveClassesAtExit={first.path}" in first.java_options
    _complete(first.path)
    second = jvmcache.plan(spark_home, {}, env=env)
    assert second is not None
    assert second.path == first.path
    assert not second.writes
    assert f"-XX:SharedArchiveFile={first.path}" in second.java_options


def test_a_changed_jar_runtime_or_user_option_names_another_archive(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    base = jvmcache.plan(spark_home, {}, env=env)
    assert base is not None
    _complete(base.path)
    other_options = jvmcache.plan(spark_home, {"spark.driver.extraJavaOptions": "-Dx=1"}, env=env)
    other_memory = jvmcache.plan(spark_home, {"spark.driver.memory": "3g"}, env=env)
    (spark_home / "jars" / "spark-core.jar").write_bytes(b"a newer jar")
    other_jars = jvmcache.plan(spark_home, {}, env=env)
    libjvm = Path(env["JAVA_HOME"]) / "lib" / "server" / "libjvm.so"
    libjvm.write_bytes(b"another build")
    other_runtime = jvmcache.plan(spark_home, {}, env=env)
    stale = [other_options, other_memory, other_jars, other_runtime]
    assert all(a is not None and a.writes for a in stale)
    assert len({base.path, *(a.path for a in stale if a is not None)}) == 5


def test_an_unfinished_archive_is_left_alone_until_old(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    archive = jvmcache.plan(spark_home, {}, env=env)
    assert archive is not None
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    # What a JVM still writing the archive (or one killed while writing it) leaves: no header yet.
    archive.path.write_bytes(b"\0" * 64)
    written = archive.path.stat().st_mtime
    assert jvmcache.plan(spark_home, {}, env=env, now=written + 5) is None
    again = jvmcache.plan(spark_home, {}, env=env, now=written + 3600)
    assert again == Archive(archive.path, writes=True)
    assert not archive.path.exists()


def test_the_first_jvm_to_map_an_archive_logs_where_its_classes_came_from(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    archive = jvmcache.plan(spark_home, {}, env=env)
    assert archive is not None
    _complete(archive.path)
    mapped = jvmcache.plan(spark_home, {}, env=env)
    assert mapped is not None
    assert not mapped.writes
    assert mapped.log is not None
    assert f"-Xlog:class+load=info:file={mapped.log}:none" in mapped.java_options
    mapped.log.write_text(
        "java.lang.Object source: shared objects file\n"
        "org.apache.spark.SparkContext source: shared objects file (top)\n"
    )
    assert jvmcache.check(mapped)
    assert not mapped.log.exists()
    assert jvmcache.plan(spark_home, {}, env=env) == Archive(archive.path, writes=False)


def test_an_archive_the_jvm_refused_is_removed_and_not_written_again(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    archive = jvmcache.plan(spark_home, {}, env=env)
    assert archive is not None
    _complete(archive.path)
    mapped = jvmcache.plan(spark_home, {}, env=env)
    assert mapped is not None
    assert mapped.log is not None
    # A JVM that could not map the archive loads Spark's classes from their jars.
    mapped.log.write_text("org.apache.spark.SparkContext source: file:/spark/jars/spark-core.jar\n")
    assert not jvmcache.check(mapped)
    assert not archive.path.exists()
    assert not mapped.log.exists()
    assert jvmcache.plan(spark_home, {}, env=env) is None


def test_a_writing_jvm_is_not_checked(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    archive = jvmcache.plan(spark_home, {}, env=env)
    assert archive is not None
    assert archive.writes
    assert archive.log is None
    assert jvmcache.check(archive)


def test_a_cache_path_that_java_options_would_split_adds_nothing(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    assert jvmcache.plan(spark_home, {}, env={**env, "XDG_CACHE_HOME": str(tmp_path / "my cache")}) is None


@pytest.mark.parametrize(
    ("conf", "extra_env"),
    [
        ({"spark.driver.extraJavaOptions": "-Xshare:off"}, {}),
        ({"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/elsewhere.jsa"}, {}),
        ({}, {"JAVA_TOOL_OPTIONS": "-XX:ArchiveClassesAtExit=/elsewhere.jsa"}),
        ({}, {"REGROUP_JVM_ARCHIVE": "0"}),
        ({}, {"SPARK_DIST_CLASSPATH": "/opt/hadoop/jars/*"}),
    ],
)
def test_the_users_own_class_sharing_or_opting_out_adds_nothing(
    tmp_path: Path, conf: dict[str, str], extra_env: dict[str, str]
) -> None:
    spark_home, env = _setup(tmp_path)
    assert jvmcache.plan(spark_home, conf, env={**env, **extra_env}) is None


def test_a_class_path_directory_with_files_adds_nothing(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    assert jvmcache.plan(spark_home, {}, env={**env, "SPARK_CONF_DIR": str(conf_dir)}) is not None
    (conf_dir / "spark-defaults.conf").write_text("")
    assert jvmcache.plan(spark_home, {}, env={**env, "SPARK_CONF_DIR": str(conf_dir)}) is None
    assert jvmcache.plan(spark_home, {"spark.driver.extraClassPath": str(conf_dir)}, env=env) is None


def test_no_java_adds_nothing(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    assert jvmcache.plan(spark_home, {}, env={**env, "JAVA_HOME": str(tmp_path / "none")}) is None


def test_archives_of_other_setups_beyond_the_newest_few_are_removed(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    directory = jvmcache.archive_dir(env)
    directory.mkdir(parents=True)
    old = []
    for i in range(4):
        path = directory / f"driver-old{i}.jsa"
        _complete(path)
        os.utime(path, (1000.0 + i, 1000.0 + i))
        old.append(path)
    archive = jvmcache.plan(spark_home, {}, env=env)
    assert archive is not None
    assert archive.writes
    assert sorted(p.name for p in directory.glob("*.jsa")) == ["driver-old2.jsa", "driver-old3.jsa"]


def test_the_users_java_options_come_after_the_archives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regroup_pipeline.session import with_class_archive

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("REGROUP_JVM_ARCHIVE", raising=False)
    settings = {"spark.driver.extraJavaOptions": "-Dgiven=1"}
    archive = with_class_archive(settings)
    if archive is None:
        pytest.skip("no class archive for this setup (a conf directory on the class path, or no java)")
    options = settings["spark.driver.extraJavaOptions"]
    assert options.startswith(archive.java_options)
    assert options.endswith(" -Dgiven=1")


_SESSION = """
import sys
from regroup_pipeline.session import build_session
spark = build_session("local[1]", kafka=False, log_level="ERROR")
print(spark.range(5).count(), spark.sparkContext._jvm.java.lang.System.getProperty("java.vm.info"))
"""


def test_a_session_starts_without_the_archive_the_jvm_refuses(tmp_path: Path) -> None:
    """A damaged archive under the right name: the JVM runs without it, and it is removed."""
    import subprocess
    import sys

    from regroup_pipeline.session import _spark_home

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("REGROUP_JVM_ARCHIVE", None)
    archive = jvmcache.plan(_spark_home(), {"spark.driver.memory": _driver_memory()}, env=env)
    if archive is None:
        pytest.skip("no class archive for this setup (a conf directory on the class path, or no java)")
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    archive.path.write_bytes(ARCHIVE_MAGIC.to_bytes(4, "little") + os.urandom(1 << 16))
    done = subprocess.run(
        [sys.executable, "-c", _SESSION], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "5"
    assert not archive.path.exists()
    assert archive.path.with_suffix(".refused").exists()


def _driver_memory() -> str:
    from regroup_pipeline.session import _local_driver_memory

    return _local_driver_memory()


def test_a_new_archive_under_a_known_key_is_checked_again(tmp_path: Path) -> None:
    spark_home, env = _setup(tmp_path)
    archive = jvmcache.plan(spark_home, {}, env=env)
    assert archive is not None
    _complete(archive.path)
    archive.path.with_suffix(".mapped").touch()
    archive.path.unlink()
    again = jvmcache.plan(spark_home, {}, env=env)
    assert again == Archive(archive.path, writes=True)
    assert not archive.path.with_suffix(".mapped").exists()
    _complete(archive.path)
    mapped = jvmcache.plan(spark_home, {}, env=env)
    assert mapped is not None
    assert mapped.log is not None
