"""The analytics: Spark DataFrame functions from :class:`~regroup_pipeline.inputs.Inputs` to tables.

- :func:`offsets` — every offset commit (and tombstone) with the interval it was in force;
  :func:`offsets_as_of` gives the committed offsets at any instant.
- :func:`lag` — log-end offset minus committed offset, and time lag, per group/topic/partition, on a time
  grid and at the window's end; Empty groups included (anything with a committed offset).
- :func:`rebalances` — one row per generation, with members, assignments, joins and leaves;
  :func:`rebalance_frequency` — per group.
- :func:`expiring_offsets` — offsets that ``offsets.retention.minutes`` removes within a horizon.
- :func:`assignment_health` — per generation, subscribed partitions left unassigned or assigned twice.
- :func:`monitoring_tables` — lag trend, retention risk, stuck partitions, member commits and a summary per
  group (:mod:`regroup_pipeline.monitoring`), sharing the lag table's lookups.
- :func:`consumer_group_members` — the current members of KIP-848 ``consumer`` groups: subscription, member
  epoch, current assignment (topic ids named) and partitions pending revocation.

Group states come from the records: a generation with members is ``Stable``, one without is ``Empty``, a
tombstone makes the group ``Dead``; groups known only from offset commits (simple groups) are ``Empty``. A
group's protocol is that of its latest record of group metadata (GroupMetadata: ``classic``,
ConsumerGroupMetadata: ``consumer``); a ``consumer`` group's state is Kafka's (``Empty``, ``Assigning``,
``Reconciling``, ``Stable``; ``Dead`` once its records are tombstoned), from its epochs and members' records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from regroup_pipeline import laglookup, monitoring
from regroup_pipeline.datasource import read_local
from regroup_pipeline.decode import HISTORY_ARROW_SCHEMA
from regroup_pipeline.inputs import DATA_COLUMNS, Inputs, TimeWindow, count_partitions
from regroup_pipeline.offsetkeys import LagGrid

__all__ = [
    "CONSUMER_GROUP_MEMBERS_SCHEMA",
    "DEFAULT_LAG_SAMPLES",
    "DEFAULT_RETENTION_MINUTES",
    "Folded",
    "MonitoringTables",
    "Tables",
    "assignment_health",
    "compute_all",
    "consumer_group_members",
    "data_record_index",
    "expiring_offsets",
    "group_states",
    "lag",
    "monitoring_tables",
    "offsets",
    "offsets_as_of",
    "rebalance_frequency",
    "rebalances",
    "release_lookups",
]

DEFAULT_RETENTION_MINUTES: Final = 10080  # offsets.retention.minutes
DEFAULT_HORIZON_MS: Final = 24 * 3600 * 1000
DEFAULT_LAG_SAMPLES: Final = 60
_TP: Final = ("topic", "partition")
_POSITION: Final = ("record_partition", "record_offset")
_GTP: Final = ("group", "topic", "partition")


def _ms(col: str | Column) -> Column:
    return F.unix_millis(F.col(col) if isinstance(col, str) else col)


def _ts(ms: int | Column) -> Column:
    return F.timestamp_millis(F.lit(ms) if isinstance(ms, int) else ms)


def _since(df: DataFrame, column: str, window: TimeWindow) -> DataFrame:
    if window.since_ms is None:
        return df
    return df.where(F.col(column) >= _ts(window.since_ms))


# ------------------------------------------------------------------------------------------ offsets


def _offset_history(inputs: Inputs) -> DataFrame:
    """Every commit record with ``valid_until`` (the next record's time for the same key, else null)."""
    if inputs.history is not None:
        with_interval = inputs.history
    else:
        order = Window.partitionBy(*_GTP).orderBy("record_partition", "record_offset")
        with_interval = inputs.commits.withColumn(
            "valid_until", F.lead("record_timestamp").over(order)
        ).withColumn("is_current", F.lead("record_offset").over(order).isNull())
    return with_interval.select(*HISTORY_ARROW_SCHEMA.names)


def offsets(inputs: Inputs, *, history: DataFrame | None = None) -> DataFrame:
    """The full commit history: one row per offset-commit record in ``__consumer_offsets`` (tombstones
    have ``deleted`` true and null offset fields). A row is in force from ``record_timestamp`` until
    ``valid_until`` (null: still in force, ``is_current``)."""
    return _since(
        history if history is not None else _offset_history(inputs), "record_timestamp", inputs.window
    )


def offsets_as_of(offset_table: DataFrame, instant_ms: int) -> DataFrame:
    """The committed offsets in force at ``instant_ms`` (epoch ms), from an :func:`offsets` table."""
    t = _ts(instant_ms)
    live = (F.col("record_timestamp") <= t) & (F.col("valid_until").isNull() | (F.col("valid_until") > t))
    return offset_table.where(live & ~F.col("deleted"))


def _latest(history: DataFrame) -> DataFrame:
    """The last record of every group/topic/partition (tombstones included)."""
    return history.where(F.col("is_current"))


def _current_offsets(history: DataFrame) -> DataFrame:
    return _latest(history).where(~F.col("deleted"))


# ------------------------------------------------------------------------------------------ group state


def _group_records(inputs: Inputs) -> DataFrame:
    """Group metadata records with their group incarnation (a tombstone starts a new one)."""
    order = Window.partitionBy("group").orderBy("record_partition", "record_offset")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    return inputs.groups.withColumn(
        "incarnation", F.coalesce(F.sum(F.col("deleted").cast("int")).over(before), F.lit(0))
    )


_NAMED_PARTITIONS: Final = "array<struct<topic:string,topic_id:string,partitions:array<int>>>"
CONSUMER_GROUP_MEMBERS_SCHEMA: Final = (
    "group string, member_id string, instance_id string, client_id string, client_host string, "
    "rack_id string, subscribed_topics array<string>, subscribed_topic_regex string, server_assignor string, "
    "rebalance_timeout_ms int, classic_session_timeout_ms int, member_epoch int, previous_member_epoch int, "
    f"member_state string, assigned_partitions {_NAMED_PARTITIONS}, "
    f"partitions_pending_revocation {_NAMED_PARTITIONS}, target_partitions {_NAMED_PARTITIONS}, "
    "assigned_at timestamp"
)
_MEMBER_STATES: Final = {0: "stable", 1: "unrevoked_partitions", 2: "unreleased_partitions"}


def _latest_records(consumer_groups: DataFrame, record_type: int, *key: str) -> DataFrame:
    """The last record of each key (``group`` and ``key``) among a type of consumer-group records, with
    ``deleted`` true when it is a tombstone."""
    rows = consumer_groups.where(F.col("record_type") == record_type)
    cols = [c for c in rows.columns if c not in ("group", *key)]
    return (
        rows.groupBy("group", *key)
        .agg(F.max_by(F.struct(*cols), F.struct(*_POSITION)).alias("r"))
        .select("group", *key, "r.*")
    )


def _topic_names(inputs: Inputs) -> DataFrame:
    """One row, one column ``names``: a map topic id → topic name, from the input's topic ids and the
    ConsumerGroupPartitionMetadata records (Kafka ≤4.0) of consumer groups."""
    assert inputs.consumer_groups is not None
    known = (
        inputs.consumer_groups.where((F.col("record_type") == 4) & F.col("topic_metadata").isNotNull())
        .select(F.inline("topic_metadata"))
        .select("topic_id", "topic")
    )
    if inputs.topic_ids is not None:
        known = inputs.topic_ids.select("topic_id", "topic").unionByName(known)
    unique = (
        known.where(F.col("topic_id").isNotNull()).groupBy("topic_id").agg(F.first("topic").alias("topic"))
    )
    return unique.agg(F.map_from_entries(F.collect_list(F.struct("topic_id", "topic"))).alias("names"))


def _named(partitions: Column) -> Column:
    """Topic-id partitions (``topic_id``, ``partitions``) with the topic's name (``topic``; the id itself
    when the name is not known), given the ``names`` map of :func:`_topic_names` in scope."""
    return F.transform(
        partitions,
        lambda a: F.struct(
            F.coalesce(F.element_at("names", a["topic_id"]), a["topic_id"]).alias("topic"),
            a["topic_id"].alias("topic_id"),
            a["partitions"].alias("partitions"),
        ),
    )


# A consumer-group member's ConsumerGroupMemberMetadata columns, as consumer_group_members shows them.
_MEMBER_METADATA_COLUMNS: Final = (
    "group",
    "member_id",
    "instance_id",
    "client_id",
    "client_host",
    "rack_id",
    "subscribed_topics",
    "subscribed_topic_regex",
    "server_assignor",
    "rebalance_timeout_ms",
    "classic_session_timeout_ms",
)


def consumer_group_members(inputs: Inputs) -> DataFrame:
    """The current members of KIP-848 ``consumer`` groups, one row per member: its subscription
    (ConsumerGroupMemberMetadata: instance_id, client_id, client_host, rack_id, subscribed_topics,
    subscribed_topic_regex, server_assignor, rebalance_timeout_ms), its current assignment
    (ConsumerGroupCurrentMemberAssignment: member_epoch, previous_member_epoch, member_state,
    assigned_partitions and partitions_pending_revocation as (topic, topic_id, partitions), assigned_at: the
    record's time) and its target (ConsumerGroupTargetAssignmentMember: target_partitions). A member is
    current while its latest member-metadata record is not a tombstone."""
    if inputs.consumer_groups is None:
        raise ValueError("these inputs hold no consumer-group records")
    cg = inputs.consumer_groups
    subs = _latest_records(cg, 5, "member_id").where(~F.col("deleted"))
    current = _latest_records(cg, 8, "member_id").where(~F.col("deleted"))
    target = _latest_records(cg, 7, "member_id").where(~F.col("deleted"))
    joined = (
        subs.select(*_MEMBER_METADATA_COLUMNS)
        .join(
            current.select(
                "group",
                "member_id",
                "member_epoch",
                "previous_member_epoch",
                "member_state",
                "assigned_partitions",
                "partitions_pending_revocation",
                F.col("record_timestamp").alias("assigned_at"),
            ),
            ["group", "member_id"],
            "left",
        )
        .join(target.select("group", "member_id", "target_partitions"), ["group", "member_id"], "left")
        .crossJoin(F.broadcast(_topic_names(inputs)))
    )
    state = F.col("member_state")
    return joined.select(
        *_MEMBER_METADATA_COLUMNS,
        "member_epoch",
        "previous_member_epoch",
        F.coalesce(
            F.element_at(F.create_map(*[F.lit(x) for k, v in _MEMBER_STATES.items() for x in (k, v)]), state),
            F.when(state.isNotNull(), F.lit("unknown")),
        ).alias("member_state"),
        _named(F.col("assigned_partitions")).alias("assigned_partitions"),
        _named(F.col("partitions_pending_revocation")).alias("partitions_pending_revocation"),
        _named(F.col("target_partitions")).alias("target_partitions"),
        "assigned_at",
    )


def _consumer_states(inputs: Inputs, member_type: Any) -> DataFrame:
    """The state of every group with ConsumerGroupMetadata records, as :func:`group_states` rows (members
    with the classic members' struct) plus ``c_position``: its last such record's position."""
    assert inputs.consumer_groups is not None
    cg = inputs.consumer_groups
    meta = _latest_records(cg, 3).select(
        "group", F.col("deleted").alias("c_deleted"), "epoch", F.struct(*_POSITION).alias("c_position")
    )
    target = _latest_records(cg, 6).where(~F.col("deleted")).select("group", "assignment_epoch")
    no_topics = F.array().cast("array<struct<topic:string,partitions:array<int>>>")
    member = F.struct(
        F.col("member_id"),
        F.col("instance_id"),
        F.col("client_id"),
        F.col("client_host"),
        F.col("rebalance_timeout_ms"),
        F.col("classic_session_timeout_ms"),
        F.lit(True),
        F.lit(None).cast("int"),
        F.col("subscribed_topics"),
        F.lit(None).cast("array<struct<topic:string,partitions:array<int>>>"),
        F.lit(None).cast("int"),
        F.col("rack_id"),
        F.lit(None).cast("int"),
        F.coalesce(
            F.transform(
                "assigned_partitions",
                lambda a: F.struct(a["topic"].alias("topic"), a["partitions"].alias("partitions")),
            ),
            no_topics,
        ),
    ).cast(member_type)
    members = (
        consumer_group_members(inputs)
        .groupBy("group")
        .agg(
            F.array_sort(F.collect_list(member)).alias("members"),  # by member id, the first field
            F.collect_list("member_epoch").alias("member_epochs"),
        )
    )
    joined = meta.join(target, "group", "left").join(members, "group", "left")
    count = F.coalesce(F.size("members"), F.lit(0))
    reconciling = F.exists(
        F.coalesce("member_epochs", F.array().cast("array<int>")),
        lambda e: e.isNull() | (e != F.col("assignment_epoch")),
    )
    state = (
        F.when(F.col("c_deleted"), F.lit("Dead"))
        .when(count == 0, F.lit("Empty"))
        .when(F.coalesce(F.col("assignment_epoch"), F.lit(-1)) < F.col("epoch"), F.lit("Assigning"))
        .when(reconciling, F.lit("Reconciling"))
        .otherwise(F.lit("Stable"))
    )
    return joined.select(
        "group",
        state.alias("state"),
        F.lit("consumer").alias("protocol"),
        F.lit("consumer").alias("protocol_type"),
        F.col("epoch").alias("generation"),
        F.lit(None).cast("timestamp").alias("current_state_timestamp"),
        F.when(~F.col("c_deleted"), F.coalesce("members", F.array().cast(ArrayType(member_type))))
        .cast(ArrayType(member_type))
        .alias("members"),
        "c_position",
    )


def group_states(inputs: Inputs, *, history: DataFrame | None = None) -> DataFrame:
    """Current state of every group known from metadata records or offset commits: group, state, protocol
    (``classic`` or ``consumer``; null for groups known only from commits), protocol_type, generation (a
    ``consumer`` group's epoch), current_state_timestamp, members (a ``consumer`` group's current members
    with their subscriptions and current assignments, in the classic members' struct). ``history`` may be
    an :func:`offsets` table or only its latest rows."""
    last = (
        inputs.groups.groupBy("group")
        .agg(
            F.max_by(
                F.struct(*[c for c in inputs.groups.columns if c != "group"]),
                F.struct("record_partition", "record_offset"),
            ).alias("g")
        )
        .select("group", "g.*")
    )
    state = (
        F.when(F.col("deleted"), F.lit("Dead"))
        .when(F.size("members") > 0, F.lit("Stable"))
        .otherwise(F.lit("Empty"))
    )
    columns = [
        "group",
        "state",
        "protocol",
        "protocol_type",
        "generation",
        "current_state_timestamp",
        "members",
    ]
    with_state = last.select(
        "group",
        state.alias("state"),
        F.lit("classic").alias("protocol"),
        "protocol_type",
        "generation",
        "current_state_timestamp",
        "members",
        F.struct(*_POSITION).alias("g_position"),
    )
    if inputs.consumer_groups is not None:
        # The later of a group's last GroupMetadata and last ConsumerGroupMetadata record tells its
        # protocol: an upgrade tombstones the first and writes the second, a downgrade the reverse.
        members_type = inputs.groups.schema["members"].dataType
        assert isinstance(members_type, ArrayType)
        consumer = _consumer_states(inputs, members_type.elementType)
        newer = consumer.join(with_state.select("group", "g_position"), "group", "left").where(
            F.col("g_position").isNull() | (F.col("c_position") > F.col("g_position"))
        )
        with_state = (
            with_state.join(newer.select("group"), "group", "left_anti")
            .select(*columns)
            .unionByName(newer.select(*columns))
        )
    else:
        with_state = with_state.select(*columns)
    committers = (_latest(history) if history is not None else inputs.commits).select("group").distinct()
    simple = committers.join(with_state.select("group"), "group", "left_anti").select(
        "group",
        F.lit("Empty").alias("state"),
        F.lit(None).cast("string").alias("protocol"),
        F.lit(None).cast("string").alias("protocol_type"),
        F.lit(None).cast("int").alias("generation"),
        F.lit(None).cast("timestamp").alias("current_state_timestamp"),
        F.lit(None).cast(with_state.schema["members"].dataType).alias("members"),
    )
    return with_state.unionByName(simple)


# ------------------------------------------------------------------------------------------ lag


@dataclass(frozen=True, slots=True)
class Folded:
    """What the tasks that wrote a whole commit history folded on the way
    (:func:`~regroup_pipeline.datasource.write_history`): the per-key rows and commit runs
    (:mod:`~regroup_pipeline.offsetkeys`), each key's last record (``latest``), the history's earliest
    record timestamp (epoch ms; None: no commits), and the committed offsets in force at the instants of
    ``grid``, looked up in the data topics' records (``samples``), which serve as the lag table's grid
    rows when its grid is that one. ``records``: the index of the data topics' records those lookups used,
    for the others to use too."""

    keys: DataFrame
    first_record_ms: int | None
    runs: DataFrame | None = None
    latest: DataFrame | None = None
    grid: LagGrid | None = None
    samples: DataFrame | None = None
    records: laglookup.RecordIndex | None = None


def _grid(
    inputs: Inputs, history: DataFrame, samples: int, interval_ms: int | None, folded: Folded | None = None
) -> LagGrid | None:
    """The lag sampling grid, which ends before the window's end; from the first commit without
    ``since``."""
    w = inputs.window
    start = w.since_ms
    if start is None and folded is not None:
        start = folded.first_record_ms
    elif start is None:
        first = history.agg(F.min(_ms("record_timestamp"))).first()
        start = None if first is None or first[0] is None else int(first[0])
    return None if start is None else LagGrid.spanning(start, w.as_of_ms, samples, interval_ms)


def _lag_parts(
    inputs: Inputs,
    *,
    history: DataFrame,
    latest: DataFrame,
    samples: int | None,
    interval_ms: int | None,
    anchors: DataFrame | None,
    folded: Folded | None = None,
) -> tuple[DataFrame, DataFrame | None]:
    """Lag rows with their ``kind``: the window's end (:data:`monitoring.CURRENT`), the sampling grid
    (``"sample"``; none when ``samples`` is None) and ``anchors`` (group, topic, partition, kind,
    sample_time, committed_offset), with lag and time lag computed; in two parts: the rows that one pass
    over the data topics' records looks up, and the grid's rows when ``folded`` has them at that grid,
    looked up already by the tasks that wrote the history (else they are in the first part: the second is
    None)."""
    w = inputs.window
    rows = (
        _current_offsets(latest)
        .select(
            *_GTP,
            _ts(w.as_of_ms).alias("sample_time"),
            F.lit(True).alias("is_current"),
            F.lit(monitoring.CURRENT).alias("kind"),
            "committed_offset",
            "commit_timestamp",
        )
        .join(F.broadcast(inputs.partitions.select(*_TP, "log_end_offset")), list(_TP), "left")
    )
    grid = _grid(inputs, history, samples, interval_ms, folded) if samples is not None else None
    grid_rows = None

    def sample_rows(samples: DataFrame, *looked_up: str | Column) -> DataFrame:
        return samples.select(
            *_GTP,
            "sample_time",
            F.lit(False).alias("is_current"),
            F.lit(_SAMPLE).alias("kind"),
            "committed_offset",
            "commit_timestamp",
            *looked_up,
        )

    if grid is not None and folded is not None and folded.samples is not None and folded.grid == grid:
        grid_rows = _with_lag(sample_rows(folded.samples, "log_end_offset", "first_unconsumed_timestamp"))
    elif grid is not None:
        past = sample_rows(_grid_samples(history, grid), F.lit(None).cast("long").alias("log_end_offset"))
        rows = past.unionByName(rows)
    if anchors is not None:
        rows = rows.unionByName(
            anchors.select(
                *_GTP,
                "sample_time",
                F.lit(False).alias("is_current"),
                "kind",
                "committed_offset",
                F.lit(None).cast("timestamp").alias("commit_timestamp"),
                F.lit(None).cast("long").alias("log_end_offset"),
            )
        )
    records = folded.records if folded is not None else None
    looked_up = _lookup_records(rows.select(*_LOOKUP_INPUT), inputs, latest.select(*_TP).distinct(), records)
    return _with_lag(looked_up), grid_rows


def _with_lag(rows: DataFrame) -> DataFrame:
    """Looked-up lag rows (:data:`~regroup_pipeline.laglookup.LOOKUP_SCHEMA`) with lag and time lag."""
    lag_records = F.col("log_end_offset") - F.col("committed_offset")
    behind = F.col("committed_offset") < F.col("log_end_offset")
    time_lag = F.when(
        behind & F.col("first_unconsumed_timestamp").isNotNull(),
        F.greatest(F.lit(0), _ms("sample_time") - _ms("first_unconsumed_timestamp")),
    ).otherwise(F.when(F.col("log_end_offset").isNotNull(), F.lit(0)))
    return rows.select(
        *_GTP,
        "sample_time",
        "is_current",
        "kind",
        "committed_offset",
        "commit_timestamp",
        "log_end_offset",
        lag_records.alias("lag"),
        F.when(behind, F.col("first_unconsumed_timestamp")).alias("first_unconsumed_timestamp"),
        time_lag.cast("long").alias("time_lag_ms"),
    )


def _grid_samples(history: DataFrame, grid: LagGrid) -> DataFrame:
    """Each commit in force at an instant of ``grid``, once per instant: group, topic, partition,
    sample_time, committed_offset, commit_timestamp (what :func:`~regroup_pipeline.offsetkeys.grid_samples`
    picks out while the history is read)."""
    interval_end = F.coalesce(_ms("valid_until"), F.lit(grid.end_ms))
    first_i = F.greatest(F.lit(0), F.ceil((_ms("record_timestamp") - grid.start_ms) / grid.step_ms))
    last_i = F.least(F.lit(grid.count - 1), F.ceil((interval_end - grid.start_ms) / grid.step_ms) - 1)
    return (
        history.where(~F.col("deleted"))
        .select(*_GTP, "committed_offset", "commit_timestamp", first_i.alias("i0"), last_i.alias("i1"))
        .where(F.col("i0") <= F.col("i1"))
        .select(
            *_GTP,
            F.explode(F.sequence(F.col("i0").cast("long"), F.col("i1").cast("long"))).alias("i"),
            "committed_offset",
            "commit_timestamp",
        )
        .select(
            *_GTP,
            _ts(F.lit(grid.start_ms) + F.col("i") * grid.step_ms).alias("sample_time"),
            "committed_offset",
            "commit_timestamp",
        )
    )


def _lag_table(rows: DataFrame, states: DataFrame, window: TimeWindow) -> DataFrame:
    """The ``lag`` table from :func:`_lag_parts`: the grid and the window's end, with the group state."""
    out = (
        rows.where(F.col("kind").isin(_SAMPLE, monitoring.CURRENT))
        .drop("kind")
        .join(F.broadcast(states.select("group", F.col("state").alias("group_state"))), "group", "left")
    )
    return _since(out, "sample_time", window)


def lag(
    inputs: Inputs,
    *,
    samples: int = DEFAULT_LAG_SAMPLES,
    interval_ms: int | None = None,
    history: DataFrame | None = None,
    states: DataFrame | None = None,
    latest: DataFrame | None = None,
) -> DataFrame:
    """Lag per group/topic/partition at ``samples`` evenly spaced instants (or every ``interval_ms``) from
    ``since`` (default: the first commit) up to the window's end, plus one row at the end itself
    (``is_current``). Columns: group, topic, partition, sample_time, is_current, committed_offset,
    commit_timestamp, log_end_offset, lag (records), first_unconsumed_timestamp, time_lag_ms (sample time
    minus the timestamp of the first unconsumed record; 0 when caught up), group_state (current).

    At the end instant the log end offsets are the partitions table's; at earlier instants they are
    max(offset)+1 of the records with a timestamp at or before the sample time.
    """
    if history is None:
        history = _offset_history(inputs)
    if latest is None:
        latest = _latest(history)
    if states is None:
        states = group_states(inputs, history=history)
    rows, _folded_rows = _lag_parts(
        inputs, history=history, latest=latest, samples=samples, interval_ms=interval_ms, anchors=None
    )
    return _lag_table(rows, states, inputs.window)


_SAMPLE: Final = "sample"
_LOOKUP_INPUT: Final = (
    *_GTP,
    "sample_time",
    "is_current",
    "kind",
    "committed_offset",
    "commit_timestamp",
    "log_end_offset",
)


# The record indexes broadcast by the lag lookups, until release_lookups(): a broadcast's file stays in the
# driver's temporary directory until it is destroyed (Spark keeps it for the session's life otherwise).
_BROADCASTS: list[Any] = []


def release_lookups() -> None:
    """Destroy the record indexes that the lag lookups planned so far broadcast, once the tables that read
    them are written: a long-lived session (``pipeline stream``'s, a notebook's) would keep every one."""
    while _BROADCASTS:
        _BROADCASTS.pop().destroy()


def data_record_index(inputs: Inputs) -> laglookup.RecordIndex | None:
    """The index of a data directory's records for the lag lookups, when they are few (up to
    ``BROADCAST_RECORDS``), read by the driver: sooner than Spark's tasks would, and all of them, also
    those of partitions that no lag row looks up. None for other inputs and more records."""
    if inputs.data_options is None:
        return None
    few = read_local(inputs.data_options, laglookup.BROADCAST_RECORDS)
    return None if few is None else laglookup.RecordIndex(few.select(list(DATA_COLUMNS)))


def _lookup_records(
    rows: DataFrame, inputs: Inputs, tps: DataFrame, index: laglookup.RecordIndex | None = None
) -> DataFrame:
    """Fill, from each partition's records: the log end offset at past sample times, and the timestamp of
    the first unconsumed record (the smallest offset at or above the committed one), by binary searches in
    numpy (:mod:`~regroup_pipeline.laglookup`). When the records are few (up to ``BROADCAST_RECORDS``: a data
    directory's counted as the driver reads them, others bounded by the partitions' log end offsets), they
    are broadcast to the rows' tasks (``index``: their index, built already); else one shuffle brings each
    partition's rows and records together."""
    records = inputs.data.join(F.broadcast(tps), list(_TP), "left_semi").select(*DATA_COLUMNS)
    if index is None and inputs.data_options is not None:
        index = data_record_index(inputs)
    elif index is None:
        bound = inputs.partitions.agg(
            F.sum("log_end_offset").alias("records"),
            F.count_if(F.col("log_end_offset").isNull()).alias("unknown"),
        ).first()
        known = (
            bound is not None and not bound.unknown and (bound.records or 0) <= laglookup.BROADCAST_RECORDS
        )
        if known:
            index = laglookup.RecordIndex(records.toArrow().select(list(DATA_COLUMNS)))
    if index is not None:
        shared = rows.sparkSession.sparkContext.broadcast(index)
        _BROADCASTS.append(shared)
        return rows.mapInArrow(functools.partial(laglookup.lookup_batches, shared), laglookup.LOOKUP_SCHEMA)
    return (
        rows.groupBy(*_TP)
        .cogroup(records.groupBy(*_TP))
        .applyInArrow(laglookup.lag_lookup, laglookup.LOOKUP_SCHEMA)
    )


# ------------------------------------------------------------------------------------------ rebalances


def _identity(member: Column) -> Column:
    """A member's identity across generations: its static instance id, else its member id."""
    return F.coalesce(member["group_instance_id"], member["member_id"])


def rebalances(inputs: Inputs) -> DataFrame:
    """One row per generation the coordinator completed (from the GroupMetadata records written at the
    leader's SyncGroup, or when a join phase ends with no members), with its members (subscriptions and
    assignments decoded), joins and leaves relative to the previous generation (by static instance id,
    else member id) and the time since it. A generation re-recorded (static member replaced) keeps its
    first time and its last member list. Generation 0 (the record of a group's creation) is not a
    rebalance and is left out."""
    recs = _group_records(inputs).where(~F.col("deleted") & (F.col("generation") > 0))
    order_key = F.struct("record_partition", "record_offset")
    per_gen = recs.groupBy("group", "incarnation", "generation").agg(
        F.min_by("record_timestamp", order_key).alias("time"),
        F.max_by(
            F.struct(
                "protocol_type",
                "protocol",
                "leader",
                "current_state_timestamp",
                "members",
                "record_partition",
                "record_offset",
            ),
            order_key,
        ).alias("last"),
        F.count(F.lit(1)).alias("records"),
    )
    flat = per_gen.select(
        "group",
        "incarnation",
        "generation",
        "time",
        "last.protocol_type",
        "last.protocol",
        "last.leader",
        "last.current_state_timestamp",
        "last.members",
        F.size("last.members").alias("member_count"),
        F.when(F.size("last.members") > 0, F.lit("Stable")).otherwise(F.lit("Empty")).alias("state"),
        (F.col("records") - 1).alias("static_replacements"),
        "last.record_partition",
        "last.record_offset",
    ).withColumn("member_ids", F.transform("members", _identity))
    order = Window.partitionBy("group").orderBy("incarnation", "generation")
    prev_ids = F.lag("member_ids").over(order)
    prev_time = F.lag("time").over(order)
    prev_gen = F.lag("generation").over(order)
    same_life = F.lag("incarnation").over(order) == F.col("incarnation")
    out = flat.select(
        "*",
        F.when(same_life, prev_gen).alias("previous_generation"),
        F.when(same_life, _ms("time") - _ms(prev_time)).alias("since_previous_ms"),
        F.array_sort(
            F.array_except(
                "member_ids", F.coalesce(F.when(same_life, prev_ids), F.array().cast("array<string>"))
            )
        ).alias("joined"),
        F.array_sort(
            F.array_except(
                F.coalesce(F.when(same_life, prev_ids), F.array().cast("array<string>")), "member_ids"
            )
        ).alias("left"),
    ).drop("member_ids")
    return _since(out, "time", inputs.window)


def rebalance_frequency(rebalance_table: DataFrame) -> DataFrame:
    """Per group: generations seen, first/last rebalance, mean and median time between generations,
    rebalances per hour over the observed span, largest membership, and the latest generation's state."""
    latest = F.max_by(F.struct("generation", "state", "member_count"), F.struct("incarnation", "generation"))
    span_ms = _ms(F.max("time")) - _ms(F.min("time"))
    return (
        rebalance_table.groupBy("group")
        .agg(
            F.count(F.lit(1)).alias("generations"),
            F.sum(F.when(F.col("state") == "Empty", 1).otherwise(0)).alias("empty_generations"),
            F.min("time").alias("first_rebalance"),
            F.max("time").alias("last_rebalance"),
            F.avg("since_previous_ms").alias("mean_interval_ms"),
            F.percentile_approx("since_previous_ms", 0.5).alias("median_interval_ms"),
            F.when(span_ms > 0, (F.count(F.lit(1)) - 1) * 3_600_000.0 / span_ms).alias("rebalances_per_hour"),
            F.max("member_count").alias("max_members"),
            latest.alias("latest"),
        )
        .select(
            "*",
            F.col("latest.generation").alias("current_generation"),
            F.col("latest.state").alias("current_state"),
        )
        .drop("latest")
    )


# ------------------------------------------------------------------------------------------ assignment health


def _partition_counts(partitions: DataFrame, known: Mapping[str, int] | None = None) -> Column:
    """A literal map topic → partition count (topics are few; this keeps the health check row-local):
    ``known`` (what the driver listed), else counted from ``partitions``."""
    # One row per partition: counted here, one Spark job where an aggregation would run three.
    counts = (
        known if known is not None else count_partitions(partitions.select("topic", "partition").collect())
    )
    if not counts:
        return F.create_map().cast("map<string,int>")
    return F.create_map(*[F.lit(x) for t, n in counts.items() for x in (t, n)])


def assignment_health(
    rebalance_table: DataFrame, partitions: DataFrame, partition_counts: Mapping[str, int] | None = None
) -> DataFrame:
    """Per Stable generation of a ``consumer`` group: partitions of subscribed topics that no member was
    assigned (``unassigned``), partitions assigned to more than one member (``multiply_assigned``), and
    assignments of partitions that do not exist or whose topic the member did not subscribe to
    (``unexpected``). Partition counts are today's. (Cooperative assignors leave partitions unassigned for
    one generation on purpose while they move them.)"""
    counts = _partition_counts(partitions, partition_counts)
    no_topics = F.array().cast("array<string>")
    subscribed = F.array_sort(
        F.array_distinct(
            F.flatten(F.transform("members", lambda m: F.coalesce(m["subscribed_topics"], no_topics)))
        )
    )
    expected = F.flatten(
        F.transform(
            "subscribed",
            lambda t: F.transform(
                F.sequence(F.lit(0), F.coalesce(F.element_at(counts, t), F.lit(0)) - 1),
                lambda p: F.struct(t.alias("topic"), p.alias("partition")),
            ),
        )
    )
    no_assignment = F.array().cast("array<struct<topic:string,partitions:array<int>>>")
    assigned = F.flatten(
        F.transform(
            "members",
            lambda m: F.flatten(
                F.transform(
                    F.coalesce(m["assignment"], no_assignment),
                    lambda a: F.transform(
                        a["partitions"],
                        lambda p: F.struct(
                            a["topic"].alias("topic"),
                            p.alias("partition"),
                            _identity(m).alias("member"),
                            F.array_contains(F.coalesce(m["subscribed_topics"], no_topics), a["topic"]).alias(
                                "subscribed"
                            ),
                        ),
                    ),
                )
            ),
        )
    )
    tps = F.array_sort(
        F.transform(
            "assigned", lambda x: F.struct(x["topic"].alias("topic"), x["partition"].alias("partition"))
        )
    )
    # Sorted, a partition assigned twice sits next to itself.
    twice = F.array_distinct(
        F.transform(
            F.filter(
                F.sequence(F.lit(1), F.size("tps") - 1),
                lambda i: F.element_at("tps", i) == F.element_at("tps", i + 1),
            ),
            lambda i: F.element_at("tps", i),
        )
    )
    multiply = F.transform(
        "twice",
        lambda tp: F.struct(
            tp["topic"].alias("topic"),
            tp["partition"].alias("partition"),
            F.array_sort(
                F.transform(
                    F.filter(
                        "assigned",
                        lambda x: (x["topic"] == tp["topic"]) & (x["partition"] == tp["partition"]),
                    ),
                    lambda x: x["member"],
                )
            ).alias("members"),
        ),
    )
    unknown = F.array_except("tps", "expected")
    unexpected = F.array_sort(
        F.transform(
            F.filter(
                "assigned",
                lambda x: (
                    ~x["subscribed"]
                    | F.array_contains(
                        unknown, F.struct(x["topic"].alias("topic"), x["partition"].alias("partition"))
                    )
                ),
            ),
            lambda x: F.struct(
                x["topic"].alias("topic"), x["partition"].alias("partition"), x["member"].alias("member")
            ),
        )
    )
    gens = rebalance_table.where((F.col("state") == "Stable") & (F.col("protocol_type") == "consumer"))
    staged = (
        gens.select("group", "incarnation", "generation", "time", "protocol", "member_count", "members")
        .withColumn("subscribed", subscribed)
        .withColumn("expected", expected)
        .withColumn("assigned", assigned)
        .withColumn("tps", tps)
        .withColumn(
            "twice",
            F.when(F.size("tps") > 1, twice).otherwise(
                F.array().cast("array<struct<topic:string,partition:int>>")
            ),
        )
    )
    out = staged.select(
        "group",
        "incarnation",
        "generation",
        "time",
        "protocol",
        "member_count",
        F.size("expected").alias("subscribed_partitions"),
        F.size(F.array_distinct("tps")).alias("assigned_partitions"),
        F.array_sort(F.array_except("expected", "tps")).alias("unassigned"),
        multiply.alias("multiply_assigned"),
        unexpected.alias("unexpected"),
    )
    healthy = (F.size("unassigned") == 0) & (F.size("multiply_assigned") == 0) & (F.size("unexpected") == 0)
    return out.withColumn("healthy", healthy)


# ------------------------------------------------------------------------------------------ expiration


def expiring_offsets(
    inputs: Inputs,
    *,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    history: DataFrame | None = None,
    states: DataFrame | None = None,
) -> DataFrame:
    """Committed offsets that the coordinator's expiration removes by the window's end + ``horizon_ms``
    under ``offsets.retention.minutes`` (docs/design/group-semantics.md §10):

    - simple groups (no protocol type): ``commit timestamp + retention``;
    - Empty groups: retention counts from when the group became Empty (``current_state_timestamp``;
      the commit timestamp for old record versions without it);
    - Stable ``consumer`` groups: only offsets of topics no member subscribes to, from their commit
      timestamp; other Stable groups, and consumer groups with an unparseable subscription, keep all;
    - an explicit expire timestamp (OffsetCommitValue v1) replaces ``base + retention``.

    Columns: group, topic, partition, committed_offset, commit_timestamp, expire_timestamp, group_state,
    rule, base_timestamp, expires_at, expires_in_ms (negative: overdue, removed at the next check) and
    group_deleted (the group is Empty and all its offsets go: the group record goes with them).
    """
    w = inputs.window
    retention_ms = retention_minutes * 60_000
    current = _current_offsets(history if history is not None else _offset_history(inputs))
    if states is None:
        states = group_states(inputs, history=history)
    subscribed = F.flatten(
        F.transform("members", lambda m: F.coalesce(m["subscribed_topics"], F.array().cast("array<string>")))
    )
    parseable = F.forall("members", lambda m: F.coalesce(m["subscription_valid"], F.lit(False)))
    rule = (
        F.when(F.col("protocol_type").isNull() | (F.col("protocol_type") == ""), F.lit("simple"))
        .when(F.col("state") == "Empty", F.lit("empty"))
        .when(
            (F.col("state") == "Stable") & (F.col("protocol_type") == "consumer") & parseable, F.lit("stable")
        )
        # A consumer-protocol group keeps only the offsets of subscribed topics, whatever its state.
        .when((F.col("protocol") == "consumer") & (F.col("state") != "Dead") & parseable, F.lit("stable"))
        .otherwise(F.lit("none"))
    )
    joined = current.join(states, "group", "left").withColumn("rule", rule)
    base = F.when(F.col("rule") == "empty", F.coalesce("current_state_timestamp", "commit_timestamp")).when(
        F.col("rule").isin("simple", "stable"), F.col("commit_timestamp")
    )
    exempt = (F.col("rule") == "none") | (
        (F.col("rule") == "stable") & F.array_contains(subscribed, F.col("topic"))
    )
    expires_at = F.when(~exempt, F.coalesce(F.col("expire_timestamp"), _ts(_ms(base) + retention_ms)))
    cutoff = w.as_of_ms + horizon_ms
    rows = joined.select(
        *_GTP,
        "committed_offset",
        "commit_timestamp",
        "expire_timestamp",
        F.col("state").alias("group_state"),
        "rule",
        F.when(~exempt, base).alias("base_timestamp"),
        expires_at.alias("expires_at"),
    )
    rows = rows.withColumn("expires_in_ms", _ms("expires_at") - w.as_of_ms)
    per_group = Window.partitionBy("group")
    all_go = F.min(F.coalesce(_ms("expires_at") <= cutoff, F.lit(False))).over(per_group)
    rows = rows.withColumn("group_deleted", (F.col("group_state") == "Empty") & all_go)
    return rows.where(_ms("expires_at") <= cutoff)


def _consumer_assignment_history(inputs: Inputs) -> DataFrame:
    """Every ConsumerGroupCurrentMemberAssignment record of consumer groups, with the position and time of
    the member's next one (``next_offset``, ``next_timestamp``; null for its last), the assigned partitions
    named (``assignment``: topic, partitions) and the member's latest identity (``m``: group_instance_id,
    client_id, client_host; from its last ConsumerGroupMemberMetadata record)."""
    assert inputs.consumer_groups is not None
    cg = inputs.consumer_groups
    order = Window.partitionBy("group", "member_id").orderBy(*_POSITION)
    who = _latest_records(cg, 5, "member_id").where(~F.col("deleted"))
    return (
        cg.where(F.col("record_type") == 8)
        .select(
            "group",
            "member_id",
            "deleted",
            "member_epoch",
            *_POSITION,
            "record_timestamp",
            F.lead("record_offset").over(order).alias("next_offset"),
            F.lead("record_timestamp").over(order).alias("next_timestamp"),
            "assigned_partitions",
        )
        .join(
            who.select(
                "group",
                "member_id",
                F.struct(
                    F.col("instance_id").alias("group_instance_id"),
                    "client_id",
                    "client_host",
                ).alias("m"),
            ),
            ["group", "member_id"],
            "left",
        )
        .crossJoin(F.broadcast(_topic_names(inputs)))
        .select(
            "group",
            "member_id",
            "deleted",
            "member_epoch",
            *_POSITION,
            "record_timestamp",
            "next_offset",
            "next_timestamp",
            F.transform(
                _named(F.col("assigned_partitions")),
                lambda a: F.struct(a["topic"].alias("topic"), a["partitions"].alias("partitions")),
            ).alias("assignment"),
            "m",
        )
    )


def _consumer_group_members_or_empty(inputs: Inputs) -> DataFrame:
    if inputs.consumer_groups is not None:
        return consumer_group_members(inputs)
    spark = inputs.groups.sparkSession
    return spark.createDataFrame([], CONSUMER_GROUP_MEMBERS_SCHEMA)


# ------------------------------------------------------------------------------------------ everything


@dataclass(frozen=True, slots=True)
class Tables:
    offsets: DataFrame
    lag: DataFrame
    rebalances: DataFrame
    rebalance_frequency: DataFrame
    expiring_offsets: DataFrame
    assignment_health: DataFrame
    lag_trend: DataFrame
    retention_risk: DataFrame
    stuck_partitions: DataFrame
    member_commits: DataFrame
    group_summary: DataFrame
    consumer_group_members: DataFrame | None = None  # None: not computed (e.g. tables read back)
    cached: tuple[DataFrame, ...] = ()  # intermediates kept in memory; release with unpersist()

    def items(self) -> list[tuple[str, DataFrame]]:
        return [
            ("offsets", self.offsets),
            ("lag", self.lag),
            ("rebalances", self.rebalances),
            ("rebalance_frequency", self.rebalance_frequency),
            ("expiring_offsets", self.expiring_offsets),
            ("assignment_health", self.assignment_health),
            ("lag_trend", self.lag_trend),
            ("retention_risk", self.retention_risk),
            ("stuck_partitions", self.stuck_partitions),
            ("member_commits", self.member_commits),
            ("group_summary", self.group_summary),
            *(
                [("consumer_group_members", self.consumer_group_members)]
                if self.consumer_group_members is not None
                else []
            ),
        ]

    def unpersist(self) -> None:
        for df in self.cached:
            df.unpersist()


@dataclass(frozen=True, slots=True)
class MonitoringTables:
    """The tables of :mod:`regroup_pipeline.monitoring` and what they were derived from."""

    lag_trend: DataFrame
    retention_risk: DataFrame
    stuck_partitions: DataFrame
    member_commits: DataFrame
    group_summary: DataFrame
    # Rows of :func:`_lag_parts`, both parts: the window's end, the anchors (and the grid, when asked for).
    lag_rows: DataFrame
    cached: tuple[DataFrame, ...] = ()


def monitoring_tables(
    inputs: Inputs,
    *,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    stuck_after_ms: int = monitoring.DEFAULT_STUCK_AFTER_MS,
    history: DataFrame | None = None,
    latest: DataFrame | None = None,
    states: DataFrame | None = None,
    lag_samples: int | None = None,
    lag_interval_ms: int | None = None,
    folded: Folded | None = None,
) -> MonitoringTables:
    """Lag trend, retention risk, stuck partitions, member commits and the group summary
    (:mod:`regroup_pipeline.monitoring`). Their lag lookups — at each key's window start and at the instant
    its committed offset stopped moving — share one pass over the data topics' records with the lag table's
    grid when ``lag_samples`` is given (``lag_rows`` then holds the grid too). The intermediates are kept in
    memory (``cached``). ``folded``: what the tasks that wrote the history folded (a window without
    ``since``), which spares aggregations over every commit."""
    level = StorageLevel.MEMORY_AND_DISK
    w = inputs.window
    if history is None:
        history = _offset_history(inputs)
    if latest is None:
        latest = _latest(history)
    if states is None:
        states = group_states(inputs, history=latest)
    if folded is not None and w.since_ms is None:
        activity = monitoring.activity_from_keys(folded.keys, w).persist(level)
    else:
        folded = None
        activity = monitoring.commit_activity(history, w).persist(level)
    looked_up, grid_rows = _lag_parts(
        inputs,
        history=history,
        latest=latest,
        samples=lag_samples,
        interval_ms=lag_interval_ms,
        anchors=monitoring.anchor_rows(activity),
        folded=folded,
    )
    rows = looked_up.persist(level)
    trend = monitoring.lag_trend(rows, activity, states, w).persist(level)
    # Kept: the group summary aggregates them again.
    risk = monitoring.retention_risk(trend, inputs.retention, w, horizon_ms=horizon_ms).persist(level)
    stuck = monitoring.stuck_partitions(rows, activity, states, w, stuck_after_ms=stuck_after_ms).persist(
        level
    )
    assignments = _consumer_assignment_history(inputs) if inputs.consumer_groups is not None else None
    return MonitoringTables(
        lag_trend=trend,
        retention_risk=risk,
        stuck_partitions=stuck,
        member_commits=monitoring.member_commits(
            history, inputs.groups, w, assignments, folded.runs if folded is not None else None
        ),
        group_summary=monitoring.group_summary(states, trend, risk, stuck),
        lag_rows=rows if grid_rows is None else rows.unionByName(grid_rows),
        cached=(activity, rows, trend, risk, stuck),
    )


def compute_all(
    inputs: Inputs,
    *,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
    horizon_ms: int = DEFAULT_HORIZON_MS,
    lag_samples: int = DEFAULT_LAG_SAMPLES,
    lag_interval_ms: int | None = None,
    stuck_after_ms: int = monitoring.DEFAULT_STUCK_AFTER_MS,
    history: DataFrame | None = None,
    folded: Folded | None = None,
) -> Tables:
    """Every table. The commit history, group states and generations that several tables share are
    computed once and kept in memory (``Tables.unpersist()`` releases them); the caller may also
    ``persist()`` the inputs. ``history``: an :func:`offsets` table computed before (without ``since``),
    for instance written and read back, used instead of computing and caching the history again;
    ``folded``: what the tasks that wrote that history folded on the way. The lag table and the
    monitoring tables read the data topics' records once, together."""
    level = StorageLevel.MEMORY_AND_DISK
    cached_history = history is None
    if history is None:
        history = _offset_history(inputs).persist(level)
    # States, current lag and expiration need only each key's last record: one pass over the history.
    folded_latest = folded.latest if folded is not None else None
    latest = (folded_latest if folded_latest is not None else _latest(history)).persist(level)
    states = group_states(inputs, history=latest).persist(level)
    reb = rebalances(inputs).persist(level)
    watched = monitoring_tables(
        inputs,
        horizon_ms=horizon_ms,
        stuck_after_ms=stuck_after_ms,
        history=history,
        latest=latest,
        states=states,
        lag_samples=lag_samples,
        lag_interval_ms=lag_interval_ms,
        folded=folded,
    )
    return Tables(
        offsets=offsets(inputs, history=history),
        lag=_lag_table(watched.lag_rows, states, inputs.window),
        rebalances=reb,
        rebalance_frequency=rebalance_frequency(reb),
        expiring_offsets=expiring_offsets(
            inputs, retention_minutes=retention_minutes, horizon_ms=horizon_ms, history=latest, states=states
        ),
        assignment_health=assignment_health(reb, inputs.partitions, inputs.partition_counts),
        lag_trend=watched.lag_trend,
        retention_risk=watched.retention_risk,
        stuck_partitions=watched.stuck_partitions,
        member_commits=watched.member_commits,
        group_summary=watched.group_summary,
        consumer_group_members=_consumer_group_members_or_empty(inputs),
        cached=((history,) if cached_history else ()) + (latest, states, reb, *watched.cached),
    )
