"""The batch tables against ground truth from real clients on a real broker: OffsetFetch, ListOffsets,
DescribeGroups and each member's own view of its generations and assignments; and the same job over
Spark's Kafka source and over the Python Data Source gives identical tables."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from .support import SPARK_SOCKETS, by_key

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

RETENTION_MS = 10080 * 60_000


def current_offsets(
    tables: dict[str, list[dict[str, Any]]],
) -> dict[str, dict[tuple[str, int], tuple[int, str, int]]]:
    out: dict[str, dict[tuple[str, int], tuple[int, str, int]]] = {}
    for r in tables["offsets"]:
        if r["is_current"] and not r["deleted"]:
            out.setdefault(r["group"], {})[(r["topic"], r["partition"])] = (
                r["committed_offset"],
                r["metadata"],
                r["leader_epoch"],
            )
    return out


def test_offsets_equal_offset_fetch(kafka_tables: Any, scenario: Any) -> None:
    got = current_offsets(kafka_tables)
    for group, expected in scenario.committed.items():
        assert got.get(group, {}) == expected, group
    assert scenario.committed["g-gone"] == {}
    assert scenario.committed["g-admin"][("audit", 0)] == (7, "set by admin", -1)


def test_offsets_keep_the_full_history(kafka_tables: Any) -> None:
    chains: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in kafka_tables["offsets"]:
        chains.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
    for chain in chains.values():
        chain.sort(key=lambda r: r["record_offset"])
        for earlier, later in itertools.pairwise(chain):
            assert earlier["valid_until"] == later["record_timestamp"]
            assert not earlier["is_current"]
        assert chain[-1]["is_current"]
        assert chain[-1]["valid_until"] is None
    assert all(r["value_version"] in (1, 3, 4) for r in kafka_tables["offsets"] if not r["deleted"])
    # g-gone's offsets were committed, then deleted with the group: the tombstone is the current row.
    gone = chains[("g-gone", "audit", 0)]
    assert [r["deleted"] for r in gone] == [False, True]
    assert gone[0]["committed_offset"] == 10
    assert gone[1]["committed_offset"] is None


def test_lag_equals_list_offsets_minus_offset_fetch(kafka_tables: Any, scenario: Any) -> None:
    current = {(r["group"], r["topic"], r["partition"]): r for r in kafka_tables["lag"] if r["is_current"]}
    expected_keys = {(g, t, p) for g, offsets in scenario.committed.items() for (t, p) in offsets}
    assert set(current) == expected_keys
    for (group, topic, partition), row in current.items():
        committed = scenario.committed[group][(topic, partition)][0]
        end = scenario.end_offsets[(topic, partition)]
        assert row["log_end_offset"] == end
        assert row["lag"] == end - committed, (group, topic, partition)
        assert row["sample_time"] == scenario.snapshot_ms


def test_time_lag_comes_from_record_timestamps(kafka_tables: Any, scenario: Any) -> None:
    for row in kafka_tables["lag"]:
        if not row["is_current"]:
            continue
        # The first unconsumed record still held: retention may have deleted the committed one.
        first_held = max(row["committed_offset"], scenario.start_offsets[(row["topic"], row["partition"])])
        if row["lag"] > 0:
            first = scenario.produced[(row["topic"], row["partition"], first_held)]
            assert row["first_unconsumed_timestamp"] == first
            assert row["time_lag_ms"] == scenario.snapshot_ms - first
        else:
            assert row["time_lag_ms"] == 0
    churn = {
        (r["topic"], r["partition"]): r
        for r in kafka_tables["lag"]
        if r["is_current"] and r["group"] == "g-churn"
    }
    # The Empty group missed the 5 late records on orders-0, the first written at late_ts.
    assert churn[("orders", 0)]["lag"] == 5
    assert churn[("orders", 0)]["time_lag_ms"] == scenario.snapshot_ms - scenario.late_ts
    assert churn[("orders", 0)]["group_state"] == "Empty"


def test_lag_over_time_samples_the_history(kafka_tables: Any) -> None:
    past = [r for r in kafka_tables["lag"] if not r["is_current"] and r["group"] == "g-churn"]
    assert past, "no historical samples"
    times = sorted({r["sample_time"] for r in past})
    assert len(times) > 5
    for r in past:
        assert r["lag"] is None or r["lag"] >= 0


def _generations(observed: list[Any]) -> dict[int, dict[str, tuple[tuple[str, int], ...]]]:
    gens: dict[int, dict[str, tuple[tuple[str, int], ...]]] = {}
    for o in observed:
        gens.setdefault(o.generation, {})[o.member_id] = o.partitions
    return gens


def _assignment(member: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((a["topic"], p) for a in member["assignment"] for p in a["partitions"]))


def _truth(scenario: Any, broker: Any) -> dict[str, list[Any]]:
    """The generations the coordinator produced: from regroup's ``__group_events`` when the broker is
    regroup; otherwise (Apache Kafka) the generations the clients were assigned in, plus the Empty
    generation of each group whose members all left."""
    from .scenario import CoordinatorGeneration, coordinator_generations

    truth = coordinator_generations(broker.data_dir, scenario.snapshot_ms)
    if truth is not None:
        return truth
    out: dict[str, list[Any]] = {}
    for group in ("g-churn", "g-rr", "g-gone"):
        gens = _generations(scenario.observed[group])
        out[group] = [
            CoordinatorGeneration(g, "Stable", None, None, frozenset(m), 0, None)
            for g, m in sorted(gens.items())
        ]
        if group != "g-rr":
            last = max(gens)
            out[group].append(CoordinatorGeneration(last + 1, "Empty", None, None, frozenset(), 0, None))
    return out


def test_rebalances_list_exactly_the_generations_the_coordinator_produced(
    kafka_tables: Any, scenario: Any, broker: Any
) -> None:
    truth = _truth(scenario, broker)
    for group in ("g-churn", "g-rr", "g-gone"):
        rows = sorted(
            (r for r in kafka_tables["rebalances"] if r["group"] == group),
            key=lambda r: (r["incarnation"], r["generation"]),
        )
        expected = truth[group]
        assert [(r["generation"], r["state"]) for r in rows] == [(g.generation, g.state) for g in expected]
        previous: frozenset[str] = frozenset()
        for row, gen in zip(rows, expected, strict=True):
            members = {m["member_id"] for m in row["members"]}
            assert members == gen.members, (group, gen.generation)
            assert row["member_count"] == len(gen.members)
            assert set(row["joined"]) == gen.members - previous, (group, gen.generation)
            assert set(row["left"]) == previous - gen.members, (group, gen.generation)
            previous = gen.members
            if gen.state == "Empty":
                assert row["protocol"] is None
                continue
            assert row["protocol_type"] == "consumer"
            assert row["leader"] in members
            if gen.leader is not None:
                assert (row["leader"], row["protocol"]) == (gen.leader, gen.protocol)
                # The generation's record is written between the end of the join phase and the moment
                # the leader's assignment is durable.
                assert gen.join_completed_ms <= row["time"] <= gen.stable_ms
        # Every generation a client was assigned in, with exactly the assignment it received. A member
        # may not see a generation it was assigned in: when the leader rejoins at once (kafka-python does
        # when its metadata catches up), a slower member's SyncGroup gets REBALANCE_IN_PROGRESS, as on Kafka.
        stable = {r["generation"]: r for r in rows if r["state"] == "Stable"}
        for gen_id, seen in _generations(scenario.observed[group]).items():
            assigned = {m["member_id"]: _assignment(m) for m in stable[gen_id]["members"]}
            assert {m: assigned.get(m) for m in seen} == seen, (group, gen_id)
    churn = sorted(
        (r for r in kafka_tables["rebalances"] if r["group"] == "g-churn"), key=lambda r: r["generation"]
    )
    # A joins, B joins, C joins, B leaves, A leaves, C leaves (the client may add generations of the same
    # membership, e.g. kafka-python rejoining once its metadata is complete).
    sizes = [r["member_count"] for r in churn]
    assert [n for i, n in enumerate(sizes) if i == 0 or n != sizes[i - 1]] == [1, 2, 3, 2, 1, 0]
    assert churn[-1]["state"] == "Empty"
    assert churn[0]["since_previous_ms"] is None
    assert [r["since_previous_ms"] for r in churn[1:]] == [
        later["time"] - earlier["time"] for earlier, later in itertools.pairwise(churn)
    ]
    assert [r["previous_generation"] for r in churn[1:]] == [r["generation"] for r in churn[:-1]]
    # Subscriptions were decoded from the consumer protocol inside the group metadata.
    assert all(sorted(m["subscribed_topics"]) == ["orders", "payments"] for r in churn for m in r["members"])


def test_last_generation_matches_describe_groups(kafka_tables: Any, scenario: Any) -> None:
    for group in ("g-churn", "g-rr"):
        rows = [r for r in kafka_tables["rebalances"] if r["group"] == group]
        last = max(rows, key=lambda r: (r["incarnation"], r["generation"]))
        described = scenario.described[group]
        assert described["protocol_type"] == "consumer"
        assert described["members"] == sorted(m["member_id"] for m in last["members"])
        if described["state"] in ("PreparingRebalance", "CompletingRebalance"):
            # A rebalance in progress leaves no record until it completes: still the last generation.
            assert last["state"] == "Stable"
            continue
        assert described["state"] == last["state"]
        if last["state"] == "Stable":
            assert described["protocol_data"] == last["protocol"]


def test_rebalance_frequency(kafka_tables: Any, scenario: Any, broker: Any) -> None:
    truth = _truth(scenario, broker)
    freq = by_key(kafka_tables["rebalance_frequency"], "group")
    for group in ("g-churn", "g-rr", "g-gone"):
        assert freq[(group,)]["generations"] == len(truth[group]), group
        assert freq[(group,)]["empty_generations"] == sum(g.state == "Empty" for g in truth[group])
        assert freq[(group,)]["max_members"] == max(len(g.members) for g in truth[group])
    assert freq[("g-churn",)]["current_state"] == "Empty"
    assert freq[("g-churn",)]["max_members"] == 3
    assert freq[("g-rr",)]["current_state"] == "Stable"
    assert freq[("g-churn",)]["rebalances_per_hour"] > 0


def test_assignment_health_matches_what_members_received(kafka_tables: Any, scenario: Any) -> None:
    from .scenario import TOPICS

    groups = ("g-churn", "g-rr", "g-gone")
    rebalances = {
        (r["group"], r["generation"]): r
        for r in kafka_tables["rebalances"]
        if r["incarnation"] == 0 and r["group"] in groups
    }
    health = [r for r in kafka_tables["assignment_health"] if r["group"] in groups]
    assert len(health) == sum(1 for r in rebalances.values() if r["state"] == "Stable")
    checked = 0
    for row in health:
        seen = _generations(scenario.observed[row["group"]]).get(row["generation"])
        if seen is None:
            continue  # no client was assigned in this generation (it was superseded before they synced)
        generation = rebalances[(row["group"], row["generation"])]
        topics = {t for m in generation["members"] for t in m["subscribed_topics"]}
        expected = {(t, p) for t in topics for p in range(TOPICS[t])}
        received = {tp for parts in seen.values() for tp in parts}
        unassigned = {(u["topic"], u["partition"]) for u in row["unassigned"]}
        assert row["multiply_assigned"] == []
        assert row["subscribed_partitions"] == len(expected)
        if set(seen) != {m["member_id"] for m in generation["members"]}:
            # Not every member saw this generation (a slower member's SyncGroup was superseded): what the
            # others received is assigned; the rest is not known from the clients.
            assert not unassigned & received
            continue
        checked += 1
        assert unassigned == expected - received
        assert row["healthy"] == (expected == received)
    assert checked >= len(health) - 3
    assert any(r["healthy"] for r in health)


def test_expiring_offsets_follow_the_retention_rules(kafka_tables: Any, scenario: Any) -> None:
    # Computed with a 1 minute retention and a 10 year horizon (support.SHORT_RETENTION).
    got = {(r["group"], r["topic"], r["partition"]): r for r in kafka_tables["expiring_offsets"]}
    churn = [r for k, r in got.items() if k[0] == "g-churn"]
    assert len(churn) == 5
    lo, hi = scenario.left_empty_ms["g-churn"]
    for r in churn:
        # Empty: retention counts from when the group became Empty, for every offset.
        assert r["rule"] == "empty"
        assert r["group_state"] == "Empty"
        assert lo - 1000 <= r["base_timestamp"] <= hi + 1000
        assert r["expires_at"] == r["base_timestamp"] + 60_000
        assert r["expires_in_ms"] == r["expires_at"] - scenario.snapshot_ms
        assert r["group_deleted"]
    rr = {k[1:]: r for k, r in got.items() if k[0] == "g-rr"}
    # Stable: only the topic no member subscribes to any more expires, from its commit timestamp.
    assert {t for t, _ in rr} == {"payments"}
    for r in rr.values():
        assert r["rule"] == "stable"
        assert r["expires_at"] == r["commit_timestamp"] + 60_000
        assert not r["group_deleted"]
    admin = {k[1:]: r for k, r in got.items() if k[0] == "g-admin"}
    # A simple group (admin commits only): from each commit timestamp.
    assert set(admin) == {("audit", 0), ("orders", 1)}
    lo, hi = scenario.admin_commit_ms
    for r in admin.values():
        assert r["rule"] == "simple"
        assert r["group_state"] == "Empty"
        assert lo - 1000 <= r["commit_timestamp"] <= hi + 1000
        assert r["expires_at"] == r["commit_timestamp"] + 60_000
    assert not any(k[0] == "g-gone" for k in got)
    # With the default retention (7 days) and horizon (24 hours) nothing expires yet.
    assert kafka_tables["expiring_offsets_default"] == []


def _comparable(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    # Segment sizes are known from a data directory only (test_monitoring checks them).
    return {
        name: sorted(({**r, "size_bytes": None} if "size_bytes" in r else r for r in rows), key=repr)
        for name, rows in tables.items()
    }


def test_kafka_source_and_data_source_give_identical_tables(kafka_tables: Any, datadir_tables: Any) -> None:
    assert set(kafka_tables) == set(datadir_tables)
    kt, dt = _comparable(kafka_tables), _comparable(datadir_tables)
    for name in kt:
        assert kt[name] == dt[name], name
    assert all(
        kt[name] for name in ("offsets", "lag", "rebalances", "rebalance_frequency", "assignment_health")
    )
