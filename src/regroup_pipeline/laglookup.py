"""The lag rows' lookups in the data topics' records: where a partition's log ended at a past instant, and
the timestamp of the first record a group has not consumed.

Per partition, its records sorted by offset answer "the first record at or above the committed offset",
and sorted by timestamp, with the running maximum of offset + 1, "where the log ended at instant t". Rows
and records meet in one of two ways: a cogroup by partition, which shuffles and sorts both sides
(:func:`lag_lookup`, for any number of records), or — when the records are few — an index of them
broadcast to the tasks that hold the rows, which are looked up where they are, with no shuffle and no sort
of the rows (:class:`RecordIndex`, :func:`lookup_batches`). Both give the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

__all__ = ["BROADCAST_RECORDS", "LOOKUP_SCHEMA", "RecordIndex", "lag_lookup", "lookup_batches"]

# Up to this many records (32 bytes each in the index: 32 MB), the lookups broadcast them instead of
# shuffling them with the rows.
BROADCAST_RECORDS: Final = 1_000_000

LOOKUP_SCHEMA: Final = (
    "group string, topic string, partition int, sample_time timestamp, is_current boolean, kind string, "
    "committed_offset bigint, commit_timestamp timestamp, log_end_offset bigint, "
    "first_unconsumed_timestamp timestamp"
)

_MICROS: Final = pa.timestamp("us", tz="UTC")


def _ints(column: Any) -> Any:
    """An integer or timestamp column as int64 numbers (timestamps in microseconds)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    return column.to_numpy(zero_copy_only=False).astype(np.int64)


def _sorted(offsets: Any, stamps: Any) -> tuple[Any, Any, Any, Any]:
    """One partition's records as (offsets ascending, their timestamps, timestamps ascending, the log end
    offset after each of those)."""
    by_offset = np.argsort(offsets, kind="stable")
    by_time = np.argsort(stamps, kind="stable")
    return offsets[by_offset], stamps[by_offset], stamps[by_time], np.maximum.accumulate(offsets[by_time] + 1)


def _look_up(
    sorted_offsets: Any, offset_stamps: Any, sorted_stamps: Any, ends: Any, committed: Any, sample_us: Any
) -> tuple[Any, Any, Any]:
    """For rows of a partition with records: whether a record at or above the committed offset exists, its
    timestamp, and the log end offset at the sample time."""
    m = sorted_offsets.size
    i = np.searchsorted(sorted_offsets, committed, "left")
    j = np.searchsorted(sorted_stamps, sample_us, "right") - 1
    # Before its first record a log ends where that record lands.
    end_at = np.where(j >= 0, ends[np.maximum(j, 0)], sorted_offsets[0])
    return i < m, offset_stamps[np.minimum(i, m - 1)], end_at


def _unfound(n: int) -> tuple[Any, Any, Any, Any]:
    """(found, first_ts, end_at, end_null) of ``n`` rows before any lookup: nothing found, no log end."""
    return np.zeros(n, bool), np.zeros(n, np.int64), np.zeros(n, np.int64), np.ones(n, bool)


def _filled(rows: Any, found: Any, first_ts: Any, end_at: Any, end_null: Any) -> Any:
    """``rows`` (a table or a batch of :data:`LOOKUP_SCHEMA` without its last column) with log_end_offset,
    where null, and first_unconsumed_timestamp filled in."""
    known_end = rows.column("log_end_offset")
    given = known_end.is_valid().to_numpy(zero_copy_only=False)
    given_end = _ints(known_end.fill_null(0))
    log_end = pa.array(np.where(given, given_end, end_at), pa.int64(), mask=~given & end_null)
    first = pa.array(first_ts, pa.int64(), mask=~found).cast(_MICROS)
    return (
        rows.select([n for n in rows.column_names if n != "log_end_offset"])
        .append_column("log_end_offset", log_end)
        .append_column("first_unconsumed_timestamp", first)
    )


def lag_lookup(samples: Any, records: Any) -> Any:
    """``applyInArrow`` function for one partition: ``samples`` (lag rows) and ``records`` (offset,
    timestamp) as Arrow tables → the lag rows with log_end_offset (when null) and
    first_unconsumed_timestamp filled in."""
    n = samples.num_rows
    offsets = _ints(records.column("offset"))
    if offsets.size and n:
        found, first_ts, end_at = _look_up(
            *_sorted(offsets, _ints(records.column("timestamp"))),
            _ints(samples.column("committed_offset")),
            _ints(samples.column("sample_time")),
        )
        return _filled(samples, found, first_ts, end_at, np.zeros(n, bool))
    return _filled(samples, *_unfound(n))


def _partition_keys(rows: Any) -> tuple[Any, list[str]]:
    """Each row's (topic, partition) as one int64 (the topic's code in the returned names, shifted left
    32 bits, or'ed with the partition)."""
    column = rows.column("topic")
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    topics = pc.dictionary_encode(column)
    codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes << 32 | _ints(rows.column("partition")), topics.dictionary.to_pylist()


class RecordIndex:
    """The records of :func:`lag_lookup`, every partition's at once, built on the driver and broadcast:
    per partition the four sorted arrays of its records, concatenated (``_bounds`` delimits them)."""

    __slots__ = ("_bounds", "_ends", "_offset_stamps", "_offsets", "_partitions", "_stamps")

    def __init__(self, records: Any) -> None:
        """``records``: an Arrow table of topic, partition, offset, timestamp."""
        keys, names = _partition_keys(records)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        offsets = _ints(records.column("offset"))[order]
        stamps = _ints(records.column("timestamp"))[order]
        if keys.size:
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            stops = np.r_[starts[1:], keys.size]
        else:
            starts = stops = np.zeros(0, np.int64)
        self._partitions: dict[tuple[str, int], int] = {}
        parts: list[tuple[Any, Any, Any, Any]] = []
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            key = int(keys[a])
            self._partitions[(names[key >> 32], key & 0xFFFFFFFF)] = len(parts)
            parts.append(_sorted(offsets[a:b], stamps[a:b]))
        self._bounds = np.r_[0, (stops - starts).cumsum()].astype(np.int64)
        empty = np.zeros(0, np.int64)
        self._offsets, self._offset_stamps, self._stamps, self._ends = (
            np.concatenate([p[k] for p in parts]) if parts else empty for k in range(4)
        )

    def fill(self, rows: Any) -> Any:
        """The lag rows of one Arrow batch (any partitions) with their lookups done, as :func:`lag_lookup`
        does them."""
        n = rows.num_rows
        found, first_ts, end_at, end_null = _unfound(n)
        if n:
            keys, names = _partition_keys(rows)
            distinct, inverse = np.unique(keys, return_inverse=True)
            where = [self._partitions.get((names[k >> 32], k & 0xFFFFFFFF), -1) for k in distinct.tolist()]
            segment = np.asarray(where, np.int64)[inverse.reshape(-1)]
            order = np.argsort(segment, kind="stable")
            committed = _ints(rows.column("committed_offset"))
            sample_us = _ints(rows.column("sample_time"))
            bounds = self._bounds
            for at in np.split(order, np.flatnonzero(np.diff(segment[order])) + 1):
                s = int(segment[at[0]])
                if s < 0:
                    continue  # no records: as lag_lookup with none
                a, b = int(bounds[s]), int(bounds[s + 1])
                found[at], first_ts[at], end_at[at] = _look_up(
                    self._offsets[a:b],
                    self._offset_stamps[a:b],
                    self._stamps[a:b],
                    self._ends[a:b],
                    committed[at],
                    sample_us[at],
                )
                end_null[at] = False
        return _filled(rows, found, first_ts, end_at, end_null)


def lookup_batches(index: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: the lag rows' batches filled from the broadcast :class:`RecordIndex`."""
    records: RecordIndex = index.value
    for batch in batches:
        yield records.fill(batch)
