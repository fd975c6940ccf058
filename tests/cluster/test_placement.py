"""Replica placement: Kafka's rack-unaware round robin at topic creation and when partitions are added."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.cluster.placement import assign_added_partitions, assign_replicas
from regroup.protocol.errors import ErrorCode, KafkaError


def test_known_assignment_for_five_nodes_ten_partitions() -> None:
    # The layout Kafka's own placement test expects with start index and shift 0.
    assert assign_replicas(10, 3, [0, 1, 2, 3, 4], 0, 0) == (
        (0, 1, 2),
        (1, 2, 3),
        (2, 3, 4),
        (3, 4, 0),
        (4, 0, 1),
        (0, 2, 3),  # second round: the followers move one further from the leader
        (1, 3, 4),
        (2, 4, 0),
        (3, 0, 1),
        (4, 1, 2),
    )


def test_start_index_and_shift_select_first_leader_and_follower_distance() -> None:
    assert assign_replicas(3, 2, [10, 20, 30], 1, 1) == ((20, 10), (30, 20), (10, 30))
    assert assign_replicas(3, 2, [10, 20, 30], 2, 0) == ((30, 10), (10, 20), (20, 30))


def test_node_ids_are_sorted_and_deduplicated() -> None:
    assert assign_replicas(4, 2, [3, 1, 2, 1], 0, 0) == assign_replicas(4, 2, [1, 2, 3], 0, 0)


def test_replication_factor_above_node_count_is_rejected_with_kafkas_message() -> None:
    with pytest.raises(KafkaError) as excinfo:
        assign_replicas(3, 4, [1, 2, 3], 0, 0)
    assert excinfo.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert excinfo.value.message == "Replication factor: 4 larger than available brokers: 3."


@pytest.mark.parametrize("rf", [0, -1])
def test_replication_factor_below_one_is_rejected(rf: int) -> None:
    with pytest.raises(KafkaError) as excinfo:
        assign_replicas(3, rf, [1, 2, 3], 0, 0)
    assert excinfo.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert excinfo.value.message == "Replication factor must be larger than 0."


def test_no_nodes_is_an_invalid_replication_factor() -> None:
    with pytest.raises(KafkaError) as excinfo:
        assign_replicas(1, 1, [], 0, 0)
    assert excinfo.value.message == "Replication factor: 1 larger than available brokers: 0."


def test_partition_count_is_checked_first() -> None:
    with pytest.raises(KafkaError) as excinfo:
        assign_replicas(0, 5, [1], 0, 0)
    assert excinfo.value.code is ErrorCode.INVALID_PARTITIONS


def test_negative_randomness_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        assign_replicas(1, 1, [1], -1, 0)


def test_single_node() -> None:
    assert assign_replicas(3, 1, [7], 5, 9) == ((7,), (7,), (7,))


def test_first_partition_offsets_the_rotation_and_the_shift_grows_at_each_wrap() -> None:
    # partition 2 leads on node index 2; partition 3 wraps around the three nodes, so the shift grows
    assert assign_replicas(3, 2, [1, 2, 3], 0, 0, first_partition=2) == ((3, 1), (1, 3), (2, 1))


# ----------------------------------------------------------------------------------------- adding partitions


def test_adding_partitions_continues_from_partition_zeros_leader() -> None:
    # One partition on all four nodes led by 2: the new ones continue the round robin after it.
    added = assign_added_partitions("t", [(2, 3, 0, 1)], 7, [0, 1, 2, 3])
    assert [r[0] for r in added] == [3, 0, 1, 2, 3, 0]
    assert all(sorted(r) == [0, 1, 2, 3] for r in added)


def test_adding_partitions_to_a_topic_on_some_nodes() -> None:
    assert assign_added_partitions("t", [(1, 2)], 3, [0, 1, 2, 3]) == ((2, 0), (3, 1))


def test_adding_partitions_when_partition_zeros_leader_is_gone() -> None:
    # Partition 0's leader no longer runs: count from the first node id not below it (else from the
    # first node), so new partition 1 goes one further.
    assert assign_added_partitions("t", [(9,)], 3, [1, 2, 3]) == ((2,), (3,))
    assert assign_added_partitions("t", [(2,)], 3, [1, 3, 5]) == ((5,), (1,))


def test_adding_partitions_must_increase_the_count() -> None:
    with pytest.raises(KafkaError) as excinfo:
        assign_added_partitions("orders", [(1,), (2,), (3,)], 2, [1, 2, 3])
    assert excinfo.value.code is ErrorCode.INVALID_PARTITIONS
    assert (
        excinfo.value.message == "The topic orders currently has 3 partition(s); 2 would not be an increase."
    )
    with pytest.raises(KafkaError) as excinfo:
        assign_added_partitions("orders", [(1,), (2,)], 2, [1, 2, 3])
    assert excinfo.value.message == "Topic already has 2 partition(s)."


def test_adding_partitions_keeps_the_replication_factor() -> None:
    with pytest.raises(KafkaError) as excinfo:
        assign_added_partitions("t", [(1, 2, 3)], 2, [1, 2])
    assert excinfo.value.code is ErrorCode.INVALID_REPLICATION_FACTOR


# ------------------------------------------------------------------------------------------------- properties

nodes_st = st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True)


@st.composite
def placements(draw: st.DrawFn) -> tuple[list[int], int, int, int, int]:
    nodes = draw(nodes_st)
    rf = draw(st.integers(1, len(nodes)))
    partitions = draw(st.integers(1, 60))
    start = draw(st.integers(0, len(nodes) - 1))
    shift = draw(st.integers(0, len(nodes) - 1))
    return nodes, rf, partitions, start, shift


@given(placements())
def test_every_partition_gets_rf_distinct_running_nodes(case: tuple[list[int], int, int, int, int]) -> None:
    nodes, rf, partitions, start, shift = case
    assignment = assign_replicas(partitions, rf, nodes, start, shift)
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(nodes)


@given(placements())
def test_leaders_and_replicas_spread_evenly(case: tuple[list[int], int, int, int, int]) -> None:
    nodes, rf, partitions, start, shift = case
    assignment = assign_replicas(partitions, rf, nodes, start, shift)
    leaders = Counter(r[0] for r in assignment)
    replicas = Counter(n for r in assignment for n in r)
    leader_counts = [leaders[n] for n in nodes]
    replica_counts = [replicas[n] for n in nodes]
    assert max(leader_counts) - min(leader_counts) <= 1
    # each full round of len(nodes) partitions gives every node one leadership and rf replicas
    assert max(replica_counts) - min(replica_counts) <= rf
    if partitions % len(nodes) == 0:
        assert len(set(leader_counts)) == 1
        assert len(set(replica_counts)) == 1


@given(placements(), st.randoms(use_true_random=False))
def test_node_order_does_not_matter(case: tuple[list[int], int, int, int, int], rnd: random.Random) -> None:
    nodes, rf, partitions, start, shift = case
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    assert assign_replicas(partitions, rf, shuffled, start, shift) == assign_replicas(
        partitions, rf, nodes, start, shift
    )


@given(placements(), st.integers(1, 30))
def test_added_partitions_are_valid_and_continue_partition_ids(
    case: tuple[list[int], int, int, int, int], extra: int
) -> None:
    nodes, rf, partitions, start, shift = case
    existing = assign_replicas(partitions, rf, nodes, start, shift)
    added = assign_added_partitions("t", existing, partitions + extra, nodes)
    assert len(added) == extra
    assert all(len(set(r)) == rf and set(r) <= set(nodes) for r in added)
    # the first replica of each new partition continues the leader rotation from partition 0's leader
    ordered = sorted(nodes)
    first = ordered.index(existing[0][0])
    assert [r[0] for r in added] == [
        ordered[(p + first) % len(nodes)] for p in range(partitions, partitions + extra)
    ]
