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
