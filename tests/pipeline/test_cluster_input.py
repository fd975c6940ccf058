"""The pipeline over a regroup cluster: its nodes' data directories, read together (each partition's
replicas once), give the tables of its Kafka listeners through Spark's Kafka source."""

from __future__ import annotations

from typing import Any

import pytest

from .clusters import PARTITIONS, RECORDS
from .support import SPARK_SOCKETS, compute_tables
from .test_tables import _comparable

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]


def test_the_nodes_data_directories_give_the_tables_of_the_kafka_source(
    spark: Any, regroup_cluster: Any
) -> None:
    from regroup_pipeline.inputs import TimeWindow, from_datadir, from_kafka

    window = TimeWindow(now_ms=regroup_cluster.snapshot_ms)
    kafka = _comparable(compute_tables(from_kafka(spark, regroup_cluster.bootstrap, window)))
    dirs = _comparable(
        compute_tables(from_datadir(spark, [str(d) for d in regroup_cluster.node_dirs], window))
    )
    assert set(kafka) == set(dirs)
    for name in kafka:
        assert dirs[name] == kafka[name], name
    groups = {r["group"] for r in kafka["offsets"]}
    assert groups == {"cl-done", "cl-behind"}
    # Each commit once: cl-done's members committed every 20 records on their partitions.
    assert len(kafka["offsets"]) == len(
        {
            (r["group"], r["topic"], r["partition"], r["record_offset"], r["record_partition"])
            for r in kafka["offsets"]
        }
    )
    per_partition = RECORDS // PARTITIONS
    for group, consumed in (("cl-done", RECORDS), ("cl-behind", RECORDS // 2)):
        now = [r for r in kafka["lag"] if r["group"] == group and r["is_current"]]
        assert sum(r["committed_offset"] for r in now) == consumed, group
        assert sum(r["lag"] for r in now) == per_partition * len(now) - consumed, group
    assert len({r["generation"] for r in kafka["rebalances"] if r["group"] == "cl-done"}) >= 3
