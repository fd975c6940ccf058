"""Building the SparkSession: local by default, any cluster with a master URL, the Kafka connector at the
running Spark version, UTC timestamps, and ``format("regroup")`` registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Final

from pyspark.sql import SparkSession

from regroup_pipeline.connector import kafka_jars_conf, kafka_package
from regroup_pipeline.datasource import register

__all__ = ["DEFAULT_MASTER", "build_session", "kafka_package"]

DEFAULT_MASTER: Final = "local[*]"


def _local_cores(master: str) -> int | None:
    if not master.startswith("local"):
        return None
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    cores = inside.split(",")[0].strip()
    return os.cpu_count() or 1 if cores == "*" else int(cores)


def _local_driver_memory() -> str:
    """A quarter of the machine's memory, 1–8 GiB: in local mode the driver's JVM runs every task, and
    Spark's default of 1 GiB makes the cached commit history of a few million commits spill to disk."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{min(8, max(1, total // 4 // 2**30))}g"


def build_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "regroup-pipeline",
    kafka: bool = True,
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession for the pipeline. ``kafka`` puts Spark's Kafka connector on the classpath (resolved
    by :mod:`regroup_pipeline.connector` into regroup's cache on first use, then taken from there; raises
    :class:`~regroup_pipeline.connector.ConnectorError` when it cannot be); ``conf`` entries override
    everything set here."""
    active = SparkSession.getActiveSession()
    if active is not None:
        # Inside an application that already runs Spark (a notebook, a test session): use its session.
        register(active)
        return active
    # Python workers must run the interpreter that has pyarrow and regroup_pipeline installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Bigger Arrow batches for mapInArrow: the decoders' cost per batch is mostly fixed numpy overhead.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    }
    cores = _local_cores(master)
    if cores is not None:
        settings["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        settings["spark.ui.enabled"] = "false"
        settings["spark.driver.memory"] = _local_driver_memory()
    user = dict(conf or {})
    if kafka:
        user.update(kafka_jars_conf(user))
        # Spark's default (AdminClient) offset reader skips internal topics like __consumer_offsets.
        settings["spark.sql.streaming.kafka.useDeprecatedOffsetFetching"] = "true"
    settings.update(user)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
