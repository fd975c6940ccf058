"""What consumer-lag tools (Burrow, kminion, klag, kafka-lag-exporter) tell about groups, as batch tables
derived from what :mod:`regroup_pipeline.jobs` computes anyway — the commit history, lag at any instant
(log end offset and first unconsumed record looked up in the data topics), group states and the group
metadata records — and from the inputs' retention table:

- :func:`commit_activity` — per group/topic/partition: the analysed window (from ``since`` or the key's
  first commit, to the window's end), the committed offset at its start, since when the committed offset
  is unchanged, commits in the window; :func:`anchor_rows` are the instants at which the lag lookup must
  also answer (the window's start and the instant the offset stopped moving).
- :func:`lag_trend` — consume, produce and lag rates over the window, time to catch up, last commit.
- :func:`retention_risk` — distance of the committed offset from the log start offset, records already
  deleted before the group read them, and when retention will delete unconsumed records.
- :func:`stuck_partitions` — committed offset unchanged for a while as the log end grows, with its owner.
- :func:`member_commits` — commits attributed to members through the assignment in force, commit rates.
- :func:`group_protocols` and :func:`group_summary` — one row per group.

Rates are differences between the window's start and end divided by its length: exact for steady rates,
an average otherwise (``--since`` narrows the window to recent behaviour).
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from regroup_pipeline.inputs import TimeWindow

__all__ = [
    "CURRENT",
    "DEFAULT_STUCK_AFTER_MS",
    "UNCHANGED_SINCE",
    "WINDOW_START",
    "activity_from_keys",
    "anchor_rows",
    "commit_activity",
    "group_protocols",
    "group_summary",
    "lag_trend",
    "member_commits",
    "retention_risk",
    "stuck_partitions",
]

DEFAULT_STUCK_AFTER_MS: Final = 5 * 60_000
# Kinds of lag rows (the ``kind`` column of the lag lookup): the window's end, and the anchors.
CURRENT: Final = "current"
WINDOW_START: Final = "window_start"
UNCHANGED_SINCE: Final = "unchanged_since"
_TP: Final = ("topic", "partition")
_GTP: Final = ("group", "topic", "partition")
_POSITION: Final = ("record_partition", "record_offset")


def _ms(col: str | Column) -> Column:
    return F.unix_millis(F.col(col) if isinstance(col, str) else col)


def _ts(ms: int | Column) -> Column:
    return F.timestamp_millis(F.lit(ms) if isinstance(ms, int) else ms)


def _per_second(count: Column, span_ms: Column) -> Column:
    return F.when(span_ms > 0, count * 1000.0 / span_ms)


def _ordered_sum(column: str) -> Column:
    """The sum of a floating-point column added up in ascending order (null without values): rounding
    depends on the order of the additions, and a shuffle hands an aggregation its rows in the order the
    tasks before it finished, so a plain sum can differ in its last digits from one run to the next."""
    values = F.array_sort(F.collect_list(column))
    return F.when(F.size(values) > 0, F.aggregate(values, F.lit(0.0), lambda total, x: total + x))


# ------------------------------------------------------------------------------------------ activity


def _position() -> Column:
    """A key's log position (record_partition, record_offset) as one long, for hash aggregation (a
    struct would force Spark to sort): exact for partitions below 2**16 and offsets below 2**47."""
    return F.col("record_partition").cast("long") * F.lit(1 << 47) + F.col("record_offset")


def commit_activity(history: DataFrame, window: TimeWindow) -> DataFrame:
    """Per group/topic/partition with a committed offset (its last record is not a tombstone):

    - ``window_start``: ``since``, or the first commit of the key's current life (after its last
      tombstone) when that is later; ``start_committed_offset``: the committed offset then;
    - ``unchanged_since``: when the current committed offset came into force, i.e. the first record of
      the trailing run of commits of that same offset (re-commits of an unchanged offset do not move it);
    - ``commits``: commit records in the window; ``committed_offset`` and ``commit_timestamp`` of the last.

    Two aggregations over the history, no sort: a record's successor is known from its ``valid_until``
    (the successor's record timestamp), so the current life starts at the last tombstone's
    ``valid_until`` (else at the key's first record) and the trailing run at the ``valid_until`` of the
    last record with another offset (else where the life starts)."""
    since = window.since_ms
    pos = _position()
    deleted = F.col("deleted")
    cols = history.select(
        *_GTP,
        pos.alias("pos"),
        "record_timestamp",
        "committed_offset",
        "commit_timestamp",
        "deleted",
        "valid_until",
    )
    tomb = F.when(deleted, F.col("pos"))
    aggs = [
        F.max_by("deleted", "pos").alias("last_deleted"),
        F.max_by("committed_offset", "pos").alias("last_offset"),
        F.max_by("commit_timestamp", "pos").alias("last_commit_timestamp"),
        F.max(tomb).alias("tomb_pos"),
        F.max_by("valid_until", tomb).alias("tomb_until"),
        F.min_by("record_timestamp", "pos").alias("first_timestamp"),
    ]
    if since is not None:
        before = F.when(F.col("record_timestamp") <= _ts(since), F.col("pos"))
        aggs.append(F.max_by("committed_offset", before).alias("since_offset"))
    life = F.when(F.col("tomb_pos").isNull(), F.col("first_timestamp")).otherwise(F.col("tomb_until"))
    keys = (
        cols.groupBy(*_GTP)
        .agg(*aggs)
        .where(~F.col("last_deleted"))
        .select("*", life.alias("life_started"))
        .drop("last_deleted", "first_timestamp", "tomb_until")
    )
    start = F.col("life_started") if since is None else F.greatest(F.col("life_started"), _ts(since))
    after = F.col("tomb_pos").isNull() | (F.col("pos") > F.col("tomb_pos"))
    changed = after & (F.col("committed_offset") != F.col("last_offset"))
    kept = [c for c in keys.columns if c not in _GTP]
    per_key = (
        cols.join(F.broadcast(keys), list(_GTP))
        .groupBy(*_GTP)
        .agg(
            *[F.first(c).alias(c) for c in kept],
            F.min_by("committed_offset", F.when(after, F.col("pos"))).alias("life_offset"),
            F.max_by("valid_until", F.when(changed, F.col("pos"))).alias("changed_until"),
            F.count(F.when(after & ~deleted & (F.col("record_timestamp") >= start), 1)).alias("commits"),
        )
    )
    life_started = F.col("life_started")
    if since is None:
        window_start, start_offset = life_started, F.col("life_offset")
    else:
        # A life that began before ``since`` is still going on then: the record in force at ``since`` is
        # the last one written at or before it.
        window_start = F.greatest(life_started, _ts(since))
        start_offset = F.when(life_started <= _ts(since), F.col("since_offset")).otherwise(
            F.col("life_offset")
        )
    return per_key.select(
        *_GTP,
        F.col("last_offset").alias("committed_offset"),
        F.col("last_commit_timestamp").alias("commit_timestamp"),
        F.coalesce("changed_until", "life_started").alias("unchanged_since"),
        window_start.alias("window_start"),
        start_offset.alias("start_committed_offset"),
        "commits",
    )


def activity_from_keys(keys: DataFrame, window: TimeWindow) -> DataFrame:
    """:func:`commit_activity` from the per-key rows the reading tasks folded
    (:data:`~regroup_pipeline.offsetkeys.KEY_ARROW_SCHEMA`), for a window without ``since``: the same rows
    without an aggregation over every commit."""
    if window.since_ms is not None:
        raise ValueError("per-key rows describe whole histories: a window with since needs commit_activity")
    return keys.where(~F.col("deleted")).select(
        *_GTP,
        "committed_offset",
        "commit_timestamp",
        F.coalesce("changed_until", "life_started").alias("unchanged_since"),
        F.col("life_started").alias("window_start"),
        F.col("life_offset").alias("start_committed_offset"),
        "commits",
    )


def anchor_rows(activity: DataFrame) -> DataFrame:
    """The instants besides the window's end at which each key's lag is needed: ``kind``
    :data:`WINDOW_START` (with the committed offset then) and :data:`UNCHANGED_SINCE`."""
    return activity.select(
        *_GTP,
        F.lit(WINDOW_START).alias("kind"),
        F.col("window_start").alias("sample_time"),
        F.col("start_committed_offset").alias("committed_offset"),
    ).unionByName(
        activity.select(
            *_GTP,
            F.lit(UNCHANGED_SINCE).alias("kind"),
            F.col("unchanged_since").alias("sample_time"),
            "committed_offset",
        )
    )


def _points(points: DataFrame, kind: str, prefix: str = "") -> DataFrame:
    cols = ("log_end_offset", "lag", "time_lag_ms", "first_unconsumed_timestamp")
    return points.where(F.col("kind") == kind).select(*_GTP, *[F.col(c).alias(prefix + c) for c in cols])


# ------------------------------------------------------------------------------------------ lag trend


def lag_trend(points: DataFrame, activity: DataFrame, states: DataFrame, window: TimeWindow) -> DataFrame:
    """Per group/topic/partition with a committed offset, over the window from ``window_start`` to the
    window's end (``points``: lag rows of kinds :data:`CURRENT` and :data:`WINDOW_START`):

    - ``consume_rate`` and ``produce_rate``: records/s the committed offset and the log end advanced;
    - ``lag_trend``: records/s the lag grew (negative: shrank), ``trend`` growing/shrinking/flat;
    - ``time_lag_growth``: seconds of time lag gained per second (1 while nothing is consumed);
    - ``catch_up_ms``: lag ÷ (consume rate − produce rate), 0 when caught up, null when not catching up;
    - ``commits`` in the window, ``last_commit_timestamp`` and its age at the window's end.
    """
    as_of = window.as_of_ms
    span = F.lit(as_of) - _ms("window_start")
    joined = (
        activity.join(_points(points, CURRENT), list(_GTP), "left")
        .join(_points(points, WINDOW_START, "start_"), list(_GTP), "left")
        .join(F.broadcast(states.select("group", F.col("state").alias("group_state"))), "group", "left")
    )
    gained = F.col("lag") - F.col("start_lag")
    catch_up = (
        F.when(F.col("lag") == 0, F.lit(0)).when(gained < 0, (F.col("lag") * span) / (-gained)).cast("long")
    )
    return joined.select(
        *_GTP,
        "group_state",
        "window_start",
        _ts(as_of).alias("window_end"),
        "start_committed_offset",
        "committed_offset",
        "start_log_end_offset",
        "log_end_offset",
        "start_lag",
        "lag",
        _per_second(F.col("committed_offset") - F.col("start_committed_offset"), span).alias("consume_rate"),
        _per_second(F.col("log_end_offset") - F.col("start_log_end_offset"), span).alias("produce_rate"),
        _per_second(gained, span).alias("lag_trend"),
        F.when(gained > 0, "growing").when(gained < 0, "shrinking").when(gained == 0, "flat").alias("trend"),
        "start_time_lag_ms",
        "time_lag_ms",
        F.when(span > 0, (F.col("time_lag_ms") - F.col("start_time_lag_ms")) / span).alias("time_lag_growth"),
        "first_unconsumed_timestamp",
        catch_up.alias("catch_up_ms"),
        "commits",
        F.col("commit_timestamp").alias("last_commit_timestamp"),
        (F.lit(as_of) - _ms("commit_timestamp")).alias("last_commit_age_ms"),
    )


# ------------------------------------------------------------------------------------------ retention


def retention_risk(
    trend: DataFrame, retention: DataFrame | None, window: TimeWindow, *, horizon_ms: int
) -> DataFrame:
    """Per group/topic/partition with a committed offset (from a :func:`lag_trend` table), against the
    partition's log start offset and its topic's retention settings:

    - ``retention_margin_records``: committed offset − log start offset (negative: retention has deleted
      records the group had not read); ``retention_margin_ms``: that many records at the produce rate —
      how long retention, deleting as fast as producers write once the log is full, takes to reach the
      committed offset; ``records_lost``: records deleted before the group read them;
    - ``data_loss_at``: when retention is expected to delete the first unconsumed record still held, if
      the group does not reach it first. By age (``retention.ms``): when the time lag reaches
      retention.ms, the time lag growing at ``time_lag_growth``. By size (``retention.bytes``, only where
      the partition's size is known): when the lag exceeds the records retention.bytes holds (at the
      partition's mean record size), the lag growing at produce − consume rate. Retention deletes whole
      segments, once they are closed, at its next check: ``data_loss_at`` is the earliest it can happen.
      ``data_loss_by`` names the limit; ``data_loss_in_ms`` is negative when it is overdue;
    - ``at_risk``: records already lost, or data loss expected within ``horizon_ms``.
    """
    as_of = window.as_of_ms
    if retention is None:
        joined = trend.select(
            "*",
            *[F.lit(None).cast("long").alias(c) for c in ("log_start_offset", "size_bytes")],
            *[F.lit(None).cast("long").alias(c) for c in ("retention_ms", "retention_bytes")],
        )
    else:
        joined = trend.join(F.broadcast(retention), list(_TP), "left")
    lag, time_lag, growth = F.col("lag"), F.col("time_lag_ms"), F.col("time_lag_growth")
    r_ms, r_bytes = F.col("retention_ms"), F.col("retention_bytes")
    behind = lag > 0
    by_age = F.when(
        behind & (r_ms >= 0) & time_lag.isNotNull(),
        F.when(time_lag >= r_ms, _ms("first_unconsumed_timestamp") + r_ms).when(
            growth > 0, F.lit(as_of) + (r_ms - time_lag) / growth
        ),
    )
    held = F.col("log_end_offset") - F.col("log_start_offset")
    capacity = r_bytes * held / F.col("size_bytes")  # records that retention.bytes keeps
    net = F.col("produce_rate") - F.col("consume_rate")
    by_size = F.when(
        behind & (r_bytes >= 0) & (F.col("size_bytes") > 0) & (held > 0),
        F.when(lag >= capacity, F.lit(as_of)).when(net > 0, F.lit(as_of) + (capacity - lag) * 1000.0 / net),
    )
    margin = F.col("committed_offset") - F.col("log_start_offset")
    staged = joined.select(
        "*",
        F.floor(by_age).cast("long").alias("_by_age"),
        F.floor(by_size).cast("long").alias("_by_size"),
    ).withColumn("_at", F.least("_by_age", "_by_size"))
    lost = F.when(margin.isNotNull(), F.greatest(F.lit(0), -margin))
    risky = (lost > 0) | (F.col("_at") <= as_of + horizon_ms)
    return staged.select(
        *_GTP,
        "group_state",
        "committed_offset",
        "log_start_offset",
        "log_end_offset",
        "lag",
        "size_bytes",
        "retention_ms",
        "retention_bytes",
        margin.alias("retention_margin_records"),
        F.when(F.col("produce_rate") > 0, margin * 1000.0 / F.col("produce_rate")).alias(
            "retention_margin_ms"
        ),
        lost.alias("records_lost"),
        "first_unconsumed_timestamp",
        "time_lag_ms",
        "time_lag_growth",
        "consume_rate",
        "produce_rate",
        _ts(F.col("_at")).alias("data_loss_at"),
        (F.col("_at") - as_of).alias("data_loss_in_ms"),
        F.when(F.col("_at") == F.col("_by_age"), "retention.ms")
        .when(F.col("_at") == F.col("_by_size"), "retention.bytes")
        .alias("data_loss_by"),
        F.coalesce(risky, F.lit(False)).alias("at_risk"),
    )


# ------------------------------------------------------------------------------------------ stuck


def _owner(topic: Column, partition: Column) -> Column:
    """The first member of the group's current generation whose assignment holds the partition."""
    owning = F.filter(
        "members",
        lambda m: F.exists(
            m["assignment"], lambda a: (a["topic"] == topic) & F.array_contains(a["partitions"], partition)
        ),
    )
    return F.get(owning, 0)


def stuck_partitions(
    points: DataFrame,
    activity: DataFrame,
    states: DataFrame,
    window: TimeWindow,
    *,
    stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
) -> DataFrame:
    """Partitions whose committed offset has been unchanged for at least ``stuck_after_ms`` at the window's
    end while records kept arriving (the log end grew since ``unchanged_since``) and some are unread.
    ``owner_*`` is the member the group's current generation assigned the partition to (null when the
    group has no members or nobody owns it); ``records_since`` the records written since the offset stopped
    moving; ``last_commit_timestamp`` tells a consumer that re-commits the same offset from one that stopped
    committing."""
    as_of = window.as_of_ms
    state = states.select(
        "group", F.col("state").alias("group_state"), "generation", F.col("members").alias("members")
    )
    joined = (
        activity.join(_points(points, CURRENT), list(_GTP), "left")
        .join(_points(points, UNCHANGED_SINCE, "then_"), list(_GTP), "left")
        .join(F.broadcast(state), "group", "left")
    )
    unchanged = F.lit(as_of) - _ms("unchanged_since")
    grew = F.col("log_end_offset") - F.col("then_log_end_offset")
    stuck = (F.col("lag") > 0) & (unchanged >= stuck_after_ms) & (grew > 0)
    owner = F.when(F.size("members") > 0, _owner(F.col("topic"), F.col("partition")))
    return joined.where(stuck).select(
        *_GTP,
        "group_state",
        "generation",
        owner["member_id"].alias("owner_member_id"),
        owner["group_instance_id"].alias("owner_instance_id"),
        owner["client_id"].alias("owner_client_id"),
        owner["client_host"].alias("owner_client_host"),
        "committed_offset",
        "unchanged_since",
        unchanged.alias("unchanged_ms"),
        F.col("commit_timestamp").alias("last_commit_timestamp"),
        F.col("then_log_end_offset").alias("since_log_end_offset"),
        "log_end_offset",
        grew.alias("records_since"),
        "lag",
        "time_lag_ms",
    )


# ------------------------------------------------------------------------------------------ members


def member_commits(
    history: DataFrame,
    groups: DataFrame,
    window: TimeWindow,
    assignments: DataFrame | None = None,
    runs: DataFrame | None = None,
) -> DataFrame:
    """Commits per member, with commit rates. Offset-commit records carry no member id, so each record in
    the window is credited to the member that owned its partition when it was written: the owner in the
    group's last GroupMetadata record before it in the log (a group's records all live in one
    ``__consumer_offsets`` partition, and a classic coordinator accepts a member's commit only in the
    generation that record describes) or, for a ``consumer`` group, the member whose last current-assignment
    record before it held the partition (``assignments``: ConsumerGroupCurrentMemberAssignment records with
    the member's next one, named partitions and identity; see ``jobs``). ``runs``: for a window without
    ``since``, the commits already cut into runs no membership record interrupts
    (:data:`~regroup_pipeline.offsetkeys.RUN_ARROW_SCHEMA`), credited a run at a time instead of a commit at
    a time. Commits of a group without members
    (admin commits, commits of simple groups) and of partitions nobody owned get a row with a null
    ``member_id``.

    Per group and member: ``generations`` and ``active_ms`` (time it was a member within the window),
    ``commits`` (one record per partition per commit), ``partitions`` committed, first and last commit,
    ``commit_rate`` (commits/s over ``active_ms``; for the null member, from the group's first commit in
    the window to the window's end); a ``consumer`` group member's ``generations`` are its member epochs."""
    as_of = window.as_of_ms
    since = window.since_ms
    order = Window.partitionBy("group").orderBy(*_POSITION)
    gens = groups.select(
        "group",
        "deleted",
        "members",
        *_POSITION,
        "record_timestamp",
        F.lead("record_offset").over(order).alias("next_offset"),
        F.lead("record_timestamp").over(order).alias("next_timestamp"),
    ).where(~F.col("deleted") & (F.size("members") > 0))
    members = gens.select(
        "group",
        "record_offset",
        "next_offset",
        "record_timestamp",
        "next_timestamp",
        F.explode("members").alias("m"),
    ).select(
        "group",
        "record_offset",
        "next_offset",
        "record_timestamp",
        "next_timestamp",
        F.col("m.member_id").alias("member_id"),
        F.col("m.assignment").alias("assignment"),
        F.struct("m.group_instance_id", "m.client_id", "m.client_host").alias("m"),
        F.col("record_offset").alias("epoch"),  # a generation: one per record
    )
    if assignments is not None:
        members = members.unionByName(
            assignments.where(~F.col("deleted")).select(
                "group",
                "record_offset",
                "next_offset",
                "record_timestamp",
                "next_timestamp",
                "member_id",
                "assignment",
                "m",
                F.col("member_epoch").cast("long").alias("epoch"),
            )
        )
    assigned = members.select(
        F.col("group").alias("o_group"),
        F.col("record_offset").alias("o_from"),
        F.col("next_offset").alias("o_until"),
        "member_id",
        F.explode("assignment").alias("a"),
    )
    owners = assigned.select(
        "*", F.col("a.topic").alias("o_topic"), F.explode("a.partitions").alias("o_partition")
    ).drop("a")
    if runs is not None:
        if since is not None:
            raise ValueError("runs cover whole histories: a window with since needs the commits")
        c = runs
    else:
        commits = history.where(~F.col("deleted"))
        if since is not None:
            commits = commits.where(F.col("record_timestamp") >= _ts(since))
        # Each commit as a run of one.
        c = commits.select(
            *_GTP,
            "record_offset",
            F.lit(1).cast("long").alias("commits"),
            F.col("commit_timestamp").alias("first_commit"),
            F.col("commit_timestamp").alias("last_commit"),
            F.col("record_timestamp").alias("first_record_timestamp"),
        )
    c = c.select(*_GTP, "record_offset", "commits", "first_commit", "last_commit", "first_record_timestamp")
    credited = c.join(
        F.broadcast(owners),
        (c["group"] == owners["o_group"])
        & (c["topic"] == owners["o_topic"])
        & (c["partition"] == owners["o_partition"])
        & (c["record_offset"] > owners["o_from"])
        & (owners["o_until"].isNull() | (c["record_offset"] < owners["o_until"])),
        "left",
    ).select(*_GTP, "member_id", "commits", "first_commit", "last_commit", "first_record_timestamp")
    counted = credited.groupBy("group", "member_id").agg(
        F.sum("commits").alias("commits"),
        F.count_distinct("topic", "partition").alias("partitions"),
        F.min("first_commit").alias("first_commit"),
        F.max("last_commit").alias("last_commit"),
    )
    group_start = credited.groupBy("group").agg(F.min("first_record_timestamp").alias("group_first"))

    begin = _ms("record_timestamp") if since is None else F.greatest(_ms("record_timestamp"), F.lit(since))
    end = F.least(F.coalesce(_ms("next_timestamp"), F.lit(as_of)), F.lit(as_of))
    membership = (
        members.select(
            "group", "member_id", "m", "epoch", *_POSITION[1:], begin.alias("begin"), end.alias("end")
        )
        .where(F.col("end") >= F.col("begin"))
        .groupBy("group", "member_id")
        .agg(
            F.count_distinct("epoch").alias("generations"),
            F.sum(F.col("end") - F.col("begin")).alias("member_ms"),
            F.max_by("m", "record_offset").alias("latest"),
        )
    )
    out = membership.join(counted, ["group", "member_id"], "full").join(group_start, "group", "left")
    unattributed_ms = F.lit(as_of) - _ms("group_first")
    active = F.when(F.col("member_id").isNull(), unattributed_ms).otherwise(F.col("member_ms"))
    return out.select(
        "group",
        "member_id",
        F.col("latest.group_instance_id").alias("group_instance_id"),
        F.col("latest.client_id").alias("client_id"),
        F.col("latest.client_host").alias("client_host"),
        F.coalesce("generations", F.lit(0)).alias("generations"),
        active.alias("active_ms"),
        F.coalesce("commits", F.lit(0)).alias("commits"),
        F.coalesce("partitions", F.lit(0)).alias("partitions"),
        "first_commit",
        "last_commit",
        _per_second(F.coalesce("commits", F.lit(0)), active).alias("commit_rate"),
    )


# ------------------------------------------------------------------------------------------ groups


def group_protocols(consumer_groups: DataFrame) -> DataFrame:
    """``consumer`` for every group whose last KIP-848 ConsumerGroupMetadata record is not a tombstone
    (``group``, ``protocol``), whatever its GroupMetadata records say (``jobs.group_states`` weighs both)."""
    last = (
        consumer_groups.where(F.col("record_type") == 3)
        .groupBy("group")
        .agg(F.max(F.struct(*_POSITION, "deleted")).alias("last"))
    )
    return last.where(~F.col("last.deleted")).select("group", F.lit("consumer").alias("protocol"))


def group_summary(
    states: DataFrame,
    trend: DataFrame,
    risk: DataFrame,
    stuck: DataFrame,
) -> DataFrame:
    """One row per group: state, protocol (``classic`` or ``consumer``, from ``states``), protocol type,
    generation (a ``consumer`` group's epoch), members, and over its partitions with a committed offset:
    total lag and its trend, the largest time lag, the longest time to catch up (null when a lagging
    partition is not catching up), stuck partitions, partitions at risk, records lost, the earliest
    expected data loss and the last commit."""
    per_group = trend.groupBy("group").agg(
        F.count(F.lit(1)).alias("partitions"),
        F.sum("lag").alias("lag"),
        F.sum("start_lag").alias("start_lag"),
        F.max("time_lag_ms").alias("max_time_lag_ms"),
        _ordered_sum("lag_trend").alias("lag_trend"),
        F.max("catch_up_ms").alias("longest_catch_up_ms"),
        F.count(F.when((F.col("lag") > 0) & F.col("catch_up_ms").isNull(), 1)).alias("not_catching_up"),
        F.max("last_commit_timestamp").alias("last_commit_timestamp"),
    )
    risks = risk.groupBy("group").agg(
        F.count(F.when(F.col("at_risk"), 1)).alias("at_risk_partitions"),
        F.sum("records_lost").alias("records_lost"),
        F.min("data_loss_at").alias("data_loss_at"),
    )
    stuck_counts = stuck.groupBy("group").agg(F.count(F.lit(1)).alias("stuck_partitions"))
    groups = states.select("group", "state", "protocol", "protocol_type", "generation", "members")
    joined = (
        groups.join(per_group, "group", "left")
        .join(risks, "group", "left")
        .join(stuck_counts, "group", "left")
    )
    protocol = F.coalesce(F.col("protocol"), F.lit("classic"))
    gained = F.col("lag") - F.col("start_lag")
    return joined.select(
        "group",
        "state",
        protocol.alias("protocol"),
        "protocol_type",
        "generation",
        F.when(F.col("members").isNull(), 0).otherwise(F.size("members")).alias("members"),
        F.coalesce("partitions", F.lit(0)).alias("partitions"),
        "lag",
        "max_time_lag_ms",
        "lag_trend",
        F.when(gained > 0, "growing").when(gained < 0, "shrinking").when(gained == 0, "flat").alias("trend"),
        F.when(F.col("not_catching_up") == 0, F.col("longest_catch_up_ms")).alias("catch_up_ms"),
        F.coalesce("stuck_partitions", F.lit(0)).alias("stuck_partitions"),
        F.coalesce("at_risk_partitions", F.lit(0)).alias("at_risk_partitions"),
        F.coalesce("records_lost", F.lit(0)).alias("records_lost"),
        "data_loss_at",
        "last_commit_timestamp",
    )
