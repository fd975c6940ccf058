"""The controller's partition decisions: reconciling leader and ISR with node liveness, AlterPartition
validation, preferred-leader election. Cases follow what Kafka's PartitionChangeBuilder and
ReplicationControlManager tests check, plus properties over random states."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.cluster.model import NO_LEADER, LeaderRecoveryState, NodeRegistration, NodeState, PartitionRecord
from regroup.cluster.partition_change import (
    AlterPartitionProposal,
    alter_partition,
    check_broker_epoch,
    elect_preferred_leader,
    node_liveness,
    preferred_leader,
    reconcile,
)
from regroup.protocol.errors import ErrorCode

RECOVERED = LeaderRecoveryState.RECOVERED
RECOVERING = LeaderRecoveryState.RECOVERING
REPLICAS = (1, 2, 3)


def part(
    leader: int,
    isr: tuple[int, ...],
    leader_epoch: int = 5,
    partition_epoch: int = 7,
    recovery: LeaderRecoveryState = RECOVERED,
) -> PartitionRecord:
    return PartitionRecord(leader, leader_epoch, isr, partition_epoch, recovery)


# -------------------------------------------------------------------------------------------------- node gone


def test_gone_leader_is_replaced_by_the_next_isr_member() -> None:
    assert reconcile(REPLICAS, part(1, (1, 2, 3)), {2, 3}, set()) == part(2, (2, 3), 6, 8)


def test_new_leader_is_the_first_in_assignment_order_not_isr_order() -> None:
    # ISR order (2, 1, 3); assignment order (3, 1, 2): 3 is gone, so 1 leads; the ISR keeps its order.
    assert reconcile((3, 1, 2), part(3, (2, 1, 3)), {1, 2}, set()) == part(1, (2, 1), 6, 8)


def test_gone_follower_leaves_the_isr_without_a_leader_epoch_bump() -> None:
    assert reconcile(REPLICAS, part(1, (1, 2, 3)), {1, 3}, set()) == part(1, (1, 3), 5, 8)


def test_gone_node_outside_the_isr_changes_nothing() -> None:
    assert reconcile(REPLICAS, part(1, (1, 2)), {1, 2}, set()) is None


def test_last_isr_member_stays_and_the_partition_goes_offline() -> None:
    offline = reconcile(REPLICAS, part(1, (1,)), {2, 3}, set())
    assert offline == part(NO_LEADER, (1,), 6, 8)
    assert offline is not None
    assert reconcile(REPLICAS, offline, {2, 3}, set()) is None  # stays offline, nothing more to write


def test_several_nodes_gone_at_once() -> None:
    assert reconcile(REPLICAS, part(1, (1, 2, 3)), {3}, set()) == part(3, (3,), 6, 8)
    # the whole ISR gone at once: kept whole, so whichever member returns first may lead
    assert reconcile(REPLICAS, part(1, (1, 2)), {3}, set()) == part(NO_LEADER, (1, 2), 6, 8)


def test_failures_one_after_another_across_partitions() -> None:
    # Five nodes; three partitions led by their first replica, ISR = replicas.
    replicas = {"p0": (1, 2, 3), "p1": (2, 3, 4), "p2": (0, 2, 1)}
    state = {name: part(r[0], r, 0, 0) for name, r in replicas.items()}

    def step(alive: set[int]) -> None:
        for name, r in replicas.items():
            state[name] = reconcile(r, state[name], alive, set()) or state[name]

    step({0, 1, 4})  # 2 and 3 gone
    assert state == {"p0": part(1, (1,), 0, 1), "p1": part(4, (4,), 1, 1), "p2": part(0, (0, 1), 0, 1)}
    step({1, 4})  # then 0
    assert state["p2"] == part(1, (1,), 1, 2)
    step({4})  # then 1: its partitions wait for it
    assert state["p0"] == part(NO_LEADER, (1,), 1, 2)
    assert state["p2"] == part(NO_LEADER, (1,), 2, 3)
    assert state["p1"] == part(4, (4,), 1, 1)
    step({1, 4})  # 1 is back
    assert state["p0"] == part(1, (1,), 2, 3)
    assert state["p2"] == part(1, (1,), 3, 4)


# -------------------------------------------------------------------------------------------------- node back


def test_node_back_leads_the_leaderless_partitions_whose_isr_holds_it() -> None:
    assert reconcile(REPLICAS, part(NO_LEADER, (1,)), {1, 2, 3}, set()) == part(1, (1,), 6, 8)


def test_node_back_outside_the_isr_does_not_lead_without_unclean_election() -> None:
    assert reconcile(REPLICAS, part(NO_LEADER, (1,)), {2, 3}, set()) is None


def test_node_back_into_an_isr_kept_whole_leads_and_the_absent_members_leave() -> None:
    assert reconcile(REPLICAS, part(NO_LEADER, (1, 2)), {2, 3}, set()) == part(2, (2,), 6, 8)


def test_a_leader_that_still_qualifies_keeps_leading() -> None:
    # no move back to the preferred replica: that is the preferred election's job
    assert reconcile(REPLICAS, part(2, (1, 2, 3)), {1, 2, 3}, set()) is None


# ------------------------------------------------------------------------------------------- unclean election


def test_unclean_election_when_the_last_isr_member_goes() -> None:
    assert reconcile(REPLICAS, part(1, (1,)), {2, 3}, set(), unclean=True) == part(2, (2,), 6, 8, RECOVERING)


def test_unclean_election_when_a_node_outside_the_isr_comes_back() -> None:
    state = part(NO_LEADER, (1,), 6, 8)
    assert reconcile(REPLICAS, state, {3}, set(), unclean=True) == part(3, (3,), 7, 9, RECOVERING)


def test_unclean_enabled_still_prefers_an_isr_member() -> None:
    assert reconcile(REPLICAS, part(1, (1, 3)), {2, 3}, set(), unclean=True) == part(3, (3,), 6, 8)


def test_unclean_election_with_nobody_alive_goes_offline() -> None:
    assert reconcile(REPLICAS, part(1, (1,)), set(), set(), unclean=True) == part(NO_LEADER, (1,), 6, 8)


def test_unclean_election_of_a_recovering_partition_stays_recovering() -> None:
    state = part(2, (2,), 6, 8, RECOVERING)
    assert reconcile(REPLICAS, state, {3}, set(), unclean=True) == part(3, (3,), 7, 9, RECOVERING)


# -------------------------------------------------------------------------------------- controlled shutdown


def test_shutting_down_leader_hands_over_and_leaves_the_isr() -> None:
    assert reconcile(REPLICAS, part(1, (1, 2, 3)), {1, 2, 3}, {1}) == part(2, (2, 3), 6, 8)


def test_shutting_down_follower_leaves_the_isr() -> None:
    assert reconcile(REPLICAS, part(1, (1, 2, 3)), {1, 2, 3}, {3}) == part(1, (1, 2), 5, 8)


def test_shutting_down_sole_isr_member_stays_in_the_isr_without_leading() -> None:
    assert reconcile(REPLICAS, part(1, (1,)), {1, 2, 3}, {1}) == part(NO_LEADER, (1,), 6, 8)


def test_a_shutting_down_node_never_leads_not_even_uncleanly() -> None:
    assert reconcile(REPLICAS, part(NO_LEADER, (1,)), {1, 2}, {1, 2}, unclean=True) is None
    assert reconcile(REPLICAS, part(NO_LEADER, (1,)), {1, 2}, {1}, unclean=True) == part(
        2, (2,), 6, 8, RECOVERING
    )


def test_node_liveness_from_registrations() -> None:
    nodes = {
        1: NodeRegistration(1, {}, broker_epoch=10),
        2: NodeRegistration(2, {}, state=NodeState.SHUTTING_DOWN, broker_epoch=20),
        3: NodeRegistration(3, {}, state=NodeState.STORAGE_FAILED, broker_epoch=30),
    }
    assert node_liveness(nodes) == ({1: 10, 2: 20, 3: 30}, frozenset({2, 3}))


# ------------------------------------------------------------------------------------------------ properties

NODES = range(6)


@st.composite
def states(draw: st.DrawFn) -> tuple[tuple[int, ...], PartitionRecord, set[int], set[int], bool]:
    replicas = tuple(draw(st.permutations(list(NODES)))[: draw(st.integers(1, len(NODES)))])
    isr = tuple(draw(st.permutations(list(replicas)))[: draw(st.integers(1, len(replicas)))])
    leader = draw(st.sampled_from([NO_LEADER, *isr]))
    recovery = draw(st.sampled_from(LeaderRecoveryState))
    state = part(leader, isr, draw(st.integers(0, 100)), draw(st.integers(0, 100)), recovery)
    registered = draw(st.sets(st.sampled_from(NODES)))
    shutting_down = draw(st.sets(st.sampled_from(sorted(registered)))) if registered else set()
    return replicas, state, registered, shutting_down, draw(st.booleans())


def _acceptable(node: int, registered: AbstractSet[int], shutting_down: AbstractSet[int]) -> bool:
    return node in registered and node not in shutting_down


@given(states())
def test_reconciled_state_is_well_formed(
    case: tuple[tuple[int, ...], PartitionRecord, set[int], set[int], bool],
) -> None:
    replicas, old, registered, shutting_down, unclean = case
    new = reconcile(replicas, old, registered, shutting_down, unclean=unclean)
    if new is None:
        return
    assert new.partition_epoch == old.partition_epoch + 1
    assert new.leader_epoch == old.leader_epoch + (new.leader != old.leader)
    assert new.isr
    assert len(set(new.isr)) == len(new.isr)
    assert set(new.isr) <= set(replicas)
    if new.leader != NO_LEADER:
        assert new.leader in new.isr
        assert _acceptable(new.leader, registered, shutting_down)
    # the next reconciliation against the same liveness has nothing to do
    assert reconcile(replicas, new, registered, shutting_down, unclean=unclean) is None


@given(states())
def test_clean_reconciliation_only_removes_and_elects_from_the_isr(
    case: tuple[tuple[int, ...], PartitionRecord, set[int], set[int], bool],
) -> None:
    replicas, old, registered, shutting_down, _ = case
    new = reconcile(replicas, old, registered, shutting_down) or old
    alive_isr = tuple(n for n in old.isr if _acceptable(n, registered, shutting_down))
    assert new.isr == (alive_isr or old.isr)
    assert new.leader_recovery_state == old.leader_recovery_state
    if old.leader in alive_isr:
        assert new.leader == old.leader
    elif alive_isr:
        assert new.leader == next(r for r in replicas if r in alive_isr)
    else:
        assert new.leader == NO_LEADER


@given(states())
def test_unclean_election_picks_the_first_live_replica_only_when_the_isr_is_gone(
    case: tuple[tuple[int, ...], PartitionRecord, set[int], set[int], bool],
) -> None:
    replicas, old, registered, shutting_down, _ = case
    new = reconcile(replicas, old, registered, shutting_down, unclean=True) or old
    clean = reconcile(replicas, old, registered, shutting_down) or old
    live = [r for r in replicas if _acceptable(r, registered, shutting_down)]
    if clean.leader != NO_LEADER or not live:
        assert new == clean
    else:
        assert (new.leader, new.isr, new.leader_recovery_state) == (live[0], (live[0],), RECOVERING)


# -------------------------------------------------------------------------------------------- AlterPartition

EPOCHS = {1: 100, 2: 200, 3: 300}
CURRENT = part(1, (1, 2), leader_epoch=4, partition_epoch=9)


def proposal(
    isr: tuple[int, ...],
    *,
    broker_id: int = 1,
    leader_epoch: int = 4,
    partition_epoch: int = 9,
    epochs: dict[int, int] | None = None,
    recovery: LeaderRecoveryState = RECOVERED,
) -> AlterPartitionProposal:
    with_epochs = tuple((n, (epochs or EPOCHS).get(n, -1)) for n in isr)
    return AlterPartitionProposal(broker_id, leader_epoch, partition_epoch, with_epochs, recovery)


def test_alter_partition_expands_the_isr() -> None:
    result = alter_partition(REPLICAS, CURRENT, proposal((1, 2, 3)), EPOCHS, set())
    assert result.error is ErrorCode.NONE
    assert result.changed
    assert result.partition == part(1, (1, 2, 3), 4, 10)  # no leader-epoch bump for an ISR change


def test_alter_partition_shrinks_the_isr() -> None:
    result = alter_partition(REPLICAS, CURRENT, proposal((1,)), EPOCHS, set())
    assert (result.error, result.partition) == (ErrorCode.NONE, part(1, (1,), 4, 10))


def test_alter_partition_to_the_current_isr_changes_nothing() -> None:
    result = alter_partition(REPLICAS, CURRENT, proposal((1, 2)), EPOCHS, set())
    assert (result.error, result.partition, result.changed) == (ErrorCode.NONE, CURRENT, False)


def test_alter_partition_keeps_the_proposed_order() -> None:
    result = alter_partition(REPLICAS, CURRENT, proposal((3, 1, 2)), EPOCHS, set())
    assert result.partition is not None
    assert result.partition.isr == (3, 1, 2)


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (proposal((1, 2, 3), leader_epoch=5), ErrorCode.NOT_CONTROLLER),
        (proposal((1, 2, 3), partition_epoch=10), ErrorCode.NOT_CONTROLLER),
        (proposal((1, 2, 3), leader_epoch=3), ErrorCode.FENCED_LEADER_EPOCH),
        (proposal((2, 3), broker_id=2, leader_epoch=3), ErrorCode.FENCED_LEADER_EPOCH),  # epoch checked first
        (proposal((1, 2, 3), broker_id=2), ErrorCode.INVALID_REQUEST),  # not the leader
        (proposal((1, 2, 3), partition_epoch=8), ErrorCode.INVALID_UPDATE_VERSION),
        (proposal((1, 2, 4)), ErrorCode.INVALID_REQUEST),  # not a replica
        (proposal((1, 2, 2)), ErrorCode.INVALID_REQUEST),  # duplicate
        (proposal((1, -1)), ErrorCode.INVALID_REQUEST),
        (proposal((2, 3)), ErrorCode.INVALID_REQUEST),  # without the leader
        (proposal(()), ErrorCode.INVALID_REQUEST),
        (proposal((1, 2), recovery=RECOVERING), ErrorCode.INVALID_REQUEST),  # recovering with two members
        (proposal((1,), recovery=RECOVERING), ErrorCode.INVALID_REQUEST),  # RECOVERED -> RECOVERING
        (proposal((1, 2, 3), epochs={1: 100, 2: 200, 3: 299}), ErrorCode.INELIGIBLE_REPLICA),  # stale epoch
    ],
)
def test_alter_partition_validation(request_: AlterPartitionProposal, error: ErrorCode) -> None:
    result = alter_partition(REPLICAS, CURRENT, request_, EPOCHS, set())
    assert (result.error, result.partition, result.changed) == (error, None, False)


def test_alter_partition_of_an_unknown_partition() -> None:
    result = alter_partition(REPLICAS, None, proposal((1,)), EPOCHS, set())
    assert result.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_partition_rejects_an_unregistered_replica() -> None:
    result = alter_partition(REPLICAS, CURRENT, proposal((1, 2, 3)), {1: 100, 2: 200}, set())
    assert result.error is ErrorCode.INELIGIBLE_REPLICA
    assert result.reason == "ineligible replicas in the new ISR [1, 2, 3]: 3: not registered"


def test_alter_partition_refusals_say_why() -> None:
    stale = alter_partition(
        REPLICAS, CURRENT, proposal((1, 2, 3), epochs={1: 100, 2: 200, 3: 7}), EPOCHS, set()
    )
    assert stale.reason.endswith("3: broker epoch mismatch: requested=7 VS expected=300")
    not_leader = alter_partition(REPLICAS, CURRENT, proposal((1, 2), broker_id=2), EPOCHS, set())
    assert not_leader.reason == "the current leader is 1"


def test_alter_partition_rejects_a_shutting_down_replica_even_the_leader() -> None:
    assert (
        alter_partition(REPLICAS, CURRENT, proposal((1, 2, 3)), EPOCHS, {3}).error
        is ErrorCode.INELIGIBLE_REPLICA
    )
    assert (
        alter_partition(REPLICAS, CURRENT, proposal((1,)), EPOCHS, {1}).error is ErrorCode.INELIGIBLE_REPLICA
    )


def test_alter_partition_without_broker_epochs_skips_the_epoch_check() -> None:
    result = alter_partition(REPLICAS, CURRENT, proposal((1, 2, 3), epochs={}), EPOCHS, set())
    assert result.error is ErrorCode.NONE


def test_recovering_leader_reports_recovery_with_its_isr_expansion() -> None:
    recovering = part(1, (1,), 4, 9, RECOVERING)
    result = alter_partition(REPLICAS, recovering, proposal((1, 2)), EPOCHS, set())
    assert result.partition == part(1, (1, 2), 4, 10, RECOVERED)
    same = alter_partition(REPLICAS, recovering, proposal((1,), recovery=RECOVERING), EPOCHS, set())
    assert (same.error, same.changed) == (ErrorCode.NONE, False)


def test_check_broker_epoch() -> None:
    assert check_broker_epoch(1, 100, EPOCHS) is ErrorCode.NONE
    assert check_broker_epoch(1, 99, EPOCHS) is ErrorCode.STALE_BROKER_EPOCH
    assert check_broker_epoch(9, 100, EPOCHS) is ErrorCode.STALE_BROKER_EPOCH


# ------------------------------------------------------------------------------------------ preferred leader


def test_preferred_leader() -> None:
    assert preferred_leader(REPLICAS, part(2, (1, 2, 3)), {1, 2, 3}, set()) == 1
    assert preferred_leader(REPLICAS, part(2, (2, 3)), {1, 2, 3}, set()) is None
    assert preferred_leader(REPLICAS, part(2, (1, 2, 3)), {1, 2, 3}, {1}) is None
    assert preferred_leader(REPLICAS, part(2, (1, 2, 3)), {2, 3}, set()) is None


def test_elect_preferred_leader() -> None:
    assert elect_preferred_leader(REPLICAS, part(2, (1, 2, 3)), {1, 2, 3}, set()) == part(1, (1, 2, 3), 6, 8)
    assert elect_preferred_leader(REPLICAS, part(1, (1, 2, 3)), {1, 2, 3}, set()) is None
    # preferred unavailable: a leader that qualifies stays; with none, the first qualifying ISR member
    assert elect_preferred_leader(REPLICAS, part(3, (2, 3)), {1, 2, 3}, set()) is None
    assert elect_preferred_leader(REPLICAS, part(NO_LEADER, (3, 2)), {1, 2, 3}, set()) == part(
        2, (3, 2), 6, 8
    )
