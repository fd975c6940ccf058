"""Helpers: run the jobs and bring their (small) tables into Python with timestamps as epoch ms."""

from __future__ import annotations

from typing import Any, Final

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from regroup_pipeline import jobs
from regroup_pipeline.inputs import Inputs
from regroup_pipeline.runner import persist_inputs, unpersist_inputs

# PySpark reads collected results from a local socket it leaves to the garbage collector ("The socket
# will be automatically closed when garbage-collected", pyspark/util.py); the ResourceWarning that
# follows is Spark's, not ours. Only unclosed TCP sockets are ignored: connected to loopback, or already
# disconnected by the JVM (then the kernel reports the local address as 0.0.0.0 and no peer). No ":" in
# the pattern: pytest splits warning filters on it.
SPARK_SOCKET_REPR: Final = (
    r"<socket.socket fd=\d+, family=2, type=1, proto=6, "
    r"laddr=\('(127\.0\.0\.1|0\.0\.0\.0)', \d+\)(, raddr=\('127\.0\.0\.1', \d+\))?>"
)
SPARK_SOCKETS: Final = pytest.mark.filterwarnings(
    rf"ignore:Exception ignored in. {SPARK_SOCKET_REPR}:pytest.PytestUnraisableExceptionWarning"
)


def rows(df: DataFrame) -> list[dict[str, Any]]:
    """Every row as a dict, top-level timestamps as epoch milliseconds, in a stable order."""
    cols = [
        F.unix_millis(F.col(f.name)).alias(f.name) if isinstance(f.dataType, TimestampType) else F.col(f.name)
        for f in df.schema.fields
    ]
    out = [r.asDict(recursive=True) for r in df.select(*cols).collect()]
    return sorted(out, key=repr)


# Retention 1 minute and a 10-year horizon: every offset that can expire shows up in expiring_offsets, and
# every partition with a data-loss forecast is at risk; stuck after 1 ms: every partition whose committed
# offset stopped moving while records arrived is stuck.
SHORT_RETENTION: Final = {"retention_minutes": 1, "horizon_ms": 10 * 365 * 86_400_000, "stuck_after_ms": 1}


def compute_tables(inputs: Inputs) -> dict[str, list[dict[str, Any]]]:
    """Every table (with :data:`SHORT_RETENTION`, plus ``expiring_offsets_default`` with the defaults: 7
    days' retention, 24 hours' horizon)."""
    inputs = persist_inputs(inputs)
    tables = jobs.compute_all(inputs, **SHORT_RETENTION)
    out = {name: rows(df) for name, df in tables.items()}
    out["expiring_offsets_default"] = rows(jobs.expiring_offsets(inputs))
    tables.unpersist()
    unpersist_inputs(inputs)
    return out


def by_key(table: list[dict[str, Any]], *key: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in table:
        k = tuple(row[c] for c in key)
        assert k not in out, f"duplicate key {k}"
        out[k] = row
    return out
