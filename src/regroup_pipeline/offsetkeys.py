"""Per group/topic/partition summaries of a commit history, folded while the history is read.

The tasks that read ``__consumer_offsets`` partitions see each key's commits in log order (a group's
records all live in one partition), so what :func:`regroup_pipeline.monitoring.commit_activity` derives
with two aggregations over every commit — the key's current life (since its last tombstone), the committed
offset the life started with, when the current offset came into force, commits in the life — folds here in
one compiled pass per batch (numba), state kept per key. Rows of :data:`KEY_ARROW_SCHEMA` come out, one per
key, tombstoned keys included (``deleted``), with the earliest record timestamp (the lag grid's start).

Given the positions of the groups' membership records (GroupMetadata and KIP-848 current-assignment
records, which say who owns which partition from there on), the same pass also cuts each key's commits
into runs that no membership record interrupts (:data:`RUN_ARROW_SCHEMA`): every commit of a run has the
same owner, so ``member_commits`` credits runs instead of every commit.

Given the lag table's sampling grid (:class:`LagGrid`), the tasks also pick out the committed offset in
force at each of its instants (:func:`grid_samples`): each record is in force from its timestamp until its
successor's (``valid_until``), so the instants its interval holds follow from the record alone. Looked up
in the data topics' records (:class:`~regroup_pipeline.laglookup.RecordIndex`) by the same tasks, they
are the lag table's rows of its grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
from numba import njit  # type: ignore[import-untyped,unused-ignore]  # numba ships no type information

from regroup_pipeline.logformat import TIMESTAMP, key_ids

__all__ = [
    "KEY_ARROW_SCHEMA",
    "RUN_ARROW_SCHEMA",
    "SAMPLE_ARROW_SCHEMA",
    "LagGrid",
    "OffsetKeys",
    "grid_samples",
    "membership_positions",
]

# One row per group/topic/partition of a commit history. ``deleted``: its last record is a tombstone (the
# other columns but ``min_record_timestamp`` then say nothing). The life is what follows the last
# tombstone (or the whole history): ``life_started`` the first record's time (the tombstone's successor),
# ``life_offset`` its committed offset; ``changed_until``: the end of the interval of the life's last
# record whose committed offset differs from the current one (null: the offset never changed in the
# life); ``commits``: commit records of the life written at or after ``life_started``.
KEY_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("deleted", pa.bool_()),
        pa.field("min_record_timestamp", TIMESTAMP),
        pa.field("committed_offset", pa.int64()),
        pa.field("commit_timestamp", TIMESTAMP),
        pa.field("life_started", TIMESTAMP),
        pa.field("life_offset", pa.int64()),
        pa.field("changed_until", TIMESTAMP),
        pa.field("commits", pa.int64()),
    ]
)

# Runs of a key's commits between two membership records of its group: the position of the run's first
# commit, its commits, their earliest and latest commit timestamps and earliest record timestamp.
RUN_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("record_offset", pa.int64()),
        pa.field("commits", pa.int64()),
        pa.field("first_commit", TIMESTAMP),
        pa.field("last_commit", TIMESTAMP),
        pa.field("first_record_timestamp", TIMESTAMP),
    ]
)

# The committed offset of a group/topic/partition in force at an instant of the lag grid (tombstones are in
# force too, but say there is none: they have no rows), and what the lag lookup finds for it: where the log
# ended then, and the timestamp of the first record at or above the committed offset.
SAMPLE_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("sample_time", TIMESTAMP),
        pa.field("committed_offset", pa.int64()),
        pa.field("commit_timestamp", TIMESTAMP),
        pa.field("log_end_offset", pa.int64()),
        pa.field("first_unconsumed_timestamp", TIMESTAMP),
    ]
)
_GRID_ARROW_SCHEMA: Final = SAMPLE_ARROW_SCHEMA.remove(len(SAMPLE_ARROW_SCHEMA) - 1)


def _ceil_div(a: Any, b: int) -> Any:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class LagGrid:
    """The instants at which the lag table samples every key: ``start_ms + i * step_ms`` for
    ``0 <= i < count``, all before ``end_ms`` (the window's end, where each key's last record stops being
    in force)."""

    start_ms: int
    step_ms: int
    count: int
    end_ms: int

    @classmethod
    def spanning(cls, start_ms: int, end_ms: int, samples: int, interval_ms: int | None) -> LagGrid | None:
        """``samples`` instants from ``start_ms`` to ``end_ms`` (or one every ``interval_ms``); None for an
        empty span."""
        span = end_ms - start_ms
        if span <= 0:
            return None
        step = interval_ms if interval_ms else max(1, _ceil_div(span, samples))
        return cls(start_ms, step, _ceil_div(span, step), end_ms)


def grid_samples(batch: Any, grid: LagGrid) -> Any:
    """Rows of :data:`SAMPLE_ARROW_SCHEMA` without its last column, the lookups still to do
    (``log_end_offset`` null), as a ``pyarrow.Table``, for the history rows of ``batch``
    (:data:`~regroup_pipeline.decode.HISTORY_ARROW_SCHEMA`): each commit in force at an instant of
    ``grid``, once per instant. Instants are compared in milliseconds, as the lag table's are (a
    timestamp's milliseconds rounded down)."""
    stamp = batch.column("record_timestamp").cast(pa.int64()).to_numpy() // 1000
    until = batch.column("valid_until").cast(pa.int64()).fill_null(grid.end_ms * 1000).to_numpy() // 1000
    deleted = batch.column("deleted").fill_null(False).to_numpy(zero_copy_only=False)
    first = np.maximum(0, _ceil_div(stamp - grid.start_ms, grid.step_ms))
    last = np.minimum(grid.count - 1, _ceil_div(until - grid.start_ms, grid.step_ms) - 1)
    counts = np.where(deleted, 0, np.maximum(0, last - first + 1))
    rows = np.repeat(np.arange(counts.size), counts)
    # Each row's instants are consecutive: the first, then one more per repeat.
    nth = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    instants = grid.start_ms + (first[rows] + nth) * grid.step_ms
    at = pa.array(rows)
    columns = [batch.column(name).take(at) for name in ("group", "topic", "partition")]
    columns.append(pa.array(instants * 1000, pa.int64()).cast(TIMESTAMP))
    columns.extend(batch.column(name).take(at) for name in ("committed_offset", "commit_timestamp"))
    columns.append(pa.nulls(rows.size, pa.int64()))
    return pa.Table.from_arrays(columns, schema=_GRID_ARROW_SCHEMA)


# Columns of the fold's state, one slot per key.
_MIN_TS, _LAST_OFFSET, _LAST_COMMIT_TS, _LIFE_STARTED, _LIFE_OFFSET, _CHANGED_UNTIL = range(6)
_PREV_OFFSET, _PREV_UNTIL, _COMMITS = 6, 7, 8
# The open run: its interval between membership records, first position, commits, commit and record times.
_RUN_INTERVAL, _RUN_OFFSET, _RUN_COMMITS, _RUN_FIRST_COMMIT, _RUN_LAST_COMMIT, _RUN_FIRST_RECORD = range(
    9, 15
)
_I64_STATE: Final = 15
# Flags: key seen, last record a tombstone, last commit timestamp null, life start known, life offset set,
# changed_until set, changed_until null, a record seen in the life, previous record's valid_until null.
_SEEN, _DELETED, _COMMIT_TS_NULL, _LIFE_KNOWN, _LIFE_OFFSET_SET, _CHANGED_SET = range(6)
_CHANGED_NULL, _IN_LIFE, _PREV_UNTIL_NULL = 6, 7, 8
_RUN_OPEN, _RUN_COMMIT_SEEN = 9, 10  # a run is open; it has a commit timestamp
_FLAG_STATE: Final = 11


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _fold(  # one row at a time, in log order per key: the state machine reads best as one function
    key: Any,
    stamp: Any,
    until: Any,
    until_null: Any,
    offset: Any,
    commit_ts: Any,
    commit_ts_null: Any,
    deleted: Any,
    position: Any,
    with_runs: bool,
    slot_bounds: Any,
    bounds: Any,
    state: Any,
    flags: Any,
    runs: Any,
) -> int:
    """Folds the rows into ``state``/``flags``; with ``with_runs``, runs closed by a row of another
    interval go to ``runs`` (see :func:`_close_run`); returns how many. A row's interval is how many of
    its group's membership positions (``bounds[slot_bounds[k, 0]:slot_bounds[k, 1]]``, sorted) lie before
    it."""
    closed = 0
    for r in range(key.size):
        k = key[r]
        ts = stamp[r]
        if not flags[k, _SEEN]:
            flags[k, _SEEN] = True
            flags[k, _LIFE_KNOWN] = True
            state[k, _MIN_TS] = ts
            state[k, _LIFE_STARTED] = ts
        elif ts < state[k, _MIN_TS]:
            state[k, _MIN_TS] = ts
        if deleted[r]:
            # A tombstone ends the key's life; the next record starts another.
            flags[k, _DELETED] = True
            flags[k, _LIFE_KNOWN] = not until_null[r]
            state[k, _LIFE_STARTED] = until[r]
            flags[k, _LIFE_OFFSET_SET] = False
            flags[k, _CHANGED_SET] = False
            flags[k, _IN_LIFE] = False
            state[k, _COMMITS] = 0
            continue
        o = offset[r]
        if not flags[k, _LIFE_OFFSET_SET]:
            flags[k, _LIFE_OFFSET_SET] = True
            state[k, _LIFE_OFFSET] = o
        if flags[k, _IN_LIFE] and o != state[k, _PREV_OFFSET]:
            # The previous record is, so far, the last one with an offset other than the current one.
            flags[k, _CHANGED_SET] = True
            flags[k, _CHANGED_NULL] = flags[k, _PREV_UNTIL_NULL]
            state[k, _CHANGED_UNTIL] = state[k, _PREV_UNTIL]
        flags[k, _IN_LIFE] = True
        state[k, _PREV_OFFSET] = o
        state[k, _PREV_UNTIL] = until[r]
        flags[k, _PREV_UNTIL_NULL] = until_null[r]
        if flags[k, _LIFE_KNOWN] and ts >= state[k, _LIFE_STARTED]:
            state[k, _COMMITS] += 1
        flags[k, _DELETED] = False
        state[k, _LAST_OFFSET] = o
        state[k, _LAST_COMMIT_TS] = commit_ts[r]
        flags[k, _COMMIT_TS_NULL] = commit_ts_null[r]
        if not with_runs:
            continue
        interval = _before(bounds, slot_bounds[k, 0], slot_bounds[k, 1], position[r])
        if flags[k, _RUN_OPEN] and state[k, _RUN_INTERVAL] != interval:
            _close_run(k, state, flags, runs, closed)
            closed += 1
        if not flags[k, _RUN_OPEN]:
            flags[k, _RUN_OPEN] = True
            flags[k, _RUN_COMMIT_SEEN] = False
            state[k, _RUN_INTERVAL] = interval
            state[k, _RUN_OFFSET] = position[r]
            state[k, _RUN_COMMITS] = 0
            state[k, _RUN_FIRST_RECORD] = ts
        state[k, _RUN_COMMITS] += 1
        state[k, _RUN_FIRST_RECORD] = min(state[k, _RUN_FIRST_RECORD], ts)
        if not commit_ts_null[r]:
            c = commit_ts[r]
            if not flags[k, _RUN_COMMIT_SEEN]:
                flags[k, _RUN_COMMIT_SEEN] = True
                state[k, _RUN_FIRST_COMMIT] = c
                state[k, _RUN_LAST_COMMIT] = c
            else:
                state[k, _RUN_FIRST_COMMIT] = min(state[k, _RUN_FIRST_COMMIT], c)
                state[k, _RUN_LAST_COMMIT] = max(state[k, _RUN_LAST_COMMIT], c)
    return closed


@njit(cache=True, nogil=True, inline="always")  # type: ignore[misc,unused-ignore]
def _before(bounds: Any, lo: int, hi: int, position: int) -> int:
    """How many of the sorted ``bounds[lo:hi]`` are below ``position``."""
    a, b = lo, hi
    while a < b:
        m = (a + b) >> 1
        if bounds[m] < position:
            a = m + 1
        else:
            b = m
    return a - lo


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _close_run(k: int, state: Any, flags: Any, runs: Any, at: int) -> None:
    """Row ``at`` of ``runs``: key slot, whether the run has a commit timestamp, first position, commits,
    earliest and latest commit timestamps, earliest record timestamp."""
    runs[at, 0] = k
    runs[at, 1] = flags[k, _RUN_COMMIT_SEEN]
    runs[at, 2] = state[k, _RUN_OFFSET]
    runs[at, 3] = state[k, _RUN_COMMITS]
    runs[at, 4] = state[k, _RUN_FIRST_COMMIT]
    runs[at, 5] = state[k, _RUN_LAST_COMMIT]
    runs[at, 6] = state[k, _RUN_FIRST_RECORD]
    flags[k, _RUN_OPEN] = False


def _micros(column: Any) -> tuple[Any, Any]:
    """A timestamp column as int64 microseconds (nulls as 0) and its null mask."""
    values = column.cast(pa.int64())
    return values.fill_null(0).to_numpy().astype(np.int64), values.is_null().to_numpy(zero_copy_only=False)


def membership_positions(groups: Any, consumer_groups: Any) -> dict[str, Any]:
    """Per group, the sorted positions of the records that change who owns its partitions: its
    GroupMetadata records (``groups``, decoded as the ``group_metadata`` read does) and KIP-848
    current-assignment records (type 8 of ``consumer_groups``), tombstones included — the boundaries of the
    commit runs. Either table may be None."""
    parts: list[Any] = []
    if groups is not None:
        parts.append(groups.select(["group", "record_offset"]))
    if consumer_groups is not None:
        assignments = consumer_groups.filter(pc.equal(consumer_groups.column("record_type"), 8))
        parts.append(assignments.select(["group", "record_offset"]))
    per_group: dict[str, list[int]] = {}
    for table in parts:
        names, offsets = table.column("group").to_pylist(), table.column("record_offset").to_pylist()
        for group, offset in zip(names, offsets, strict=True):
            per_group.setdefault(group, []).append(offset)
    return {group: np.unique(np.asarray(offsets, np.int64)) for group, offsets in per_group.items()}


class OffsetKeys:
    """Folds history batches (:data:`~regroup_pipeline.decode.HISTORY_ARROW_SCHEMA`, each key's rows in
    log order across the batches fed) into one :data:`KEY_ARROW_SCHEMA` row per key and, given
    ``boundaries`` (per group, the sorted positions of its membership records in its ``__consumer_offsets``
    partition), into :data:`RUN_ARROW_SCHEMA` rows."""

    def __init__(self, boundaries: dict[str, Any] | None = None) -> None:
        self._index: dict[tuple[str, str, int], int] = {}
        self._keys: list[tuple[str, str, int]] = []
        self._state = np.zeros((1024, _I64_STATE), np.int64)
        self._flags = np.zeros((1024, _FLAG_STATE), np.bool_)
        self._with_runs = boundaries is not None
        # Every group's membership positions end to end; per group, its slice; per key slot, its group's.
        self._group_bounds: dict[str, tuple[int, int]] = {}
        at = 0
        for group, positions in (boundaries or {}).items():
            self._group_bounds[group] = (at, at + positions.size)
            at += positions.size
        self._bounds = (
            np.concatenate([np.asarray(b, np.int64) for b in boundaries.values()])
            if boundaries
            else np.zeros(0, np.int64)
        )
        self._slot_bounds = np.zeros((1024, 2), np.int64)
        self._runs: list[Any] = []

    def feed(self, batch: Any) -> None:
        if batch.num_rows == 0:
            return
        key = self._key_index(batch)
        stamp, _ = _micros(batch.column("record_timestamp"))
        until, until_null = _micros(batch.column("valid_until"))
        commit_ts, commit_ts_null = _micros(batch.column("commit_timestamp"))
        offset = batch.column("committed_offset").fill_null(0).to_numpy().astype(np.int64)
        deleted = batch.column("deleted").fill_null(False).to_numpy(zero_copy_only=False)
        position = batch.column("record_offset").to_numpy().astype(np.int64)
        runs = np.empty((key.size if self._with_runs else 0, 7), np.int64)
        closed = _fold(
            key,
            stamp,
            until,
            until_null,
            offset,
            commit_ts,
            commit_ts_null,
            deleted,
            position,
            self._with_runs,
            self._slot_bounds,
            self._bounds,
            self._state,
            self._flags,
            runs,
        )
        if closed:
            self._runs.append(runs[:closed].copy())

    def _key_index(self, batch: Any) -> Any:
        """Each row's key slot; slots for new keys are added (the state grows as needed)."""
        codes, first, inverse = np.unique(key_ids([batch]), return_index=True, return_inverse=True)
        at = pa.array(first)
        names = zip(
            batch.column("group").take(at).to_pylist(),
            batch.column("topic").take(at).to_pylist(),
            batch.column("partition").take(at).to_pylist(),
            strict=True,
        )
        slots = np.empty(codes.size, np.int64)
        added: list[tuple[int, tuple[int, int]]] = []
        for i, name in enumerate(names):
            slot = self._index.get(name)
            if slot is None:
                slot = self._index[name] = len(self._keys)
                self._keys.append(name)
                added.append((slot, self._group_bounds.get(name[0], (0, 0))))
            slots[i] = slot
        if len(self._keys) > self._state.shape[0]:
            size = max(len(self._keys), 2 * self._state.shape[0])
            grow = size - self._state.shape[0]
            self._state = np.concatenate([self._state, np.zeros((grow, _I64_STATE), np.int64)])
            self._flags = np.concatenate([self._flags, np.zeros((grow, _FLAG_STATE), np.bool_)])
            self._slot_bounds = np.concatenate([self._slot_bounds, np.zeros((grow, 2), np.int64)])
        for slot, bounds in added:
            self._slot_bounds[slot] = bounds
        return slots[inverse.ravel()]

    def finish(self) -> Any:
        """The keys' rows (a ``pyarrow.Table``) of everything fed so far."""
        n = len(self._keys)
        state, flags = self._state[:n], self._flags[:n]

        def stamps(column: int, null: Any = None) -> Any:
            return pa.array(np.ascontiguousarray(state[:, column]), pa.int64(), mask=null).cast(TIMESTAMP)

        deleted = flags[:, _DELETED]
        life_null = deleted | ~flags[:, _LIFE_KNOWN]
        columns = [
            pa.array([k[0] for k in self._keys], pa.string()),
            pa.array([k[1] for k in self._keys], pa.string()),
            pa.array([k[2] for k in self._keys], pa.int32()),
            pa.array(np.ascontiguousarray(deleted)),
            stamps(_MIN_TS),
            pa.array(np.ascontiguousarray(state[:, _LAST_OFFSET]), pa.int64(), mask=deleted),
            stamps(_LAST_COMMIT_TS, deleted | flags[:, _COMMIT_TS_NULL]),
            stamps(_LIFE_STARTED, life_null),
            pa.array(np.ascontiguousarray(state[:, _LIFE_OFFSET]), pa.int64(), mask=deleted),
            stamps(_CHANGED_UNTIL, deleted | ~flags[:, _CHANGED_SET] | flags[:, _CHANGED_NULL]),
            pa.array(np.ascontiguousarray(state[:, _COMMITS]), pa.int64()),
        ]
        return pa.Table.from_arrays(columns, schema=KEY_ARROW_SCHEMA)

    def finish_runs(self) -> Any:
        """The runs (a ``pyarrow.Table``) of everything fed so far, the open ones closed."""
        n = len(self._keys)
        open_keys = np.flatnonzero(self._flags[:n, _RUN_OPEN])
        last = np.empty((open_keys.size, 7), np.int64)
        for i, k in enumerate(open_keys.tolist()):
            _close_run(k, self._state, self._flags, last, i)
        runs = np.concatenate([*self._runs, last]) if self._runs else last
        self._runs = []
        slot = runs[:, 0].tolist()
        no_commit_ts = runs[:, 1] == 0

        def column(i: int, mask: Any = None) -> Any:
            return pa.array(np.ascontiguousarray(runs[:, i]), pa.int64(), mask=mask)

        columns = [
            pa.array([self._keys[k][0] for k in slot], pa.string()),
            pa.array([self._keys[k][1] for k in slot], pa.string()),
            pa.array([self._keys[k][2] for k in slot], pa.int32()),
            column(2),
            column(3),
            column(4, no_commit_ts).cast(TIMESTAMP),
            column(5, no_commit_ts).cast(TIMESTAMP),
            column(6).cast(TIMESTAMP),
        ]
        return pa.Table.from_arrays(columns, schema=RUN_ARROW_SCHEMA)
