"""Streaming: the pipeline's Structured Streaming mode, and committing a query's progress to a group."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from regroup_pipeline.kafka_client import KafkaClientError, SimpleKafkaClient
from regroup_pipeline.progress import GroupProgressCommitter, commit_progress_to_group, offsets_from_progress

from .support import SPARK_SOCKETS, rows

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]


def _offset_fetch(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import-time read_text
        from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        fetched = admin.list_group_offsets(group).get(group, {})
    finally:
        admin.close()
    return {(tp.topic, tp.partition): om.offset for tp, om in fetched.items() if om.offset >= 0}


def test_offsets_from_progress_reads_kafka_shaped_offsets_only() -> None:
    got = offsets_from_progress(
        ['{"orders":{"0":5,"2":7},"x":{"1":-1}}', '{"logOffset":3}', "not json", '{"payments":{"1":2}}'],
        topics=None,
    )
    assert got == {("orders", 0): 5, ("orders", 2): 7, ("payments", 1): 2}
    assert offsets_from_progress(['{"orders":{"0":5}}', '{"payments":{"1":2}}'], ["payments"]) == {
        ("payments", 1): 2
    }


class _Progress:
    def __init__(self, query_id: str, offsets: dict[str, dict[str, int]]) -> None:
        self.id = query_id
        self.sources = [type("S", (), {"endOffset": json.dumps(offsets)})()]


class _FakeClient:
    def __init__(self) -> None:
        self.commits: list[tuple[str, dict[tuple[str, int], int]]] = []
        self.fail = False

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int], *, metadata: str = "") -> None:
        if self.fail:
            raise KafkaClientError("boom", 15)
        self.commits.append((group, dict(offsets)))

    def close(self) -> None:
        pass


def test_the_listener_commits_only_its_query_and_only_changes_and_survives_errors() -> None:
    client = _FakeClient()
    listener = GroupProgressCommitter("b:1", "grp", query_id="q1", client_factory=lambda _: client)  # type: ignore[arg-type,return-value]
    listener.commit_progress(_Progress("q2", {"t": {"0": 1}}))
    listener.commit_progress(_Progress("q1", {"t": {"0": 1, "1": 4}}))
    listener.commit_progress(_Progress("q1", {"t": {"0": 1, "1": 6}}))
    assert client.commits == [("grp", {("t", 0): 1, ("t", 1): 4}), ("grp", {("t", 1): 6})]
    client.fail = True
    listener.commit_progress(_Progress("q1", {"t": {"0": 2}}))
    assert isinstance(listener.last_error, KafkaClientError)
    client.fail = False
    listener.commit_progress(_Progress("q1", {"t": {"0": 2}}))
    assert client.commits[-1] == ("grp", {("t", 0): 2})


def test_simple_client_commits_in_admin_form_and_reports_errors(scenario: Any, settled: None) -> None:
    with SimpleKafkaClient(scenario.bootstrap) as client:
        assert client.partition_counts(["orders"]) == {"orders": 3}
        assert client.log_end_offsets(["orders"]) == {
            ("orders", p): scenario.end_offsets[("orders", p)] for p in range(3)
        }
        client.commit_offsets("pipeline-admin", {("orders", 0): 3, ("orders", 2): 1}, metadata="m")
        assert _offset_fetch(scenario.bootstrap, "pipeline-admin") == {("orders", 0): 3, ("orders", 2): 1}
        # g-rr has live members: the coordinator refuses admin-form commits to it.
        with pytest.raises(KafkaClientError, match="UNKNOWN_MEMBER_ID"):
            client.commit_offsets("g-rr", {("orders", 0): 0})


def test_commit_progress_to_group_makes_a_spark_query_visible(
    spark: Any, scenario: Any, settled: None, tmp_path: Path
) -> None:
    from regroup_pipeline import jobs
    from regroup_pipeline.inputs import TimeWindow, from_kafka

    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", scenario.bootstrap)
        .option("subscribe", "orders")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = source.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        listener = commit_progress_to_group(query, scenario.bootstrap, "spark-orders")
        query.processAllAvailable()
        deadline = time.monotonic() + 30
        expected = {("orders", p): scenario.end_offsets[("orders", p)] for p in range(3)}
        while _offset_fetch(scenario.bootstrap, "spark-orders") != expected:
            assert time.monotonic() < deadline, listener.last_error
            time.sleep(0.2)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    # Lag tools — and this pipeline — now see the Spark job as an Empty group that is caught up.
    lag = rows(jobs.lag(from_kafka(spark, scenario.bootstrap, TimeWindow()), samples=2))
    current = [r for r in lag if r["group"] == "spark-orders" and r["is_current"]]
    assert len(current) == 3
    assert all(r["lag"] == 0 and r["group_state"] == "Empty" for r in current)


def _stream_tables(output: Path) -> dict[str, list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    out = {}
    for name in ("offsets", "lag", "rebalances", "rebalance_frequency"):
        out[name] = pq.read_table(output / name).to_pylist()
    return out


def test_stream_over_the_data_directory_keeps_tables_current(spark: Any, tmp_path: Path) -> None:
    from regroup_pipeline.streaming import start_stream
    from regroup_pipeline.synthetic import MemberSpec, group_metadata, offset_commit

    from .datadirs import Batch, build

    now = int(time.time() * 1000)
    data = [(now - 60_000 + i, None, b"x") for i in range(10)]
    co = [
        offset_commit("sg", "t", 0, 4, commit_ts=now - 30_000),
        group_metadata("sg", 1, [MemberSpec("m", ["t"], {"t": [0]})], state_ts=now - 40_000),
    ]
    d = build(
        tmp_path / "data",
        {"__consumer_offsets": 1, "t": 1},
        [Batch("t", 0, data), Batch("__consumer_offsets", 0, [(now - 30_000, k, v) for k, v in co])],
        now,
    )
    out = tmp_path / "out"
    query = start_stream(spark, out, tmp_path / "ck", data_dirs=[str(d.path)], trigger_ms=500, lag_samples=3)
    try:
        query.processAllAvailable()
        tables = _stream_tables(out)
        current = [r for r in tables["lag"] if r["is_current"]]
        assert [(r["group"], r["committed_offset"], r["log_end_offset"], r["lag"]) for r in current] == [
            ("sg", 4, 10, 6)
        ]
        assert [(r["group"], r["generation"], r["member_count"]) for r in tables["rebalances"]] == [
            ("sg", 1, 1)
        ]
        # A new commit and a new generation arrive: the next micro-batch updates the tables.
        from regroup.log import LogManager
        from regroup.protocol.record_batch import Record, build_batch

        logs = LogManager(d.path)
        logs.load()
        plog = logs.partition("__consumer_offsets", 0)
        assert plog is not None
        k1, v1 = offset_commit("sg", "t", 0, 10, commit_ts=now)
        k2, v2 = group_metadata("sg", 2, [], state_ts=now)
        plog.append(build_batch([Record(0, now, k1, v1), Record(1, now, k2, v2)]), now_ms=now, validate=False)
        logs.close()
        query.processAllAvailable()
        tables = _stream_tables(out)
        current = [r for r in tables["lag"] if r["is_current"]]
        assert [(r["committed_offset"], r["lag"], r["group_state"]) for r in current] == [(10, 0, "Empty")]
        assert sorted((r["generation"], r["state"]) for r in tables["rebalances"]) == [
            (1, "Stable"),
            (2, "Empty"),
        ]
    finally:
        query.stop()


def test_stream_from_the_cluster_matches_the_batch_tables(
    spark: Any, scenario: Any, kafka_tables: Any, settled: None, tmp_path: Path
) -> None:
    from regroup_pipeline.streaming import start_stream

    from .scenario import GROUPS

    out = tmp_path / "out"
    query = start_stream(
        spark, out, tmp_path / "ck", bootstrap_servers=scenario.bootstrap, trigger_ms=500, lag_samples=3
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    tables = _stream_tables(out)
    scenario_groups = set(GROUPS)
    key = ("group", "incarnation", "generation", "time", "member_count", "joined", "left", "state")
    streamed = sorted(tuple(r[k] for k in key) for r in tables["rebalances"] if r["group"] in scenario_groups)
    batch = sorted(tuple(r[k] for k in key) for r in kafka_tables["rebalances"])
    assert [r[:3] + r[4:] for r in streamed] == [r[:3] + r[4:] for r in batch]
    assert [int(r[3].timestamp() * 1000) for r in streamed] == [r[3] for r in batch]
    current = {
        (r["group"], r["topic"], r["partition"]): r["lag"]
        for r in tables["lag"]
        if r["is_current"] and r["group"] in scenario_groups
    }
    assert current == {
        (r["group"], r["topic"], r["partition"]): r["lag"] for r in kafka_tables["lag"] if r["is_current"]
    }
