"""The monitoring tables (lag trend, retention risk, stuck partitions, member commits, group summary):
against the churn scenario, whose g-stuck and g-slow groups have answers known by construction (see
``scenario.py``), and against hand-made histories for what real clients rarely produce (tombstones,
re-commits, the ``since`` window, size-based retention, KIP-848 groups, moving owners)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from regroup_pipeline import jobs, logdir
from regroup_pipeline.inputs import TimeWindow, decode_consumer_groups, from_datadir, retention_settings
from regroup_pipeline.runner import persist_inputs, unpersist_inputs
from regroup_pipeline.synthetic import (
    MemberSpec,
    consumer_group_metadata,
    consumer_group_tombstone,
    group_metadata,
    offset_commit,
    offset_tombstone,
)

from .datadirs import Batch, build
from .support import SPARK_SOCKETS, by_key, rows

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

HOUR = 3_600_000
EVENTS_RETENTION_MS = 3 * HOUR
DEFAULT_RETENTION_MS = 7 * 24 * HOUR


# ------------------------------------------------------------------------------------------ the scenario


def _stuck_member(scenario: Any) -> Any:
    """S's latest assignment (its generation and member id)."""
    return scenario.observed["g-stuck"][-1]


def test_lag_trend_of_a_stuck_and_a_catching_up_partition(kafka_tables: Any, scenario: Any) -> None:
    trend = by_key(kafka_tables["lag_trend"], "group", "topic", "partition")
    (first_lo, first_hi), (second_lo, second_hi) = scenario.stuck_commit_ms
    end = scenario.snapshot_ms

    def stamp(partition: int, offset: int) -> int:
        return int(scenario.produced[("clicks", partition, offset)])

    stuck, moving = trend[("g-stuck", "clicks", 0)], trend[("g-stuck", "clicks", 1)]
    for row in (stuck, moving):
        # The window starts at the group's first commit of the partition and ends at the snapshot.
        assert first_lo <= row["window_start"] <= first_hi
        assert row["window_end"] == end
        assert row["group_state"] == "Stable"
    span = end - stuck["window_start"]
    # clicks-0: committed 20 of 20 records, then 10 more arrived and the offset stayed.
    assert (stuck["start_committed_offset"], stuck["committed_offset"]) == (20, 20)
    assert (stuck["start_log_end_offset"], stuck["log_end_offset"]) == (20, 30)
    assert (stuck["start_lag"], stuck["lag"]) == (0, 10)
    assert stuck["consume_rate"] == 0
    assert stuck["produce_rate"] == 10 * 1000.0 / span
    assert stuck["lag_trend"] == stuck["produce_rate"]
    assert stuck["trend"] == "growing"
    assert stuck["catch_up_ms"] is None
    assert stuck["start_time_lag_ms"] == 0
    assert stuck["time_lag_ms"] == end - stamp(0, 20)
    assert stuck["time_lag_growth"] == (end - stamp(0, 20)) / span
    assert stuck["commits"] == 1
    assert first_lo <= stuck["last_commit_timestamp"] <= first_hi
    assert stuck["last_commit_age_ms"] == end - stuck["last_commit_timestamp"]
    # clicks-1: committed 5 of 20 records, then 4 more arrived and the group committed 15.
    span = end - moving["window_start"]
    assert (moving["start_committed_offset"], moving["committed_offset"]) == (5, 15)
    assert (moving["start_log_end_offset"], moving["log_end_offset"]) == (20, 24)
    assert (moving["start_lag"], moving["lag"]) == (15, 9)
    assert moving["consume_rate"] == 10 * 1000.0 / span
    assert moving["produce_rate"] == 4 * 1000.0 / span
    assert moving["lag_trend"] == -6 * 1000.0 / span
    assert moving["trend"] == "shrinking"
    # 9 records behind, 6 fewer per span: 1.5 spans to catch up.
    assert moving["catch_up_ms"] == int(9 * span / 6)
    assert moving["start_time_lag_ms"] == moving["window_start"] - stamp(1, 5)
    assert moving["time_lag_ms"] == end - stamp(1, 15)
    assert moving["time_lag_growth"] == (moving["time_lag_ms"] - moving["start_time_lag_ms"]) / span
    assert moving["commits"] == 2
    assert second_lo <= moving["last_commit_timestamp"] <= second_hi
    # Every partition with a committed offset has a row; caught-up ones need no time to catch up.
    assert set(trend) == {(g, t, p) for g, offsets in scenario.committed.items() for (t, p) in offsets}
    for (group, topic, partition), row in trend.items():
        committed = scenario.committed[group][(topic, partition)][0]
        assert row["lag"] == scenario.end_offsets[(topic, partition)] - committed
        if row["lag"] == 0:
            assert row["catch_up_ms"] == 0


def test_the_stuck_partition_and_its_owner(kafka_tables: Any, scenario: Any) -> None:
    # Computed with --stuck-after 1 ms (support.SHORT_RETENTION): every partition whose offset stopped
    # moving while records arrived. Only clicks-0 got records after its group's last commit of it: the
    # other topics' records are stamped before the scenario's commits.
    (row,) = kafka_tables["stuck_partitions"]
    assert (row["group"], row["topic"], row["partition"]) == ("g-stuck", "clicks", 0)
    owner = _stuck_member(scenario)
    assert row["owner_member_id"] == owner.member_id
    assert row["owner_client_id"] == "S"
    assert row["owner_instance_id"] is None
    assert row["generation"] == owner.generation
    assert row["group_state"] == "Stable"
    first_lo, first_hi = scenario.stuck_commit_ms[0]
    assert first_lo <= row["unchanged_since"] <= first_hi
    assert row["unchanged_ms"] == scenario.snapshot_ms - row["unchanged_since"]
    assert first_lo <= row["last_commit_timestamp"] <= first_hi
    assert (row["committed_offset"], row["since_log_end_offset"], row["log_end_offset"]) == (20, 20, 30)
    assert (row["records_since"], row["lag"]) == (10, 10)
    assert row["time_lag_ms"] == scenario.snapshot_ms - scenario.produced[("clicks", 0, 20)]


def test_retention_overtook_the_slow_group(
    kafka_tables: Any, datadir_tables: Any, scenario: Any, regroup_copy: Path
) -> None:
    risk = by_key(kafka_tables["retention_risk"], "group", "topic", "partition")
    end = scenario.snapshot_ms
    # Retention deleted events-0's first two segments (offsets 0-9); g-slow had committed 2.
    assert scenario.start_offsets[("events", 0)] == 10
    lost = risk[("g-slow", "events", 0)]
    assert (lost["committed_offset"], lost["log_start_offset"], lost["log_end_offset"]) == (2, 10, 15)
    assert (lost["records_lost"], lost["retention_margin_records"]) == (8, -8)
    assert (lost["retention_ms"], lost["retention_bytes"]) == (EVENTS_RETENTION_MS, -1)
    assert lost["size_bytes"] is None  # unknown from a cluster
    assert lost["at_risk"]
    # Nothing is consumed: the time lag grows as fast as time, and the first record still held (10) is
    # deleted once it is retention.ms old.
    first_held = scenario.produced[("events", 0, 10)]
    assert lost["first_unconsumed_timestamp"] == first_held
    assert lost["time_lag_growth"] == 1.0
    assert lost["data_loss_at"] == first_held + EVENTS_RETENTION_MS
    assert lost["data_loss_in_ms"] == first_held + EVENTS_RETENTION_MS - end
    assert lost["data_loss_by"] == "retention.ms"
    # No record was written in g-slow's window (they are stamped hours before): no produce rate.
    assert lost["produce_rate"] == 0
    assert lost["retention_margin_ms"] is None
    ahead = risk[("g-slow", "events", 1)]
    assert (ahead["log_start_offset"], ahead["records_lost"], ahead["retention_margin_records"]) == (0, 0, 3)
    first_unread = scenario.produced[("events", 1, 3)]
    assert ahead["data_loss_at"] == first_unread + EVENTS_RETENTION_MS
    assert ahead["at_risk"]  # within the tests' 10-year horizon
    # clicks-0 (stuck): 20 records between the log start and the committed offset, written at the
    # window's produce rate; the time lag grows at time_lag_growth until it reaches 7 days.
    stuck = risk[("g-stuck", "clicks", 0)]
    assert (stuck["log_start_offset"], stuck["records_lost"], stuck["retention_margin_records"]) == (0, 0, 20)
    assert stuck["retention_ms"] == DEFAULT_RETENTION_MS
    assert stuck["retention_margin_ms"] == 20 * 1000.0 / stuck["produce_rate"]
    growth = stuck["time_lag_growth"]
    assert stuck["data_loss_at"] == math.floor(end + (DEFAULT_RETENTION_MS - stuck["time_lag_ms"]) / growth)
    # Caught-up partitions have nothing to lose.
    caught_up = [r for r in risk.values() if r["lag"] == 0]
    assert caught_up
    assert all(r["data_loss_at"] is None and r["records_lost"] == 0 for r in caught_up)
    for (_, topic, partition), row in risk.items():
        assert row["log_start_offset"] == scenario.start_offsets[(topic, partition)]
    # From the data directory: the same, with sizes read from the segment files.
    sizes = {(p.topic, p.partition): logdir.partition_size(p) for p in logdir.list_partitions([regroup_copy])}
    for row in datadir_tables["retention_risk"]:
        assert row["size_bytes"] == sizes[(row["topic"], row["partition"])]


def test_commits_are_credited_to_the_members_that_made_them(kafka_tables: Any, scenario: Any) -> None:
    got = {(r["group"], r["member_id"]): r for r in kafka_tables["member_commits"]}
    for group, counts in scenario.member_commits.items():
        for member_id, n in counts.items():
            assert got[(group, member_id)]["commits"] == n, (group, member_id)
        assert (group, None) not in got, group  # members' commits all credited
    # Every member of every generation has a row, committing or not; and nothing is credited twice.
    for group in ("g-churn", "g-rr", "g-gone", "g-stuck"):
        members = {
            m["member_id"] for r in kafka_tables["rebalances"] if r["group"] == group for m in r["members"]
        }
        assert {m for g, m in got if g == group} == members
        records = [r for r in kafka_tables["offsets"] if r["group"] == group and not r["deleted"]]
        assert sum(r["commits"] for (g, _), r in got.items() if g == group) == len(records)
    # Admin commits belong to no member.
    for group in ("g-admin", "g-slow"):
        row = got[(group, None)]
        assert (row["commits"], row["partitions"], row["generations"]) == (2, 2, 0)
        assert row["active_ms"] == scenario.snapshot_ms - row["first_commit"]
    lo, hi = scenario.slow_commit_ms
    assert lo <= got[("g-slow", None)]["first_commit"] <= hi
    # S committed 2 partitions, then 1, and has been a member since it joined.
    s = got[("g-stuck", _stuck_member(scenario).member_id)]
    assert (s["commits"], s["partitions"], s["client_id"]) == (3, 2, "S")
    joined_lo, joined_hi = scenario.stuck_joined_ms
    assert scenario.snapshot_ms - joined_hi <= s["active_ms"] <= scenario.snapshot_ms - joined_lo
    assert s["commit_rate"] == 3 * 1000.0 / s["active_ms"]
    assert scenario.stuck_commit_ms[0][0] <= s["first_commit"] <= scenario.stuck_commit_ms[0][1]
    assert scenario.stuck_commit_ms[1][0] <= s["last_commit"] <= scenario.stuck_commit_ms[1][1]


def test_group_summary(kafka_tables: Any, datadir_tables: Any, scenario: Any) -> None:
    from .scenario import GROUPS

    summary = by_key(kafka_tables["group_summary"], "group")
    assert {g for (g,) in summary} >= set(GROUPS)
    for group in GROUPS:
        row = summary[(group,)]
        assert row["protocol"] == "classic"  # no KIP-848 records in __consumer_offsets
        lag = sum(scenario.end_offsets[tp] - c[0] for tp, c in scenario.committed[group].items())
        assert row["lag"] == (lag if scenario.committed[group] else None), group
        assert row["partitions"] == len(scenario.committed[group])
        described = scenario.described[group]["state"]
        # A rebalance in progress leaves no record until it completes: still the last generation's state.
        rebalancing = described in ("PreparingRebalance", "CompletingRebalance")
        assert row["state"] == ("Stable" if rebalancing else described), group
    assert summary[("g-gone",)]["state"] == "Dead"
    assert summary[("g-gone",)]["lag"] is None
    stuck = summary[("g-stuck",)]
    assert (stuck["members"], stuck["lag"], stuck["trend"], stuck["stuck_partitions"]) == (
        1,
        19,
        "growing",
        1,
    )
    assert stuck["catch_up_ms"] is None  # clicks-0 is not catching up
    trend = [r for r in kafka_tables["lag_trend"] if r["group"] == "g-stuck"]
    assert stuck["max_time_lag_ms"] == max(r["time_lag_ms"] for r in trend)
    assert stuck["lag_trend"] == pytest.approx(sum(r["lag_trend"] for r in trend))
    slow = summary[("g-slow",)]
    assert (slow["state"], slow["protocol_type"], slow["members"]) == ("Empty", None, 0)
    assert (slow["records_lost"], slow["at_risk_partitions"], slow["stuck_partitions"]) == (8, 2, 0)
    assert slow["data_loss_at"] == scenario.produced[("events", 1, 3)] + EVENTS_RETENTION_MS
    assert summary[("g-churn",)]["records_lost"] == 0
    assert all(r["stuck_partitions"] == 0 for (g,), r in summary.items() if g != "g-stuck")


# ------------------------------------------------------------------------------------------ hand-made

T0 = 1_795_000_000_000
MIN = 60_000
AS_OF = T0 + 100 * MIN
T_RETENTION_MS = 200 * MIN
SIZED_RETENTION_BYTES = 1000


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Any:
    co: list[tuple[int, bytes, bytes | None]] = []

    def add(ts: int, kv: tuple[bytes, bytes | None]) -> None:
        co.append((ts, kv[0], kv[1]))

    # again: offset 10, deleted, then 30 committed twice (a re-commit does not move the offset); its
    # member m9 owns t-0.
    add(T0, group_metadata("again", 1, [MemberSpec("m9", ["t"], {"t": [0]}, client_id="c9")], state_ts=T0))
    add(T0 + 10 * MIN, offset_commit("again", "t", 0, 10, commit_ts=T0 + 10 * MIN))
    add(T0 + 20 * MIN, offset_tombstone("again", "t", 0))
    add(T0 + 40 * MIN, offset_commit("again", "t", 0, 30, commit_ts=T0 + 40 * MIN))
    add(T0 + 50 * MIN, offset_commit("again", "t", 0, 30, commit_ts=T0 + 50 * MIN))
    # catching: 21 behind at minute 20, 15 behind at minute 90.
    add(T0 + 20 * MIN, offset_commit("catching", "t", 0, 0, commit_ts=T0 + 20 * MIN))
    add(T0 + 90 * MIN, offset_commit("catching", "t", 0, 85, commit_ts=T0 + 90 * MIN))
    # moving: m1 owns t-0 in generation 1, m2 in generation 2, nobody once the group is Empty.
    add(T0, group_metadata("moving", 1, [MemberSpec("m1", ["t"], {"t": [0]})], state_ts=T0))
    add(T0 + 1 * MIN, offset_commit("moving", "t", 0, 1, commit_ts=T0 + 1 * MIN))
    add(
        T0 + 2 * MIN,
        group_metadata("moving", 2, [MemberSpec("m2", ["t"], {"t": [0]})], state_ts=T0 + 2 * MIN),
    )
    add(T0 + 3 * MIN, offset_commit("moving", "t", 0, 3, commit_ts=T0 + 3 * MIN))
    add(T0 + 4 * MIN, offset_commit("moving", "t", 0, 4, commit_ts=T0 + 4 * MIN))
    add(T0 + 5 * MIN, group_metadata("moving", 3, [], state_ts=T0 + 5 * MIN))
    add(T0 + 6 * MIN, offset_commit("moving", "t", 0, 6, commit_ts=T0 + 6 * MIN))
    # KIP-848 groups: one alive, one converted back to classic.
    add(T0, consumer_group_metadata("kip848", 5))
    add(T0 + 30 * MIN, offset_commit("kip848", "t", 0, 30, commit_ts=T0 + 30 * MIN))
    add(T0, consumer_group_metadata("downgraded", 2))
    add(T0 + MIN, consumer_group_tombstone("downgraded"))
    add(T0 + MIN, group_metadata("downgraded", 3, [], state_ts=T0 + MIN))
    # sized (retention.bytes): 50 behind and catching up slower than records arrive; 95 behind.
    add(T0 + 20 * MIN, offset_commit("sized-slow", "sized", 0, 10, commit_ts=T0 + 20 * MIN))
    add(T0 + 80 * MIN, offset_commit("sized-slow", "sized", 0, 50, commit_ts=T0 + 80 * MIN))
    add(T0 + 10 * MIN, offset_commit("sized-behind", "sized", 0, 5, commit_ts=T0 + 10 * MIN))
    # trimmed: DeleteRecords moved the log start to 4; the group had read 2.
    add(T0 + 10 * MIN, offset_commit("trimmed-g", "trimmed", 0, 2, commit_ts=T0 + 10 * MIN))
    co.sort(key=lambda r: r[0])  # the coordinator writes in time order
    data = [(T0 + j * MIN, None, b"x") for j in range(100)]  # one record a minute
    writes = [
        Batch("__consumer_offsets", 0, co),
        Batch("t", 0, data),
        Batch("sized", 0, data),
        Batch("trimmed", 0, data[:10]),
    ]
    built = build(
        tmp_path_factory.mktemp("monitoring") / "data",
        {"__consumer_offsets": 1, "t": 1, "sized": 1, "trimmed": 1},
        writes,
        T0,
        topic_configs={
            "t": {"retention.ms": str(T_RETENTION_MS)},
            "sized": {"retention.ms": "-1", "retention.bytes": str(SIZED_RETENTION_BYTES)},
        },
    )
    from regroup.log import LogManager

    logs = LogManager(built.path)
    logs.load()
    trimmed = logs.partition("trimmed", 0)
    assert trimmed is not None
    trimmed.delete_records_before(4)
    logs.close()
    return built


def _tables(spark: Any, history: Any, **kwargs: Any) -> dict[str, list[dict[str, Any]]]:
    window = TimeWindow(
        now_ms=AS_OF, since_ms=kwargs.pop("since_ms", None), until_ms=kwargs.pop("until_ms", None)
    )
    inputs = persist_inputs(from_datadir(spark, [str(history.path)], window))
    watched = jobs.monitoring_tables(inputs, horizon_ms=10 * 365 * 86_400_000, **kwargs)
    out = {
        name: rows(getattr(watched, name))
        for name in ("lag_trend", "retention_risk", "stuck_partitions", "member_commits", "group_summary")
    }
    for df in watched.cached:
        df.unpersist()
    unpersist_inputs(inputs)
    return out


@pytest.fixture(scope="module")
def tables(spark: Any, history: Any) -> dict[str, list[dict[str, Any]]]:
    return _tables(spark, history, stuck_after_ms=60 * MIN)


def test_window_starts_after_a_tombstone_and_recommits_do_not_move_the_offset(tables: Any) -> None:
    trend = by_key(tables["lag_trend"], "group", "topic", "partition")
    again = trend[("again", "t", 0)]
    assert again["window_start"] == T0 + 40 * MIN
    assert (again["start_committed_offset"], again["committed_offset"], again["commits"]) == (30, 30, 2)
    assert again["last_commit_timestamp"] == T0 + 50 * MIN
    # At minute 40 records 0-40 existed; now 0-99.
    assert (again["start_log_end_offset"], again["log_end_offset"]) == (41, 100)
    assert (again["start_lag"], again["lag"]) == (11, 70)
    assert again["consume_rate"] == 0
    assert again["produce_rate"] == 59 * 1000.0 / (60 * MIN)
    assert again["time_lag_growth"] == 1.0
    catching = trend[("catching", "t", 0)]
    span = 80 * MIN
    assert (catching["start_lag"], catching["lag"], catching["trend"]) == (21, 15, "shrinking")
    assert catching["consume_rate"] == 85 * 1000.0 / span
    assert catching["produce_rate"] == 79 * 1000.0 / span
    assert catching["catch_up_ms"] == 15 * span // 6
    # Time lag: 20 minutes at minute 20 (record 0), 15 at the end (record 85).
    assert (catching["start_time_lag_ms"], catching["time_lag_ms"]) == (20 * MIN, 15 * MIN)
    assert catching["time_lag_growth"] == -5 / 80


def test_since_narrows_the_window(spark: Any, history: Any) -> None:
    narrow = _tables(spark, history, since_ms=T0 + 45 * MIN)
    trend = by_key(narrow["lag_trend"], "group", "topic", "partition")
    again = trend[("again", "t", 0)]
    assert (again["window_start"], again["start_committed_offset"], again["commits"]) == (
        T0 + 45 * MIN,
        30,
        1,
    )
    assert again["start_log_end_offset"] == 46
    catching = trend[("catching", "t", 0)]
    # In force at minute 45: the commit of minute 20.
    assert (catching["window_start"], catching["start_committed_offset"], catching["commits"]) == (
        T0 + 45 * MIN,
        0,
        1,
    )
    members = {(r["group"], r["member_id"]): r for r in narrow["member_commits"]}
    # moving's generations and commits all came before minute 45.
    assert not [key for key in members if key[0] == "moving"]
    # m9 has been again's member all along: 55 minutes of the window, one commit (minute 50) in it.
    m9 = members[("again", "m9")]
    assert (m9["commits"], m9["active_ms"], m9["commit_rate"]) == (1, 55 * MIN, 1000.0 / (55 * MIN))
    # catching has no members: its commit of minute 90 is nobody's, over the 10 minutes since.
    nobody = members[("catching", None)]
    assert (nobody["commits"], nobody["active_ms"]) == (1, 10 * MIN)


def test_stuck_after_threshold_and_owner(spark: Any, history: Any, tables: Any) -> None:
    (row,) = [r for r in tables["stuck_partitions"] if r["group"] == "again"]
    # Unchanged since minute 40 (the re-commit at 50 does not count), 60 minutes at the end: stuck at
    # --stuck-after 60m, with 59 records written since.
    assert (row["unchanged_since"], row["unchanged_ms"]) == (T0 + 40 * MIN, 60 * MIN)
    assert row["last_commit_timestamp"] == T0 + 50 * MIN
    assert (row["since_log_end_offset"], row["log_end_offset"], row["records_since"], row["lag"]) == (
        41,
        100,
        59,
        70,
    )
    assert (row["owner_member_id"], row["owner_client_id"], row["generation"]) == ("m9", "c9", 1)
    # Also unchanged for 60 minutes or more while records arrived: moving (Empty: no owner), kip848 and
    # sized-behind. Not catching and sized-slow (moved 10 and 20 minutes before the end), nor trimmed-g
    # (no record since its commit).
    stuck = {r["group"]: r for r in tables["stuck_partitions"]}
    assert set(stuck) == {"again", "moving", "kip848", "sized-behind"}
    assert stuck["moving"]["owner_member_id"] is None
    assert stuck["moving"]["group_state"] == "Empty"
    later = _tables(spark, history, stuck_after_ms=60 * MIN + 1)
    assert {r["group"] for r in later["stuck_partitions"]} == {"moving", "kip848", "sized-behind"}


def test_retention_by_size_and_a_moved_log_start(tables: Any, history: Any) -> None:
    risk = by_key(tables["retention_risk"], "group", "topic", "partition")
    (sized_dir,) = logdir.list_partitions([history.path], topics=["sized"])
    size = logdir.partition_size(sized_dir)
    capacity = SIZED_RETENTION_BYTES * 100 / size  # records retention.bytes keeps
    assert 50 < capacity < 95, f"the test needs a capacity between the two lags, got {capacity}"
    behind = risk[("sized-behind", "sized", 0)]
    assert behind["size_bytes"] == size
    assert (behind["retention_ms"], behind["retention_bytes"]) == (-1, SIZED_RETENTION_BYTES)
    # 95 behind, more than retention.bytes holds: due now.
    assert (behind["data_loss_at"], behind["data_loss_in_ms"]) == (AS_OF, 0)
    assert behind["data_loss_by"] == "retention.bytes"
    slow = risk[("sized-slow", "sized", 0)]
    # 50 behind, 39 more records arrived than were read over 60 minutes.
    net = slow["produce_rate"] - slow["consume_rate"]
    assert net == 79 * 1000.0 / (80 * MIN) - 40 * 1000.0 / (80 * MIN)
    assert slow["data_loss_at"] == math.floor(AS_OF + (capacity - 50) * 1000.0 / net)
    assert slow["data_loss_by"] == "retention.bytes"
    # t: by age. again's time lag (70 minutes) grows as fast as time: record 30 goes at 30 + 200 minutes.
    again = risk[("again", "t", 0)]
    assert (again["data_loss_at"], again["data_loss_by"]) == (T0 + 230 * MIN, "retention.ms")
    assert again["data_loss_in_ms"] == 130 * MIN
    # catching's time lag shrinks: no loss expected.
    catching = risk[("catching", "t", 0)]
    assert (catching["data_loss_at"], catching["at_risk"]) == (None, False)
    trimmed = risk[("trimmed-g", "trimmed", 0)]
    assert (trimmed["log_start_offset"], trimmed["records_lost"], trimmed["retention_margin_records"]) == (
        4,
        2,
        -2,
    )
    assert trimmed["at_risk"]


def test_retention_as_of_until(spark: Any, history: Any) -> None:
    risk = by_key(
        _tables(spark, history, until_ms=T0 + 50 * MIN)["retention_risk"], "group", "topic", "partition"
    )
    # The first record still held (4) was written by then; sizes are unknown at a past instant.
    trimmed = risk[("trimmed-g", "trimmed", 0)]
    assert (trimmed["log_start_offset"], trimmed["records_lost"], trimmed["size_bytes"]) == (4, 2, None)
    sized = risk[("sized-behind", "sized", 0)]
    assert (sized["log_end_offset"], sized["retention_bytes"], sized["size_bytes"]) == (
        51,
        SIZED_RETENTION_BYTES,
        None,
    )
    assert sized["data_loss_at"] is None  # no forecast by size without sizes, none by age (retention.ms -1)
    assert ("sized-slow", "sized", 0) in risk
    assert risk[("sized-slow", "sized", 0)]["committed_offset"] == 10  # the commit of minute 80 is later


def test_retention_settings_follow_the_cleanup_policy() -> None:
    assert retention_settings(None) == (None, None)
    assert retention_settings({"retention.ms": "1000", "retention.bytes": "-1"}) == (1000, -1)
    assert retention_settings({"cleanup.policy": "compact", "retention.ms": "1000"}) == (-1, -1)
    assert retention_settings({"cleanup.policy": "compact,delete", "retention.ms": "5"}) == (5, None)


def test_member_commits_follow_the_owner_at_commit_time(tables: Any) -> None:
    got = {(r["group"], r["member_id"]): r for r in tables["member_commits"] if r["group"] == "moving"}
    assert set(got) == {("moving", "m1"), ("moving", "m2"), ("moving", None)}
    m1, m2, nobody = got[("moving", "m1")], got[("moving", "m2")], got[("moving", None)]
    assert (m1["commits"], m1["generations"], m1["active_ms"]) == (1, 1, 2 * MIN)
    assert m1["commit_rate"] == 1 * 1000.0 / (2 * MIN)
    assert (m2["commits"], m2["first_commit"], m2["last_commit"]) == (2, T0 + 3 * MIN, T0 + 4 * MIN)
    assert (m2["generations"], m2["active_ms"]) == (1, 3 * MIN)
    # The commit after the group became Empty: no owner; its rate runs from the group's first commit.
    assert (nobody["commits"], nobody["generations"], nobody["active_ms"]) == (1, 0, AS_OF - (T0 + MIN))


def test_group_protocol_and_summary(spark: Any, tables: Any, history: Any) -> None:
    summary = by_key(tables["group_summary"], "group")
    kip848 = summary[("kip848",)]
    assert (kip848["protocol"], kip848["state"], kip848["partitions"], kip848["lag"]) == (
        "consumer",
        "Empty",  # an epoch, no member records
        1,
        70,
    )
    assert kip848["generation"] == 5
    assert summary[("downgraded",)]["protocol"] == "classic"
    assert summary[("downgraded",)]["state"] == "Empty"
    again = summary[("again",)]
    assert (again["state"], again["members"], again["stuck_partitions"], again["trend"]) == (
        "Stable",
        1,
        1,
        "growing",
    )
    assert summary[("catching",)]["catch_up_ms"] == 15 * 80 * MIN // 6
    assert summary[("trimmed-g",)]["records_lost"] == 2
    # The same records decoded from raw records (the cluster input's path).
    from regroup_pipeline.datasource import raw_schema

    raw = (
        spark.read.format("regroup")
        .option("path", str(history.path))
        .option("topics", "__consumer_offsets")
        .load()
    )
    assert raw.schema == raw_schema()
    decoded = rows(decode_consumer_groups(raw))
    assert [
        (r["group"], r["deleted"], r["epoch"]) for r in sorted(decoded, key=lambda r: r["record_offset"])
    ] == [
        ("kip848", False, 5),
        ("downgraded", False, 2),
        ("downgraded", True, None),
    ]


def test_activity_and_runs_folded_while_reading_equal_the_aggregated_ones(
    spark: Any, history: Any, tmp_path: Path
) -> None:
    """The per-key rows and commit runs the reading tasks fold (``all`` over a data directory) give the
    same commit activity and member commits as the aggregations over every commit — tombstones,
    re-commits, moving offsets, owners changing between commits and KIP-848 groups included — and the
    same rows folded one record at a time are the same."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    from regroup_pipeline import monitoring
    from regroup_pipeline.datasource import HistoryOutputs, write_history
    from regroup_pipeline.inputs import CONSUMER_GROUP_SCHEMA, GROUP_SCHEMA
    from regroup_pipeline.offsetkeys import (
        KEY_ARROW_SCHEMA,
        RUN_ARROW_SCHEMA,
        OffsetKeys,
        membership_positions,
    )

    inputs = persist_inputs(from_datadir(spark, [str(history.path)], TimeWindow(now_ms=AS_OF)))
    assert inputs.history_options is not None
    outputs = HistoryOutputs(
        *(str(tmp_path / name) for name in ("offsets", "keys", "runs", "groups", "consumer_groups"))
    )
    write_history(spark, dict(inputs.history_options), outputs)
    # The group records the tasks decoded on the way are the data source's.
    for name, schema, df in (
        ("groups", GROUP_SCHEMA, inputs.groups),
        ("consumer_groups", CONSUMER_GROUP_SCHEMA, inputs.consumer_groups),
    ):
        assert rows(spark.read.schema(schema).parquet(str(tmp_path / name))) == rows(df)
    boundaries = membership_positions(
        pq.read_table(tmp_path / "groups"), pq.read_table(tmp_path / "consumer_groups")
    )
    assert len(boundaries["moving"]) == 3  # its three GroupMetadata records
    keys = spark.read.schema(from_arrow_schema(KEY_ARROW_SCHEMA)).parquet(str(tmp_path / "keys"))
    runs = spark.read.schema(from_arrow_schema(RUN_ARROW_SCHEMA)).parquet(str(tmp_path / "runs"))
    history_df = jobs.offsets(inputs)
    folded = rows(monitoring.activity_from_keys(keys, inputs.window))
    assert folded == rows(monitoring.commit_activity(history_df, inputs.window))
    again = by_key(folded, "group", "topic", "partition")[("again", "t", 0)]
    assert (again["window_start"], again["unchanged_since"], again["commits"]) == (T0 + 40 * MIN,) * 2 + (2,)
    moving = by_key(folded, "group", "topic", "partition")[("moving", "t", 0)]
    assert (moving["start_committed_offset"], moving["unchanged_since"]) == (1, T0 + 6 * MIN)

    # moving's four commits fall in three runs: before generation 2, in it, after the group emptied.
    moving_runs = [r for r in rows(runs) if r["group"] == "moving"]
    assert sorted(r["commits"] for r in moving_runs) == [1, 1, 2]
    assignments = jobs._consumer_assignment_history(inputs)
    credited = rows(monitoring.member_commits(history_df, inputs.groups, inputs.window, assignments, runs))
    assert credited == rows(monitoring.member_commits(history_df, inputs.groups, inputs.window, assignments))

    one_by_one = OffsetKeys(boundaries)
    for batch in pq.read_table(tmp_path / "offsets").to_batches(max_chunksize=1):
        one_by_one.feed(batch)
    order = [("group", "ascending"), ("topic", "ascending"), ("partition", "ascending")]
    assert one_by_one.finish().sort_by(order).equals(pq.read_table(tmp_path / "keys").sort_by(order))
    order.append(("record_offset", "ascending"))
    assert one_by_one.finish_runs().sort_by(order).equals(pq.read_table(tmp_path / "runs").sort_by(order))
    with pytest.raises(ValueError, match="since"):
        monitoring.activity_from_keys(keys, TimeWindow(now_ms=AS_OF, since_ms=T0))
    with pytest.raises(ValueError, match="since"):
        monitoring.member_commits(
            history_df, inputs.groups, TimeWindow(now_ms=AS_OF, since_ms=T0), assignments, runs
        )
    unpersist_inputs(inputs)


def test_lag_grid_samples_and_latest_folded_while_reading_equal_the_history_path(
    spark: Any, history: Any, tmp_path: Path
) -> None:
    """The grid samples the reading tasks pick out and look up (``all`` over a data directory) give the
    same lag rows as sampling the whole history in Spark and looking the samples up after — across a
    tombstone, a re-commit, a moved log start and the window's end — and their last records are the
    history's current ones; samples at another grid than the lag table's are not used."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from regroup_pipeline.datasource import HistoryOutputs, first_commit_ms, write_history
    from regroup_pipeline.decode import HISTORY_ARROW_SCHEMA
    from regroup_pipeline.offsetkeys import KEY_ARROW_SCHEMA, SAMPLE_ARROW_SCHEMA, LagGrid

    inputs = persist_inputs(from_datadir(spark, [str(history.path)], TimeWindow(now_ms=AS_OF)))
    assert inputs.history_options is not None
    options = dict(inputs.history_options)
    # The first offset commit ("moving" at minute 1; the GroupMetadata records at T0 are not commits).
    assert first_commit_ms(options) == T0 + MIN
    samples = 7
    grid = LagGrid.spanning(T0 + MIN, AS_OF, samples, None)
    assert grid is not None
    assert (grid.step_ms, grid.count) == (-(-99 * MIN // samples), samples)
    index = jobs.data_record_index(inputs)
    assert index is not None
    names = ("offsets", "keys", "latest", "samples")
    outputs = HistoryOutputs(
        **{field: str(tmp_path / name) for field, name in zip(("history", *names[1:]), names, strict=True)}
    )
    written = write_history(spark, options, outputs, grid, index)
    history_df = jobs.offsets(inputs)
    assert (written.rows, written.first_record_ms) == (history_df.count(), T0 + MIN)

    def read(name: str, schema: Any) -> Any:
        return spark.read.schema(from_arrow_schema(schema)).parquet(str(tmp_path / name))

    latest = read("latest", HISTORY_ARROW_SCHEMA)
    assert rows(latest) == rows(jobs._latest(history_df))
    folded = jobs.Folded(
        keys=read("keys", KEY_ARROW_SCHEMA),
        first_record_ms=written.first_record_ms,
        latest=latest,
        grid=grid,
        samples=read("samples", SAMPLE_ARROW_SCHEMA),
        records=index,
    )
    args: dict[str, Any] = {
        "history": history_df,
        "latest": latest,
        "samples": samples,
        "interval_ms": None,
        "anchors": None,
    }
    everything, none = jobs._lag_parts(inputs, **args)  # without samples folded: all looked up
    assert none is None
    expected = rows(everything)
    looked_up, grid_rows = jobs._lag_parts(inputs, **args, folded=folded)
    assert grid_rows is not None
    assert sorted(rows(looked_up) + rows(grid_rows), key=repr) == expected
    by_sample = by_key([r for r in expected if r["kind"] == "sample"], "group", "sample_time")
    # "again" between its tombstone (minute 20) and its next commit (minute 40) has no committed offset.
    again = sorted(t for g, t in by_sample if g == "again")
    assert not [t for t in again if T0 + 20 * MIN <= t < T0 + 40 * MIN]
    catching = by_sample[("catching", grid.start_ms + 3 * grid.step_ms)]  # minute 43: offset 0, 43 records
    assert (catching["committed_offset"], catching["log_end_offset"], catching["lag"]) == (0, 44, 44)

    # Samples taken at another grid (a probe that missed the first commit) are not the lag table's.
    other = LagGrid.spanning(T0 + 2 * MIN, AS_OF, samples, None)
    looked_up, grid_rows = jobs._lag_parts(inputs, **args, folded=dataclasses.replace(folded, grid=other))
    assert grid_rows is None
    assert rows(looked_up) == expected
    unpersist_inputs(inputs)


def test_the_group_summarys_lag_trend_is_added_up_in_one_order(spark: Any) -> None:
    """A plain floating-point sum depends on the order its rows arrive in, which follows the order the
    tasks before a shuffle finished; the summary's is the sum in ascending order however the rows come."""
    from pyspark.sql import functions as F

    from regroup_pipeline import monitoring

    values = [1e16, 1.0, -1e16, 1.0, 3.0, -2.5, 0.5]
    assert len({sum(values), sum(reversed(values)), sum(sorted(values))}) > 1
    expected = sum(sorted(values))
    data = [("g", v) for v in values] + [("none", None)]
    for seed in range(4):
        df = spark.createDataFrame(data, "group string, lag_trend double").repartition(3, F.rand(seed))
        got = {
            r["group"]: r["total"]
            for r in df.groupBy("group").agg(monitoring._ordered_sum("lag_trend").alias("total")).collect()
        }
        assert got == {"g": expected, "none": None}


def test_all_samples_the_lag_grid_from_the_history_when_the_probe_missed_the_first_commit(
    spark: Any, tmp_path: Path
) -> None:
    """The driver's probe reads only the start of each ``__consumer_offsets`` partition: a commit stamped
    before those further on in the log (a clock that went back) starts the grid earlier than the tasks
    sampled, and ``all`` then samples the grid from the history: its lag table is ``compute_all``'s."""
    from regroup_pipeline.datasource import first_commit_ms
    from regroup_pipeline.runner import write_all

    late = T0 + 30 * MIN
    commits = [
        (late + i, *offset_commit(f"g{i % 50}", "t", 0, i % 100, commit_ts=late + i)) for i in range(20_000)
    ]
    commits.append((T0, *offset_commit("early", "t", 0, 5, commit_ts=T0)))
    data = [(T0 + j * MIN, None, b"x") for j in range(100)]
    writes = [Batch("__consumer_offsets", 0, commits[i : i + 1000]) for i in range(0, len(commits), 1000)]
    built = build(tmp_path / "data", {"__consumer_offsets": 1, "t": 1}, [*writes, Batch("t", 0, data)], T0)
    window = TimeWindow(now_ms=AS_OF)
    inputs = from_datadir(spark, [str(built.path)], window)
    assert inputs.history_options is not None
    assert first_commit_ms(dict(inputs.history_options)) == late  # the probe did not reach "early"
    out = tmp_path / "tables"
    write_all(inputs, out, out / "report.html")
    expected = jobs.compute_all(from_datadir(spark, [str(built.path)], window))
    lag = rows(expected.lag)
    assert min(r["sample_time"] for r in lag) == T0  # the grid starts at "early"'s commit
    assert rows(spark.read.parquet(str(out / "lag"))) == lag
    expected.unpersist()
