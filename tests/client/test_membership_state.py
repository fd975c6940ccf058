"""The sans-I/O membership state machine, driven by scripted coordinator responses and a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from regroup.client.assignors import PartitionAssignor, RangeAssignor, create_assignor
from regroup.client.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from regroup.client.errors import CommitFailedError, FencedInstanceIdError, RebalanceInProgressError
from regroup.client.membership import (
    Callback,
    CallbackKind,
    CoordinatorNode,
    Generation,
    Membership,
    MembershipConfig,
    MemberState,
)
from regroup.client.requests import CoordinatorAnswer, leave_group_request
from regroup.client.types import TopicPartition
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.heartbeat import HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupResponse, JoinGroupResponseMember
from regroup.protocol.messages.sync_group import SyncGroupResponse

T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))
NODE = CoordinatorAnswer(ErrorCode.NONE, 1, "broker-1", 9092, None)


def state_of(m: Membership) -> MemberState:
    """The state, read through a call so that type checkers do not narrow it across transitions."""
    return m.state


def coordinator_of(m: Membership) -> CoordinatorNode | None:
    return m.coordinator


def member(
    *,
    instance: str | None = None,
    assignors: Sequence[str | PartitionAssignor] = ("range",),
    topics: Sequence[str] = ("t",),
    now: int = 0,
) -> Membership:
    config = MembershipConfig(
        group_id="g",
        topics=frozenset(topics),
        group_instance_id=instance,
        session_timeout_ms=10000,
        rebalance_timeout_ms=60000,
        heartbeat_interval_ms=3000,
        retry_backoff_ms=100,
        retry_backoff_max_ms=1000,
    )
    m = Membership(config, [create_assignor(a) if isinstance(a, str) else a for a in assignors], now)
    m.on_find_coordinator(NODE, now)
    return m


def join_ok(
    generation: int,
    member_id: str,
    leader: str,
    *,
    protocol: str = "range",
    members: Sequence[JoinGroupResponseMember] = (),
    skip: bool = False,
) -> JoinGroupResponse:
    return JoinGroupResponse(
        generation_id=generation,
        protocol_type="consumer",
        protocol_name=protocol,
        leader=leader,
        member_id=member_id,
        members=list(members),
        skip_assignment=skip,
    )


def sync_ok(partitions: Sequence[TopicPartition], protocol: str = "range") -> SyncGroupResponse:
    return SyncGroupResponse(
        protocol_type="consumer",
        protocol_name=protocol,
        assignment=encode_assignment(Assignment(tuple(partitions))),
    )


def callbacks_of_join_complete(m: Membership, assignment: bytes) -> list[Callback]:
    completion = m.begin_join_complete(assignment)
    out = []
    if completion.revoked:
        out.append(Callback(CallbackKind.REVOKED, completion.revoked))
    assigned = m.finish_join_complete(completion)
    if assigned is not None:
        out.append(assigned)
    return out


def become_stable(
    m: Membership, generation: int, member_id: str, partitions: Sequence[TopicPartition], now: int = 0
) -> list[Callback]:
    """Drive one follower rebalance: prepare, JoinGroup, SyncGroup, join completion."""
    prepared = m.begin_join_prepare() if m.needs_join_prepare else None
    m.finish_join_prepare(prepared)
    _, sent = m.join_request()
    protocol = m.assignors[0].name
    outcome = m.on_join_response(join_ok(generation, member_id, "someone-else", protocol=protocol), sent, now)
    assert not outcome.is_leader
    _, sent = m.sync_request({})
    assignment = m.on_sync_response(sync_ok(partitions, protocol), sent)
    return ([prepared] if prepared else []) + callbacks_of_join_complete(m, assignment)


# ---------------------------------------------------------------------------------------------- join


def test_two_step_join_rejoins_with_the_given_member_id() -> None:
    m = member()
    assert m.rejoin_needed_or_pending()
    assert m.begin_join_prepare() is None  # nothing owned yet
    m.finish_join_prepare(None)
    request, sent = m.join_request()
    assert request.member_id == ""
    assert request.protocol_type == "consumer"
    assert [p.name for p in request.protocols] == ["range"]
    assert state_of(m) is MemberState.PREPARING_REBALANCE

    response = JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1")
    with pytest.raises(KafkaError) as info:
        m.on_join_response(response, sent, 0)
    assert m.failure_action(info.value) == "rejoin"
    assert m.generation == Generation(-1, "m-1", None)

    request, _ = m.join_request()
    assert request.member_id == "m-1"
    assert request.reason == "need to re-join with the given member-id: m-1"


def test_join_request_carries_the_subscription_of_every_assignor() -> None:
    m = member(assignors=("range", "cooperative-sticky"), topics=("b", "a"))
    become_stable(m, 4, "m-1", [TopicPartition("a", 0)])
    m.request_rejoin("test")
    request, _ = m.join_request()
    assert [p.name for p in request.protocols] == ["range", "cooperative-sticky"]
    range_sub = decode_subscription(request.protocols[0].metadata)
    coop_sub = decode_subscription(request.protocols[1].metadata)
    assert range_sub.topics == ("a", "b")
    assert range_sub.owned_partitions == (TopicPartition("a", 0),)
    assert range_sub.generation_id == 4
    assert range_sub.user_data is None
    # Only the selected assignor (range) heard of generation 4, as in Java.
    assert coop_sub.user_data == (-1).to_bytes(4, "big", signed=True)
    assert coop_sub.generation_id == 4
    assert request.session_timeout_ms == 10000
    assert request.rebalance_timeout_ms == 60000


def test_leader_runs_the_assignor_and_follower_does_not() -> None:
    m = member()
    m.finish_join_prepare(m.begin_join_prepare())
    _, sent = m.join_request()
    metadata = encode_subscription(Subscription(("t",)))
    members = [JoinGroupResponseMember(member_id=x, metadata=metadata) for x in ("m-1", "m-2")]
    outcome = m.on_join_response(join_ok(1, "m-1", "m-1", members=members), sent, 0)
    assert outcome.is_leader
    assert state_of(m) is MemberState.COMPLETING_REBALANCE
    subs = m.leader_subscriptions(outcome.members)
    assignments = m.perform_assignment(outcome, subs, {"t": 4})
    assert {k: decode_assignment(v).partitions for k, v in assignments.items()} == {
        "m-1": (T0, T1),
        "m-2": (T2, T3),
    }
    assert m.is_leader
    request, sent = m.sync_request(assignments)
    assert request.generation_id == 1
    assert request.member_id == "m-1"
    assert request.protocol_name == "range"
    assert {a.member_id for a in request.assignments} == {"m-1", "m-2"}
    assignment = m.on_sync_response(sync_ok([T0, T1]), sent)
    assert state_of(m) is MemberState.STABLE
    assert not m.rejoin_needed_or_pending()
    assert callbacks_of_join_complete(m, assignment) == [Callback(CallbackKind.ASSIGNED, (T0, T1))]
    assert m.assigned == {T0, T1}


def test_static_leader_told_to_skip_assignment_does_not_run_the_assignor() -> None:
    class Exploding(RangeAssignor):
        def assign_partitions(
            self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
        ) -> dict[str, list[TopicPartition]]:
            raise AssertionError("the assignor must not run")

    m = member(instance="i-1", assignors=[Exploding()])
    m.finish_join_prepare(m.begin_join_prepare())
    request, sent = m.join_request()
    assert request.group_instance_id == "i-1"
    metadata = encode_subscription(Subscription(("t",)))
    members = [JoinGroupResponseMember(member_id="i-1-x", group_instance_id="i-1", metadata=metadata)]
    outcome = m.on_join_response(join_ok(3, "i-1-x", "i-1-x", members=members, skip=True), sent, 0)
    assert outcome.is_leader
    assert outcome.skip_assignment
    assert m.perform_assignment(outcome, m.leader_subscriptions(outcome.members), {"t": 4}) == {}
    sync, _ = m.sync_request({})
    assert sync.assignments == []


def test_eager_member_revokes_everything_before_rejoining() -> None:
    m = member()
    become_stable(m, 1, "m-1", [T0, T1])
    m.request_rejoin("test")
    callback = m.begin_join_prepare()
    assert callback == Callback(CallbackKind.REVOKED, (T0, T1))
    assert m.assigned == {T0, T1}  # still owned while the callback runs (it may commit)
    m.finish_join_prepare(callback)
    assert m.assigned == frozenset()


def test_eager_revoke_callback_runs_even_with_nothing_owned() -> None:
    m = member()
    become_stable(m, 1, "m-1", [])
    m.request_rejoin("test")
    assert m.begin_join_prepare() == Callback(CallbackKind.REVOKED, ())


def test_cooperative_member_revokes_only_moved_partitions_and_rejoins() -> None:
    m = member(assignors=("cooperative-sticky",))
    become_stable(m, 1, "m-1", [T0, T1, T2])
    assert not m.rejoin_needed_or_pending()
    # A rebalance: nothing revoked up front (still subscribed), then the new assignment drops T2.
    m.request_rejoin("new member")
    assert m.begin_join_prepare() is None
    m.finish_join_prepare(None)
    assert m.assigned == {T0, T1, T2}
    callbacks = become_stable(m, 2, "m-1", [T0, T1, T3])
    assert callbacks == [Callback(CallbackKind.REVOKED, (T2,)), Callback(CallbackKind.ASSIGNED, (T3,))]
    assert m.assigned == {T0, T1, T3}
    assert m.rejoin_needed  # rejoin at once so that T2 can be handed out
    assert m.rejoin_reason == "need to revoke partitions and re-join"


def test_cooperative_member_revokes_partitions_of_unsubscribed_topics_before_joining() -> None:
    m = member(assignors=("cooperative-sticky",), topics=("t", "u"))
    u0 = TopicPartition("u", 0)
    become_stable(m, 1, "m-1", [T0, u0])
    m.set_subscription(frozenset({"t"}))
    assert m.rejoin_needed_or_pending()
    assert m.rejoin_reason == "subscription has changed"
    assert m.begin_join_prepare() == Callback(CallbackKind.REVOKED, (u0,))


def test_assignment_outside_the_subscription_triggers_a_rejoin() -> None:
    m = member()
    m.finish_join_prepare(m.begin_join_prepare())
    _, sent = m.join_request()
    m.on_join_response(join_ok(1, "m-1", "x"), sent, 0)
    _, sent = m.sync_request({})
    assignment = m.on_sync_response(sync_ok([TopicPartition("other", 0)]), sent)
    assert callbacks_of_join_complete(m, assignment) == []
    assert m.assigned == frozenset()
    assert m.rejoin_needed


# ------------------------------------------------------------------------------------- errors


def test_rebalance_in_progress_heartbeat_rejoins_keeping_the_generation() -> None:
    m = member()
    become_stable(m, 5, "m-1", [T0])
    request, sent = m.heartbeat_request(3000)
    assert (request.generation_id, request.member_id) == (5, "m-1")
    m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), sent, 3000)
    assert m.rejoin_needed_or_pending()
    assert state_of(m) is MemberState.STABLE
    assert m.generation == Generation(5, "m-1", "range")
    assert m.begin_join_prepare() == Callback(CallbackKind.REVOKED, (T0,))


def test_rebalance_in_progress_on_join_and_sync_is_retried_at_once() -> None:
    m = member()
    become_stable(m, 5, "m-1", [T0])
    m.request_rejoin("test")
    _, sent = m.join_request()
    with pytest.raises(KafkaError) as info:
        m.on_join_response(JoinGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), sent, 0)
    assert m.failure_action(info.value) == "rejoin"
    _, sent = m.join_request()
    m.on_join_response(join_ok(6, "m-1", "x"), sent, 0)
    _, sent = m.sync_request({})
    with pytest.raises(KafkaError) as info:
        m.on_sync_response(SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), sent)
    assert m.failure_action(info.value) == "rejoin"
    assert m.generation == Generation(6, "m-1", "range")


def test_illegal_generation_resets_the_generation_but_keeps_the_member_id() -> None:
    m = member()
    become_stable(m, 5, "m-1", [T0, T1])
    _, sent = m.heartbeat_request(3000)
    m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION), sent, 3000)
    assert m.generation == Generation(-1, "m-1", None)
    assert state_of(m) is MemberState.UNJOINED
    assert not m.heartbeat_enabled()
    # The partitions are lost (not revoked): another member may already own them.
    assert m.begin_join_prepare() == Callback(CallbackKind.LOST, (T0, T1))
    m.finish_join_prepare(Callback(CallbackKind.LOST, (T0, T1)))
    request, _ = m.join_request()
    assert request.member_id == "m-1"
    assert decode_subscription(request.protocols[0].metadata).owned_partitions == ()


def test_unknown_member_id_resets_the_member_id() -> None:
    m = member()
    become_stable(m, 5, "m-1", [T0])
    _, sent = m.heartbeat_request(3000)
    m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID), sent, 3000)
    assert m.generation == Generation()
    request, _ = m.join_request()
    assert request.member_id == ""


def test_sync_illegal_generation_resets_only_if_still_current() -> None:
    m = member()
    m.finish_join_prepare(m.begin_join_prepare())
    _, sent = m.join_request()
    m.on_join_response(join_ok(2, "m-1", "x"), sent, 0)
    _, sent = m.sync_request({})
    with pytest.raises(KafkaError) as info:
        m.on_sync_response(SyncGroupResponse(error_code=ErrorCode.ILLEGAL_GENERATION), sent)
    assert m.failure_action(info.value) == "rejoin"
    assert m.generation == Generation(-1, "m-1", None)


def test_errors_about_an_older_generation_are_ignored() -> None:
    m = member()
    become_stable(m, 5, "m-1", [T0])
    _, stale = m.heartbeat_request(3000)
    m.request_rejoin("test")
    become_stable(m, 6, "m-1", [T0])
    error = m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION), stale, 3100)
    assert error is ErrorCode.NONE
    assert m.generation == Generation(6, "m-1", "range")
    assert state_of(m) is MemberState.STABLE


def test_fenced_instance_id_is_fatal() -> None:
    m = member(instance="i-1")
    become_stable(m, 5, "i-1-a", [T0])
    request, sent = m.heartbeat_request(3000)
    assert request.group_instance_id == "i-1"
    with pytest.raises(FencedInstanceIdError):
        m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.FENCED_INSTANCE_ID), sent, 3000)
    assert isinstance(m.fatal_error, FencedInstanceIdError)
    assert not m.heartbeat_enabled()
    m2 = member(instance="i-1")
    _, sent = m2.join_request()
    with pytest.raises(FencedInstanceIdError) as info:
        m2.on_join_response(JoinGroupResponse(error_code=ErrorCode.FENCED_INSTANCE_ID), sent, 0)
    assert m2.failure_action(info.value) == "raise"


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ],
)
def test_fatal_join_errors_are_raised(error: ErrorCode) -> None:
    m = member()
    _, sent = m.join_request()
    with pytest.raises(KafkaError) as info:
        m.on_join_response(JoinGroupResponse(error_code=error), sent, 0)
    assert m.failure_action(info.value) == "raise"


def test_join_response_for_another_protocol_type_is_rejected() -> None:
    m = member()
    _, sent = m.join_request()
    response = join_ok(1, "m-1", "m-1")
    response.protocol_type = "connect"
    with pytest.raises(KafkaError) as info:
        m.on_join_response(response, sent, 0)
    assert info.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


# --------------------------------------------------------------------------------- coordinator


@pytest.mark.parametrize("error", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_failover_during_join(error: ErrorCode) -> None:
    m = member()
    assert m.coordinator == CoordinatorNode(1, "broker-1", 9092)
    _, sent = m.join_request()
    with pytest.raises(KafkaError) as info:
        m.on_join_response(JoinGroupResponse(error_code=error), sent, 0)
    assert coordinator_of(m) is None
    assert m.failure_action(info.value) == "backoff"
    with pytest.raises(KafkaError):
        m.on_find_coordinator(CoordinatorAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1, None), 100)
    m.on_find_coordinator(CoordinatorAnswer(ErrorCode.NONE, 2, "broker-2", 9093, None), 200)
    assert m.coordinator == CoordinatorNode(2, "broker-2", 9093)
    _, sent = m.join_request()
    assert m.on_join_response(join_ok(1, "m-1", "m-1"), sent, 200).is_leader


def test_coordinator_failover_on_heartbeat_keeps_the_generation() -> None:
    m = member()
    become_stable(m, 3, "m-1", [T0])
    _, sent = m.heartbeat_request(3000)
    m.on_heartbeat_response(HeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR), sent, 3000)
    assert m.coordinator is None
    assert m.generation == Generation(3, "m-1", "range")
    assert not m.should_heartbeat(3050)
    assert m.should_heartbeat(3100)  # retried after retry.backoff.ms
    m.on_find_coordinator(CoordinatorAnswer(ErrorCode.NONE, 2, "broker-2", 9093, None), 3200)
    _, sent = m.heartbeat_request(3200)
    m.on_heartbeat_response(HeartbeatResponse(), sent, 3210)
    assert state_of(m) is MemberState.STABLE


def test_session_timeout_without_heartbeats_presumes_the_coordinator_dead() -> None:
    m = member()
    become_stable(m, 1, "m-1", [T0], now=0)
    assert not m.session_timeout_expired(9999)
    _, sent = m.heartbeat_request(3000)
    m.on_heartbeat_response(HeartbeatResponse(), sent, 3000)
    assert not m.session_timeout_expired(12999)
    assert m.session_timeout_expired(13000)
    # Failed heartbeats do not extend the session, and back off exponentially up to the maximum.
    delays = []
    for now in (13000, 14000, 15000, 16000, 17000):
        m.heartbeat_request(now)
        m.heartbeat_failed(now)
        delays.append(m.time_to_next_heartbeat(now))
    assert delays == [100, 200, 400, 800, 1000]
    assert m.session_timeout_expired(17000)


def test_heartbeat_timing() -> None:
    m = member()
    become_stable(m, 1, "m-1", [], now=1000)
    assert m.heartbeat_enabled()
    assert not m.should_heartbeat(3999)
    assert m.should_heartbeat(4000)
    m.heartbeat_request(4000)
    assert m.time_to_next_heartbeat(4000) == 3000


# ------------------------------------------------------------------------------- leave / poll


def test_max_poll_interval_expiry_leaves_and_rejoins_on_next_poll() -> None:
    m = member()
    become_stable(m, 7, "m-1", [T0, T1], now=0)
    m.poll(1000)
    assert not m.poll_timeout_expired(60999)
    assert m.poll_timeout_expired(61000)
    sent = m.leave_group()
    assert sent == Generation(7, "m-1", "range")
    request = leave_group_request(5, "g", sent.member_id, None, "consumer poll timeout has expired.")
    assert request.members[0].member_id == "m-1"
    assert request.members[0].reason == "consumer poll timeout has expired."
    assert state_of(m) is MemberState.UNJOINED
    assert m.generation == Generation()
    assert m.rejoin_needed_or_pending()
    # The next poll rejoins from scratch; what was owned is reported lost.
    assert m.begin_join_prepare() == Callback(CallbackKind.LOST, (T0, T1))


def test_static_members_do_not_send_leave_group() -> None:
    m = member(instance="i-1")
    become_stable(m, 7, "i-1-a", [T0])
    assert m.leave_group() is None
    assert state_of(m) is MemberState.UNJOINED


def test_close_revokes_or_reports_lost() -> None:
    m = member()
    become_stable(m, 1, "m-1", [T0])
    assert m.begin_leave() == Callback(CallbackKind.REVOKED, (T0,))
    m.request_rejoin("x")
    m.join_request()
    assert m.begin_leave() == Callback(CallbackKind.LOST, (T0,))
    m.finish_leave_prepare()
    assert m.begin_leave() is None


# ------------------------------------------------------------------------------------ offsets


def test_commit_needs_a_stable_generation() -> None:
    m = member()
    with pytest.raises(CommitFailedError):
        m.commit_generation()
    m.join_request()
    with pytest.raises(RebalanceInProgressError):
        m.commit_generation()


def test_commit_errors() -> None:
    m = member()
    become_stable(m, 4, "m-1", [T0])
    sent = m.commit_generation()
    assert sent == Generation(4, "m-1", "range")
    m.on_commit_response({T0: ErrorCode.NONE}, sent)
    with pytest.raises(RebalanceInProgressError):
        m.on_commit_response({T0: ErrorCode.REBALANCE_IN_PROGRESS}, sent)
    assert m.rejoin_needed
    with pytest.raises(KafkaError) as info:
        m.on_commit_response({T0: ErrorCode.NOT_COORDINATOR}, sent)
    assert info.value.retriable
    assert m.coordinator is None
    with pytest.raises(CommitFailedError):
        m.on_commit_response({T0: ErrorCode.ILLEGAL_GENERATION}, sent)
    assert m.generation == Generation(-1, "m-1", None)


def test_offset_fetch_errors() -> None:
    from regroup.client.requests import FetchedOffset

    m = member()
    with pytest.raises(KafkaError) as info:
        m.on_fetch_response(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, {})
    assert info.value.retriable
    assert m.on_fetch_response(ErrorCode.NONE, {T0: FetchedOffset(ErrorCode.NONE, None)}) == {T0: None}
    with pytest.raises(KafkaError):
        m.on_fetch_response(ErrorCode.NONE, {T0: FetchedOffset(ErrorCode.UNSTABLE_OFFSET_COMMIT, None)})


def test_leader_notices_partition_count_changes() -> None:
    m = member()
    m.finish_join_prepare(m.begin_join_prepare())
    _, sent = m.join_request()
    metadata = encode_subscription(Subscription(("t",)))
    outcome = m.on_join_response(
        join_ok(1, "m-1", "m-1", members=[JoinGroupResponseMember(member_id="m-1", metadata=metadata)]),
        sent,
        0,
    )
    m.perform_assignment(outcome, m.leader_subscriptions(outcome.members), {"t": 2})
    _, sent = m.sync_request({})
    callbacks_of_join_complete(m, m.on_sync_response(sync_ok([T0, T1]), sent))
    m.on_metadata({"t": 2})
    assert not m.rejoin_needed_or_pending()
    m.on_metadata({"t": 4})
    assert m.rejoin_needed_or_pending()
    assert m.rejoin_reason == "cached metadata has changed"


def test_protocol_follows_the_assignors() -> None:
    from regroup.client.assignors import RebalanceProtocol

    assert member(assignors=("range", "cooperative-sticky")).protocol is RebalanceProtocol.EAGER
    assert member(assignors=("cooperative-sticky",)).protocol is RebalanceProtocol.COOPERATIVE
    with pytest.raises(ValueError, match="unique"):
        member(assignors=("range", "range"))
