"""The SyncGroup (§8.3), Heartbeat (§8.4) and LeaveGroup (§8.5) checklists of
docs/design/group-semantics.md."""

from __future__ import annotations

import pytest

from regroup.group.history import AssignmentAppendFailed, MemberLeft
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import Harness, assignment
from .states import completing, empty, preparing, stable

S = GroupState


def snap(h: Harness, group: str = "g"):  # type: ignore[no-untyped-def]
    s = h.shard.group(group)
    assert s is not None
    return s


# ---------------------------------------------------------------------------------------- SyncGroup


@pytest.mark.parametrize(("ptype", "pname"), [(None, "range"), ("consumer", None)])
def test_sync_v5_requires_protocol_type_and_name(h: Harness, ptype: str | None, pname: str | None) -> None:
    setup = stable(h)
    call = h.sync("g", setup.members[1], setup.generation, protocol_type=ptype, protocol_name=pname)
    assert call.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("", "m", 1, protocol_type=ptype, protocol_name=pname).error is (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )


def test_sync_validation_order(h: Harness) -> None:
    assert h.sync("", "m", 0).error is ErrorCode.INVALID_GROUP_ID
    assert h.sync("nope", "m", 0).error is ErrorCode.UNKNOWN_MEMBER_ID
    setup = stable(h)
    leader, follower = setup.members
    gen = setup.generation
    assert h.sync("g", "stranger", gen).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync("g", follower, gen + 5).error is ErrorCode.ILLEGAL_GENERATION
    # identity before generation
    assert h.sync("g", "stranger", gen + 5).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync("g", follower, gen, protocol_type="connect").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", follower, gen, protocol_name="rr").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # generation before protocol
    assert h.sync("g", follower, gen + 1, protocol_name="rr").error is ErrorCode.ILLEGAL_GENERATION
    del leader


def test_sync_on_empty_is_unknown_member_before_identity(h: Harness) -> None:
    setup = empty(h)
    call = h.sync("g", "x", 999, instance_id="whatever", protocol_type="other")
    assert call.error is ErrorCode.UNKNOWN_MEMBER_ID
    del setup


def test_sync_error_responses_carry_no_protocol(h: Harness) -> None:
    setup = preparing(h)
    call = h.sync("g", setup.members[1], setup.generation)
    assert call.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert call.response.assignment == b""
    assert call.response.protocol_type is None
    assert call.response.protocol_name is None


@pytest.mark.parametrize("version", range(6))
def test_sync_versions(h: Harness, version: int) -> None:
    setup = completing(h)
    follower = h.sync("g", setup.members[1], setup.generation, version=version)
    h.sync("g", setup.members[0], setup.generation, {setup.members[1]: b"abc"}, version=version)
    assert follower.response.assignment == b"abc"
    expected = ("consumer", "range") if version >= 5 else (None, None)
    assert (follower.response.protocol_type, follower.response.protocol_name) == expected


def test_leader_assignment_members_missing_get_empty_and_unknown_ignored(h: Harness) -> None:
    setup = completing(h, n=3)
    calls = [h.sync("g", m, setup.generation) for m in setup.members[1:]]
    h.sync("g", setup.members[0], setup.generation, {setup.members[1]: b"x", "stranger": b"y"})
    assert [c.response.assignment for c in calls] == [b"x", b""]
    assert [m.assignment for m in snap(h).members] == [b"", b"x", b""]


def test_leader_assignment_append_failure_resets_and_rebalances(h: Harness) -> None:
    setup = completing(h)
    follower = h.sync("g", setup.members[1], setup.generation)
    h.fail_next_append(ErrorCode.NOT_COORDINATOR)
    leader = h.sync("g", setup.members[0], setup.generation, dict.fromkeys(setup.members, b"z"))
    assert leader.error is ErrorCode.NOT_COORDINATOR
    assert follower.error is ErrorCode.NOT_COORDINATOR
    assert follower.response.assignment == b""
    assert snap(h).state is S.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in snap(h).members)
    h.join("g", setup.members[0])
    h.join("g", setup.members[1])
    record = h.shard.group_history("g")[-1]
    assert record.cause == AssignmentAppendFailed(setup.members[0], "NOT_COORDINATOR")


def test_stable_sync_removes_from_pending_sync(h: Harness) -> None:
    setup = completing(h)
    h.sync("g", setup.members[0], setup.generation, {})
    assert snap(h).pending_sync_members == (setup.members[1],)
    h.sync("g", setup.members[1], setup.generation)
    assert snap(h).pending_sync_members == ()


def test_superseded_parked_sync_is_answered(h: Harness) -> None:
    setup = completing(h)
    first = h.sync("g", setup.members[1], setup.generation)
    second = h.sync("g", setup.members[1], setup.generation)
    assert first.error is ErrorCode.REBALANCE_IN_PROGRESS
    h.sync("g", setup.members[0], setup.generation, {setup.members[1]: b"q"})
    assert second.response.assignment == b"q"


# ---------------------------------------------------------------------------------------- Heartbeat


def test_heartbeat_validation_order(h: Harness) -> None:
    assert h.heartbeat("", "m", 0).error is ErrorCode.INVALID_GROUP_ID
    assert h.heartbeat("nope", "m", 0).error is ErrorCode.UNKNOWN_MEMBER_ID
    setup = stable(h)
    assert h.heartbeat("g", "stranger", setup.generation + 1).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", setup.members[1], setup.generation + 1).error is ErrorCode.ILLEGAL_GENERATION


def test_heartbeat_old_generation_valid_during_preparing(h: Harness) -> None:
    setup = preparing(h)
    assert h.heartbeat("g", setup.members[1], setup.generation).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat("g", setup.members[1], setup.generation + 1).error is ErrorCode.ILLEGAL_GENERATION


@pytest.mark.parametrize("version", range(5))
def test_heartbeat_versions(h: Harness, version: int) -> None:
    setup = stable(h)
    assert h.heartbeat("g", setup.members[1], setup.generation, version=version).error is ErrorCode.NONE


# --------------------------------------------------------------------------------------- LeaveGroup


def test_leave_invalid_group(h: Harness) -> None:
    assert h.leave("", "m").error is ErrorCode.INVALID_GROUP_ID


@pytest.mark.parametrize("version", range(6))
def test_leave_unknown_group(h: Harness, version: int) -> None:
    call = h.leave("nope", "m", version=version)
    if version >= 3:
        assert call.error is ErrorCode.NONE
        assert [(m.member_id, m.error_code) for m in call.response.members] == [("m", 25)]
    else:
        assert call.error is ErrorCode.UNKNOWN_MEMBER_ID
        assert call.response.members == []


@pytest.mark.parametrize("version", range(3))
def test_leave_v0_to_v2_top_level_error(h: Harness, version: int) -> None:
    setup = stable(h, n=3)
    assert h.leave("g", "stranger", version=version).error is ErrorCode.UNKNOWN_MEMBER_ID
    ok = h.leave("g", setup.members[2], version=version)
    assert ok.error is ErrorCode.NONE
    assert ok.response.members == []
    assert snap(h).state is S.PREPARING_REBALANCE


def test_leave_batch_per_member_errors(h: Harness) -> None:
    ids, gen = h.form_group("g", 3, static=True)
    call = h.leave(
        "g",
        (ids[0], None),
        ("", "i1"),  # administrative removal by instance id
        ("", "unknown-instance"),
        ("", None),
        (ids[2], "i0"),  # i0 is no longer mapped to anyone → unknown
        (ids[2], "i1"),  # i1 gone as well
        version=5,
        reason="shutdown",
    )
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in call.response.members] == [
        (ids[0], None, 0),
        ("", "i1", 0),
        ("", "unknown-instance", 25),
        ("", None, 25),
        (ids[2], "i0", 25),
        (ids[2], "i1", 25),
    ]
    assert [m.member_id for m in snap(h).members] == [ids[2]]
    h.join("g", ids[2], instance_id="i2")
    cause = h.shard.group_history("g")[-1].cause
    assert isinstance(cause, MemberLeft)
    assert [(m.member_id, m.reason) for m in cause.members] == [(ids[0], "shutdown"), (ids[1], "shutdown")]
    del gen


def test_leave_fenced_instance(h: Harness) -> None:
    ids, _ = h.form_group("g", 2, static=True)
    call = h.leave("g", (ids[0], "i1"))
    assert call.response.members[0].error_code == ErrorCode.FENCED_INSTANCE_ID


def test_leave_answers_parked_join_with_unknown_member(h: Harness) -> None:
    setup = preparing(h, n=3)
    h.leave("g", setup.members[0])
    parked = setup.parked[0]
    assert parked.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert parked.response.member_id == ""


def test_leave_of_member_with_parked_sync_answers_it(h: Harness) -> None:
    setup = completing(h, n=2)
    parked = h.sync("g", setup.members[1], setup.generation)
    h.leave("g", ("", None), (setup.members[1], None))
    assert parked.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_leave_last_member_empties_group_and_writes_record(h: Harness) -> None:
    setup = stable(h, n=1)
    before = len(h.log)
    h.leave("g", setup.members[0])
    assert snap(h).state is S.EMPTY
    assert snap(h).generation_id == setup.generation + 1
    assert len(h.log) == before + 1


def test_leave_emptying_append_failure_is_top_level_error(h: Harness) -> None:
    setup = stable(h, n=1)
    h.fail_next_append(ErrorCode.NOT_COORDINATOR)
    call = h.leave("g", setup.members[0])
    assert call.error is ErrorCode.NOT_COORDINATOR
    assert call.response.members == []
    assert snap(h).state is S.EMPTY  # Kafka keeps the in-memory transition; the log still has the old one


def test_leave_pending_only_rebalances_stable_group(h: Harness) -> None:
    """regroup follows the Java coordinator: removing only a pending member still rebalances."""
    setup = stable(h)
    pending = h.join("g").response.member_id
    call = h.leave("g", pending)
    assert call.response.members[0].error_code == 0
    assert snap(h).state is S.PREPARING_REBALANCE
    del setup


def test_leave_during_initial_rebalance_does_not_complete_it(h: Harness) -> None:
    a = h.join("g", version=3)
    b = h.join("g", version=3)
    assert not a.done
    h.advance(100)
    b_id = snap(h).members[1].member_id
    h.leave("g", b_id)
    assert b.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert not a.done
    h.advance_to(3000)
    assert not a.done  # b's arrival extended the window by one delay, even though b left
    h.advance_to(6000)
    assert a.done


def test_leave_single_member_response_reflects_assignment_reset(h: Harness) -> None:
    setup = stable(h, n=2)
    h.leave("g", setup.members[1])
    assert snap(h).members[0].assignment == assignment({"t": [0]})  # kept until the next sync
