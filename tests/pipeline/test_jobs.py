"""The jobs on hand-made ``__consumer_offsets`` histories: what real clients rarely produce (static
replacements, broken assignments, old record versions, explicit expire timestamps, deleted and
recreated groups) and the --since/--until window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regroup_pipeline import jobs, laglookup
from regroup_pipeline.inputs import TimeWindow, from_datadir
from regroup_pipeline.runner import persist_inputs
from regroup_pipeline.synthetic import (
    MemberSpec,
    group_metadata,
    group_tombstone,
    offset_commit,
    offset_tombstone,
)

from .datadirs import Batch, build
from .support import SPARK_SOCKETS, rows

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

T0 = 1_795_000_000_000
MIN = 60_000


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Any:
    a = MemberSpec("a-1", ["t"], {"t": [0, 1]}, group_instance_id="inst-a")
    b = MemberSpec("b-1", ["t"], {"t": [2, 3]}, group_instance_id="inst-b")
    b2 = MemberSpec("b-2", ["t"], {"t": [2, 3]}, group_instance_id="inst-b")
    c = MemberSpec("c-1", ["t"], {})
    co: list[tuple[int, bytes, bytes | None]] = []

    def add(ts: int, kv: tuple[bytes, bytes | None]) -> None:
        co.append((ts, kv[0], kv[1]))

    # static: two static members; b restarts (static replacement, same generation); c joins.
    add(T0, group_metadata("static", 1, [a, b], state_ts=T0))
    add(T0 + 1 * MIN, group_metadata("static", 1, [a, b2], state_ts=T0))
    add(T0 + 2 * MIN, group_metadata("static", 2, [a, b2, c], state_ts=T0 + 2 * MIN))
    # bad: partition 1 assigned twice, partition 3 to nobody, "other" assigned though nobody subscribes.
    bad = [
        MemberSpec("x", ["t"], {"t": [0, 1]}),
        MemberSpec("y", ["t"], {"t": [1, 2], "other": [0]}),
    ]
    add(T0 + 3 * MIN, group_metadata("bad", 1, bad, state_ts=T0))
    # old: v1 records carry no state timestamp; Empty since then.
    add(T0, offset_commit("old", "t", 0, 5, commit_ts=T0, value_version=1))
    add(T0 + MIN, group_metadata("old", 3, [], value_version=1))
    # explicit: a v1 commit with its own expire timestamp, in a simple group.
    add(T0, offset_commit("explicit", "t", 1, 9, commit_ts=T0, value_version=1, expire_ts=T0 + 5 * MIN))
    # connect: a Stable group of another protocol type never expires offsets.
    add(
        T0,
        group_metadata(
            "connect", 1, [MemberSpec("w", [], subscription=b"\x00\x00")], protocol_type="connect"
        ),
    )
    add(T0, offset_commit("connect", "t", 2, 1, commit_ts=T0))
    # again: deleted, then created anew; generations restart.
    add(T0, group_metadata("again", 1, [c], state_ts=T0))
    add(T0 + MIN, offset_commit("again", "t", 3, 4, commit_ts=T0 + MIN))
    add(T0 + 2 * MIN, offset_tombstone("again", "t", 3))
    add(T0 + 2 * MIN, group_tombstone("again"))
    add(T0 + 3 * MIN, group_metadata("again", 1, [a], state_ts=T0 + 3 * MIN))
    add(T0 + 4 * MIN, offset_commit("again", "t", 3, 2, commit_ts=T0 + 4 * MIN))
    # lagging: commits over time against records over time.
    for i in range(6):
        add(T0 + i * 10 * MIN, offset_commit("lagging", "t", 0, 10 * i, commit_ts=T0 + i * 10 * MIN))
    data = [(T0 + j * MIN, None, b"x") for j in range(100)]  # one record a minute on t-0
    writes = [
        Batch("__consumer_offsets", 0, co),
        Batch("t", 0, data),
        Batch("t", 1, data[:20]),
        Batch("t", 2, data[:5]),
        Batch("t", 3, data[:5]),
    ]
    return build(
        tmp_path_factory.mktemp("hist") / "data", {"__consumer_offsets": 1, "t": 4, "other": 1}, writes, T0
    )


def _inputs(spark: Any, history: Any, **window: int) -> Any:
    return from_datadir(spark, [str(history.path)], TimeWindow(now_ms=T0 + 100 * MIN, **window))


@pytest.fixture(scope="module")
def inputs(spark: Any, history: Any) -> Iterator[Any]:
    """The history's inputs, read once and kept in memory for the module."""
    kept = persist_inputs(_inputs(spark, history))
    yield kept
    for df in (kept.groups, kept.data, kept.partitions):
        df.unpersist()


def test_static_replacement_and_joins(inputs: Any) -> None:
    reb = {(r["group"], r["incarnation"], r["generation"]): r for r in rows(jobs.rebalances(inputs))}
    g1, g2 = reb[("static", 0, 1)], reb[("static", 0, 2)]
    assert g1["time"] == T0
    assert g1["static_replacements"] == 1
    assert [m["member_id"] for m in g1["members"]] == ["a-1", "b-2"]
    assert g1["joined"] == ["inst-a", "inst-b"]
    assert g1["left"] == []
    assert g2["joined"] == ["c-1"]
    assert g2["left"] == []
    assert g2["since_previous_ms"] == 2 * MIN
    # A deleted and recreated group starts a new incarnation.
    assert reb[("again", 0, 1)]["members"][0]["member_id"] == "c-1"
    again = reb[("again", 1, 1)]
    assert again["previous_generation"] is None
    assert again["joined"] == ["inst-a"]


def test_assignment_health_finds_double_and_missing_assignments(inputs: Any) -> None:
    health = {r["group"]: r for r in rows(jobs.assignment_health(jobs.rebalances(inputs), inputs.partitions))}
    bad = health["bad"]
    assert not bad["healthy"]
    assert bad["subscribed_partitions"] == 4
    assert bad["unassigned"] == [{"topic": "t", "partition": 3}]
    assert bad["multiply_assigned"] == [{"topic": "t", "partition": 1, "members": ["x", "y"]}]
    assert bad["unexpected"] == [{"topic": "other", "partition": 0, "member": "y"}]
    assert health["static"]["healthy"]


def test_expiration_rules_for_old_versions_explicit_timestamps_and_other_protocols(inputs: Any) -> None:
    table = rows(jobs.expiring_offsets(inputs, retention_minutes=10, horizon_ms=10**12))
    got = {(r["group"], r["topic"], r["partition"]): r for r in table}
    old = got[("old", "t", 0)]
    assert old["rule"] == "empty"
    assert old["base_timestamp"] == T0
    assert old["expires_at"] == T0 + 10 * MIN
    explicit = got[("explicit", "t", 1)]
    assert explicit["rule"] == "simple"
    assert explicit["expires_at"] == T0 + 5 * MIN
    assert ("connect", "t", 2) not in got
    assert not any(k[0] == "again" for k in got)  # its Stable member subscribes to t


def test_lag_over_time_follows_commits_and_records(inputs: Any) -> None:
    table = [r for r in rows(jobs.lag(inputs, interval_ms=10 * MIN)) if r["group"] == "lagging"]
    by_time = {r["sample_time"]: r for r in table}
    for i in range(6):
        r = by_time[T0 + i * 10 * MIN]
        # At minute 10i: records 0..10i exist (one a minute), the group committed 10i.
        assert r["committed_offset"] == 10 * i
        assert r["log_end_offset"] == 10 * i + 1
        assert r["lag"] == 1
        assert r["first_unconsumed_timestamp"] == T0 + 10 * i * MIN
        assert r["time_lag_ms"] == 0
    late = by_time[T0 + 90 * MIN]
    assert late["committed_offset"] == 50
    assert late["log_end_offset"] == 91
    assert late["time_lag_ms"] == 40 * MIN
    now = next(r for r in table if r["is_current"])
    assert now["sample_time"] == T0 + 100 * MIN
    assert now["log_end_offset"] == 100
    assert now["lag"] == 50
    assert now["time_lag_ms"] == 50 * MIN


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().analyzed().toString())


def test_lag_is_the_same_with_the_records_broadcast_or_shuffled(
    inputs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history's few records are broadcast to the lag rows' tasks; with the bound at zero the same
    lookups go through the cogroup that many records take."""
    broadcast_df = jobs.lag(inputs, interval_ms=10 * MIN)
    monkeypatch.setattr(laglookup, "BROADCAST_RECORDS", -1)
    shuffled_df = jobs.lag(inputs, interval_ms=10 * MIN)
    assert "MapInArrow" in _plan(broadcast_df)
    assert "CoGroup" not in _plan(broadcast_df)
    assert "CoGroup" in _plan(shuffled_df)
    broadcast = rows(broadcast_df)
    assert broadcast == rows(shuffled_df)
    assert any(r["first_unconsumed_timestamp"] is not None for r in broadcast)


def test_released_lookups_leave_no_broadcast_behind(spark: Any, inputs: Any) -> None:
    jobs.release_lookups()  # those of the tests before
    temp = Path(spark.sparkContext._temp_dir)
    before = set(temp.iterdir())
    lag = jobs.lag(inputs, interval_ms=10 * MIN)
    assert set(temp.iterdir()) - before  # the record index, broadcast
    assert rows(lag)
    jobs.release_lookups()
    assert not set(temp.iterdir()) - before


def test_since_and_until_window(spark: Any, history: Any) -> None:
    inputs = _inputs(spark, history, since_ms=T0 + 15 * MIN, until_ms=T0 + 35 * MIN)
    offsets = [r for r in rows(jobs.offsets(inputs)) if r["group"] == "lagging"]
    assert [r["committed_offset"] for r in sorted(offsets, key=lambda r: r["record_offset"])] == [20, 30]
    assert offsets[-1]["is_current"]  # the commit at minute 40 is after until
    lag = [r for r in rows(jobs.lag(inputs, interval_ms=5 * MIN)) if r["group"] == "lagging"]
    assert min(r["sample_time"] for r in lag) >= T0 + 15 * MIN
    current = next(r for r in lag if r["is_current"])
    assert current["sample_time"] == T0 + 35 * MIN
    assert current["committed_offset"] == 30
    assert current["log_end_offset"] == 36
    reb = rows(jobs.rebalances(inputs))
    assert all(T0 + 15 * MIN <= r["time"] <= T0 + 35 * MIN for r in reb)
