"""The leader's view of its followers: fetch state and catch-up times, ISR shrink and expansion proposals,
and the high watermark. Cases follow what Kafka's ReplicaTest and PartitionTest check, plus a property test
over random fetch/append/shrink sequences."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.cluster.high_watermark import (
    UNKNOWN_OFFSET,
    FollowerState,
    LeaderPartitionState,
    high_watermark,
)
from regroup.protocol.errors import ErrorCode, KafkaError

LAG = 30_000


def leader(
    *,
    replicas: tuple[int, ...] = (1, 2, 3),
    isr: tuple[int, ...] = (1, 2, 3),
    leo: int = 10,
    hw: int = 0,
    now: int = 1_000,
    min_isr: int = 1,
    broker_epochs: dict[int, int] | None = None,
    shutting_down: frozenset[int] = frozenset(),
    lag: int = LAG,
    label: str = "",
) -> LeaderPartitionState:
    """Node 1 leading at leader epoch 5, partition epoch 9."""
    return LeaderPartitionState(
        local_id=1,
        replicas=replicas,
        isr=isr,
        leader_epoch=5,
        partition_epoch=9,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=now,
        min_insync_replicas=min_isr,
        replica_lag_time_max_ms=lag,
        broker_epochs=broker_epochs,
        shutting_down=shutting_down,
        label=label,
    )


def fetch(
    state: LeaderPartitionState, replica: int, offset: int, now: int, leo: int, broker_epoch: int = -1
) -> tuple[bool, tuple[int, ...] | None]:
    result = state.update_follower_fetch_state(
        replica,
        fetch_offset=offset,
        log_start_offset=0,
        fetch_time_ms=now,
        leader_log_end_offset=leo,
        broker_epoch=broker_epoch,
    )
    return result.high_watermark_advanced, result.proposed_isr


# ------------------------------------------------------------------------------------------- the HW function


def test_high_watermark_is_the_minimum_leo_and_never_goes_back() -> None:
    assert high_watermark(0, 10, [7, 12], isr_size=3, effective_min_isr=1) == 7
    assert high_watermark(8, 10, [7, 12], isr_size=3, effective_min_isr=1) == 8
    assert high_watermark(0, 10, [], isr_size=1, effective_min_isr=1) == 10
    assert high_watermark(3, 10, [UNKNOWN_OFFSET], isr_size=2, effective_min_isr=1) == 3


def test_high_watermark_is_frozen_under_min_isr() -> None:
    assert high_watermark(3, 10, [10], isr_size=1, effective_min_isr=2) == 3


# ------------------------------------------------------------------------------------------ follower state


def test_initial_follower_is_unknown_and_not_caught_up() -> None:
    state = FollowerState()
    assert state.log_end_offset == UNKNOWN_OFFSET
    assert not state.is_caught_up(10, 1_000_000, LAG)


def test_fetch_at_the_leaders_end_is_caught_up_now() -> None:
    state = FollowerState().after_fetch(
        fetch_offset=10, log_start_offset=2, fetch_time_ms=500, leader_log_end_offset=10, broker_epoch=7
    )
    assert (state.log_end_offset, state.log_start_offset, state.broker_epoch) == (10, 2, 7)
    assert state.last_caught_up_time_ms == 500
    assert state.last_fetch_time_ms == 500


def test_fetch_reaching_the_previous_fetchs_leader_end_was_caught_up_then() -> None:
    def step(s: FollowerState, offset: int, now: int, leo: int) -> FollowerState:
        return s.after_fetch(
            fetch_offset=offset,
            log_start_offset=0,
            fetch_time_ms=now,
            leader_log_end_offset=leo,
            broker_epoch=-1,
        )

    s = step(FollowerState(), 5, 100, 10)
    assert s.last_caught_up_time_ms is None
    s = step(s, 10, 200, 15)  # reached the leader's end as of the fetch at 100
    assert s.last_caught_up_time_ms == 100
    s = step(s, 12, 300, 20)  # short of 15, the leader's end at the fetch at 200
    assert s.last_caught_up_time_ms == 100
    s = step(s, 20, 400, 20)
    assert s.last_caught_up_time_ms == 400
    s = step(s, 20, 350, 20)  # a late-arriving older fetch does not move it back
    assert s.last_caught_up_time_ms == 400


def test_caught_up_within_the_lag_or_at_the_leaders_end() -> None:
    s = FollowerState(log_end_offset=5, last_caught_up_time_ms=100)
    assert s.is_caught_up(10, 100 + LAG, LAG)
    assert not s.is_caught_up(10, 101 + LAG, LAG)
    assert s.is_caught_up(5, 10**9, LAG)


def test_reset_when_a_new_leader_is_elected() -> None:
    known = FollowerState(3, 9, 9, 50, 50, 4)
    assert known.reset(1_000, 12, new_leader=True, in_isr=True) == FollowerState(last_caught_up_time_ms=1_000)
    assert known.reset(1_000, 12, new_leader=True, in_isr=False) == FollowerState()


def test_reset_when_the_leader_is_reelected() -> None:
    known = FollowerState(3, 9, 9, 50, 50, 4)
    assert known.reset(1_000, 12, new_leader=False, in_isr=True) == FollowerState(3, 9, 12, 1_000, 1_000, 4)
    assert known.reset(1_000, 12, new_leader=False, in_isr=False) == FollowerState(3, 9, 12, None, None, 4)


# -------------------------------------------------------------------------------------------------- the HW


def test_leader_alone_in_the_isr_has_hw_at_its_leo() -> None:
    state = leader(replicas=(1,), isr=(1,), leo=10, hw=4)
    assert state.high_watermark == 10
    assert state.maybe_increment_high_watermark(15, 2_000)
    assert state.high_watermark == 15


def test_hw_waits_for_every_isr_member() -> None:
    state = leader(leo=10, hw=0)
    assert fetch(state, 2, 10, 1_100, 10) == (False, None)  # 3 has not fetched yet: its LEO is unknown
    assert state.high_watermark == 0
    assert fetch(state, 3, 7, 1_200, 10) == (True, None)
    assert state.high_watermark == 7
    assert fetch(state, 3, 10, 1_300, 10) == (True, None)
    assert state.high_watermark == 10


def test_hw_never_moves_backwards() -> None:
    state = leader(leo=10, hw=8)
    fetch(state, 2, 5, 1_100, 10)
    fetch(state, 3, 5, 1_100, 10)
    assert state.high_watermark == 8


def test_hw_does_not_move_while_the_isr_is_under_min_isr() -> None:
    state = leader(isr=(1, 2), leo=10, hw=0, min_isr=3)
    assert state.under_min_isr
    fetch(state, 2, 10, 1_100, 10)
    assert state.high_watermark == 0


def test_effective_min_isr_is_capped_by_the_replication_factor() -> None:
    state = leader(replicas=(1,), isr=(1,), leo=10, hw=0, min_isr=2)
    assert state.effective_min_isr == 1
    assert state.high_watermark == 10


def test_hw_counts_a_member_being_added() -> None:
    state = leader(replicas=(1, 2), isr=(1,), leo=10, hw=10)
    assert fetch(state, 2, 10, 1_100, 10) == (False, (1, 2))  # in sync: proposed, now in flight
    assert state.maximal_isr == {1, 2}
    assert state.maybe_increment_high_watermark(20, 1_200) is False  # the joining member holds it at 10
    assert fetch(state, 2, 15, 1_300, 20) == (True, None)
    assert state.high_watermark == 15


def test_hw_waits_for_a_caught_up_follower_that_cannot_join_yet() -> None:
    state = leader(isr=(1,), leo=10, hw=10)
    assert fetch(state, 2, 10, 1_100, 10)[1] == (1, 2)
    assert fetch(state, 3, 10, 1_100, 10)[1] is None  # caught up, but an ISR change is in flight
    fetch(state, 2, 20, 1_200, 20)
    assert state.high_watermark == 10  # 3 is caught up and eligible: the HW waits for it
    assert state.maybe_increment_high_watermark(20, 1_100 + LAG + 1)  # 3 lagged too long: no more waiting
    assert state.high_watermark == 20


def test_hw_is_not_recomputed_when_the_followers_leo_did_not_move() -> None:
    state = leader(replicas=(1, 2), isr=(1, 2), leo=10, hw=0)
    fetch(state, 2, 10, 1_100, 10)
    assert state.high_watermark == 10
    assert fetch(state, 2, 10, 1_200, 12) == (False, None)
    assert state.high_watermark == 10


# ------------------------------------------------------------------------------------- shrinking the ISR


def test_isr_members_count_as_caught_up_when_leadership_starts() -> None:
    state = leader(now=1_000)
    assert state.out_of_sync_replicas(10, 1_000 + LAG) == set()
    assert state.out_of_sync_replicas(10, 1_001 + LAG) == {2, 3}


def test_stuck_follower_is_out_of_sync_after_the_lag() -> None:
    state = leader(leo=10, now=0)
    fetch(state, 2, 10, 5_000, 10)
    fetch(state, 3, 10, 5_000, 10)
    fetch(state, 2, 20, 20_000, 20)  # 2 keeps up; 3 stops fetching at 10
    assert state.out_of_sync_replicas(20, 5_000 + LAG) == set()
    assert state.out_of_sync_replicas(20, 5_001 + LAG) == {3}


def test_follower_always_one_fetch_behind_stays_in_sync() -> None:
    # The leader's LEO grows between fetches, but each fetch reaches where the leader was at the previous one.
    state = leader(replicas=(1, 2), isr=(1, 2), leo=10, now=0)
    leo = 10
    for t in range(1, 20):
        previous = leo
        leo += 10
        fetch(state, 2, previous, t * 10_000, leo)
        assert state.out_of_sync_replicas(leo, t * 10_000) == set()


def test_shrink_proposes_the_isr_without_the_lagging_and_commits_on_success() -> None:
    state = leader(leo=10, now=0)
    fetch(state, 2, 10, 100, 10)
    fetch(state, 3, 4, 100, 10)
    assert state.high_watermark == 4
    assert state.maybe_shrink_isr(10, 100) is None
    assert state.maybe_shrink_isr(10, LAG + 1) == (1, 2)
    assert state.pending_isr == (1, 2)
    assert state.out_of_sync_replicas(10, LAG + 1) == set()  # nothing more while a change is in flight
    assert not state.maybe_increment_high_watermark(10, LAG + 1)  # 3 still counts until the change commits
    assert state.alter_partition_succeeded(
        isr=(1, 2), leader_epoch=5, partition_epoch=10, leader_log_end_offset=10, now_ms=LAG + 2
    )
    assert (state.isr, state.partition_epoch, state.high_watermark) == ((1, 2), 10, 10)
    assert state.pending_isr is None


# ------------------------------------------------------------------------------------- expanding the ISR


def test_follower_joins_once_at_the_hw_and_within_the_current_epoch() -> None:
    # leadership began at LEO 10 with a checkpointed HW of 8
    state = leader(replicas=(1, 2, 3), isr=(1, 3), leo=10, hw=8)
    assert state.leader_epoch_start_offset == 10
    assert not state.is_follower_in_sync(2)  # never fetched
    assert fetch(state, 2, 9, 1_100, 10) == (False, None)  # at or above the HW, but before this epoch's start
    assert not state.is_follower_in_sync(2)
    assert fetch(state, 2, 10, 1_200, 10) == (False, (1, 3, 2))


def test_ineligible_followers_do_not_join() -> None:
    epochs = {1: 100, 2: 200, 3: 300}
    state = leader(isr=(1,), leo=10, hw=10, broker_epochs=epochs, shutting_down=frozenset({3}))
    assert fetch(state, 3, 10, 1_100, 10, broker_epoch=300)[1] is None  # shutting down
    assert fetch(state, 2, 10, 1_100, 10, broker_epoch=201)[1] is None  # not its registered epoch
    assert fetch(state, 2, 10, 1_200, 10, broker_epoch=200)[1] == (1, 2)


def test_unregistered_or_silent_followers_are_ineligible() -> None:
    state = leader(isr=(1,), leo=10, hw=10, broker_epochs={1: 100, 3: 300})
    assert fetch(state, 2, 10, 1_100, 10)[1] is None  # 2 is not registered
    state.update_nodes({1: 100, 2: 200, 3: 300}, frozenset())
    assert not state.eligible_to_join_isr(3)  # never fetched: its broker epoch is unknown
    assert fetch(state, 2, 10, 1_200, 10)[1] == (1, 2)  # -1: no epoch check


def test_fetch_from_an_older_incarnation_is_refused() -> None:
    state = leader(broker_epochs={1: 100, 2: 200, 3: 300})
    with pytest.raises(KafkaError) as excinfo:
        fetch(state, 2, 10, 1_100, 10, broker_epoch=199)
    assert excinfo.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_fetch_from_a_non_replica_is_refused() -> None:
    with pytest.raises(KafkaError) as excinfo:
        fetch(leader(), 4, 10, 1_100, 10)
    assert excinfo.value.code is ErrorCode.UNKNOWN_LEADER_EPOCH


# ---------------------------------------------------------------------------------------- controller answers


def test_refused_ineligible_change_reverts_to_the_committed_isr() -> None:
    state = leader(isr=(1,), leo=10, hw=10)
    fetch(state, 2, 10, 1_100, 10)
    assert state.alter_partition_failed(ErrorCode.INELIGIBLE_REPLICA) is False
    assert (state.isr, state.pending_isr) == ((1,), None)


@pytest.mark.parametrize(
    "error",
    [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
)
def test_change_refused_for_stale_metadata_waits_for_newer_metadata(error: ErrorCode) -> None:
    state = leader(isr=(1,), leo=10, hw=10)
    fetch(state, 2, 10, 1_100, 10)
    assert state.alter_partition_failed(error) is False
    assert state.pending_isr == (1, 2)
    state.update_leadership(
        replicas=(1, 2, 3), isr=(1,), leader_epoch=6, partition_epoch=11, log_end_offset=10, now_ms=2_000
    )
    assert state.pending_isr is None


def test_other_failures_are_retried() -> None:
    state = leader(isr=(1,), leo=10, hw=10)
    fetch(state, 2, 10, 1_100, 10)
    assert state.alter_partition_failed(ErrorCode.NOT_CONTROLLER) is True
    assert state.pending_isr == (1, 2)


def test_stale_success_answers_are_ignored() -> None:
    state = leader(isr=(1,), leo=10, hw=10)
    fetch(state, 2, 10, 1_100, 10)
    assert not state.alter_partition_succeeded(
        isr=(1, 2), leader_epoch=4, partition_epoch=10, leader_log_end_offset=10, now_ms=1_200
    )
    assert not state.alter_partition_succeeded(
        isr=(1, 2), leader_epoch=5, partition_epoch=8, leader_log_end_offset=10, now_ms=1_200
    )
    assert state.pending_isr == (1, 2)


# ------------------------------------------------------------------------------------------ metadata updates


def test_older_metadata_is_ignored() -> None:
    state = leader()
    state.update_leadership(
        replicas=(1, 2), isr=(1,), leader_epoch=6, partition_epoch=8, log_end_offset=10, now_ms=2_000
    )
    assert (state.isr, state.leader_epoch, state.partition_epoch) == ((1, 2, 3), 5, 9)


def test_same_epoch_metadata_replaces_the_isr_and_keeps_follower_progress() -> None:
    state = leader(leo=10)
    fetch(state, 2, 10, 1_100, 10)
    state.update_leadership(
        replicas=(1, 2, 3), isr=(1, 2), leader_epoch=5, partition_epoch=10, log_end_offset=12, now_ms=2_000
    )
    assert state.isr == (1, 2)
    follower = state.follower(2)
    assert follower is not None
    assert (follower.log_end_offset, follower.last_caught_up_time_ms) == (10, 1_100)


def test_new_epoch_as_the_same_leader_restarts_catch_up_clocks() -> None:
    state = leader(leo=10)
    fetch(state, 2, 10, 1_100, 10)
    state.update_leadership(
        replicas=(1, 2, 4), isr=(1, 2), leader_epoch=6, partition_epoch=10, log_end_offset=12, now_ms=2_000
    )
    assert state.leader_epoch_start_offset == 12
    assert state.follower(2) == FollowerState(0, 10, 12, 2_000, 2_000, -1)
    assert state.follower(3) is None  # no longer a replica
    assert state.follower(4) == FollowerState(last_fetch_leader_log_end_offset=12)  # new, never fetched


# ------------------------------------------------------------------------------------------------ properties

Op = tuple[str, int, int]
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.integers(0, 6)),
        st.tuples(st.just("tick"), st.integers(0, 1_500), st.just(0)),
        st.tuples(st.just("shrink"), st.just(0), st.just(0)),
        st.tuples(st.just("answer"), st.booleans().map(int), st.just(0)),
    ),
    max_size=60,
)


@given(
    st.sampled_from([(1,), (1, 2), (1, 2, 3)]),
    st.integers(1, 4),
    st.integers(0, 10),
    st.integers(0, 10),
    ops_st,
)
def test_hw_only_advances_to_what_every_counted_member_holds(
    isr: tuple[int, ...], min_isr: int, start_leo: int, hw_below: int, ops: list[Op]
) -> None:
    leo, now = start_leo, 0
    initial_hw = max(0, start_leo - hw_below)
    state = leader(isr=isr, leo=leo, hw=initial_hw, now=now, min_isr=min_isr, lag=1_000)
    fetched = {2: 0, 3: 0}
    for op, a, b in ops:
        before = state.high_watermark
        if op == "append":
            leo += a
            state.maybe_increment_high_watermark(leo, now)
        elif op == "fetch":
            fetched[a] = min(leo, fetched[a] + b)
            fetch(state, a, fetched[a], now, leo)
        elif op == "tick":
            now += a
        elif op == "shrink":
            state.maybe_shrink_isr(leo, now)
        elif state.pending_isr is not None:
            if a:
                pending = state.pending_isr
                state.alter_partition_succeeded(
                    isr=pending,
                    leader_epoch=5,
                    partition_epoch=state.partition_epoch + 1,
                    leader_log_end_offset=leo,
                    now_ms=now,
                )
            else:
                state.alter_partition_failed(ErrorCode.INELIGIBLE_REPLICA)
        hw = state.high_watermark
        assert before <= hw <= max(leo, initial_hw)
        assert 1 in state.isr
        if hw != before:
            assert len(state.isr) >= state.effective_min_isr
        if hw > initial_hw:
            for member in state.maximal_isr - {1}:
                follower = state.follower(member)
                assert follower is not None
                assert follower.log_end_offset >= hw


def test_log_lines_name_the_partition(caplog: pytest.LogCaptureFixture) -> None:
    state = leader(replicas=(1, 2), isr=(1,), leo=0, hw=0, now=0, label="orders-3")
    with caplog.at_level(logging.INFO, "regroup.cluster"):
        fetch(state, 2, 0, 10, 0)
    assert "[Partition orders-3] expanding ISR from [1] to [1, 2]" in caplog.text
