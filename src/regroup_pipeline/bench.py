"""``regroup pipeline bench``: how fast the pipeline decodes
``__consumer_offsets`` and runs the ``all`` job.

It writes a synthetic data directory (offset commits of 1000 groups, 10 records per commit batch as a
coordinator writes one batch per OffsetCommit request, five generations per group, and data topics), then
measures on one SparkSession:

- decode: raw records (from Parquet) → offset commits with the vectorised ``mapInArrow`` decoder, and with a
  plain row-at-a-time Python UDF (pickled rows, regroup's codecs) as the baseline; the data source reading
  and decoding the segments; and, as the bound for the data source, Spark taking batches that are already
  decoded from a Python data source (the transfer alone); and the Spark tasks that decode the segments
  writing the commit history to Parquet themselves (the first step of ``all``);
- end to end: the ``all`` job over the data directory (Python Data Source read, decode, every table
  written as Parquet, the HTML report).

It prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

__all__ = ["build_dataset", "run_bench"]

GROUPS: Final = 1000
TOPICS: Final = 20
PARTITIONS: Final = 10
CO_PARTITIONS: Final = 10
RECORDS_PER_COMMIT: Final = 10
GENERATIONS: Final = 5
DATA_RECORDS_PER_PARTITION: Final = 2000
SPAN_MS: Final = 6 * 3600 * 1000
_MARKER: Final = "dataset.json"


def _value_field_positions(batch: bytes) -> list[tuple[int, int]]:
    """(position of the committed offset, position of the commit timestamp) in each record of an
    uncompressed batch of OffsetCommitValue v3 records with empty metadata."""
    from regroup_pipeline.logformat import decode_records, index_batches

    records = decode_records(batch, index_batches(batch))
    starts = records.value_start.tolist()
    # v3: version int16, offset int64, leader epoch int32, metadata (int16 length, empty), commit ts int64
    return [(s + 2, s + 16) for s in starts]


def build_dataset(root: Path, records: int, now_ms: int) -> dict[str, int]:
    """Write the synthetic data directory (``records`` offset commits) under ``root``."""
    from regroup.protocol.record_batch import Record, build_batch
    from regroup_pipeline.synthetic import (
        MemberSpec,
        PartitionWriter,
        group_metadata,
        offset_commit,
        rebase_batch,
    )

    start = now_ms - SPAN_MS
    co = [PartitionWriter(root, "__consumer_offsets", p) for p in range(CO_PARTITIONS)]
    group_partition = [g % CO_PARTITIONS for g in range(GROUPS)]
    group_topic = [f"topic-{g % TOPICS}" for g in range(GROUPS)]

    metadata_records = 0
    for gen in range(1, GENERATIONS + 1):
        ts = start + (gen - 1) * SPAN_MS // GENERATIONS
        for g in range(GROUPS):
            n = 1 + (g + gen) % 3
            parts = list(range(PARTITIONS))
            members = [
                MemberSpec(f"member-{g}-{gen}-{m}", [group_topic[g]], {group_topic[g]: parts[m::n]})
                for m in range(n)
            ]
            key, value = group_metadata(f"group-{g}", gen, members, state_ts=ts)
            co[group_partition[g]].append([(ts, key, value)])
            metadata_records += 1

    templates: list[tuple[bytes, list[tuple[int, int]]]] = []
    for g in range(GROUPS):
        recs = []
        for p in range(RECORDS_PER_COMMIT):
            key, value = offset_commit(f"group-{g}", group_topic[g], p, 0, commit_ts=start, value_version=3)
            recs.append(Record(p, start, key, value))
        batch = build_batch(recs, base_offset=0)
        templates.append((batch, _value_field_positions(batch)))

    batches = records // RECORDS_PER_COMMIT
    step = max(1, SPAN_MS // max(batches, 1))
    for b in range(batches):
        g = b % GROUPS
        shift = b * step
        committed = (b // GROUPS) * (DATA_RECORDS_PER_PARTITION // max(1, batches // GROUPS))
        template, positions = templates[g]
        writer = co[group_partition[g]]
        patches = [
            p for pos_offset, pos_ts in positions for p in ((pos_offset, committed), (pos_ts, start + shift))
        ]
        writer.append_raw(rebase_batch(template, writer.next_offset, shift, patches))
    for w in co:
        w.close()

    data_records = 0
    for t in range(TOPICS):
        for p in range(PARTITIONS):
            writer = PartitionWriter(root, f"topic-{t}", p)
            per = DATA_RECORDS_PER_PARTITION
            for chunk in range(0, per, 500):
                writer.append(
                    [
                        (start + (i * SPAN_MS) // per, None, b"v" * 100)
                        for i in range(chunk, min(per, chunk + 500))
                    ]
                )
            data_records += per
            writer.close()
    info = {
        "records": records,
        "offset_commits": batches * RECORDS_PER_COMMIT,
        "group_metadata": metadata_records,
        "data_records": data_records,
        "now_ms": now_ms,
    }
    (root / _MARKER).write_text(json.dumps(info))
    return info


def _dataset(workdir: Path, records: int) -> tuple[Path, dict[str, int]]:
    root = workdir / f"data-{records}"
    marker = root / _MARKER
    if marker.is_file():
        info: dict[str, int] = json.loads(marker.read_text())
        if info.get("records") == records:
            return root, info
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    return root, build_dataset(root, records, int(time.time() * 1000))


def _baseline_decode(key: bytes, value: bytes | None) -> tuple[Any, ...] | None:
    from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue

    version = int.from_bytes(key[:2], "big", signed=True)
    k = OffsetCommitKey.decode(key[2:], version)
    if value is None:
        return (k.group, k.topic, k.partition, None, None, None, None, None)
    v, _version = OffsetCommitValue.decode_versioned(value)
    expire = v.expire_timestamp if v.expire_timestamp >= 0 else None
    return (k.group, k.topic, k.partition, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, expire)


def _arrow_decode_only(batches: Iterator[Any]) -> int:
    from regroup_pipeline.decode import decode_offset_commits

    return sum(decode_offset_commits(b).num_rows for b in batches)


def _transfer_source(options: dict[str, str], rows: int, tasks: int) -> Any:
    """A data source that yields already decoded offset commits — the data source's own first batch for
    ``options``, decoded once per task and sent again until ``rows`` — in ``tasks`` tasks: what moving
    decoded batches from Python into Spark costs on its own, the bound for the data source."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.pandas.types import from_arrow_schema

    from regroup_pipeline.logformat import COMMIT_ARROW_SCHEMA

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(tasks)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            from regroup_pipeline.datasource import first_batch

            batch = first_batch(options)
            assert batch is not None
            assert batch.num_rows
            left = rows // tasks + (1 if partition.value < rows % tasks else 0)
            while left > 0:
                yield batch.slice(0, min(left, batch.num_rows))
                left -= batch.num_rows

    class Transfer(DataSource):
        @classmethod
        def name(cls) -> str:
            return "regroup_bench_transfer"

        def schema(self) -> Any:
            return from_arrow_schema(COMMIT_ARROW_SCHEMA)

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return Transfer


def run_bench(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    from regroup_pipeline.session import build_session

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="regroup-bench-"))
    results: dict[str, Any] = {"records": args.records, "master": args.master}
    t = time.perf_counter()
    root, info = _dataset(workdir, args.records)
    results["dataset_seconds"] = round(time.perf_counter() - t, 1)
    results["dataset"] = info

    t = time.perf_counter()
    own_session = SparkSession.getActiveSession() is None  # else: run inside the caller's session
    spark = build_session(args.master, kafka=False, conf=dict(args.conf), log_level="ERROR")
    results["session_seconds"] = round(time.perf_counter() - t, 1)

    raw_path = _raw_commit_records(spark, root, workdir / f"raw-{args.records}.parquet")
    raw = spark.read.parquet(str(raw_path))
    rows = raw.count()
    results["decode_rows"] = rows
    results.update(_decode_timings(spark, raw, rows, root, workdir))
    results.update(_baseline_timing(raw, rows, args.baseline_records))
    results["decoder_only_rows_per_s"] = _decoder_only_rate(raw_path)
    results.update(_all_job_timing(spark, root, workdir / "out", info["now_ms"]))
    if own_session:
        spark.stop()
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_results(results)
    return 0


def _raw_commit_records(spark: Any, root: Path, raw_path: Path) -> Path:
    """The offset-commit records of ``__consumer_offsets`` as raw key/value rows in Parquet (written once
    per dataset size): the input of the decode timings."""
    from pyspark.sql import functions as F

    from regroup_pipeline.inputs import CONSUMER_OFFSETS

    if not (raw_path / "_SUCCESS").exists():
        raw = spark.read.format("regroup").option("path", str(root)).option("topics", CONSUMER_OFFSETS).load()
        raw.select("key", "value", "partition", "offset", "timestamp").where(
            F.expr("substring(key, 1, 2) IN (X'0000', X'0001')")
        ).write.mode("overwrite").parquet(str(raw_path))
    return raw_path


def _timed(df: Any) -> float:
    """Seconds to run ``df`` to completion without writing anything."""
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def _decode_timings(spark: Any, raw: Any, rows: int, root: Path, workdir: Path) -> dict[str, Any]:
    """The Parquet scan alone, the vectorised decoder, the data source decoding segments, the transfer
    bound, and the tasks writing the commit history themselves."""
    from regroup_pipeline.datasource import HistoryOutputs, record_types_option, write_history
    from regroup_pipeline.inputs import CONSUMER_OFFSETS, decode_commits
    from regroup_pipeline.logformat import OFFSET_COMMIT_TYPES

    _timed(raw)  # warm the Parquet read path and the JVM
    scan = _timed(raw)
    vectorised = _timed(decode_commits(raw))
    source_options = {
        "path": str(root),
        "topics": CONSUMER_OFFSETS,
        "recordTypes": record_types_option(OFFSET_COMMIT_TYPES),
        "decode": "offset_commits",
    }
    in_source = spark.read.format("regroup").options(**source_options).load()
    _timed(in_source.limit(1000))  # start the data source's Python workers
    # The first full read also warms the JVM's Arrow read path, which the transfer shares: each is then
    # timed three times, alternately, and the fastest run of each kept, so both are compared warm, and a
    # run slowed by something else on the machine (single runs of either spread by ±20% on 2 shared
    # cores) weighs on neither.
    source_first = _timed(in_source)
    spark.dataSource.register(_transfer_source(source_options, rows, spark.sparkContext.defaultParallelism))
    transfer_df = spark.read.format("regroup_bench_transfer").load()
    transfers, sources = [], []
    for _ in range(3):
        transfers.append(_timed(transfer_df))
        sources.append(_timed(in_source))
    source_decode, transfer = min(sources), min(transfers)
    start = time.perf_counter()
    options = {k: v for k, v in source_options.items() if k != "decode"}
    options["minPartitions"] = str(spark.sparkContext.defaultParallelism)
    written = write_history(spark, options, HistoryOutputs(str(workdir / "history"))).rows
    history_write = time.perf_counter() - start
    shutil.rmtree(workdir / "history", ignore_errors=True)
    return {
        "scan_seconds": round(scan, 2),
        "scan_rows_per_s": round(rows / scan),
        "vectorised_seconds": round(vectorised, 2),
        "vectorised_rows_per_s": round(rows / vectorised),
        "data_source_decode_seconds": round(source_decode, 2),
        "data_source_decode_rows_per_s": round(rows / source_decode),
        "data_source_first_seconds": round(source_first, 2),
        "data_source_first_rows_per_s": round(rows / source_first),
        "data_source_share_of_transfer": round(transfer / source_decode, 2),
        "transfer_seconds": round(transfer, 2),
        "transfer_rows_per_s": round(rows / transfer),
        "history_write_rows": written,
        "history_write_seconds": round(history_write, 2),
        "history_write_rows_per_s": round(written / history_write),
    }


def _baseline_timing(raw: Any, rows: int, baseline_records: int | None) -> dict[str, Any]:
    """A plain row-at-a-time Python UDF with regroup's codecs, on all rows or a sample of them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    baseline_rows = min(baseline_records or rows, rows)
    baseline_input = raw
    if baseline_rows < rows:
        # A sample keeps every task busy (a limit would run in one task and use one core).
        baseline_input = raw.sample(fraction=baseline_rows / rows, seed=7).cache()
        baseline_rows = baseline_input.count()
    out_type = StructType(
        [
            StructField("group", StringType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("committed_offset", LongType()),
            StructField("leader_epoch", IntegerType()),
            StructField("metadata", StringType()),
            StructField("commit_timestamp", LongType()),
            StructField("expire_timestamp", LongType()),
        ]
    )
    baseline_udf = F.udf(_baseline_decode, out_type, useArrow=False)
    baseline = _timed(baseline_input.select(baseline_udf("key", "value").alias("d")).select("d.*"))
    baseline_input.unpersist()
    return {
        "baseline_rows": baseline_rows,
        "baseline_seconds": round(baseline, 2),
        "baseline_rows_per_s": round(baseline_rows / baseline),
    }


def _decoder_only_rate(raw_path: Path) -> int:
    """Rows per second of the decoder alone, outside Spark, on the same Arrow data."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

    table = pq.read_table(raw_path)
    start = time.perf_counter()
    decoded = _arrow_decode_only(iter(table.to_batches(max_chunksize=65536)))
    return round(decoded / (time.perf_counter() - start))


def _all_job_timing(spark: Any, root: Path, out: Path, now_ms: int) -> dict[str, Any]:
    """The ``all`` job end to end over the data directory, with the seconds of each stage."""
    from regroup_pipeline.inputs import TimeWindow, from_datadir
    from regroup_pipeline.runner import StepCounts, write_all

    start = time.perf_counter()
    window = TimeWindow(now_ms=now_ms)
    counts: dict[str, StepCounts] = {}
    stages = write_all(
        from_datadir(spark, [str(root)], window), out, out / "report.html", lag_samples=60, counts=counts
    )
    return {
        "all_job_seconds": round(time.perf_counter() - start, 1),
        "all_job_stage_seconds": {name: round(secs, 1) for name, secs in stages.items()},
        "all_job_spark_jobs": {name: c.jobs for name, c in counts.items()},
        "all_job_spark_stages": {name: c.stages for name, c in counts.items()},
    }


def _print_results(results: dict[str, Any]) -> None:
    d = results["dataset"]
    rows = results["decode_rows"]
    print(
        f"dataset: {d['offset_commits']:,} offset commits, "
        f"{d['group_metadata']:,} group metadata records, "
        f"{d['data_records']:,} data records (built in {results['dataset_seconds']}s)"
    )
    print(f"Spark {results['master']}, session start {results['session_seconds']}s")
    print(f"{'decode ' + format(rows, ','):<34}{'seconds':>10}{'rows/s':>14}")
    timings = (
        ("  Parquet scan only", "scan"),
        ("  vectorised (mapInArrow)", "vectorised"),
        ("  data source, first full read", "data_source_first"),
        ("  data source reads + decodes", "data_source_decode"),
        ("  transfer alone (decoded batches)", "transfer"),
        ("  tasks decode + write offsets", "history_write"),
        ("  Python UDF baseline", "baseline"),
    )
    for label, key in timings:
        print(f"{label:<34}{results[key + '_seconds']:>10.2f}{results[key + '_rows_per_s']:>14,}")
    share = results["data_source_share_of_transfer"]
    label = "  data source at the transfer bound"
    print(f"{label:<34}{share:>10.0%}   (transfer seconds / data source seconds)")
    baseline_rows = results["baseline_rows"]
    if baseline_rows < rows:
        print(f"{'':<34}(baseline on {baseline_rows:,} rows)")
    print(f"{'  decoder alone, no Spark':<34}{'':>10}{results['decoder_only_rows_per_s']:>14,}")
    print(f"all job end to end (read, decode, 6 tables, report): {results['all_job_seconds']}s")
    jobs, stages = results["all_job_spark_jobs"], results["all_job_spark_stages"]
    print(
        f"  {'step':<22}{'seconds':>8}{'jobs':>6}{'stages':>8}\n"
        + "\n".join(
            f"  {name:<22}{secs:>8.1f}{jobs.get(name, 0):>6}{stages.get(name, 0):>8}"
            for name, secs in results["all_job_stage_seconds"].items()
        )
    )
    print(f"  {'Spark jobs, stages in all':<30}{sum(jobs.values()):>6}{sum(stages.values()):>8}")
