"""Structured Streaming mode: keep ``lag``, ``rebalances`` (and ``offsets``) current.

The stream reads ``__consumer_offsets`` and the data topics — through Spark's Kafka source from a cluster,
or as file-based micro-batches over a data directory with ``format("regroup")`` — and each micro-batch
appends its decoded records to state tables (Parquet under ``<output>/_state``), then recomputes the
tables from the state and replaces them. A replayed micro-batch is harmless: state rows are de-duplicated
by their log position when read.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

from regroup_pipeline import jobs, logdir
from regroup_pipeline.datasource import FORMAT
from regroup_pipeline.inputs import (
    COMMIT_SCHEMA,
    CONSUMER_OFFSETS,
    DATA_COLUMNS,
    DATA_TOPICS_PATTERN,
    GROUP_SCHEMA,
    PARTITION_SCHEMA,
    RAW_COLUMNS,
    Inputs,
    TimeWindow,
    decode_commits,
    decode_groups,
)

__all__ = ["StateUpdater", "run_stream", "start_stream", "stream_source"]

STATE_DIR: Final = "_state"
DATA_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)
PartitionsFn = Callable[[SparkSession, DataFrame], DataFrame]


def stream_source(
    spark: SparkSession,
    *,
    data_dirs: Sequence[str] | None = None,
    bootstrap_servers: str | None = None,
    topic_pattern: str = DATA_TOPICS_PATTERN,
    kafka_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A streaming DataFrame of raw records of ``__consumer_offsets`` and the data topics, from the
    beginning of each log."""
    pattern = f"{CONSUMER_OFFSETS}|{topic_pattern}"
    if data_dirs:
        return (
            spark.readStream.format(FORMAT)
            .option("path", ",".join(data_dirs))
            .option("topicPattern", pattern)
            .option("payloadTopics", CONSUMER_OFFSETS)
            .load()
        )
    if not bootstrap_servers:
        raise ValueError("a stream needs data directories or bootstrap servers")
    from regroup_pipeline.inputs import kafka_source_options
    from regroup_pipeline.kafka_client import SimpleKafkaClient

    with SimpleKafkaClient(bootstrap_servers) as client:
        counts = client.partition_counts()
    wanted = {t: n for t, n in counts.items() if re.fullmatch(pattern, t)}
    # Explicit partitions, as in batch: topics and partitions created later are picked up when the stream
    # restarts.
    options = kafka_source_options(spark, bootstrap_servers, wanted, kafka_options)
    return spark.readStream.format("kafka").options(**options).load().select(*RAW_COLUMNS)


def datadir_partitions(paths: Sequence[str], topic_pattern: str) -> PartitionsFn:
    def partitions(spark: SparkSession, data: DataFrame) -> DataFrame:
        ends = [logdir.partition_end(p) for p in logdir.list_partitions(paths, pattern=topic_pattern)]
        return spark.createDataFrame(
            [(e.topic, e.partition, e.log_end_offset) for e in ends], PARTITION_SCHEMA
        )

    return partitions


def kafka_partitions(bootstrap_servers: str, topic_pattern: str) -> PartitionsFn:
    def partitions(spark: SparkSession, data: DataFrame) -> DataFrame:
        from regroup_pipeline.kafka_client import SimpleKafkaClient

        with SimpleKafkaClient(bootstrap_servers) as client:
            ends = client.log_end_offsets()
        rows = [(t, p, o) for (t, p), o in sorted(ends.items()) if re.fullmatch(topic_pattern, t)]
        return spark.createDataFrame(rows, PARTITION_SCHEMA)

    return partitions


class StateUpdater:
    """The ``foreachBatch`` function of the stream: append the micro-batch to the state tables, then
    rewrite ``offsets``, ``lag``, ``rebalances`` and ``rebalance_frequency`` under ``output``."""

    def __init__(
        self,
        output: Path,
        partitions: PartitionsFn,
        *,
        lag_samples: int = jobs.DEFAULT_LAG_SAMPLES,
        lag_interval_ms: int | None = None,
    ) -> None:
        self.output = output
        self.partitions = partitions
        self.lag_samples = lag_samples
        self.lag_interval_ms = lag_interval_ms
        self.batches = 0

    def _state(self, name: str) -> str:
        return str(self.output / STATE_DIR / name)

    def _read(self, spark: SparkSession, name: str, schema: StructType, key: Sequence[str]) -> DataFrame:
        return spark.read.schema(schema).parquet(self._state(name)).dropDuplicates(list(key))

    def prepare(self, spark: SparkSession) -> None:
        """Create empty state tables so that the first micro-batch can read them."""
        for name, schema in (("commits", COMMIT_SCHEMA), ("groups", GROUP_SCHEMA), ("data", DATA_SCHEMA)):
            if not Path(self._state(name)).exists():
                spark.createDataFrame([], schema).write.mode("append").parquet(self._state(name))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        batch = batch.persist()  # read once, used three times
        co = batch.where(F.col("topic") == CONSUMER_OFFSETS)
        decode_commits(co).write.mode("append").parquet(self._state("commits"))
        decode_groups(co).write.mode("append").parquet(self._state("groups"))
        data = batch.where(F.col("topic") != CONSUMER_OFFSETS).select(*DATA_COLUMNS)
        data.write.mode("append").parquet(self._state("data"))

        state_data = self._read(spark, "data", DATA_SCHEMA, ("topic", "partition", "offset"))
        inputs = Inputs(
            commits=self._read(spark, "commits", COMMIT_SCHEMA, ("record_partition", "record_offset")),
            groups=self._read(spark, "groups", GROUP_SCHEMA, ("record_partition", "record_offset")),
            data=state_data,
            partitions=self.partitions(spark, state_data),
            window=TimeWindow(now_ms=int(time.time() * 1000)),
        )
        reb = jobs.rebalances(inputs).cache()
        tables = {
            "offsets": jobs.offsets(inputs),
            "lag": jobs.lag(inputs, samples=self.lag_samples, interval_ms=self.lag_interval_ms),
            "rebalances": reb,
            "rebalance_frequency": jobs.rebalance_frequency(reb),
        }
        for name, df in tables.items():
            df.write.mode("overwrite").parquet(str(self.output / name))
        reb.unpersist()
        jobs.release_lookups()
        batch.unpersist()
        self.batches += 1


def start_stream(
    spark: SparkSession,
    output: Path,
    checkpoint: Path,
    *,
    data_dirs: Sequence[str] | None = None,
    bootstrap_servers: str | None = None,
    topic_pattern: str = DATA_TOPICS_PATTERN,
    kafka_options: Mapping[str, str] | None = None,
    trigger_ms: int = 10_000,
    lag_samples: int = jobs.DEFAULT_LAG_SAMPLES,
    lag_interval_ms: int | None = None,
    query_name: str = "regroup-pipeline",
) -> StreamingQuery:
    """Start the streaming pipeline and return its query."""
    source = stream_source(
        spark,
        data_dirs=data_dirs,
        bootstrap_servers=bootstrap_servers,
        topic_pattern=topic_pattern,
        kafka_options=kafka_options,
    )
    if data_dirs:
        partitions = datadir_partitions(data_dirs, topic_pattern)
    else:
        assert bootstrap_servers is not None
        partitions = kafka_partitions(bootstrap_servers, topic_pattern)
    updater = StateUpdater(output, partitions, lag_samples=lag_samples, lag_interval_ms=lag_interval_ms)
    updater.prepare(spark)
    return (
        source.writeStream.queryName(query_name)
        .foreachBatch(updater)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )


def run_stream(spark: SparkSession, args: argparse.Namespace) -> int:
    """``regroup pipeline stream``."""
    data_dirs = [p for item in args.data_dir for p in item.split(",") if p] if args.data_dir else None
    query = start_stream(
        spark,
        Path(args.output),
        Path(args.checkpoint),
        data_dirs=data_dirs,
        bootstrap_servers=args.bootstrap_server,
        topic_pattern=args.topics or DATA_TOPICS_PATTERN,
        kafka_options=dict(args.kafka_option),
        trigger_ms=args.trigger,
        lag_samples=args.lag_samples,
        lag_interval_ms=args.lag_interval,
    )
    if args.commit_group:
        if not args.bootstrap_server:
            raise SystemExit("--commit-group needs --bootstrap-server")
        from regroup_pipeline.progress import commit_progress_to_group

        commit_progress_to_group(query, args.bootstrap_server, args.commit_group)
    try:
        if args.once:
            query.processAllAvailable()
            query.stop()
        else:
            query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0
