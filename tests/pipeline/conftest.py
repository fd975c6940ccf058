"""Fixtures of the pipeline tests: one local SparkSession, one broker, one churn scenario, and the tables
computed once from each input (Spark's Kafka source and the Python Data Source)."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("pyspark") is None:
    # Without the 'spark' extra there is nothing to test here.
    collect_ignore_glob = ["test_*.py"]


def _reap() -> None:
    """Collect PySpark's abandoned result sockets now, silently (see ``support.SPARK_SOCKETS``), rather
    than let the garbage collector close them during whatever test runs next."""
    from .support import SPARK_SOCKET_REPR

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", f"unclosed {SPARK_SOCKET_REPR}", ResourceWarning)
        gc.collect()


@pytest.fixture(autouse=True)
def _reap_spark_sockets() -> Iterator[None]:
    yield
    _reap()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from regroup_pipeline.session import build_session

    session = build_session(
        "local[2]",
        app_name="regroup-pipeline-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        log_level="ERROR",
    )
    yield session
    session.stop()
    _reap()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from regroup import refkafka

    from .brokers import BROKER, start_broker

    if BROKER == "kafka" and (reason := refkafka.skip_reason()) is not None:
        pytest.skip(reason)
    b = start_broker(tmp_path_factory.mktemp("broker"))
    yield b
    b.stop()


@pytest.fixture(scope="session")
def scenario(broker: Any) -> Iterator[Any]:
    """The churn scenario, run by real clients in a subprocess (which keeps g-rr's members alive until
    the end of the session)."""
    from .scenario import Scenario

    worker = Path(__file__).with_name("scenario.py")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(worker.parent.parent), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.scenario", broker.bootstrap_servers, str(broker.data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=worker.parent.parent,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(30)
        raise AssertionError(f"the scenario failed (exit code {proc.returncode}); see its stderr above")
    try:
        yield Scenario.from_json(line)
    finally:
        proc.stdin.close()
        proc.stdout.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="session")
def regroup_copy(scenario: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenario's topics copied into a regroup-layout data directory by ``regroup.log``."""
    from . import scenario as sc

    target = tmp_path_factory.mktemp("regroup-layout") / "data"
    sc.copy_to_regroup_layout(
        scenario.data_dir, target, ["__consumer_offsets", *sc.ALL_TOPICS], sc.TOPIC_CONFIGS
    )
    return target


@pytest.fixture(scope="session")
def regroup_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running three-node regroup cluster with the workload of :mod:`.clusters` done
    (:class:`~.clusters.ClusterData`)."""
    from regroup.testing import Cluster

    from .clusters import run_workload

    data_dir = tmp_path_factory.mktemp("regroup-cluster")
    with Cluster(nodes=3, data_dir=data_dir) as cluster:
        yield run_workload(cluster, data_dir)


@pytest.fixture(scope="session")
def kafka_tables(spark: Any, scenario: Any) -> dict[str, list[dict[str, Any]]]:
    from regroup_pipeline.inputs import TimeWindow, from_kafka

    from .support import compute_tables

    window = TimeWindow(now_ms=scenario.snapshot_ms)
    return compute_tables(from_kafka(spark, scenario.bootstrap, window))


@pytest.fixture(scope="session")
def datadir_tables(spark: Any, scenario: Any, regroup_copy: Path) -> dict[str, list[dict[str, Any]]]:
    from regroup_pipeline.inputs import TimeWindow, from_datadir

    from .support import compute_tables

    window = TimeWindow(now_ms=scenario.snapshot_ms)
    return compute_tables(from_datadir(spark, [str(regroup_copy)], window))


@pytest.fixture(scope="session")
def settled(kafka_tables: Any, datadir_tables: Any) -> None:
    """Depend on this before changing the cluster: both sets of batch tables are computed by then."""


os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
