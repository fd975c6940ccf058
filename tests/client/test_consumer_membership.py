"""The consumer-protocol (KIP-848) member state machine, fed scripted ConsumerGroupHeartbeat responses."""

from __future__ import annotations

import uuid

import pytest

from regroup.client import TopicPartition
from regroup.client.consumer_membership import (
    ConsumerMembership,
    ConsumerMembershipConfig,
    ConsumerMemberState,
    Reconciliation,
    StaleMemberEpochError,
)
from regroup.client.errors import CommitFailedError
from regroup.client.membership import CallbackKind
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
NAMES = {T: "t", U: "u"}


def member(**kwargs: object) -> ConsumerMembership:
    settings: dict[str, object] = {"group_id": "g", "member_id": "m1", "topics": frozenset({"t", "u"})}
    settings.update(kwargs)
    core = ConsumerMembership(ConsumerMembershipConfig(**settings), now_ms=0)  # type: ignore[arg-type]
    core.on_topic_names(NAMES)
    return core


def answer(
    epoch: int,
    assignment: dict[uuid.UUID, list[int]] | None = None,
    *,
    error: ErrorCode = ErrorCode.NONE,
    interval: int = 500,
) -> ConsumerGroupHeartbeatResponse:
    assigned = None
    if assignment is not None:
        assigned = Assignment(
            topic_partitions=[
                ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=t, partitions=ps)
                for t, ps in assignment.items()
            ]
        )
    return ConsumerGroupHeartbeatResponse(
        error_code=error.value,
        member_id=None if error is not ErrorCode.NONE else "m1",
        member_epoch=epoch if error is ErrorCode.NONE else 0,
        heartbeat_interval_ms=interval if error is ErrorCode.NONE else 0,
        assignment=assigned,
    )


def run_step(core: ConsumerMembership) -> Reconciliation:
    """One reconciliation step as the driver runs it (callbacks elided)."""
    step = core.begin_reconciliation()
    assert step is not None
    assert core.finish_reconciliation(step)
    return step


def tps(*items: tuple[str, int]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(t, p) for t, p in items)


def test_join_request_carries_everything_then_only_changes() -> None:
    core = member(group_instance_id="i1", rack_id="r1", server_assignor="uniform", rebalance_timeout_ms=9000)
    assert core.join_needed()
    core.join(now_ms=0)
    assert core.should_heartbeat(0)
    join = core.heartbeat_request(0)
    assert (join.member_id, join.member_epoch) == ("m1", 0)
    assert join.instance_id == "i1"
    assert join.rack_id == "r1"
    assert join.server_assignor == "uniform"
    assert join.rebalance_timeout_ms == 9000
    assert join.subscribed_topic_names == ["t", "u"]
    assert join.subscribed_topic_regex is None
    assert join.topic_partitions == []
    assert not core.should_heartbeat(0), "one heartbeat in flight at a time"
    core.on_heartbeat_response(answer(1, {}), now_ms=10)
    assert core.state is ConsumerMemberState.STABLE
    assert core.member_epoch == 1
    assert not core.should_heartbeat(509), "the broker's interval"
    assert core.should_heartbeat(510)
    hb = core.heartbeat_request(510)
    assert hb.member_epoch == 1
    assert hb.instance_id == "i1"
    assert hb.rack_id is None
    assert hb.server_assignor is None
    assert hb.rebalance_timeout_ms == -1
    assert hb.subscribed_topic_names is None
    assert hb.topic_partitions is None
    core.on_heartbeat_response(answer(1), now_ms=520)
    core.set_subscription(frozenset({"t"}))
    assert core.should_heartbeat(521), "a subscription change goes out at once"
    assert core.heartbeat_request(521).subscribed_topic_names == ["t"]


def test_regex_subscription() -> None:
    core = member(topics=frozenset(), topic_regex="t.*")
    core.join(0)
    join = core.heartbeat_request(0)
    assert join.subscribed_topic_regex == "t.*"
    assert join.subscribed_topic_names is None
    with pytest.raises(ValueError, match="not both"):
        ConsumerMembershipConfig(group_id="g", member_id="m", topics=frozenset({"t"}), topic_regex="t.*")


def test_revocation_is_acknowledged_before_new_partitions_are_taken() -> None:
    core = member()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(1, {T: [0, 1, 2]}), 0)
    assert core.state is ConsumerMemberState.RECONCILING
    step = run_step(core)
    assert step.added == tps(("t", 0), ("t", 1), ("t", 2))
    assert not step.revoked
    assert core.state is ConsumerMemberState.ACKNOWLEDGING
    assert core.should_heartbeat(0)
    ack = core.heartbeat_request(0)
    assert [(p.topic_id, p.partitions) for p in ack.topic_partitions or []] == [(T, [0, 1, 2])]
    assert core.state is ConsumerMemberState.STABLE
    core.on_heartbeat_response(answer(1), 5)

    # A target that both moves t-1, t-2 away and adds u-0: revoke first, acknowledge, then assign.
    core.on_heartbeat_response(answer(2, {T: [0], U: [0]}), 600)
    assert core.state is ConsumerMemberState.RECONCILING
    revoke = core.begin_reconciliation()
    assert revoke is not None
    assert revoke.revoked == tps(("t", 1), ("t", 2))
    assert not revoke.added
    callback = core.revocation_callback(revoke)
    assert callback is not None
    assert callback.kind is CallbackKind.REVOKED
    assert core.assignment_callback(revoke) is None
    assert core.begin_reconciliation() is None, "one step at a time"
    assert core.finish_reconciliation(revoke)
    assert core.assigned == frozenset(tps(("t", 0))), "u-0 is not used before the ack"
    ack = core.heartbeat_request(600)
    assert [(p.topic_id, p.partitions) for p in ack.topic_partitions or []] == [(T, [0])]
    assert core.state is ConsumerMemberState.RECONCILING, "target not reached yet"
    core.on_heartbeat_response(answer(2), 610)
    assign = run_step(core)
    assert assign.added == tps(("u", 0))
    assert not assign.revoked
    ack = core.heartbeat_request(610)
    assert sorted((str(p.topic_id), p.partitions) for p in ack.topic_partitions or []) == [
        (str(T), [0]),
        (str(U), [0]),
    ]
    assert core.state is ConsumerMemberState.STABLE
    assert core.assigned == frozenset(tps(("t", 0), ("u", 0)))


def test_same_assignment_is_stable_without_a_step() -> None:
    core = member()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(1, {T: [0]}), 0)
    run_step(core)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(3, {T: [0]}), 10)
    assert core.state is ConsumerMemberState.STABLE
    assert core.member_epoch == 3
    assert core.begin_reconciliation() is None


def test_unknown_topic_ids_wait_for_metadata() -> None:
    core = member()
    core.topic_names.clear()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(1, {T: [0], U: [1]}), 0)
    assert core.unresolved_topic_ids() == {T, U}
    assert core.begin_reconciliation() is None
    core.on_topic_names({T: "t"})
    # U is still unknown after a lookup (deleted meanwhile): the known part is reconciled.
    step = core.begin_reconciliation(ignore_unresolved=True)
    assert step is not None
    assert step.added == tps(("t", 0))


def test_new_target_during_a_step_is_reconciled_next() -> None:
    core = member()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(1, {T: [0]}), 0)
    step = core.begin_reconciliation()
    assert step is not None
    core.heartbeat_request(500)
    core.on_heartbeat_response(answer(2, {T: [0, 1]}), 510)
    assert core.finish_reconciliation(step)
    core.heartbeat_request(510)
    assert core.state is ConsumerMemberState.RECONCILING
    assert run_step(core).added == tps(("t", 1))


@pytest.mark.parametrize("error", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_fenced_member_loses_partitions_and_rejoins_with_epoch_zero(error: ErrorCode) -> None:
    core = member()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(4, {T: [0, 1]}), 0)
    run_step(core)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(4), 10)
    core.heartbeat_request(600)
    assert core.on_heartbeat_response(answer(0, error=error), 610) is error
    assert core.state is ConsumerMemberState.FENCED
    assert not core.should_heartbeat(10_000)
    lost = core.begin_fenced()
    assert lost is not None
    assert lost.kind is CallbackKind.LOST
    assert lost.partitions == tps(("t", 0), ("t", 1))
    core.finish_fenced(620)
    assert core.state is ConsumerMemberState.JOINING
    assert core.assigned == frozenset()
    rejoin = core.heartbeat_request(620)
    assert (rejoin.member_id, rejoin.member_epoch, rejoin.topic_partitions) == ("m1", 0, [])
    assert rejoin.subscribed_topic_names == ["t", "u"]
    assert rejoin.rebalance_timeout_ms == 300000


def test_reconciliation_in_flight_when_fenced_is_dropped() -> None:
    core = member()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(1, {T: [0]}), 0)
    step = core.begin_reconciliation()
    assert step is not None
    core.heartbeat_request(500)
    core.on_heartbeat_response(answer(0, error=ErrorCode.FENCED_MEMBER_EPOCH), 510)
    assert not core.finish_reconciliation(step)
    assert core.assigned == frozenset()


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ],
)
def test_fatal_errors(error: ErrorCode) -> None:
    core = member()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(0, error=error), 0)
    assert core.state is ConsumerMemberState.FATAL
    assert core.fatal_error is not None
    assert core.fatal_error.code is error
    assert not core.should_heartbeat(10_000)


@pytest.mark.parametrize(
    "error",
    [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS],
)
def test_coordinator_errors_back_off_and_resend_everything(error: ErrorCode) -> None:
    core = member(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    core.coordinator = object()  # type: ignore[assignment]
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(1, {}), 0)
    core.heartbeat_request(500)
    core.on_heartbeat_response(answer(0, error=error), 500)
    assert core.state is ConsumerMemberState.STABLE
    assert (core.coordinator is None) == (error is not ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert not core.should_heartbeat(599)
    assert core.should_heartbeat(600)
    retry = core.heartbeat_request(600)
    assert retry.subscribed_topic_names == ["t", "u"]
    assert retry.topic_partitions == []
    core.on_heartbeat_response(answer(0, error=error), 600)
    assert not core.should_heartbeat(799), "exponential backoff"
    assert core.should_heartbeat(800)


def test_leave_dynamic_and_static() -> None:
    for instance, epoch in ((None, -1), ("i1", -2)):
        core = member(group_instance_id=instance)
        core.join(0)
        core.heartbeat_request(0)
        core.on_heartbeat_response(answer(3, {T: [0]}), 0)
        run_step(core)
        core.heartbeat_request(0)
        revoke = core.begin_leave()
        assert revoke is not None
        assert revoke.kind is CallbackKind.REVOKED
        assert core.finish_leave_prepare()
        leave = core.heartbeat_request(10)
        assert (leave.member_id, leave.member_epoch, leave.instance_id) == ("m1", epoch, instance)
        core.on_heartbeat_response(answer(epoch), 20)
        assert core.state is ConsumerMemberState.UNSUBSCRIBED
        assert core.assigned == frozenset()
        assert core.join_needed()


def test_poll_timeout_leaves_then_reports_lost() -> None:
    core = member(rebalance_timeout_ms=1000)
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(2, {T: [0]}), 0)
    run_step(core)
    core.heartbeat_request(0)
    assert core.poll_timeout_expired(1000)
    core.leave_on_poll_timeout()
    assert core.heartbeat_request(1000).member_epoch == -1
    core.on_heartbeat_response(answer(-1), 1010)
    assert core.state is ConsumerMemberState.STALE
    assert core.assigned == frozenset(tps(("t", 0)))
    lost = core.begin_lost()
    assert lost is not None
    assert lost.kind is CallbackKind.LOST


def test_offset_commit_identity_and_errors() -> None:
    core = member()
    with pytest.raises(CommitFailedError):
        core.commit_generation()
    core.join(0)
    core.heartbeat_request(0)
    core.on_heartbeat_response(answer(7, {}), 0)
    sent = core.commit_generation()
    assert (sent.generation_id, sent.member_id) == (7, "m1")
    tp = TopicPartition("t", 0)
    core.on_commit_response({tp: ErrorCode.NONE}, sent)
    with pytest.raises(StaleMemberEpochError):
        core.on_commit_response({tp: ErrorCode.STALE_MEMBER_EPOCH}, sent)
    with pytest.raises(CommitFailedError):
        core.on_commit_response({tp: ErrorCode.UNKNOWN_MEMBER_ID}, sent)
    core.coordinator = object()  # type: ignore[assignment]
    with pytest.raises(Exception, match="NOT_COORDINATOR"):
        core.on_commit_response({tp: ErrorCode.NOT_COORDINATOR}, sent)
    assert core.coordinator is None
