"""The pipeline's inputs, from a broker data directory or from any Kafka-compatible cluster.

Either way the raw records have the Kafka source's schema; ``__consumer_offsets`` records are decoded into
offset commits, group metadata and KIP-848 consumer groups' records, data topics are reduced to
``(topic, partition, offset, timestamp)``, a partitions table gives every partition (empty ones included)
with its log end offset, and a retention table its log start offset, size and the topic's retention
settings. The topic ids of the data topics (``partition.metadata`` files, or Metadata v10+ answers) name the
topics of KIP-848 assignments, which hold ids only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from regroup_pipeline import logdir
from regroup_pipeline.datasource import FORMAT, record_types_option
from regroup_pipeline.decode import (
    CONSUMER_GROUP_ARROW_SCHEMA,
    GROUP_ARROW_SCHEMA,
    consumer_group_batches,
    group_metadata_batches,
    offset_commit_batches,
)
from regroup_pipeline.logformat import (
    COMMIT_ARROW_SCHEMA,
    CONSUMER_GROUP_RECORD_TYPES,
    GROUP_METADATA_TYPE,
    OFFSET_COMMIT_TYPES,
)

__all__ = [
    "CONSUMER_GROUP_SCHEMA",
    "CONSUMER_OFFSETS",
    "DATA_COLUMNS",
    "DATA_TOPICS_PATTERN",
    "GROUP_SCHEMA",
    "RAW_COLUMNS",
    "RETENTION_SCHEMA",
    "TOPIC_ID_SCHEMA",
    "Inputs",
    "TimeWindow",
    "count_partitions",
    "decode_commits",
    "decode_consumer_groups",
    "decode_groups",
    "from_datadir",
    "from_kafka",
    "from_raw",
    "kafka_raw",
    "kafka_source_options",
    "retention_settings",
]

CONSUMER_OFFSETS: Final = logdir.CONSUMER_OFFSETS
# Every topic but internal ones (__consumer_offsets, __transaction_state, ...). The same expression works
# as a Python regular expression (data source) and a Java one (Kafka source's subscribePattern).
DATA_TOPICS_PATTERN: Final = "(?!__).*"
DEPRECATED_OFFSET_FETCHING: Final = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
RAW_COLUMNS: Final = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")
# The columns of the data topics' records (Inputs.data).
DATA_COLUMNS: Final = ("topic", "partition", "offset", "timestamp")

COMMIT_SCHEMA: Final = from_arrow_schema(COMMIT_ARROW_SCHEMA)
GROUP_SCHEMA: Final = from_arrow_schema(GROUP_ARROW_SCHEMA)
CONSUMER_GROUP_SCHEMA: Final = from_arrow_schema(CONSUMER_GROUP_ARROW_SCHEMA)
PARTITION_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("log_end_offset", LongType()),
    ]
)
# Per partition: the log start offset, the bytes its segments hold (null when unknown) and the topic's
# retention.ms / retention.bytes (-1: unlimited, or a topic whose cleanup.policy does not delete; null:
# unknown).
RETENTION_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("log_start_offset", LongType()),
        StructField("size_bytes", LongType()),
        StructField("retention_ms", LongType()),
        StructField("retention_bytes", LongType()),
    ]
)
TOPIC_ID_SCHEMA: Final = StructType(
    [StructField("topic_id", StringType()), StructField("topic", StringType())]
)
RETENTION_CONFIGS: Final = ("retention.ms", "retention.bytes", "cleanup.policy")
# What a topic without overrides gets from a broker with Kafka's defaults (log.retention.hours=168,
# log.retention.bytes=-1, log.cleanup.policy=delete).
KAFKA_RETENTION_DEFAULTS: Final = {
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
}


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """``since``/``until`` bounds in epoch milliseconds. Records after ``until`` are ignored, so every
    table describes the state as of ``until`` (``now`` when unset); ``since`` limits which history rows
    (commits, lag samples, generations) are output, not the state they are computed from."""

    since_ms: int | None = None
    until_ms: int | None = None
    now_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def as_of_ms(self) -> int:
        return self.until_ms if self.until_ms is not None else self.now_ms


@dataclass(frozen=True, slots=True)
class Inputs:
    commits: DataFrame  # decoded offset commits and their tombstones (COMMIT_SCHEMA)
    groups: DataFrame  # decoded group metadata and tombstones (GROUP_SCHEMA)
    data: DataFrame  # topic, partition, offset, timestamp of data-topic records
    partitions: DataFrame  # topic, partition, log_end_offset (null when unknown)
    window: TimeWindow
    # The commits with valid_until and is_current when the input computes them while reading (the data
    # source does, per partition in log order); else the jobs derive them from ``commits``.
    history: DataFrame | None = None
    # The data source options that read ``history`` (a data directory's), for writing it straight to
    # Parquet (``datasource.write_history``).
    history_options: Mapping[str, str] | None = None
    # The data source options that read ``data`` (a data directory's), for reading few records without
    # Spark's tasks (``datasource.read_local``).
    data_options: Mapping[str, str] | None = None
    # Log start offsets, sizes and retention settings per partition (RETENTION_SCHEMA); None: unknown.
    retention: DataFrame | None = None
    # Per topic of ``partitions``, its highest partition + 1, when the driver knows it (it listed them).
    partition_counts: Mapping[str, int] | None = None
    # Decoded KIP-848 consumer groups' records, key types 3–8 and 16 (CONSUMER_GROUP_SCHEMA); None: not read.
    consumer_groups: DataFrame | None = None
    # topic_id (Kafka's string form), topic of the topics known to the input (TOPIC_ID_SCHEMA); None: unknown.
    topic_ids: DataFrame | None = None


def _key_type_in(types: Sequence[int]) -> Column:
    literals = ", ".join(f"X'{t:04X}'" for t in types)
    return F.expr(f"substring(key, 1, 2) IN ({literals})")


def decode_commits(raw: DataFrame) -> DataFrame:
    """Offset commits of raw ``__consumer_offsets`` records (vectorised, ``mapInArrow``)."""
    cols = raw.where(_key_type_in(OFFSET_COMMIT_TYPES)).select(
        "key", "value", "partition", "offset", "timestamp"
    )
    return cols.mapInArrow(offset_commit_batches, COMMIT_SCHEMA)


def decode_groups(raw: DataFrame) -> DataFrame:
    """Group metadata of raw ``__consumer_offsets`` records (``mapInArrow``)."""
    cols = raw.where(_key_type_in((2,))).select("key", "value", "partition", "offset", "timestamp")
    return cols.mapInArrow(group_metadata_batches, GROUP_SCHEMA)


def decode_consumer_groups(raw: DataFrame) -> DataFrame:
    """KIP-848 consumer groups' records (key types 3–8, 16) of raw ``__consumer_offsets`` records
    (``mapInArrow``)."""
    cols = raw.where(_key_type_in(CONSUMER_GROUP_RECORD_TYPES)).select(
        "key", "value", "partition", "offset", "timestamp"
    )
    return cols.mapInArrow(consumer_group_batches, CONSUMER_GROUP_SCHEMA)


def count_partitions(partitions: Iterable[tuple[str, int | None]]) -> dict[str, int]:
    """Per topic among (topic, partition) pairs, its highest partition + 1 (pairs without a partition
    count for nothing)."""
    counts: dict[str, int] = {}
    for topic, partition in partitions:
        if partition is not None:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts


def retention_settings(configs: Mapping[str, str] | None) -> tuple[int | None, int | None]:
    """(retention.ms, retention.bytes) from a topic's effective configs: -1 each when its cleanup.policy
    does not include ``delete`` (nothing is deleted by age or size), (None, None) when unknown."""
    if configs is None:
        return None, None
    policies = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
    if "delete" not in policies:
        return -1, -1

    def number(name: str) -> int | None:
        try:
            return int(configs[name])
        except (KeyError, ValueError):
            return None

    return number("retention.ms"), number("retention.bytes")


def _retention_from_data(
    spark: SparkSession,
    data: DataFrame,
    partitions: DataFrame,
    settings: Mapping[str, tuple[int | None, int | None]],
) -> DataFrame:
    """Retention rows when the log start is as of ``until``: the first offset among the records written
    by then (the records read are those retention has left), sizes unknown, today's settings."""
    rows = [(t, ms, b) for t, (ms, b) in sorted(settings.items())]
    configs = spark.createDataFrame(rows, "topic string, retention_ms bigint, retention_bytes bigint")
    starts = data.groupBy("topic", "partition").agg(F.min("offset").alias("log_start_offset"))
    return (
        partitions.select("topic", "partition")
        .join(starts, ["topic", "partition"], "left")
        .join(F.broadcast(configs), "topic", "left")
        .select(
            "topic",
            "partition",
            "log_start_offset",
            F.lit(None).cast("bigint").alias("size_bytes"),
            "retention_ms",
            "retention_bytes",
        )
    )


def _until(df: DataFrame, window: TimeWindow) -> DataFrame:
    if window.until_ms is None:
        return df
    return df.where(F.col("timestamp") <= F.timestamp_millis(F.lit(window.until_ms)))


def _log_ends_from_data(spark: SparkSession, data: DataFrame, counts: Mapping[str, int]) -> DataFrame:
    """Every partition of ``counts`` with max(offset)+1 of its records (null without records)."""
    rows = [(t, p) for t, n in sorted(counts.items()) for p in range(n)]
    every = spark.createDataFrame(rows, "topic string, partition int")
    ends = data.groupBy("topic", "partition").agg((F.max("offset") + 1).alias("log_end_offset"))
    known = every.join(ends, ["topic", "partition"], "left")
    # Partitions with records but missing from the metadata (deleted since) still count.
    return known.unionByName(ends.join(every, ["topic", "partition"], "left_anti"))


def from_raw(
    spark: SparkSession,
    consumer_offsets: DataFrame,
    data: DataFrame,
    partitions: DataFrame,
    window: TimeWindow,
    retention: DataFrame | None = None,
    topic_ids: DataFrame | None = None,
) -> Inputs:
    """Inputs from raw records with the Kafka source's schema (any origin), a partitions table and,
    optionally, a retention table (:data:`RETENTION_SCHEMA`) and the topics' ids (:data:`TOPIC_ID_SCHEMA`)."""
    co = _until(consumer_offsets, window)
    return Inputs(
        commits=decode_commits(co),
        groups=decode_groups(co),
        data=_until(data, window).select(*DATA_COLUMNS),
        partitions=partitions,
        window=window,
        retention=retention,
        consumer_groups=decode_consumer_groups(co),
        topic_ids=topic_ids,
    )


def from_datadir(
    spark: SparkSession,
    paths: Sequence[str],
    window: TimeWindow | None = None,
    *,
    topic_pattern: str = DATA_TOPICS_PATTERN,
    max_split_bytes: int | None = None,
) -> Inputs:
    """Inputs read from a broker data directory (``log.dirs``) by the ``regroup`` Python Data Source,
    which also decodes ``__consumer_offsets`` (option ``decode``: the same vectorised decoders, without a
    round trip through the JVM). Log start and end offsets are exact (read from the segments) unless
    ``until`` is set, in which case they are min(offset) and max(offset)+1 of the records up to ``until``.
    Retention settings are the topics' overrides in regroup's topics file over Kafka's defaults; unknown
    (null) without that file (Apache Kafka's directories keep topic configs in the KRaft metadata log)."""
    window = window or TimeWindow()

    common = {"path": ",".join(paths), "minPartitions": str(spark.sparkContext.defaultParallelism)}
    if window.until_ms is not None:
        common["until"] = str(window.until_ms)
    if max_split_bytes is not None:
        common["maxSplitBytes"] = str(max_split_bytes)

    def reader(**options: str) -> DataFrameReader:
        # A fresh reader each time: DataFrameReader.option mutates the reader it is called on.
        return spark.read.format(FORMAT).options(**common, **options)

    data_read = {"topicPattern": topic_pattern, "payload": "false"}
    data = reader(**data_read).load().select(*DATA_COLUMNS)
    overrides = logdir.topic_configs(paths)

    def settings(topic: str) -> tuple[int | None, int | None]:
        if overrides is None:
            return None, None
        return retention_settings({**KAFKA_RETENTION_DEFAULTS, **overrides.get(topic, {})})

    listed: dict[str, int] | None = None
    if window.until_ms is None:
        dirs = logdir.list_partitions(paths, pattern=topic_pattern)
        ends = [logdir.partition_end(p) for p in dirs]
        listed = count_partitions((e.topic, e.partition) for e in ends)
        partitions = spark.createDataFrame(
            [(e.topic, e.partition, e.log_end_offset) for e in ends], PARTITION_SCHEMA
        )
        retention = spark.createDataFrame(
            [
                (e.topic, e.partition, e.log_start_offset, logdir.partition_size(p), *settings(e.topic))
                for p, e in zip(dirs, ends, strict=True)
            ],
            RETENTION_SCHEMA,
        )
    else:
        counts = {t: n for t, n in logdir.topic_partition_counts(paths).items() if _matches(topic_pattern, t)}
        partitions = _log_ends_from_data(spark, data, counts)
        retention = _retention_from_data(spark, data, partitions, {t: settings(t) for t in counts})
    commit_options = {"topics": CONSUMER_OFFSETS, "recordTypes": record_types_option(OFFSET_COMMIT_TYPES)}
    history = reader(**commit_options, decode="offset_history").load()
    return Inputs(
        commits=history.drop("valid_until", "is_current"),
        history=history,
        history_options={**common, **commit_options},
        groups=reader(
            topics=CONSUMER_OFFSETS,
            recordTypes=record_types_option((GROUP_METADATA_TYPE,)),
            decode="group_metadata",
        ).load(),
        data=data,
        data_options={**common, **data_read},
        partitions=partitions,
        window=window,
        retention=retention,
        partition_counts=listed,
        consumer_groups=reader(
            topics=CONSUMER_OFFSETS,
            recordTypes=record_types_option(CONSUMER_GROUP_RECORD_TYPES),
            decode="consumer_group_records",
        ).load(),
        topic_ids=spark.createDataFrame(sorted(logdir.topic_ids(paths).items()), TOPIC_ID_SCHEMA),
    )


def _matches(pattern: str, topic: str) -> bool:
    return re.fullmatch(pattern, topic) is not None


def kafka_source_options(
    spark: SparkSession,
    bootstrap_servers: str,
    partitions: Mapping[str, int],
    options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Options of Spark's Kafka source (batch or streaming) for every record of the given topics
    (``{topic: partition count}``); ``options`` come last and override.

    The source is given the partitions explicitly (``assign``) and uses the consumer-based offset
    reader (a session setting, made here): Spark's default, AdminClient-based reader drops internal topics
    such as ``__consumer_offsets``, and a subscription would make the driver join a consumer group (which
    would then show up in the very group analytics being computed).
    """
    spark.conf.set(DEPRECATED_OFFSET_FETCHING, "true")
    return {
        "kafka.bootstrap.servers": bootstrap_servers,
        "assign": json.dumps({t: list(range(n)) for t, n in sorted(partitions.items())}),
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        # Retention may delete records between planning and reading; analytics should not fail on it.
        "failOnDataLoss": "false",
        **(options or {}),
    }


def kafka_raw(
    spark: SparkSession,
    bootstrap_servers: str,
    partitions: Mapping[str, int],
    *,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A batch read of every record of the given topics (``{topic: partition count}``) through Spark's
    Kafka source, with the raw columns in the standard order (see :func:`kafka_source_options`)."""
    batch = {"endingOffsets": "latest", **(options or {})}
    every = kafka_source_options(spark, bootstrap_servers, partitions, batch)
    return spark.read.format("kafka").options(**every).load().select(*RAW_COLUMNS)


def from_kafka(
    spark: SparkSession,
    bootstrap_servers: str,
    window: TimeWindow | None = None,
    *,
    topic_pattern: str = DATA_TOPICS_PATTERN,
    options: Mapping[str, str] | None = None,
) -> Inputs:
    """Inputs read from a Kafka-compatible cluster through Spark's Kafka source (``__consumer_offsets``
    and the data topics). Log start and end offsets are ListOffsets(earliest) and ListOffsets(latest)
    answers, taken before the records are read, unless ``until`` is set (then min(offset) and
    max(offset)+1 of the records up to ``until``); retention settings are DescribeConfigs answers. Sizes
    are unknown (null)."""
    from regroup_pipeline.kafka_client import SimpleKafkaClient

    window = window or TimeWindow()
    with SimpleKafkaClient(bootstrap_servers) as client:
        counts = client.partition_counts()
        data_counts = {t: n for t, n in counts.items() if _matches(topic_pattern, t)}
        configs = client.topic_configs(sorted(data_counts), list(RETENTION_CONFIGS))
        ids = client.topic_ids()
        if window.until_ms is None:
            starts = client.log_start_offsets()
            ends = client.log_end_offsets()
        else:
            starts, ends = {}, {}
    settings = {t: retention_settings(configs.get(t)) for t in data_counts}
    if CONSUMER_OFFSETS not in counts:
        raise ValueError(f"{bootstrap_servers} has no {CONSUMER_OFFSETS} topic yet (no group has committed)")
    co = kafka_raw(spark, bootstrap_servers, {CONSUMER_OFFSETS: counts[CONSUMER_OFFSETS]}, options=options)
    if data_counts:
        data = kafka_raw(spark, bootstrap_servers, data_counts, options=options)
    else:
        data = spark.createDataFrame([], "topic string, partition int, offset bigint, timestamp timestamp")
    if window.until_ms is None:
        rows = [(t, p, o) for (t, p), o in sorted(ends.items()) if t in data_counts]
        partitions = spark.createDataFrame(rows, PARTITION_SCHEMA)
        retention = spark.createDataFrame(
            [(t, p, starts.get((t, p)), None, *settings[t]) for t, p, _ in rows], RETENTION_SCHEMA
        )
    else:
        partitions = _log_ends_from_data(spark, _until(data, window), data_counts)
        retention = _retention_from_data(spark, _until(data, window), partitions, settings)
    topic_ids = spark.createDataFrame(sorted((i, t) for t, i in ids.items()), TOPIC_ID_SCHEMA)
    return from_raw(spark, co, data, partitions, window, retention, topic_ids)
