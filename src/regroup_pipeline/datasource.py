"""``spark.read.format("regroup")``: a PySpark Python Data Source over a broker data directory.

It needs no broker: segment files are split into Spark partitions on the driver (at offset-index
positions for big segments) and decoded in the tasks with :mod:`regroup_pipeline.logformat`, yielding Arrow
batches with the columns, order and types of Spark's Kafka source (``includeHeaders=true``)::

    key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp,
    timestampType int, headers array<struct<key: string, value: binary>>

Options (all strings):

- ``path``: a data directory; several separated by commas, like ``log.dirs``;
- ``topics``: comma-separated names; ``topicPattern``: a regular expression the whole name must match;
- ``payload``: ``false`` drops keys, values and headers (for jobs that need only offsets and timestamps);
  ``payloadTopics``: comma-separated topics that keep their payload, the others drop it;
- ``minPartitions`` (default: the planning machine's CPU count) and ``maxSplitBytes`` (default 512 MiB): tasks
  of even size and at most ``maxSplitBytes``, as many as that takes rounded up to a multiple of
  ``minPartitions``; big segments are cut at offset-index positions. ``decode=offset_history`` (whole
  partitions per task) and streaming micro-batches use ``maxSplitBytes`` as a target, default 64 MiB;
- ``until``: epoch milliseconds, only records with a timestamp at or before it;
- ``recordTypes``: comma-separated ``__consumer_offsets`` key types to keep, e.g. ``0,1``;
- ``decode``: ``offset_commits``, ``group_metadata``, ``consumer_group_records`` (KIP-848 groups' records,
  key types 3–8 and 16) or ``consumer_group_metadata`` (their type 3 alone): ``__consumer_offsets`` records
  come out decoded,
  with the schemas of :mod:`regroup_pipeline.decode`, by the same vectorised decoders that ``mapInArrow``
  runs, sparing a round trip between the JVM and Python; ``offset_history``: offset commits with the
  interval each was in force (``valid_until``, ``is_current``), computed while each partition is read in
  log order (a task reads whole partitions), sparing a shuffle and sort of every commit.

Streaming (``spark.readStream.format("regroup")``) uses file-based micro-batches: offsets have the shape
of the Kafka source's, ``{"topic": {"partition": next offset}}``, starting at each partition's log start
offset; each micro-batch reads the records up to the log end offsets seen when it was planned.

The data directory must be readable at the same path by the driver and every executor.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from regroup_pipeline import logdir
from regroup_pipeline.logformat import (
    CONSUMER_GROUP_METADATA_TYPE,
    CONSUMER_GROUP_RECORD_TYPES,
    GROUP_METADATA_TYPE,
    OFFSET_COMMIT_TYPES,
    RAW_ARROW_SCHEMA,
    decode_records,
    index_batches,
    records_to_arrow,
)

if TYPE_CHECKING:
    from regroup_pipeline.laglookup import RecordIndex
    from regroup_pipeline.offsetkeys import LagGrid

__all__ = [
    "FORMAT",
    "HistoryOutputs",
    "HistoryWritten",
    "RegroupDataSource",
    "first_batch",
    "first_commit_ms",
    "raw_schema",
    "record_types_option",
    "register",
    "write_history",
]

FORMAT: Final = "regroup"
DEFAULT_SPLIT_BYTES: Final = 64 * 1024 * 1024  # whole-partition reads and streaming micro-batches
_TASK_BYTES: Final = 512 * 1024 * 1024  # other batch reads
_CHUNK_BYTES: Final = 16 * 1024 * 1024
# The compiled commit pass reads a segment in pieces this big and hands Spark batches of at most
# _BATCH_ROWS commits out of at most _CHUNK_BYTES of segment.
_PIECE_BYTES: Final = 1024 * 1024
_BATCH_ROWS: Final = 1 << 18
_MIN_TASK_BYTES: Final = 1024 * 1024
# A split's lowest offset, the offset it ends before and the newest timestamp wanted.
_Bounds = tuple[int, int | None, int | None]
_General = Callable[[logdir.Split, bytes | bytearray | memoryview, int, _Bounds], Any]
# How much of each segment's start :func:`first_commit_ms` reads looking for offset commits.
_PROBE_BYTES: Final = 256 * 1024


def _commit_schema() -> Any:
    from regroup_pipeline.logformat import COMMIT_ARROW_SCHEMA

    return COMMIT_ARROW_SCHEMA


def _history_schema() -> Any:
    from regroup_pipeline.decode import HISTORY_ARROW_SCHEMA

    return HISTORY_ARROW_SCHEMA


def _group_schema() -> Any:
    from regroup_pipeline.decode import GROUP_ARROW_SCHEMA

    return GROUP_ARROW_SCHEMA


def _consumer_group_schema() -> Any:
    from regroup_pipeline.decode import CONSUMER_GROUP_ARROW_SCHEMA

    return CONSUMER_GROUP_ARROW_SCHEMA


DECODED: Final = {
    "offset_commits": _commit_schema,
    "offset_history": _history_schema,
    "group_metadata": _group_schema,
    "consumer_group_metadata": _consumer_group_schema,
    "consumer_group_records": _consumer_group_schema,
}
# The raw records of every group's membership (classic GroupMetadata, KIP-848 types 3–8 and 16) in one
# pass, for ``write_history``'s tasks, which decode both kinds from them; not an option of the data source.
_GROUP_RECORDS: Final = "group_records"
# Modes that decode rare key types, picked out of the segments by the compiled pass.
_RARE_RECORD_TYPES: Final = {
    "group_metadata": (GROUP_METADATA_TYPE,),
    "consumer_group_metadata": (CONSUMER_GROUP_METADATA_TYPE,),
    "consumer_group_records": CONSUMER_GROUP_RECORD_TYPES,
    _GROUP_RECORDS: (GROUP_METADATA_TYPE, *CONSUMER_GROUP_RECORD_TYPES),
}
# Modes that need each partition read whole, in order, by one task.
_WHOLE_PARTITIONS: Final = frozenset({"offset_history"})


def _arrow_schema(decode: str | None) -> Any:
    """The Arrow schema of the rows this source gives with option ``decode``."""
    return DECODED[decode]() if decode in DECODED else RAW_ARROW_SCHEMA


def raw_schema() -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(RAW_ARROW_SCHEMA)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    paths: tuple[str, ...]
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    payload: bool
    max_split_bytes: int | None  # None: not given
    until_ms: int | None
    record_types: tuple[int, ...] | None
    payload_topics: tuple[str, ...] | None = None
    decode: str | None = None
    min_partitions: int = 0

    def payload_for(self, topic: str) -> bool:
        return self.payload and (self.payload_topics is None or topic in self.payload_topics)

    @classmethod
    def parse(cls, options: Any) -> ReadOptions:
        path = options.get("path")
        if not path:
            raise ValueError("the regroup data source needs option 'path' (the broker's data directory)")
        topics = options.get("topics")
        until = options.get("until")
        types = options.get("recordTypes")
        payload_topics = options.get("payloadTopics")
        decode = options.get("decode") or None
        if decode not in (None, *DECODED):
            raise ValueError(f"option decode must be one of {', '.join(DECODED)}, not {decode!r}")
        return cls(
            paths=tuple(p.strip() for p in str(path).split(",") if p.strip()),
            topics=tuple(t.strip() for t in str(topics).split(",") if t.strip()) if topics else None,
            topic_pattern=options.get("topicPattern") or None,
            payload=str(options.get("payload", "true")).lower() != "false",
            max_split_bytes=int(options["maxSplitBytes"]) if options.get("maxSplitBytes") else None,
            until_ms=int(until) if until not in (None, "") else None,
            record_types=tuple(int(t) for t in str(types).split(",")) if types else None,
            payload_topics=tuple(t.strip() for t in str(payload_topics).split(","))
            if payload_topics
            else None,
            decode=decode,
            min_partitions=int(options.get("minPartitions", 0)),
        )

    def partitions(self) -> list[logdir.PartitionDir]:
        return logdir.list_partitions(self.paths, self.topics, self.topic_pattern)


def record_types_option(types: Sequence[int]) -> str:
    """The ``recordTypes`` option's value for these key types (what :meth:`ReadOptions.parse` reads)."""
    return ",".join(map(str, types))


@dataclass(frozen=True, slots=True)
class _Task:
    splits: tuple[logdir.Split, ...]
    max_offsets: tuple[int, ...] | None  # exclusive upper bound per split (streaming), else None


class _TaskPartition(InputPartition):
    def __init__(self, task: _Task) -> None:
        super().__init__(task)
        self.task = task


def _pack(splits: Sequence[logdir.Split], target: int, bounds: Sequence[int] | None = None) -> list[Any]:
    """Group small splits into tasks of about ``target`` bytes so that a directory of many small
    partitions does not become a task per partition."""
    tasks: list[Any] = []
    current: list[logdir.Split] = []
    current_bounds: list[int] = []
    size = 0
    for i, split in enumerate(splits):
        current.append(split)
        if bounds is not None:
            current_bounds.append(bounds[i])
        size += split.end - split.start
        if size >= target:
            tasks.append(_TaskPartition(_Task(tuple(current), tuple(current_bounds) if bounds else None)))
            current, current_bounds, size = [], [], 0
    if current:
        tasks.append(_TaskPartition(_Task(tuple(current), tuple(current_bounds) if bounds else None)))
    return tasks


def _pack_partitions(splits: Sequence[logdir.Split], target: int, slots: int = 1) -> list[Any]:
    """Tasks of whole partitions (their splits in log order), about ``target`` bytes each: as many tasks
    as that takes, rounded up to a multiple of ``slots`` (the cores that run them together), with the
    partitions spread so the tasks' sizes are as even as possible, largest task first. Packing in log
    order instead could leave the last round one lone task with the other cores idle."""
    partitions = [list(group) for _, group in itertools.groupby(splits, key=lambda s: (s.topic, s.partition))]
    total = sum(s.end - s.start for s in splits)
    return _spread(partitions, _task_count(total, target, slots))


def _task_count(total: int, target: int, slots: int) -> int:
    """Tasks of about ``target`` bytes for ``total``, rounded up to a multiple of ``slots``."""
    count = max(1, -(-total // max(target, 1)))
    return -(-count // slots) * slots


def _spread(units: Sequence[Sequence[logdir.Split]], count: int) -> list[Any]:
    """``units`` (each some splits in log order, kept together) spread over at most ``count`` tasks so the
    tasks' sizes are as even as possible, largest task first; a task's units stay in their given order."""
    if not units:
        return []
    count = min(len(units), count)
    sizes = [sum(s.end - s.start for s in unit) for unit in units]
    bins: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    # Largest unit first into the least loaded task (LPT).
    for index in sorted(range(len(units)), key=lambda i: -sizes[i]):
        lightest = min(range(count), key=loads.__getitem__)
        bins[lightest].append(index)
        loads[lightest] += sizes[index]
    order = sorted(range(count), key=lambda b: -loads[b])
    return [
        _TaskPartition(_Task(tuple(s for i in sorted(bins[b]) for s in units[i]), None))
        for b in order
        if bins[b]
    ]


def _read_task(task: _Task, opts: ReadOptions) -> Iterator[Any]:
    if opts.decode not in _WHOLE_PARTITIONS:
        return _read_splits(task, opts)
    return _read_history(task, opts)


def _read_history(task: _Task, opts: ReadOptions) -> Iterator[Any]:
    from regroup_pipeline.decode import CommitHistory

    history: CommitHistory | None = None
    last: tuple[str, int] | None = None
    for split, batch in _decoded_splits(task, opts):
        if (split.topic, split.partition) != last:
            if history is not None:
                yield from _batches(history.finish())
            history, last = CommitHistory(), (split.topic, split.partition)
        assert history is not None
        yield from _batches(history.feed(batch))
    if history is not None:
        yield from _batches(history.finish())


def _raw(batch: Any) -> Any:
    return batch


def _batches(table: Any) -> Iterator[Any]:
    if table is not None:
        yield from table.to_batches()


def _read_splits(task: _Task, opts: ReadOptions) -> Iterator[Any]:
    for _split, batch in _decoded_splits(task, opts):
        yield batch


def _decoded_splits(task: _Task, opts: ReadOptions) -> Iterator[tuple[logdir.Split, Any]]:
    from regroup_pipeline.commitscan import scan_records
    from regroup_pipeline.decode import (
        decode_consumer_group_metadata,
        decode_consumer_group_records,
        decode_group_metadata,
        decode_offset_commits,
        record_types,
    )

    decoder = {
        "offset_commits": decode_offset_commits,
        "offset_history": decode_offset_commits,
        "group_metadata": decode_group_metadata,
        "consumer_group_metadata": decode_consumer_group_metadata,
        "consumer_group_records": decode_consumer_group_records,
        _GROUP_RECORDS: _raw,
    }.get(opts.decode or "")
    # The compiled pass over segment bytes: offset commits straight to their columns, group metadata
    # records (classic or KIP-848) picked out of the commits before the codecs decode them.
    kinds = set(opts.record_types) if opts.record_types is not None else None
    scan_commits = decoder is decode_offset_commits and (kinds is None or set(OFFSET_COMMIT_TYPES) <= kinds)
    rare_types = _RARE_RECORD_TYPES.get(opts.decode or "")
    if rare_types is not None and kinds is not None:
        rare_types = tuple(t for t in rare_types if t in kinds)
    scan_rare = bool(rare_types)

    def general(
        split: logdir.Split, data: bytes | bytearray | memoryview, limit: int, bounds: _Bounds
    ) -> Any | None:
        """The piece's records by the numpy decoders, filtered and decoded as asked; None when none is
        left."""
        min_offset, max_offset, until_ms = bounds
        records = decode_records(data, index_batches(data, 0, limit))
        keep = records.offset >= min_offset
        if max_offset is not None:
            keep &= records.offset < max_offset
        if until_ms is not None:
            keep &= records.timestamp <= until_ms
        if not bool(keep.all()):
            records = records.select(keep)
        if records.count == 0:
            return None
        batch = records_to_arrow(records, split.topic, split.partition, payload=opts.payload_for(split.topic))
        if opts.record_types is not None:
            types = record_types(batch.column("key"))
            wanted = np.isin(types, np.asarray(opts.record_types, np.int64))
            if not bool(wanted.all()):
                batch = batch.filter(wanted)
            if batch.num_rows == 0:
                return None
        if decoder is not None:
            batch = decoder(batch)
            if batch.num_rows == 0:
                return None
        return batch

    for i, split in enumerate(task.splits):
        max_offset = task.max_offsets[i] if task.max_offsets is not None else None
        bounds = (split.min_offset, max_offset, opts.until_ms)
        if scan_commits:
            yield from ((split, batch) for batch in _scanned_commits(split, bounds, general))
            continue
        for data, limit in logdir.read_split(split, _CHUNK_BYTES):
            if _past(data, max_offset):
                break
            if scan_rare and decoder is not None and rare_types:
                fast = scan_records(data, limit, split.topic, split.partition, rare_types, *bounds)
                if fast is not None:
                    if fast.num_rows:
                        decoded = decoder(fast)
                        if decoded.num_rows:
                            yield split, decoded
                    continue
            batch = general(split, data, limit, bounds)
            if batch is not None:
                yield split, batch


def _past(data: bytes | bytearray | memoryview, max_offset: int | None) -> bool:
    """Whether the piece's first batch starts at or after ``max_offset``: nothing more of the split is
    wanted."""
    return max_offset is not None and int.from_bytes(data[:8], "big", signed=True) >= max_offset


def _scanned_commits(split: logdir.Split, bounds: _Bounds, general: _General) -> Iterator[Any]:
    """The offset commits of ``split`` by the compiled pass, read in small pieces (still in the CPU's
    cache when they are decoded) and gathered into batches of about ``_CHUNK_BYTES`` of segment; a piece the
    pass does not handle is decoded by ``general``."""
    from regroup_pipeline.commitscan import CommitColumns

    columns: CommitColumns | None = None
    for data, limit in logdir.read_split(split, _PIECE_BYTES, reuse=True):
        if _past(data, bounds[1]):
            break
        added = columns.add(data, limit, split.partition, *bounds) if columns is not None else False
        if added is False:
            if columns is not None and columns.count:
                yield columns.batch()
            columns = CommitColumns.for_piece(data, limit, _BATCH_ROWS, _CHUNK_BYTES)
            added = columns.add(data, limit, split.partition, *bounds)
        if added:
            continue
        if columns is not None and columns.count:
            yield columns.batch()
        columns = None
        batch = general(split, bytes(data), limit, bounds)  # the reused piece: its bytes, kept
        if batch is not None:
            yield batch
    if columns is not None and columns.count:
        yield columns.batch()


def read_local(options: Mapping[str, str], limit: int | None = None) -> Any:
    """The rows this source gives for ``options``, as one Arrow table, read in this process by the tasks'
    own code: for inputs so small that one process reads them sooner than Spark would plan and schedule
    tasks to. None as soon as there are more than ``limit`` rows."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

    opts = ReadOptions.parse(options)
    reader = _BatchReader(opts)
    batches = []
    rows = 0
    for batch in itertools.chain.from_iterable(reader.read(part) for part in reader.partitions()):
        rows += batch.num_rows
        if limit is not None and rows > limit:
            return None
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=_arrow_schema(opts.decode))


def first_batch(options: Mapping[str, str]) -> Any | None:
    """The first batch this source's first task gives for ``options``, read in this process (what a batch
    of this source looks like, for the benchmark's transfer bound); None when there is none."""
    reader = _BatchReader(ReadOptions.parse(options))
    parts = reader.partitions()
    return next(iter(reader.read(parts[0])), None) if parts else None


class _BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[Any]:
        parts = self.opts.partitions()
        total = sum(seg.size for p in parts for seg in p.segments)
        wanted = self.opts.min_partitions or os.cpu_count() or 1
        limit = self.opts.max_split_bytes
        if self.opts.decode in _WHOLE_PARTITIONS:
            # At least ``minPartitions`` tasks when there is enough data, at most maxSplitBytes each.
            target = min(limit or DEFAULT_SPLIT_BYTES, max(_MIN_TASK_BYTES, -(-total // wanted)))
            splits = logdir.plan_splits(parts, total + 1)  # a split per segment
            return _pack_partitions(splits, target, wanted) or [_TaskPartition(_Task((), None))]
        # Tasks of even size, of at most maxSplitBytes, as many as that takes rounded up to a multiple of
        # ``minPartitions``: for a few hundred MB, one task per core. A task of a Python data source costs
        # Spark a quarter of a second or so on its own, which many small tasks would pay again and again.
        count = _task_count(total, limit or _TASK_BYTES, wanted)
        target = max(_MIN_TASK_BYTES, -(-total // count))
        splits = logdir.plan_splits(parts, target)
        return _spread([[s] for s in splits], count) or [_TaskPartition(_Task((), None))]

    def read(self, partition: Any) -> Iterator[Any]:
        return _read_task(partition.task, self.opts)


Offsets = dict[str, dict[str, int]]


class _StreamReader(DataSourceStreamReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def initialOffset(self) -> Offsets:  # pyspark's method name
        out: Offsets = {}
        for p in self.opts.partitions():
            out.setdefault(p.topic, {})[str(p.partition)] = p.log_start_offset
        return out

    def latestOffset(self) -> Offsets:  # pyspark's method name
        out: Offsets = {}
        for p in self.opts.partitions():
            out.setdefault(p.topic, {})[str(p.partition)] = logdir.partition_end(p).log_end_offset
        return out

    def partitions(self, start: Offsets, end: Offsets) -> list[Any]:
        splits: list[logdir.Split] = []
        bounds: list[int] = []
        for p in self.opts.partitions():
            hi = end.get(p.topic, {}).get(str(p.partition))
            if hi is None:
                continue  # appeared after this micro-batch was planned
            lo = max(start.get(p.topic, {}).get(str(p.partition), p.log_start_offset), p.log_start_offset)
            if hi <= lo:
                continue
            segs = p.segments
            for i, seg in enumerate(segs):
                seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else None
                if seg.base_offset >= hi or (seg_end is not None and seg_end <= lo) or seg.size == 0:
                    continue
                splits.append(logdir.Split(p.topic, p.partition, seg.path, 0, seg.size, lo))
                bounds.append(hi)
        return _pack(splits, self.opts.max_split_bytes or DEFAULT_SPLIT_BYTES, bounds)

    def read(self, partition: Any) -> Iterator[Any]:
        return _read_task(partition.task, self.opts)

    def commit(self, end: Offsets) -> None:
        pass


class RegroupDataSource(DataSource):
    """``format("regroup")``: raw records of a broker data directory (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(_arrow_schema(self.options.get("decode")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # pyspark's name
        opts = ReadOptions.parse(self.options)
        if opts.decode in _WHOLE_PARTITIONS:
            raise ValueError(f"decode={opts.decode} needs whole partitions: it is for batch reads only")
        return _StreamReader(opts)


def register(spark: Any) -> None:
    """Make ``format("regroup")`` available in ``spark``."""
    spark.dataSource.register(RegroupDataSource)


@dataclass(frozen=True, slots=True)
class HistoryOutputs:
    """Where :func:`write_history` writes: the ``offsets`` table (``history``) and, folded or decoded by the
    same tasks on the way, the per-key rows (``keys``,
    :data:`~regroup_pipeline.offsetkeys.KEY_ARROW_SCHEMA`), the commit runs (``runs``,
    :data:`~regroup_pipeline.offsetkeys.RUN_ARROW_SCHEMA`; needs ``keys``), the GroupMetadata and
    KIP-848 records of the partitions read (``group_records``, ``consumer_group_records``, with the schemas
    of the ``group_metadata`` and ``consumer_group_records`` reads), each key's last record (``latest``:
    the history's rows with ``is_current``) and the committed offsets in force at the lag grid's instants,
    looked up in the data topics' records (``samples``,
    :data:`~regroup_pipeline.offsetkeys.SAMPLE_ARROW_SCHEMA`; needs a grid and the records' index)."""

    history: str
    keys: str | None = None
    runs: str | None = None
    group_records: str | None = None
    consumer_group_records: str | None = None
    latest: str | None = None
    samples: str | None = None


@dataclass(frozen=True, slots=True)
class HistoryWritten:
    """What :func:`write_history` wrote: the history's rows and its earliest record timestamp (epoch
    milliseconds, rounded down; None without rows)."""

    rows: int
    first_record_ms: int | None


def first_commit_ms(options: Mapping[str, str]) -> int | None:
    """An estimate, read in this process before any task runs, of the earliest record timestamp of the
    offset commits that ``write_history`` would read with ``options`` (epoch milliseconds): the earliest
    among the first commits of each ``__consumer_offsets`` partition (from the start of its segments, up
    to ``_PROBE_BYTES`` of each, until one holds commits). It is the true one when each partition's
    timestamps grow with its offsets, as they do when a coordinator stamps the records it appends with its
    clock; :class:`HistoryWritten` tells the true one. None when none was found."""
    opts = ReadOptions.parse(
        {**options, "recordTypes": record_types_option(OFFSET_COMMIT_TYPES), "decode": "offset_commits"}
    )
    earliest: int | None = None
    for part in opts.partitions():
        for split in logdir.plan_splits([part], logdir.partition_size(part) + 1):  # one per segment
            probe = replace(split, end=min(split.end, split.start + _PROBE_BYTES))
            stamps = [
                batch.column("record_timestamp").cast("int64").to_numpy()
                for _split, batch in _decoded_splits(_Task((probe,), None), opts)
            ]
            if stamps:
                first = min(int(s.min()) for s in stamps) // 1000
                earliest = first if earliest is None else min(earliest, first)
                break
    return earliest


def write_history(
    spark: Any,
    options: dict[str, str],
    outputs: HistoryOutputs,
    grid: LagGrid | None = None,
    records: RecordIndex | None = None,
) -> HistoryWritten:
    """Write the ``offset_history`` read of ``options`` (the data source's options; ``decode`` and
    ``recordTypes`` are set here) as a Parquet table at ``outputs.history`` (replacing what is there), and
    what else ``outputs`` asks for (``samples`` at the instants of ``grid``, looked up in ``records``,
    which goes to the tasks as a broadcast).

    The Spark tasks that read and decode the partitions write their rows with pyarrow as they go, one file
    per task, instead of handing every row to the JVM and Spark's Parquet writer: for millions of commits
    that transfer and encoding cost several times the decoding itself. A task reads its partitions' group
    records first (the compiled pass picks them out of the segments): the positions of the records that
    change who owns a group's partitions cut the commit runs. The files land in temporary directories
    beside the targets, which replace them once every task has finished.
    """
    import shutil
    import uuid

    if outputs.runs is not None and outputs.keys is None:
        raise ValueError("runs are folded with the keys: give a keys directory too")
    if outputs.samples is not None and (grid is None or records is None):
        raise ValueError("samples are taken at a grid's instants and looked up: give the grid and records")
    opts = ReadOptions.parse(
        {**options, "recordTypes": record_types_option(OFFSET_COMMIT_TYPES), "decode": "offset_history"}
    )
    read_groups = outputs.runs is not None or outputs.group_records is not None
    read_consumer_groups = outputs.runs is not None or outputs.consumer_group_records is not None
    # Both kinds of group records come from one pass over the segments (each pass walks every record).
    group_types = ((GROUP_METADATA_TYPE,) if read_groups else ()) + (
        CONSUMER_GROUP_RECORD_TYPES if read_consumer_groups else ()
    )
    group_opts = replace(opts, record_types=group_types, decode=_GROUP_RECORDS)
    tasks = [p.task for p in _BatchReader(opts).partitions()]
    named = {field.name: getattr(outputs, field.name) for field in fields(outputs)}
    targets = {name: os.path.abspath(d) for name, d in named.items() if d is not None}
    stagings = {name: f"{target}.tmp-{uuid.uuid4().hex}" for name, target in targets.items()}
    for staging in stagings.values():
        os.makedirs(staging)
    shared = spark.sparkContext.broadcast(records) if outputs.samples is not None else None

    def write_task(indices: Iterator[int]) -> Iterator[tuple[int, int | None]]:
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
        import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

        from regroup_pipeline.decode import (
            CONSUMER_GROUP_ARROW_SCHEMA,
            GROUP_ARROW_SCHEMA,
            HISTORY_ARROW_SCHEMA,
            decode_consumer_group_records,
            decode_group_metadata,
        )
        from regroup_pipeline.offsetkeys import (
            SAMPLE_ARROW_SCHEMA,
            OffsetKeys,
            grid_samples,
            membership_positions,
        )

        def records(wanted: bool, raw: list[Any], decoder: Any, schema: Any, output: str, file: str) -> Any:
            """The task's records of one kind (None unless ``wanted``), written out when asked for."""
            if not wanted:
                return None
            table = pa.Table.from_batches([decoder(batch) for batch in raw], schema)
            if output in stagings:
                pq.write_table(table, os.path.join(stagings[output], file), compression="snappy")
            return table

        # Dictionary pages for the names only: for the numbers and times they cost a quarter of the
        # write and save little (each commit's offsets and times differ from the last).
        history_dictionary = [f.name for f in HISTORY_ARROW_SCHEMA if pa.types.is_string(f.type)]
        for i in indices:
            name = f"part-{i:05d}-{uuid.uuid4().hex}.parquet"
            raw = list(_read_task(tasks[i], group_opts)) if group_types else []
            groups = records(
                read_groups, raw, decode_group_metadata, GROUP_ARROW_SCHEMA, "group_records", name
            )
            consumer_groups = records(
                read_consumer_groups,
                raw,
                decode_consumer_group_records,
                CONSUMER_GROUP_ARROW_SCHEMA,
                "consumer_group_records",
                name,
            )
            boundaries = membership_positions(groups, consumer_groups) if outputs.runs is not None else None
            keys = OffsetKeys(boundaries) if outputs.keys is not None else None
            rows = 0
            earliest: int | None = None
            latest: list[Any] = []
            samples: list[Any] = []
            history_file = os.path.join(stagings["history"], name)
            with pq.ParquetWriter(
                history_file, HISTORY_ARROW_SCHEMA, compression="snappy", use_dictionary=history_dictionary
            ) as writer:
                for batch in _read_task(tasks[i], opts):
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    first = pc.min(batch.column("record_timestamp").cast(pa.int64())).as_py()
                    if first is not None:
                        earliest = first if earliest is None else min(earliest, first)
                    if keys is not None:
                        keys.feed(batch)
                    if "latest" in stagings:
                        latest.append(batch.filter(batch.column("is_current")))
                    if shared is not None and grid is not None:
                        samples.append(shared.value.fill(grid_samples(batch, grid)))
            if "latest" in stagings:
                table = pa.Table.from_batches(latest, HISTORY_ARROW_SCHEMA)
                pq.write_table(table, os.path.join(stagings["latest"], name), compression="snappy")
            if "samples" in stagings:
                table = pa.concat_tables(samples) if samples else SAMPLE_ARROW_SCHEMA.empty_table()
                pq.write_table(table, os.path.join(stagings["samples"], name), compression="snappy")
            if keys is not None:
                pq.write_table(keys.finish(), os.path.join(stagings["keys"], name), compression="snappy")
                if boundaries is not None:
                    pq.write_table(
                        keys.finish_runs(), os.path.join(stagings["runs"], name), compression="snappy"
                    )
            # Epoch microseconds to milliseconds, rounded down as Spark's unix_millis does.
            yield rows, None if earliest is None else earliest // 1000

    try:
        written = (
            spark.sparkContext.parallelize(range(len(tasks)), max(len(tasks), 1))
            .mapPartitions(write_task)
            .collect()
        )
        for output, staging in stagings.items():
            with open(os.path.join(staging, "_SUCCESS"), "w"):
                pass
            target = targets[output]
            if os.path.isdir(target):
                shutil.rmtree(target)
            os.replace(staging, target)
    finally:
        for staging in stagings.values():
            shutil.rmtree(staging, ignore_errors=True)
        if shared is not None:
            shared.destroy()
    firsts = [first for _rows, first in written if first is not None]
    return HistoryWritten(sum(rows for rows, _first in written), min(firsts) if firsts else None)
