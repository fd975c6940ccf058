"""``format("regroup")``, the Python Data Source, over data directories written by regroup's log."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from regroup_pipeline import logdir
from regroup_pipeline.datasource import read_local
from regroup_pipeline.synthetic import MemberSpec, group_metadata, offset_commit

from .datadirs import Batch, DataDir, Marker, build
from .support import SPARK_SOCKETS, rows

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

NOW = 1_795_000_000_000


@pytest.fixture(scope="module")
def datadir(tmp_path_factory: pytest.TempPathFactory) -> DataDir:
    rng = random.Random(11)
    writes: list[Batch | Marker] = []
    for i in range(40):
        p = i % 3
        recs = [
            (
                NOW - 100_000 + i * 1000 + j,
                rng.randbytes(8) if j % 5 else None,
                rng.randbytes(rng.randint(0, 3000)),
            )
            for j in range(rng.randint(1, 20))
        ]
        writes.append(
            Batch(
                "events",
                p,
                recs,
                compression=rng.choice([0, 1, 3, 4]),
                headers=[("h", b"v")] if i % 4 == 0 else [],
            )
        )
    writes.append(Batch("events", 0, [(NOW, b"t", b"in a transaction")], transactional=True))
    writes.append(Marker("events", 0, True, NOW))
    co = [offset_commit("g", "events", p, 5, commit_ts=NOW - 50_000 + p) for p in range(3)]
    co.append(
        group_metadata("g", 1, [MemberSpec("m", ["events"], {"events": [0, 1, 2]})], state_ts=NOW - 60_000)
    )
    writes.append(Batch("__consumer_offsets", 1, [(NOW - 40_000, k, v) for k, v in co]))
    return build(
        tmp_path_factory.mktemp("ds") / "data",
        {"events": 3, "empty": 2, "__consumer_offsets": 2},
        writes,
        NOW,
    )


def _read(spark: Any, path: Path, **options: str) -> Any:
    reader = spark.read.format("regroup").option("path", str(path))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_schema_is_the_kafka_sources(spark: Any, datadir: DataDir) -> None:
    df = _read(spark, datadir.path)
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"


def test_every_record_once_whatever_the_split_size(spark: Any, datadir: DataDir) -> None:
    expected = sorted((p, o, ts, k, v) for p, o, ts, k, v in datadir.records("events"))
    for split in ("67108864", "4096"):
        got = rows(_read(spark, datadir.path, topics="events", maxSplitBytes=split))
        assert (
            sorted((r["partition"], r["offset"], r["timestamp"], r["key"], r["value"]) for r in got)
            == expected
        )
    parts = logdir.list_partitions([datadir.path], topics=["events"])
    assert len(logdir.plan_splits(parts, 4096)) > len(parts)


def test_log_end_offsets_count_transaction_markers(datadir: DataDir) -> None:
    ends = {
        (e.topic, e.partition): e for e in map(logdir.partition_end, logdir.list_partitions([datadir.path]))
    }
    last = max(o for p, o, *_ in datadir.records("events") if p == 0)
    assert ends[("events", 0)].log_end_offset == last + 2  # the commit marker takes an offset
    assert ends[("empty", 0)].log_end_offset == 0
    assert logdir.topic_partition_counts([datadir.path])["empty"] == 2


def test_the_replicas_of_a_clusters_nodes_are_read_once_from_the_longest_copy(
    spark: Any, tmp_path: Path
) -> None:
    # Three nodes' log.dirs: every partition replicated on each; node 2's copy of events-0 lags behind
    # (a follower that has not fetched the last batches yet) and node 3 holds events-1 alone.
    batches = [
        Batch("events", i % 2, [(NOW + i * 10 + j, None, b"v%d-%d" % (i, j)) for j in range(3)])
        for i in range(8)
    ]
    lagging = [b for b in batches if b.partition == 0][:2] + [b for b in batches if b.partition == 1]
    roots = [
        build(tmp_path / "node-1", {"events": 2}, batches, NOW).path,
        build(tmp_path / "node-2", {"events": 2}, lagging, NOW).path,
        build(tmp_path / "node-3", {"events": 2}, [b for b in batches if b.partition == 1], NOW).path,
    ]
    parts = logdir.list_partitions(roots, topics=["events"])
    assert [(p.topic, p.partition, Path(p.path).parent.name) for p in parts] == [
        ("events", 0, "node-1"),
        ("events", 1, "node-1"),
    ]
    # The longest copy wins wherever it is: read the lagging node first.
    first = logdir.list_partitions([roots[1], roots[0]], topics=["events"])
    assert {(p.partition, Path(p.path).parent.name) for p in first} == {(0, "node-1"), (1, "node-2")}
    got = rows(
        spark.read.format("regroup")
        .option("path", ",".join(map(str, roots)))
        .option("topics", "events")
        .load()
    )
    assert sorted((r["partition"], r["offset"], r["value"]) for r in got) == sorted(
        (p, o, v)
        for p, o, _ts, _k, v in build(tmp_path / "one", {"events": 2}, batches, NOW).records("events")
    )


def test_options_filter_topics_payload_time_and_record_types(spark: Any, datadir: DataDir) -> None:
    topics = {r["topic"] for r in rows(_read(spark, datadir.path, topicPattern="(?!__).*").select("topic"))}
    assert topics == {"events"}
    meta = rows(
        _read(spark, datadir.path, topics="events", payload="false").select("key", "value", "headers")
    )
    assert all(r["key"] is None and r["value"] is None and r["headers"] is None for r in meta)
    until = NOW - 90_000
    early = rows(_read(spark, datadir.path, topics="events", until=str(until)).select("timestamp"))
    assert early
    assert all(r["timestamp"] <= until for r in early)
    assert len(early) == sum(1 for *_, ts, _k, _v in datadir.records("events") if ts <= until)
    groups = rows(_read(spark, datadir.path, topics="__consumer_offsets", recordTypes="2").select("key"))
    assert len(groups) == 1
    assert groups[0]["key"][:2] == b"\x00\x02"


def test_read_local_gives_the_rows_spark_reads_and_stops_past_its_limit(spark: Any, datadir: DataDir) -> None:
    options = {"path": str(datadir.path), "topicPattern": "(?!__).*", "payload": "false", "until": str(NOW)}
    columns = ["topic", "partition", "offset", "timestamp"]
    local = read_local(options).select(columns)
    by_spark = _read(spark, datadir.path, **{k: v for k, v in options.items() if k != "path"}).select(
        *columns
    )
    expected = sorted((r["topic"], r["partition"], r["offset"], r["timestamp"]) for r in rows(by_spark))
    stamps = local.column("timestamp").cast("int64").to_pylist()
    got = sorted(
        (t, p, o, ts // 1000)
        for t, p, o, ts in zip(*(local.column(c).to_pylist() for c in columns[:3]), stamps, strict=True)
    )
    assert got == expected
    assert len(expected) == sum(1 for *_, ts, _k, _v in datadir.records("events") if ts <= NOW)
    assert read_local(options, limit=len(expected)) is not None
    assert read_local(options, limit=len(expected) - 1) is None
    decoded = read_local(
        {"path": str(datadir.path), "topics": "__consumer_offsets", "decode": "offset_commits"}
    )
    assert decoded.num_rows == 3
    assert decoded.schema.names == [
        f.name for f in _read(spark, datadir.path, decode="offset_commits").schema
    ]


def test_streaming_reads_new_records_in_micro_batches(spark: Any, datadir: DataDir, tmp_path: Path) -> None:
    source = (
        spark.readStream.format("regroup").option("path", str(datadir.path)).option("topics", "events").load()
    )
    query = (
        source.writeStream.format("memory")
        .queryName("regroup_stream_test")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
        first = spark.sql("select count(*) from regroup_stream_test").first()[0]
        assert first == len(datadir.records("events"))
        from regroup.log import LogManager
        from regroup.protocol.record_batch import Record, build_batch

        logs = LogManager(datadir.path)
        logs.load()
        plog = logs.partition("events", 2)
        assert plog is not None
        plog.append(build_batch([Record(0, NOW + 1, b"new", b"record")]), now_ms=NOW, validate=False)
        end = plog.log_end_offset
        logs.close()
        query.processAllAvailable()
        got = spark.sql(
            "select partition, offset, value from regroup_stream_test where key = X'6E6577'"
        ).collect()
        assert [(r[0], r[1], bytes(r[2])) for r in got] == [(2, end - 1, b"record")]
        assert spark.sql("select count(*) from regroup_stream_test").first()[0] == first + 1
        progress = json.loads(query.lastProgress["sources"][0]["endOffset"])
        assert progress["events"]["2"] == end
    finally:
        query.stop()


def test_reads_the_brokers_own_data_directory(spark: Any, scenario: Any, regroup_copy: Path) -> None:
    """The same bytes, read where the broker keeps them and where regroup's log copied them."""
    columns = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    kafka_dir = rows(_read(spark, scenario.data_dir, topicPattern="orders|payments|audit").select(*columns))
    copy = rows(_read(spark, regroup_copy, topicPattern="orders|payments|audit").select(*columns))
    assert kafka_dir == copy
    assert len([r for r in copy if r["topic"] == "orders"]) == 35


def test_matches_the_kafka_source_record_for_record(spark: Any, scenario: Any, regroup_copy: Path) -> None:
    from regroup_pipeline.inputs import kafka_raw
    from regroup_pipeline.kafka_client import SimpleKafkaClient

    with SimpleKafkaClient(scenario.bootstrap) as client:
        counts = {t: n for t, n in client.partition_counts().items() if t in ("orders", "payments", "audit")}
    kafka = rows(
        kafka_raw(spark, scenario.bootstrap, counts).where(
            f"timestamp <= timestamp_millis({scenario.snapshot_ms})"
        )
    )
    mine = rows(_read(spark, regroup_copy, topics="orders,payments,audit"))
    assert mine == kafka
    assert any(r["headers"] for r in mine)
    # Spark's Kafka source gives records without headers null headers, as the data source does.
    assert any(r["headers"] is None for r in mine)


def test_offset_history_is_computed_per_partition_across_segments(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from regroup_pipeline.decode import HISTORY_ARROW_SCHEMA

    rng = random.Random(3)
    writes: list[Batch | Marker] = []
    for i in range(300):
        group = f"group-{rng.randint(0, 7)}"
        # Coordinators place a group by its name; here two partitions take half the groups each.
        partition = int(group[-1]) % 2
        commits = [
            offset_commit(group, rng.choice(["a", "b"]), p, i * 10 + p, commit_ts=NOW + i) for p in range(3)
        ]
        writes.append(Batch("__consumer_offsets", partition, [(NOW + i, k, v) for k, v in commits]))
    data = build(
        tmp_path_factory.mktemp("history") / "data",
        {"__consumer_offsets": 2},
        writes,
        NOW,
        topic_configs={"__consumer_offsets": {"internal.segment.bytes": "8192"}},
    )
    parts = logdir.list_partitions([data.path])
    assert all(len(p.segments) > 3 for p in parts)

    commits = _read(spark, data.path, decode="offset_commits")
    order = Window.partitionBy("group", "topic", "partition").orderBy("record_partition", "record_offset")
    expected = commits.withColumn("valid_until", F.lead("record_timestamp").over(order)).withColumn(
        "is_current", F.lead("record_offset").over(order).isNull()
    )
    for split in ("8192", "67108864"):
        history = _read(spark, data.path, decode="offset_history", maxSplitBytes=split, minPartitions="4")
        assert history.columns == [*HISTORY_ARROW_SCHEMA.names]
        got = sorted(rows(history), key=lambda r: (r["record_partition"], r["record_offset"]))
        assert got == sorted(rows(expected), key=lambda r: (r["record_partition"], r["record_offset"]))
        assert len(got) == 900


def _splits(sizes: dict[int, list[int]]) -> list[logdir.Split]:
    """Splits of partitions of ``t`` in log order: per partition, its segments' sizes."""
    out = []
    for partition, segments in sizes.items():
        start = 0
        for size in segments:
            out.append(logdir.Split("t", partition, f"{partition}.log", start, start + size, 0))
            start += size
    return out


def test_read_tasks_are_even_and_a_multiple_of_the_cores() -> None:
    from regroup_pipeline.datasource import _spread, _task_count

    def sizes(packed: list[Any]) -> list[int]:
        return [sum(s.end - s.start for s in p.task.splits) for p in packed]

    ten = _splits({p: [61] for p in range(10)})
    # 610 bytes within the size limit on two cores: two tasks of five segments each, not five of two
    # (a lone task in the last round) nor ten of one (each task of a Python data source costs Spark).
    assert _task_count(610, 512, 2) == 2
    packed = _spread([[s] for s in ten], 2)
    assert sizes(packed) == [305, 305]
    assert sorted((s for p in packed for s in p.task.splits), key=ten.index) == ten
    for p in packed:
        assert list(p.task.splits) == sorted(p.task.splits, key=ten.index)  # log order within a task
    # At most 100 bytes a task: seven tasks, eight for two cores; never more tasks than pieces.
    assert _task_count(610, 100, 2) == 8
    assert len(_spread([[s] for s in ten], 8)) == 8
    assert len(_spread([[s] for s in ten[:3]], 8)) == 3
    assert _spread([], 2) == []


def test_whole_partition_tasks_are_even_and_fill_every_core() -> None:
    from regroup_pipeline.datasource import _pack_partitions

    def tasks(sizes: dict[int, list[int]], target: int, slots: int) -> list[list[tuple[int, int]]]:
        packed = _pack_partitions(_splits(sizes), target, slots)
        return [[(s.partition, s.start) for s in p.task.splits] for p in packed]

    # Ten equal partitions, two cores, a target of two partitions: ten tasks of one, not five of two
    # (which would leave one core idle in the last round).
    ten = {p: [61] for p in range(10)}
    got = tasks(ten, 64, 2)
    assert sorted(got) == [[(p, 0)] for p in range(10)]
    # A task keeps each partition whole and in log order; sizes spread largest first.
    uneven = {0: [50, 50], 1: [10], 2: [30, 30], 3: [40], 4: [20]}
    got = tasks(uneven, 100, 2)
    assert len(got) == 4
    assert sorted(s for t in got for s in t) == sorted((s.partition, s.start) for s in _splits(uneven))
    for task in got:
        for partition in {p for p, _ in task}:
            starts = [start for p, start in task if p == partition]
            assert starts == sorted(starts)
            assert len(starts) == len(uneven[partition])
    # 230 bytes, a target of 100: three tasks, four for two cores; 100 | 60 | 40 | 20 + 10.
    assert [sum(sum(uneven[p]) for p in {p for p, _ in t}) for t in got] == [100, 60, 40, 30]
    # Never more tasks than partitions; nothing to read, no task.
    assert len(tasks({0: [500], 1: [500]}, 10, 4)) == 2
    assert tasks({}, 10, 2) == []


@pytest.mark.parametrize("small", [False, True])
def test_commits_read_in_pieces_equal_the_general_decoders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: bool
) -> None:
    # Commits gathered from many pieces into few batches, a compressed batch and a group metadata record
    # among them: the same rows as the numpy decoders give, in the same order, whatever the piece size.
    from regroup_pipeline import datasource, decode

    if small:
        monkeypatch.setattr(datasource, "_PIECE_BYTES", 2048)
        monkeypatch.setattr(datasource, "_BATCH_ROWS", 37)
    rng = random.Random(5)
    writes: list[Batch | Marker] = []
    for i in range(300):
        recs = [
            (
                NOW - 10**6 + i * 100 + j,
                *offset_commit(
                    f"g{rng.randint(0, 9)}",
                    "events",
                    j,
                    i * 10 + j,
                    commit_ts=NOW - 10**6 + i * 100,
                    metadata="m" * rng.choice([0, 5, 900]),
                ),
            )
            for j in range(rng.randint(1, 12))
        ]
        if i % 50 == 7:
            member = MemberSpec("m", ["events"], {"events": [0]})
            recs.append((NOW - 10**6 + i * 100, *group_metadata("g1", i, [member], state_ts=NOW - 10**6)))
        writes.append(Batch("__consumer_offsets", 0, recs, compression=1 if i in (40, 41, 222) else 0))
    data = build(tmp_path / "data", {"__consumer_offsets": 1}, writes, NOW)
    options = {"path": str(data.path), "topics": "__consumer_offsets", "until": str(NOW - 10**6 + 25_000)}
    raw = read_local({**options, "recordTypes": "0,1"})
    expected = decode.decode_offset_commits(raw.combine_chunks().to_batches()[0])
    got = read_local({**options, "recordTypes": "0,1", "decode": "offset_commits"})
    assert expected.num_rows > 1000
    assert got.to_pylist() == expected.to_pylist()
    if small:  # gathered into batches of about 37 rows
        assert len(got.to_batches()) > expected.num_rows // 60
