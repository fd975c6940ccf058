"""The Python daemon of local sessions (regroup_pipeline.pydaemon): workers forked with the pipeline's
modules and compiled passes loaded, and Spark really starting them from it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("pyspark")

from .support import SPARK_SOCKETS

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

_LOADED = """
import json
import numba
from regroup_pipeline.pydaemon import preload
preload()
from regroup_pipeline import commitscan, offsetkeys
print(json.dumps({
    f"{m.__name__}.{n}": len(f.signatures)
    for m in (commitscan, offsetkeys)
    for n, f in vars(m).items()
    if isinstance(f, numba.core.registry.CPUDispatcher)
}))
"""


def test_preload_loads_every_pass_the_tasks_call() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    for name in (
        "commitscan._walk",
        "commitscan._capacity",
        "commitscan._commit_columns",
        "commitscan._whole_batches_end",
        "commitscan._gather",
        "offsetkeys._fold",
    ):
        assert loaded[f"regroup_pipeline.{name}"] >= 1, name
    # Both callers of the commit pass — segment bytes (the walk) and Arrow keys and values (mapInArrow) —
    # pass addresses and int64 positions: one compiled signature serves them, the one preloaded.
    assert loaded["regroup_pipeline.commitscan._commit_columns"] == 1


def test_local_workers_are_forked_by_the_preloading_daemon(spark: Any) -> None:
    def parent_command(batches: Any) -> Any:  # defined here: pickled by value, not by module name
        import os

        import pyarrow as pa

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode()
        for batch in batches:
            yield pa.RecordBatch.from_pylist([{"command": command}] * batch.num_rows)

    rows = spark.range(0, 4, 1, 2).mapInArrow(parent_command, "command string").collect()
    commands = {row.command for row in rows}
    assert len(rows) == 4
    assert all("-m regroup_pipeline.pydaemon" in command for command in commands), commands


def test_local_workers_import_pyspark_from_its_directory_with_the_daemons_objects_frozen(spark: Any) -> None:
    def worker_state(batches: Any) -> Any:  # defined here: pickled by value, not by module name
        import gc
        import os
        import sys
        import zipimport

        import pyarrow as pa
        import pyspark

        home = os.path.dirname(pyspark.__file__)
        archives = [p for p in sys.path if os.path.isfile(p) and p.startswith(home)]
        zips = [k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
        state = {"pyspark": pyspark.__file__, "archives": archives + zips, "frozen": gc.get_freeze_count()}
        for batch in batches:
            yield pa.RecordBatch.from_pylist([{"state": json.dumps(state)}] * batch.num_rows)

    states = [
        json.loads(row.state)
        for row in spark.range(0, 2, 1, 2).mapInArrow(worker_state, "state string").collect()
    ]
    assert len(states) == 2
    for state in states:
        assert ".zip" not in state["pyspark"], state  # pip's PySpark, not the copy in pyspark.zip
        assert state["archives"] == [], state  # nothing for each task's invalidate_caches to read again
        assert state["frozen"] > 10_000, state  # numpy, pyarrow, numba and the pipeline's modules


def test_only_archives_of_the_installed_pyspark_with_their_modules_in_directories_are_dropped(
    tmp_path: Any,
) -> None:
    import zipfile

    from regroup_pipeline.pydaemon import _without_installed_archives

    site = tmp_path / "site"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "jars").mkdir()
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "py4j").mkdir()
    (site / "py4j" / "__init__.py").write_text("")

    def archive(path: Any, *members: str) -> str:
        with zipfile.ZipFile(path, "w") as z:
            for member in members:
                z.writestr(member, "")
        return str(path)

    lib = site / "pyspark" / "python" / "lib"
    pyspark_zip = archive(lib / "pyspark.zip", "pyspark/__init__.py", "pyspark/sql/__init__.py")
    py4j_zip = archive(lib / "py4j-src.zip", "py4j/__init__.py")
    jar = archive(site / "pyspark" / "jars" / "spark-core.jar", "org/apache/spark/SparkContext.class")
    only_here = archive(lib / "extra.zip", "pyspark/__init__.py", "somewhere_else/__init__.py")
    outside = archive(tmp_path / "user.zip", "pyspark/__init__.py")
    path = [outside, pyspark_zip, py4j_zip, jar, only_here, str(site)]

    assert _without_installed_archives(path) == [outside, only_here, str(site)]
    # No PySpark in a plain directory (a Spark distribution's python/lib): every archive stays.
    assert _without_installed_archives(path[:-1]) == path[:-1]
