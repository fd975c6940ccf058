"""Every cell of the state × API table (docs/design/group-semantics.md §2), plus the transition table
itself."""

from __future__ import annotations

import pytest

from regroup.group.classic_group import ClassicGroup
from regroup.group.effects import TimerKey, TimerKind
from regroup.group.state import ALLOWED_PREVIOUS_STATES, GroupState, IllegalStateTransition
from regroup.protocol.errors import ErrorCode

from .harness import Harness, assignment, subscription
from .states import SETUPS, completing, dead, empty, preparing, stable

S = GroupState


def state(h: Harness, group: str = "g") -> GroupState:
    snap = h.shard.group(group)
    assert snap is not None
    return snap.state


# -------------------------------------------------------------------------------------- transitions


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_transition_table(source: GroupState, target: GroupState) -> None:
    allowed = {
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
        S.STABLE: {S.COMPLETING_REBALANCE},
        S.EMPTY: {S.PREPARING_REBALANCE},
        S.DEAD: set(GroupState),
    }
    assert ALLOWED_PREVIOUS_STATES[target] == allowed[target]
    group = ClassicGroup("g", source, 0)
    if source in allowed[target]:
        group.transition_to(target, 42)
        assert group.state is target
        assert group.previous_state is source
        assert group.current_state_timestamp_ms == 42
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 42)


def test_wire_names() -> None:
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    assert GroupState.parse("  preparingrebalance ") is S.PREPARING_REBALANCE
    assert GroupState.parse("nope") is None


# ---------------------------------------------------------------------------- JoinGroup, new member


def test_join_new_member_empty_starts_initial_rebalance(h: Harness) -> None:
    empty(h)
    first = h.join("g", version=3)
    assert not first.done
    assert state(h) is S.PREPARING_REBALANCE
    # initial rebalance: the join timer is the initial delay, not the rebalance timeout
    assert h.deadline(TimerKey(TimerKind.JOIN, "g")) == h.now + 3000


def test_join_new_member_preparing_is_parked(h: Harness) -> None:
    setup = preparing(h)
    new = h.join("g", version=3)
    assert not new.done
    assert state(h) is S.PREPARING_REBALANCE
    for m in setup.members[1:]:
        h.join("g", m)
    assert new.done
    assert new.error is ErrorCode.NONE
    assert new.response.generation_id == setup.generation + 1


def test_join_new_member_completing_rebalances(h: Harness) -> None:
    setup = completing(h)
    follower_sync = h.sync("g", setup.members[1], setup.generation)
    assert not follower_sync.done
    new = h.join("g", version=3)
    assert not new.done
    assert state(h) is S.PREPARING_REBALANCE
    # parked SyncGroups are sent back to rejoin
    assert follower_sync.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert follower_sync.response.assignment == b""


def test_join_new_member_stable_rebalances(h: Harness) -> None:
    stable(h)
    new = h.join("g", version=3)
    assert not new.done
    assert state(h) is S.PREPARING_REBALANCE


def test_join_new_member_dead(h: Harness) -> None:
    dead(h)
    call = h.join("g")
    assert call.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert call.response.member_id == ""


# -------------------------------------------------------------------------- JoinGroup, known member


def test_join_known_member_empty(h: Harness) -> None:
    setup = empty(h)
    call = h.join("g", setup.members[0])
    assert call.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert call.response.member_id == setup.members[0]


def test_join_known_member_preparing_parks_and_updates(h: Harness) -> None:
    setup = preparing(h)
    new_protocols = (("range", subscription("t", "u")),)
    call = h.join("g", setup.members[1], protocols=new_protocols, session_timeout_ms=7000)
    assert call.done
    assert call.error is ErrorCode.NONE
    member = h.shard.group("g").member(setup.members[1])  # type: ignore[union-attr]
    assert member is not None
    assert member.protocols == new_protocols
    assert member.session_timeout_ms == 7000


def test_join_known_member_completing_same_protocols_answers_current_generation(h: Harness) -> None:
    setup = completing(h)
    leader = h.join("g", setup.members[0])
    follower = h.join("g", setup.members[1])
    assert state(h) is S.COMPLETING_REBALANCE
    assert leader.response.generation_id == setup.generation
    assert [m.member_id for m in leader.response.members] == setup.members  # leader gets the members again
    assert follower.response.members == []


def test_join_known_member_completing_changed_protocols_rebalances(h: Harness) -> None:
    setup = completing(h)
    call = h.join("g", setup.members[1], protocols=(("range", subscription("x")),))
    assert not call.done
    assert state(h) is S.PREPARING_REBALANCE


def test_join_known_member_stable_leader_rebalances(h: Harness) -> None:
    setup = stable(h)
    call = h.join("g", setup.members[0])
    assert not call.done
    assert state(h) is S.PREPARING_REBALANCE


def test_join_known_member_stable_follower_same_protocols_immediate(h: Harness) -> None:
    setup = stable(h)
    call = h.join("g", setup.members[1])
    assert call.error is ErrorCode.NONE
    assert call.response.generation_id == setup.generation
    assert call.response.leader == setup.members[0]
    assert call.response.members == []
    assert state(h) is S.STABLE


def test_join_known_member_stable_follower_changed_protocols_rebalances(h: Harness) -> None:
    setup = stable(h)
    call = h.join("g", setup.members[1], protocols=(("range", subscription("t", "u")),))
    assert not call.done
    assert state(h) is S.PREPARING_REBALANCE


def test_join_known_member_dead(h: Harness) -> None:
    setup = dead(h)
    call = h.join("g", setup.members[0])
    assert call.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert call.response.member_id == setup.members[0]


# ---------------------------------------------------------------------------------------- SyncGroup


def test_sync_empty(h: Harness) -> None:
    setup = empty(h)
    assert h.sync("g", setup.members[0], setup.generation).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_preparing(h: Harness) -> None:
    setup = preparing(h)
    assert h.sync("g", setup.members[1], setup.generation).error is ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_completing_parks_and_leader_stores(h: Harness) -> None:
    setup = completing(h)
    follower = h.sync("g", setup.members[1], setup.generation)
    assert not follower.done
    plan = {setup.members[0]: assignment({"t": [0, 1]}), setup.members[1]: assignment({"t": [2]})}
    leader = h.sync("g", setup.members[0], setup.generation, plan)
    assert leader.response.assignment == plan[setup.members[0]]
    assert follower.response.assignment == plan[setup.members[1]]
    assert state(h) is S.STABLE


def test_sync_stable_returns_current_assignment(h: Harness) -> None:
    setup = stable(h)
    call = h.sync("g", setup.members[1], setup.generation)
    assert call.error is ErrorCode.NONE
    assert call.response.assignment == assignment({"t": [1]})
    assert call.response.protocol_type == "consumer"
    assert call.response.protocol_name == "range"


def test_sync_dead(h: Harness) -> None:
    setup = dead(h)
    assert h.sync("g", setup.members[0], setup.generation).error is ErrorCode.COORDINATOR_NOT_AVAILABLE


# ---------------------------------------------------------------------------------------- Heartbeat


def test_heartbeat_empty(h: Harness) -> None:
    setup = empty(h)
    assert h.heartbeat("g", setup.members[0], setup.generation).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_preparing(h: Harness) -> None:
    setup = preparing(h)
    key = TimerKey(TimerKind.HEARTBEAT, "g", setup.members[1])
    h.advance(1000)
    assert h.heartbeat("g", setup.members[1], setup.generation).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.deadline(key) == h.now + 10_000  # session re-armed


def test_heartbeat_completing_is_none(h: Harness) -> None:
    setup = completing(h)
    assert h.heartbeat("g", setup.members[1], setup.generation).error is ErrorCode.NONE


def test_heartbeat_stable(h: Harness) -> None:
    setup = stable(h)
    assert h.heartbeat("g", setup.members[1], setup.generation).error is ErrorCode.NONE


def test_heartbeat_dead(h: Harness) -> None:
    setup = dead(h)
    assert h.heartbeat("g", setup.members[1], setup.generation).error is ErrorCode.COORDINATOR_NOT_AVAILABLE


# --------------------------------------------------------------------------------------- LeaveGroup


def test_leave_empty_unknown_but_pending_removable(h: Harness) -> None:
    setup = empty(h)
    pending = h.join("g").response.member_id  # MEMBER_ID_REQUIRED: a pending member of the Empty group
    call = h.leave("g", setup.members[0], pending)
    assert [(m.member_id, m.error_code) for m in call.response.members] == [
        (setup.members[0], ErrorCode.UNKNOWN_MEMBER_ID),
        (pending, ErrorCode.NONE),
    ]
    assert state(h) is S.EMPTY
    assert h.shard.group("g").pending_members == ()  # type: ignore[union-attr]


def test_leave_preparing_removes_and_may_complete(h: Harness) -> None:
    setup = preparing(h)
    call = h.leave("g", setup.members[1])
    assert call.response.members[0].error_code == 0
    # the leader was the only one left and had rejoined: the join phase completes
    assert setup.parked[0].done
    assert setup.parked[0].error is ErrorCode.NONE
    assert state(h) is S.COMPLETING_REBALANCE


def test_leave_completing_rebalances(h: Harness) -> None:
    setup = completing(h, n=3)
    h.leave("g", setup.members[2])
    assert state(h) is S.PREPARING_REBALANCE


def test_leave_stable_rebalances(h: Harness) -> None:
    setup = stable(h, n=3)
    h.leave("g", setup.members[2])
    assert state(h) is S.PREPARING_REBALANCE


def test_leave_dead(h: Harness) -> None:
    setup = dead(h)
    call = h.leave("g", setup.members[0])
    assert call.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert call.response.members == []


# ------------------------------------------------------------------------------------- OffsetCommit


def test_commit_empty(h: Harness) -> None:
    setup = empty(h)
    ok = h.commit("g", {("t", 0): 5})
    assert ok.response.topics[0].partitions[0].error_code == 0
    bad = h.commit("g", {("t", 0): 6}, generation_id=setup.generation, member_id=setup.members[0])
    assert bad.response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_commit_preparing_with_current_generation(h: Harness) -> None:
    setup = preparing(h)
    call = h.commit("g", {("t", 1): 5}, generation_id=setup.generation, member_id=setup.members[1])
    assert call.response.topics[0].partitions[0].error_code == 0
    assert h.fetched("g", "t", 1)[0] == 5


def test_commit_completing_rebalance_in_progress(h: Harness) -> None:
    setup = completing(h)
    call = h.commit("g", {("t", 1): 5}, generation_id=setup.generation, member_id=setup.members[1])
    assert call.response.topics[0].partitions[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_commit_stable(h: Harness) -> None:
    setup = stable(h)
    call = h.commit("g", {("t", 1): 5}, generation_id=setup.generation, member_id=setup.members[1])
    assert call.response.topics[0].partitions[0].error_code == 0


def test_commit_dead(h: Harness) -> None:
    setup = dead(h)
    call = h.commit("g", {("t", 1): 5}, generation_id=setup.generation, member_id=setup.members[1])
    assert call.response.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


# -------------------------------------------------------------------------------------- OffsetFetch


@pytest.mark.parametrize(
    "setup_state", [S.EMPTY, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE], ids=lambda s: s.value
)
def test_fetch_allowed_in_every_live_state(h: Harness, setup_state: GroupState) -> None:
    h.commit("g", {("t", 0): 11})
    SETUPS[setup_state](h)
    assert state(h) is setup_state
    assert h.fetched("g", "t", 0)[0] == 11


def test_fetch_dead_group_is_unknown(h: Harness) -> None:
    h.commit("g", {("t", 0): 11})
    dead(h)
    assert h.fetched("g", "t", 0) == (-1, -1, "")
    assert h.fetch("g").topics == []
