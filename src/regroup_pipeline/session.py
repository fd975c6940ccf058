"""Building the SparkSession: local by default, any cluster with a master URL, the Kafka connector at the
running Spark version, UTC timestamps, ``format("regroup")`` registered, and on a cluster the pipeline's
own code shipped to the executors (:mod:`regroup_pipeline.pyfiles`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pyspark import SparkContext
from pyspark.sql import SparkSession

from regroup_pipeline import jvmcache
from regroup_pipeline.connector import kafka_jars_conf, kafka_package
from regroup_pipeline.datasource import register
from regroup_pipeline.pyfiles import executor_zip

__all__ = [
    "DEFAULT_MASTER",
    "ONE_SHOT_JAVA_OPTIONS",
    "build_session",
    "kafka_package",
    "ship_code",
    "with_class_archive",
]

DEFAULT_MASTER: Final = "local[*]"

# A local driver JVM in a process that runs one job and exits compiles with C1 only: that job's queries run
# once, and C2's compiling costs more than its faster code wins back. In a local ``all`` over 10M commits
# the JVM's compilations took 38 s (java.ci.totalTime, summed over its compile threads) of a first run
# of 40 s, and 13-17 s of every later run of ~20 s, as new plans keep making methods hot, on the cores the
# tasks run on. C1 alone sizes the code cache for itself (48 MB), which one ``all`` fills, and the JVM
# then stops compiling: hence the size.
ONE_SHOT_JAVA_OPTIONS: Final = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def _spark_home() -> Path:
    """Where Spark's launcher takes its jars: ``SPARK_HOME``, else the pyspark package (pip's layout)."""
    import pyspark

    home = os.environ.get("SPARK_HOME")
    return Path(home) if home else Path(pyspark.__file__).parent


def _prepend_java_options(settings: dict[str, str], options: str) -> None:
    """Put ``options`` before the driver's Java options in ``settings``: the JVM takes the last of options
    that repeat, so the user's own still win."""
    given = settings.get("spark.driver.extraJavaOptions", "")
    settings["spark.driver.extraJavaOptions"] = f"{options} {given}".strip()


def with_class_archive(settings: dict[str, str]) -> jvmcache.Archive | None:
    """Add the driver's class archive (:mod:`regroup_pipeline.jvmcache`) to ``settings``' Java options,
    before the user's own (the JVM takes the last of options that repeat); returns it."""
    archive = jvmcache.plan(_spark_home(), settings)
    if archive is not None:
        _prepend_java_options(settings, archive.java_options)
    return archive


def _local_cores(master: str) -> int | None:
    if not master.startswith("local"):
        return None
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    cores = inside.split(",")[0].strip()
    return os.cpu_count() or 1 if cores == "*" else int(cores)


def _is_local(master: str) -> bool:
    """Tasks run in the driver's JVM and Python workers it starts itself (``local-cluster`` has separate
    executors, so it is not local here)."""
    return master == "local" or master.startswith("local[")


def ship_code(spark: SparkSession) -> Path | None:
    """Unless the master is local, add the zip of the code executors import (:func:`executor_zip`) to the
    application's Python files, once; returns it. Executors then need only the pipeline's third-party
    dependencies installed, not regroup. Call it before registering data sources or UDFs: a Python
    function takes the list of Python files as it is when the function is wrapped for the JVM."""
    sc = spark.sparkContext
    if _is_local(sc.master or ""):
        return None
    zipped = executor_zip()
    if not any(f.rsplit("/", 1)[-1] == zipped.name for f in sc.listFiles):
        sc.addPyFile(str(zipped))
    return zipped


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
    one_shot: bool = False,
) -> SparkSession:
    """A SparkSession for the pipeline. ``kafka`` puts Spark's Kafka connector on the classpath (resolved
    by :mod:`regroup_pipeline.connector` into regroup's cache on first use, then taken from there; raises
    :class:`~regroup_pipeline.connector.ConnectorError` when it cannot be); ``conf`` entries override
    everything set here. On a cluster the pipeline's code goes to the executors with the application
    (:func:`ship_code`). ``one_shot``: the process runs one job and exits (a ``regroup pipeline`` command
    other than ``stream``), so a local driver JVM it starts compiles for a short life
    (:data:`ONE_SHOT_JAVA_OPTIONS`, before the user's own Java options, which win where they repeat)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        # Inside an application that already runs Spark (a notebook, a test session): use its session.
        ship_code(active)
        register(active)
        return active
    # Python workers run this interpreter, which has pyarrow, numba and regroup_pipeline installed, unless
    # PYSPARK_PYTHON names another (on a cluster: a path that exists on the workers).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Bigger Arrow batches for mapInArrow: the decoders' cost per batch is mostly fixed numpy overhead.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # PySpark 4 records the Python call site of every Column function for error messages: five JVM
        # round trips per call, a third of the ~20,000 that building the plans of ``all`` costs.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Spark keeps the classes it generates for a query's code in a cache of 100 entries; one ``all``
        # generates ~400, so a second run in the session (a notebook, every micro-batch of ``stream``)
        # compiled them all again. A class is ~3 KB of bytecode.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # Spark cannot size a Python data source's output (it takes it as 8 EiB), so every join with a table
        # derived from one looked like a join with a huge table, and the optimizer added runtime Bloom
        # filters to it: a job each to build them, and filters sized for a million keys shipped in every
        # task (a 12 MiB task binary in ``stuck_partitions``). The pipeline's joins of large inputs are
        # broadcast joins already.
        "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
    }
    cores = _local_cores(master)
    if cores is not None:
        settings["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        settings["spark.ui.enabled"] = "false"
        # Without a UI, the plan text that every query and every adaptive re-plan posts to the listeners
        # is read by nobody; Spark's default ("formatted") numbers and lists every operator to write it,
        # a tenth of the driver's JVM time in a profile of ``all``.
        settings["spark.sql.ui.explainMode"] = "simple"
        # The tables kept in memory are built and read back in one process with memory to spare: building
        # compressed columns (Spark tries each column's encodings on every batch) was a third of the
        # tasks' JVM time in a profile of ``all``.
        settings["spark.sql.inMemoryColumnarStorage.compressed"] = "false"
        settings["spark.driver.memory"] = _local_driver_memory()
        # Python workers forked with numpy, pyarrow, numba and the compiled passes already loaded.
        settings["spark.python.daemon.module"] = "regroup_pipeline.pydaemon"
    user = dict(conf or {})
    if kafka:
        user.update(kafka_jars_conf(user))
        # Spark's default (AdminClient) offset reader skips internal topics like __consumer_offsets.
        settings["spark.sql.streaming.kafka.useDeprecatedOffsetFetching"] = "true"
    settings.update(user)
    # When this process starts the driver's JVM: with the class archive of this setup.
    starts_jvm = SparkContext._gateway is None and not os.environ.get("PYSPARK_GATEWAY_PORT")
    if starts_jvm and one_shot and cores is not None:
        _prepend_java_options(settings, ONE_SHOT_JAVA_OPTIONS)
    archive = with_class_archive(settings) if starts_jvm else None
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if archive is not None:
        jvmcache.check(archive)
    spark.sparkContext.setLogLevel(log_level)
    # Before registering the data source: its Python function carries the Python files added by then.
    ship_code(spark)
    register(spark)
    return spark
