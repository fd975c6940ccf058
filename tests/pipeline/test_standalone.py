"""``regroup pipeline all`` on a real Spark standalone cluster: a master and two workers started from
pyspark's own jars as separate processes on loopback, each worker with one core and its own work directory.

The executors must not find ``regroup_pipeline`` in the driver's Python environment: the pipeline has to
ship it (:mod:`regroup_pipeline.pyfiles`). Spark starts every Python worker — the executors' and the ones
the driver's JVM starts to plan the ``format("regroup")`` data source — with the interpreter the driver
names in ``PYSPARK_PYTHON`` (it travels with each Python function; the workers' own environment does not
choose it). For the cluster run that is a wrapper script: the venv's interpreter with ``-S``, so that no
``.pth`` file is processed — regroup is an editable install, a ``.pth`` line putting ``src/`` on the path
— and ``PYTHONPATH`` extended by the venv's site-packages only, where pyspark, pyarrow and numba are. The
cluster processes and the driver get no ``PYTHONPATH`` of their own and run outside the repository, so
that wrapper can import ``regroup_pipeline`` only from what Spark ships (the test checks that it cannot
otherwise). The wrapper records the directory it starts in: executors start in their work directories.

The tables must equal those of the same command in local mode (run in the tests' own ``local[2]``
session), from a data directory and from a three-node regroup cluster through Spark's Kafka source.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from regroup.runtime.ports import free_ports

from .support import SPARK_SOCKETS

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

_START_TIMEOUT_S: Final = 120
_RUN_TIMEOUT_S: Final = 300
_TABLES: Final = (
    "offsets",
    "lag",
    "rebalances",
    "rebalance_frequency",
    "expiring_offsets",
    "assignment_health",
    "lag_trend",
    "retention_risk",
    "stuck_partitions",
    "member_commits",
    "group_summary",
    "consumer_group_members",
)


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without a ``PYTHONPATH`` (it could name ``src/``), with Spark bound to
    loopback."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.update(extra)
    return env


@dataclass
class Standalone:
    url: str
    webui: int
    work_dirs: list[Path]
    python: Path  # PYSPARK_PYTHON for the driver: the wrapper without regroup on its path
    python_log: Path  # one line per Python start by the wrapper: the directory it started in

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=10) as response:
            status: dict[str, Any] = json.load(response)
            return status


class _Processes:
    """Processes in their own process groups, stopped group by group."""

    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, cmd: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )
        self.procs.append((proc, log))
        return proc

    def check_running(self) -> None:
        for proc, log in self.procs:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"{proc.args!r} exited with {proc.returncode}:\n{tail}")

    def stop(self) -> None:
        # The workers' executors and their Python daemons are in the workers' process groups.
        for proc, _ in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGTERM)
        for proc, _ in reversed(self.procs):
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[Any]) -> None:
    """Stop ``proc``'s process group: SIGTERM, SIGKILL to what is left after 30 s."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while (proc.poll() is None or _group_alive(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Wrapper:
    python: Path
    log: Path


@pytest.fixture
def without_regroup(tmp_path: Path) -> Wrapper:
    """The Python for the cluster's Python workers (see the module's docstring)."""
    base = tmp_path / "python"
    base.mkdir()
    wrapper = Wrapper(base / "python-without-regroup", base / "started-in.log")
    site_packages = sysconfig.get_paths()["purelib"]
    wrapper.python.write_text(
        "#!/bin/sh\n"
        f'echo "$PWD" >> "{wrapper.log}"\n'
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site_packages}" exec "{sys.executable}" -S "$@"\n'
    )
    wrapper.python.chmod(0o755)
    return wrapper


@pytest.fixture
def standalone(tmp_path: Path, without_regroup: Wrapper) -> Iterator[Standalone]:
    import pyspark

    from regroup_pipeline.connector import _java

    java = _java()
    assert java is not None, "Spark needs Java: set JAVA_HOME or put java on the PATH"
    spark_home = Path(pyspark.__file__).parent
    base = tmp_path / "cluster"
    base.mkdir()
    # Spark's launch scripts would set SPARK_SCALA_VERSION; the workers need it to build executors' command
    # lines from SPARK_HOME's jars.
    (core,) = (spark_home / "jars").glob("spark-core_*.jar")
    scala = core.name.removeprefix("spark-core_").split("-")[0]
    env = _clean_env(SPARK_HOME=str(spark_home), SPARK_SCALA_VERSION=scala)
    jvm = [java, "-Xmx256m", "-cp", str(spark_home / "jars" / "*")]
    # Every port at once and below the ephemeral range: a port drawn alone and released could be drawn
    # again for another of these processes before the first one binds it.
    port, webui, *worker_uis = free_ports(4, lasting=True)
    url = f"spark://127.0.0.1:{port}"
    work_dirs = [base / f"worker-{i}" for i in (1, 2)]
    processes = _Processes()
    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        processes.start(
            [*jvm, *master, "--webui-port", str(webui)],
            base / "master.log",
            env,
            base,
        )
        for i, (work_dir, worker_ui) in enumerate(zip(work_dirs, worker_uis, strict=True), 1):
            work_dir.mkdir()
            worker = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
            worker += ["--webui-port", str(worker_ui), "--cores", "1", "--memory", "1g"]
            processes.start(
                [*jvm, *worker, "--work-dir", str(work_dir)],
                base / f"worker-{i}.log",
                env,
                base,
            )
        cluster = Standalone(url, webui, work_dirs, without_regroup.python, without_regroup.log)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            processes.check_running()
            try:
                if cluster.status().get("aliveworkers") == 2:
                    break
            except OSError:
                pass  # the master's web UI is not up yet
            assert time.monotonic() < deadline, f"the workers did not register within {_START_TIMEOUT_S}s"
            time.sleep(0.2)
        yield cluster
    finally:
        processes.stop()
        # Each executor's directory holds copies of the Kafka connector's jars (about 60 MB).
        for work_dir in work_dirs:
            shutil.rmtree(work_dir, ignore_errors=True)


def _start_all(master: str, source: list[str], out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """``regroup pipeline all`` into ``out``, its output in ``out``.log."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "regroup.cli", "pipeline", "all", *source, "--master", master]
    with out.with_suffix(".log").open("w") as log:
        return subprocess.Popen(
            [*cmd, "--output", str(out)],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=out.parent,
            start_new_session=True,  # stopped with its JVM by _stop_group
        )


def _finish(proc: subprocess.Popen[str], out: Path) -> None:
    try:
        proc.wait(_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
    log = out.with_suffix(".log").read_text(errors="replace")
    assert proc.returncode == 0, f"{proc.args!r}: exit {proc.returncode}\n{log[-5000:]}"


def _table(path: Path) -> list[str]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

    return sorted(repr(row) for row in pq.read_table(path).to_pylist())


def test_python_without_regroup_cannot_import_the_pipeline(without_regroup: Wrapper, tmp_path: Path) -> None:
    # The control for the cluster test below: what Spark ships is the only way to regroup_pipeline.
    def run(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(without_regroup.python), "-c", code],
            capture_output=True,
            text=True,
            env=_clean_env(),
            cwd=tmp_path,
            timeout=60,
            check=False,
        )

    third_party = run("import pyspark, pyarrow, pandas, numpy, numba, crc32c, cramjam")
    assert third_party.returncode == 0, third_party.stderr
    for module in ("regroup_pipeline", "regroup"):
        missing = run(f"import {module}")
        assert f"No module named '{module}'" in missing.stderr, missing.stderr


def test_all_on_a_standalone_cluster_gives_the_tables_of_local_mode(
    spark: Any,
    standalone: Standalone,
    scenario: Any,
    regroup_copy: Path,
    regroup_cluster: Any,
    tmp_path: Path,
) -> None:
    from regroup_pipeline.cli import main

    common = ["--lag-samples", "5", "--retention-minutes", "1", "--horizon", "3650d", "--stuck-after", "1ms"]
    # As the local session: the float sums of lag_trend depend on how many partitions add them up.
    common += ["--conf", "spark.sql.shuffle.partitions=2"]
    until = ["--until", str(scenario.snapshot_ms), *common]
    cluster_until = ["--until", str(regroup_cluster.snapshot_ms), *common]
    sources = {
        "datadir": ["--data-dir", str(regroup_copy), *until],
        # Spark's Kafka source from a three-node regroup cluster, every partition replicated on each node.
        "cluster": ["--bootstrap-server", regroup_cluster.bootstrap, *cluster_until],
    }
    for name, source in sources.items():
        _run_on_cluster(standalone, source, tmp_path / "on-cluster" / name)
        # The same command in local mode, in this process's session (local[2], every core of the machine
        # CI runs on): a second JVM of its own would only add its start and its cold code generation.
        assert main(["all", *source, "--output", str(tmp_path / "local" / name)]) == 0, name
    for name in sources:
        rows = 0
        for table in _TABLES:
            expected = _table(tmp_path / "local" / name / table)
            assert _table(tmp_path / "on-cluster" / name / table) == expected, f"{name}: {table}"
            rows += len(expected)
        assert rows > (100 if name == "datadir" else 50), f"{name}: the tables should not be empty"
        group = "cl-done" if name == "cluster" else "g-churn"
        assert group in (tmp_path / "on-cluster" / name / "report.html").read_text()


def _run_on_cluster(standalone: Standalone, source: list[str], out: Path) -> None:
    """Run ``all`` on the cluster with the Python that cannot import regroup, and check that its tasks,
    Python ones among them, ran on executors of both workers."""
    from regroup_pipeline.pyfiles import executor_zip

    apps_before = {app["id"] for app in standalone.status()["completedapps"]}
    _finish(_start_all(standalone.url, source, out, _clean_env(PYSPARK_PYTHON=str(standalone.python))), out)
    # The master moves the application to its completed ones when the driver's disconnection reaches it.
    deadline = time.monotonic() + 60
    while not (apps := [a for a in standalone.status()["completedapps"] if a["id"] not in apps_before]):
        assert time.monotonic() < deadline, "the master lists no completed application of the run"
        time.sleep(0.2)
    (app,) = apps
    assert app["state"] == "FINISHED"
    # An executor's directory is <work dir>/<application id>/<executor id>.
    executor_dirs = [d for work in standalone.work_dirs for d in (work / app["id"]).iterdir()]
    assert len(executor_dirs) == 2, executor_dirs
    # Executors fetch an application's files when they start running its tasks.
    shipped = executor_zip().name
    assert all((d / shipped).is_file() for d in executor_dirs), f"an executor did not fetch {shipped}"
    started_in = set(standalone.python_log.read_text().splitlines())
    assert started_in & {str(d) for d in executor_dirs}, "no Python worker ran on an executor"
