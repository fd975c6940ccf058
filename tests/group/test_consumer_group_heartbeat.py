"""KIP-848 ConsumerGroupHeartbeat against one shard: one test per row of the checklist in
docs/design/consumer-group-semantics.md §13 (Kafka 4.3 behaviour), named after the behaviour.

Record types in the log are asserted with :meth:`Harness.record_types` (tombstones negative): 3 group epoch,
5 member subscription, 6 target assignment epoch, 7 member target, 8 member current assignment.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from regroup.build import compiled
from regroup.group.config import GroupConfig
from regroup.group.consumer_group import ConsumerGroupState, MemberState
from regroup.group.consumer_group_manager import rebalance_timeout_key, session_timeout_key
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse

from .harness import Call, Harness, image, response_partitions, topic_id

T = topic_id("t")
U = topic_id("u")
CONFIG = GroupConfig(consumer_assignment_interval_ms=0)


@pytest.fixture
def h() -> Harness:
    return Harness(CONFIG, now=1000, topics=image({"t": 3, "u": 2}))


def ok(call: Call[ConsumerGroupHeartbeatResponse]) -> ConsumerGroupHeartbeatResponse:
    assert call.error is ErrorCode.NONE, call.response
    return call.response


def parts(call: Call[ConsumerGroupHeartbeatResponse]) -> dict[uuid.UUID, list[int]] | None:
    return response_partitions(ok(call))


def member_state(h: Harness, group_id: str, member_id: str) -> MemberState:
    group = h.shard.consumer_group(group_id)
    assert group is not None
    return group.members[member_id].state


def group_epoch(h: Harness, group_id: str = "g") -> int:
    group = h.shard.consumer_group(group_id)
    assert group is not None
    return group.group_epoch


# ------------------------------------------------------------------------------------------ validation


def test_v1_join_without_member_id_is_invalid_and_v0_gets_a_generated_id(h: Harness) -> None:
    assert h.cgh("g", "", names=["t"], version=1).error is ErrorCode.INVALID_REQUEST
    response = ok(h.cgh("g", "", names=["t"], version=0, client_id="c"))
    assert response.member_id == "c-1"
    assert response.member_epoch == 2


def test_blank_group_instance_or_rack_id_is_invalid(h: Harness) -> None:
    assert h.cgh(" ", "m", names=["t"]).error is ErrorCode.INVALID_REQUEST
    assert h.cgh("g", "m", names=["t"], instance_id="").error is ErrorCode.INVALID_REQUEST
    assert h.cgh("g", "m", names=["t"], rack_id="  ").error is ErrorCode.INVALID_REQUEST
    assert h.log == []


def test_join_requires_rebalance_timeout_and_empty_owned_partitions(h: Harness) -> None:
    assert h.cgh("g", "m", names=["t"], rebalance_timeout_ms=-1).error is ErrorCode.INVALID_REQUEST
    assert h.cgh("g", "m", names=["t"], owned={T: [0]}).error is ErrorCode.INVALID_REQUEST
    req_without_owned = h.cgh("g", "m", 1, names=["t"], rebalance_timeout_ms=5000)  # epoch 1: no such group
    assert req_without_owned.error is ErrorCode.GROUP_ID_NOT_FOUND


def test_join_with_owned_partitions_null_is_invalid(h: Harness) -> None:
    call = h.cgh("g", "m", names=["t"])
    ok(call)
    # epoch 0 again, TopicPartitions null
    from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest

    req = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"]
    )
    result = h.shard.consumer_group_heartbeat(h._ctx(1, "c"), req, h.topics, h.now)
    assert result.reply is not None
    assert result.reply.error_code == ErrorCode.INVALID_REQUEST.value


def test_join_needs_names_or_regex_but_an_empty_list_is_fine(h: Harness) -> None:
    assert h.cgh("g", "m").error is ErrorCode.INVALID_REQUEST
    assert ok(h.cgh("g", "m", names=[])).member_epoch == 1


def test_static_leave_without_instance_id_and_epoch_below_minus_two_are_invalid(h: Harness) -> None:
    assert h.cgh("g", "m", -2).error is ErrorCode.INVALID_REQUEST
    assert h.cgh("g", "m", -3).error is ErrorCode.INVALID_REQUEST


def test_unknown_server_assignor_is_unsupported(h: Harness) -> None:
    assert h.cgh("g", "m", names=["t"], assignor="sticky").error is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert ok(h.cgh("g", "m", names=["t"], assignor="range")).member_epoch == 2


def test_heartbeat_to_missing_group_or_unknown_member(h: Harness) -> None:
    assert h.cgh("nope", "m", 1, owned={}).error is ErrorCode.GROUP_ID_NOT_FOUND
    ok(h.cgh("g", "m", names=["t"]))
    assert h.cgh("g", "other", 2, owned={}).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.cgh("g", "other", -1).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.cgh("nope", "m", -1).error is ErrorCode.GROUP_ID_NOT_FOUND


# ------------------------------------------------------------------------------------------ joining


def test_first_join_assigns_everything_at_epoch_two_with_records_5_3_7_6_8(h: Harness) -> None:
    response = ok(h.cgh("g", "m", names=["t"]))
    assert response.member_epoch == 2
    assert response.heartbeat_interval_ms == 5000
    assert response_partitions(response) == {T: [0, 1, 2]}
    assert h.record_types() == [5, 3, 7, 6, 8]
    group = h.shard.consumer_group("g")
    assert group is not None
    assert (group.group_epoch, group.assignment_epoch, group.state) == (2, 2, ConsumerGroupState.STABLE)
    assert h.deadline(session_timeout_key("g", "m")) == h.now + 45_000


def test_member_without_topics_joins_at_epoch_one_without_a_group_epoch_record(h: Harness) -> None:
    response = ok(h.cgh("g", "m", names=[]))
    assert response.member_epoch == 1
    assert response_partitions(response) == {}
    assert h.record_types() == [5, 8]


def test_epoch_above_the_members_is_fenced(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t"]))
    assert h.cgh("g", "m", 3, owned={T: [0, 1, 2]}).error is ErrorCode.FENCED_MEMBER_EPOCH


def test_previous_epoch_is_accepted_only_with_owned_partitions_still_assigned(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))  # a: epoch 2, t:0-2
    ok(h.cgh("g", "b", names=["t"]))  # group epoch 3
    ok(h.cgh("g", "a", 2, owned={T: [0, 1]}))  # a revoked what it had to: epoch 3, previous 2
    group = h.shard.consumer_group("g")
    assert group is not None
    a = group.members["a"]
    assert (a.member_epoch, a.previous_member_epoch) == (3, 2)
    assigned = sorted(p for _, p in a.assigned)
    # the response was lost: a retries with epoch 2
    assert ok(h.cgh("g", "a", 2, owned={T: assigned})).member_epoch == 3
    assert h.cgh("g", "a", 2).error is ErrorCode.FENCED_MEMBER_EPOCH  # owned null
    assert h.cgh("g", "a", 2, owned={T: [0, 1, 2]}).error is ErrorCode.FENCED_MEMBER_EPOCH  # not a subset


def test_known_member_rejoining_with_epoch_zero_gets_its_assignment(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t"]))
    before = len(h.log)
    response = ok(h.cgh("g", "m", names=["t"]))
    assert response.member_epoch == 2
    assert response_partitions(response) == {T: [0, 1, 2]}
    assert h.record_types(before) == []


# ------------------------------------------------------------------------------------------ reconciliation


def test_second_member_bumps_epoch_and_first_must_revoke_at_its_old_epoch(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    b = ok(h.cgh("g", "b", names=["t"]))
    assert group_epoch(h) == 3
    a = h.cgh("g", "a", 2, owned={T: [0, 1, 2]})
    assert ok(a).member_epoch == 2
    kept = parts(a)
    assert kept is not None
    assert 0 < len(kept[T]) < 3
    assert member_state(h, "g", "a") is MemberState.UNREVOKED_PARTITIONS
    assert h.deadline(rebalance_timeout_key("g", "a")) == h.now + 30_000
    # b has the new epoch but nothing yet: what it will get is still owned by a
    assert b.member_epoch == 3
    assert response_partitions(b) == {}
    assert member_state(h, "g", "b") is MemberState.UNRELEASED_PARTITIONS


def test_partitions_move_only_after_the_old_owner_released_them(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    ok(h.cgh("g", "b", names=["t"]))
    kept = parts(h.cgh("g", "a", 2, owned={T: [0, 1, 2]}))
    assert kept is not None
    # b heartbeats: a still owns the partitions b is to get
    assert response_partitions(ok(h.cgh("g", "b", 3, owned={}))) is None
    released = ok(h.cgh("g", "a", 2, owned=kept))
    assert released.member_epoch == 3
    assert member_state(h, "g", "a") is MemberState.STABLE
    assert h.deadline(rebalance_timeout_key("g", "a")) is None
    b = ok(h.cgh("g", "b", 3, owned={}))
    b_parts = response_partitions(b)
    assert b_parts is not None
    assert sorted(b_parts[T] + kept[T]) == [0, 1, 2]
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.state is ConsumerGroupState.STABLE


def test_unchanged_heartbeat_has_no_assignment_but_a_full_one_does(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t"]))
    quiet = ok(h.cgh("g", "m", 2, owned={T: [0, 1, 2]}))
    assert quiet.member_epoch == 2
    assert quiet.assignment is None
    full = ok(h.cgh("g", "m", 2, rebalance_timeout_ms=30_000, names=["t"], owned={T: [0, 1, 2]}))
    assert response_partitions(full) == {T: [0, 1, 2]}


def test_member_not_revoking_in_time_is_removed_and_fenced(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"], rebalance_timeout_ms=10_000))
    ok(h.cgh("g", "b", names=["t"]))
    ok(h.cgh("g", "a", 2, owned={T: [0, 1, 2]}))  # UNREVOKED, deadline in 10 s
    before = len(h.log)
    h.advance(9_000)
    ok(h.cgh("g", "b", 3, owned={}))
    h.advance(1_000)
    group = h.shard.consumer_group("g")
    assert group is not None
    assert "a" not in group.members
    assert group.group_epoch == 4
    assert h.record_types(before)[-4:] == [-8, -7, -5, 3]
    assert h.cgh("g", "a", 2, owned={T: [0]}).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_session_timeout_removes_member_with_tombstones_8_7_5_then_epoch(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    ok(h.cgh("g", "b", names=["t"]))
    before = len(h.log)
    h.advance(44_000)
    ok(h.cgh("g", "b", 3, owned={}))
    h.advance(1_000)  # a's session ends (45 s after its last heartbeat)
    assert h.record_types(before)[-4:] == [-8, -7, -5, 3]
    group = h.shard.consumer_group("g")
    assert group is not None
    assert list(group.members) == ["b"]
    assert group.group_epoch == 4
    # b gets everything on its next heartbeat
    b = ok(h.cgh("g", "b", 3, owned={}))
    assert b.member_epoch == 4
    assert response_partitions(b) == {T: [0, 1, 2]}


def test_leave_answers_minus_one_bumps_and_last_member_leaves_group_empty(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    before = len(h.log)
    left = ok(h.cgh("g", "a", -1))
    assert (left.member_id, left.member_epoch, left.heartbeat_interval_ms, left.assignment) == (
        "a",
        -1,
        0,
        None,
    )
    assert h.record_types(before) == [-8, -7, -5, 3]
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.group_epoch == 3
    assert group.state is ConsumerGroupState.EMPTY
    assert h.deadline(session_timeout_key("g", "a")) is None


def test_delete_groups_deletes_empty_consumer_groups_only(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    ok(h.cgh("e", "x", names=["t"]))
    ok(h.cgh("e", "x", -1))
    before = len(h.log)
    results = {r.group_id: ErrorCode(r.error_code) for r in h.delete_groups("g", "e")}
    assert results == {"g": ErrorCode.NON_EMPTY_GROUP, "e": ErrorCode.NONE}
    assert h.record_types(before) == [-6, -4, -3]  # 4: Kafka tombstones ≤4.0 partition metadata too
    assert h.shard.consumer_group("e") is None
    assert h.shard.consumer_group("g") is not None


def test_topic_changes_bump_the_epoch_on_the_next_heartbeat(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t", "new"]))
    assert group_epoch(h) == 2
    h.topics = image({"t": 4, "u": 2})  # t grows
    grown = ok(h.cgh("g", "m", 2, owned={T: [0, 1, 2]}))
    assert grown.member_epoch == 3
    assert response_partitions(grown) == {T: [0, 1, 2, 3]}
    h.topics = image({"t": 4, "u": 2, "new": 1})  # a subscribed topic is created
    created = ok(h.cgh("g", "m", 3, owned={T: [0, 1, 2, 3]}))
    assert created.member_epoch == 4
    assert response_partitions(created) == {T: [0, 1, 2, 3], topic_id("new"): [0]}
    h.topics = image({"u": 2, "new": 1})  # t is deleted
    deleted = ok(h.cgh("g", "m", 4, owned={T: [0, 1, 2, 3], topic_id("new"): [0]}))
    assert group_epoch(h) == 5
    assert deleted.member_epoch == 4  # it still owns the deleted topic's partitions: revoke first
    assert response_partitions(deleted) == {topic_id("new"): [0]}
    assert ok(h.cgh("g", "m", 4, owned={topic_id("new"): [0]})).member_epoch == 5
    h.topics = image({"u": 3, "new": 1})  # an unsubscribed topic changes: nothing happens
    assert ok(h.cgh("g", "m", 5, owned={topic_id("new"): [0]})).member_epoch == 5


def test_unsubscribed_topic_is_revoked_in_the_same_response(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t", "u"]))
    response = ok(h.cgh("g", "m", 2, names=["t"], owned={T: [0, 1, 2], U: [0, 1]}))
    assert response.member_epoch == 2
    assert response_partitions(response) == {T: [0, 1, 2]}
    assert member_state(h, "g", "m") is MemberState.UNREVOKED_PARTITIONS
    done = ok(h.cgh("g", "m", 2, owned={T: [0, 1, 2]}))
    assert done.member_epoch == 3


def test_uniform_two_then_three_members_moves_one_partition(h: Harness) -> None:
    h.topics = image({"t": 4})
    ok(h.cgh("g", "a", names=["t"]))
    ok(h.cgh("g", "b", names=["t"]))
    a = parts(h.cgh("g", "a", 2, owned={T: [0, 1, 2, 3]}))
    assert a is not None
    assert len(a[T]) == 2
    ok(h.cgh("g", "a", 2, owned=a))
    b = parts(h.cgh("g", "b", 3, owned={}))
    assert b is not None
    assert len(b[T]) == 2
    ok(h.cgh("g", "c", names=["t"]))
    group = h.shard.consumer_group("g")
    assert group is not None
    sizes = sorted(len(group.targets[m]) for m in ("a", "b", "c"))
    assert sizes == [1, 1, 2]
    moved = (set(a[T]) - {p for _, p in group.targets["a"]}) | (
        set(b[T]) - {p for _, p in group.targets["b"]}
    )
    assert len(moved) == 1


def test_range_assignor_orders_static_members_first(h: Harness) -> None:
    h.topics = image({"t": 5})
    ok(h.cgh("g", "a-dynamic", names=["t"], assignor="range"))
    ok(h.cgh("g", "z-static", names=["t"], assignor="range", instance_id="i1"))
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.targets["z-static"] == {(T, 0), (T, 1), (T, 2)}
    assert group.targets["a-dynamic"] == {(T, 3), (T, 4)}


def test_most_voted_assignor_is_used_and_described(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"], assignor="range"))
    assert h.consumer_describe("g").assignor_name == "range"
    ok(h.cgh("g", "b", names=["t"], assignor="uniform"))
    ok(h.cgh("g", "c", names=["t"], assignor="uniform"))
    assert h.consumer_describe("g").assignor_name == "uniform"
    ok(h.cgh("e", "x", names=[]))
    assert h.consumer_describe("e").assignor_name == "uniform"  # the first configured


def test_max_size_turns_new_members_away_but_not_a_returning_static_member() -> None:
    h = Harness(
        GroupConfig(consumer_assignment_interval_ms=0, consumer_max_size=1), now=1000, topics=image({"t": 3})
    )
    ok(h.cgh("g", "s", names=["t"], instance_id="i"))
    assert h.cgh("g", "d", names=["t"]).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    ok(h.cgh("g", "s", -2, instance_id="i"))
    # the same member id comes back (the client kept its id)
    assert ok(h.cgh("g", "s", names=["t"], instance_id="i")).member_epoch == 2
    ok(h.cgh("g", "s", -2, instance_id="i"))
    # 4.3.1: under a new member id the full group turns the instance away
    assert h.cgh("g", "s2", names=["t"], instance_id="i").error is ErrorCode.GROUP_MAX_SIZE_REACHED


# ------------------------------------------------------------------------------------------ static members


def test_static_temporary_leave_keeps_partitions_and_rejoin_gets_them_back(h: Harness) -> None:
    ok(h.cgh("g", "s1", names=["t"], instance_id="i"))
    before = len(h.log)
    left = ok(h.cgh("g", "s1", -2, instance_id="i"))
    assert (left.member_epoch, left.heartbeat_interval_ms) == (-2, 0)
    assert h.record_types(before) == [8]
    assert group_epoch(h) == 2
    before = len(h.log)
    back = ok(h.cgh("g", "s2", names=["t"], instance_id="i"))
    assert back.member_epoch == 2
    assert response_partitions(back) == {T: [0, 1, 2]}
    assert h.record_types(before) == [-8, -7, -5, 5, 7, 8, 8]
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.group_epoch == 2
    assert group.static_members == {"i": "s2"}
    assert list(group.members) == ["s2"]


def test_static_rejoin_while_the_instance_is_active_is_unreleased(h: Harness) -> None:
    ok(h.cgh("g", "s1", names=["t"], instance_id="i"))
    assert h.cgh("g", "s2", names=["t"], instance_id="i").error is ErrorCode.UNRELEASED_INSTANCE_ID
    assert h.cgh("g", "s1", names=["t"], instance_id="i").error is ErrorCode.UNRELEASED_INSTANCE_ID


def test_static_heartbeat_with_another_member_id_is_fenced_unknown_instance_unknown(h: Harness) -> None:
    ok(h.cgh("g", "s1", names=["t"], instance_id="i"))
    assert h.cgh("g", "s2", 2, instance_id="i", owned={}).error is ErrorCode.FENCED_INSTANCE_ID
    assert h.cgh("g", "s1", 2, instance_id="other", owned={}).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.cgh("g", "s2", -1, instance_id="i").error is ErrorCode.FENCED_INSTANCE_ID
    assert h.cgh("g", "s2", -2, instance_id="nope").error is ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_gone_past_its_session_is_removed_and_partitions_reassigned(h: Harness) -> None:
    ok(h.cgh("g", "s1", names=["t"], instance_id="i"))
    ok(h.cgh("g", "d", names=["t"]))
    ok(h.cgh("g", "s1", -2, instance_id="i"))
    epoch = group_epoch(h)
    h.advance(30_000)
    ok(h.cgh("g", "d", 3, owned={}))
    h.advance(15_000)
    group = h.shard.consumer_group("g")
    assert group is not None
    assert list(group.members) == ["d"]
    assert group.static_members == {}
    assert group.group_epoch == epoch + 1
    d = ok(h.cgh("g", "d", 3, owned={}))
    assert response_partitions(d) == {T: [0, 1, 2]}


# ------------------------------------------------------------------------------------------ regexes


def test_invalid_regex_is_rejected(h: Harness) -> None:
    assert h.cgh("g", "m", regex="(?=t)t").error is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert h.cgh("g", "m", regex="(t)\\1").error is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert h.shard.consumer_group("g") is None
    assert h.log == []


def test_regex_subscription_resolves_full_matches_and_bumps(h: Harness) -> None:
    h.topics = image({"orders": 1, "orders-dlq": 1, "xorders": 1})
    response = ok(h.cgh("g", "m", regex="orders.*"))
    assert response.member_epoch == 2
    assert response_partitions(response) == {topic_id("orders"): [0], topic_id("orders-dlq"): [0]}
    # a new matching topic is picked up on the next heartbeat
    h.topics = image({"orders": 1, "orders-dlq": 1, "xorders": 1, "orders-2": 1})
    owned = {topic_id("orders"): [0], topic_id("orders-dlq"): [0]}
    again = ok(h.cgh("g", "m", 2, owned=owned))
    assert again.member_epoch == 3
    assert response_partitions(again) == {**owned, topic_id("orders-2"): [0]}
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.resolved_regexes == {"orders.*": frozenset({"orders", "orders-dlq", "orders-2"})}


def test_regex_matching_nothing_does_not_bump_and_last_subscriber_drops_it(h: Harness) -> None:
    assert ok(h.cgh("g", "m", regex="nothing.*")).member_epoch == 1
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.resolved_regexes == {"nothing.*": frozenset()}
    ok(h.cgh("g", "m", 1, regex="", owned={}))  # "" clears the regex
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.resolved_regexes == {}
    assert group.members["m"].subscription.subscribed_topic_regex is None


def test_regex_and_names_are_unioned(h: Harness) -> None:
    response = ok(h.cgh("g", "m", names=["u"], regex="t"))
    assert response_partitions(response) == {T: [0, 1, 2], U: [0, 1]}


# ------------------------------------------------------------------------------------------ other APIs


def test_consumer_group_describe_errors_and_content(h: Harness) -> None:
    h.form_group("classic", 1)
    assert h.consumer_describe("classic").error_code == ErrorCode.GROUP_ID_NOT_FOUND.value
    assert h.consumer_describe("").error_code == ErrorCode.INVALID_GROUP_ID.value
    assert h.consumer_describe("missing").error_code == ErrorCode.GROUP_ID_NOT_FOUND.value
    ok(h.cgh("g", "m", names=["t"], rack_id="r1", instance_id="i"))
    described = h.consumer_describe("g")
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Stable", 2, 2)
    (member,) = described.members
    assert (member.member_id, member.instance_id, member.rack_id, member.member_epoch) == ("m", "i", "r1", 2)
    assert member.subscribed_topic_names == ["t"]
    assert member.subscribed_topic_regex == ""
    assert [(tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == [("t", [0, 1, 2])]
    assert [(tp.topic_name, tp.partitions) for tp in member.target_assignment.topic_partitions] == [
        ("t", [0, 1, 2])
    ]


def test_describe_groups_reports_consumer_groups_dead(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t"]))
    described = h.describe("g", version=5)
    assert described.group_state == "Dead"
    assert described.members == []


def test_list_groups_lists_consumer_groups_with_type_filter(h: Harness) -> None:
    h.form_group("classic", 1)
    ok(h.cgh("g", "m", names=["t"]))
    listed = {(g.group_id, g.protocol_type, g.group_type, g.group_state) for g in h.shard.list_groups()}
    assert ("g", "consumer", "consumer", "Stable") in listed
    only = h.shard.list_groups(types_filter=["Consumer"])
    assert [(g.group_id, g.group_type) for g in only] == [("g", "consumer")]
    assert [g.group_id for g in h.shard.list_groups(states_filter=["stable"], types_filter=["consumer"])] == [
        "g"
    ]
    assert h.shard.list_groups(states_filter=["empty"], types_filter=["consumer"]) == []


def test_join_group_to_a_consumer_group_is_inconsistent_with_migration_disabled() -> None:
    h = Harness(replace(CONFIG, consumer_migration_policy="disabled"), now=1000, topics=image({"t": 3}))
    ok(h.cgh("g", "m", names=["t"]))
    assert h.join("g").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_heartbeat_to_a_non_empty_classic_group_is_not_found_with_migration_disabled() -> None:
    h = Harness(replace(CONFIG, consumer_migration_policy="disabled"), now=1000, topics=image({"t": 3}))
    h.form_group("classic", 1)
    assert h.cgh("classic", "m", names=["t"]).error is ErrorCode.GROUP_ID_NOT_FOUND


def test_empty_classic_group_is_replaced_by_the_consumer_group(h: Harness) -> None:
    commit = h.commit("simple", {("t", 0): 5})  # creates a record-less ("simple") classic group
    assert commit.response.topics[0].partitions[0].error_code == 0
    assert h.shard.group("simple") is not None
    before = len(h.log)
    ok(h.cgh("simple", "m", names=["t"]))
    assert h.record_types(before) == [-2, 5, 3, 7, 6, 8]
    assert h.shard.group("simple") is None
    assert h.shard.consumer_group("simple") is not None
    h.shard.check_invariants()


def test_failed_append_leaves_no_trace(h: Harness) -> None:
    h.fail_next_append()
    call = h.cgh("g", "m", names=["t"])
    assert call.error is ErrorCode.NOT_COORDINATOR
    assert h.shard.consumer_group("g") is None
    ok(h.cgh("g", "m", names=["t"]))
    h.fail_next_append()
    assert h.cgh("g", "m", -1).error is ErrorCode.NOT_COORDINATOR
    group = h.shard.consumer_group("g")
    assert group is not None
    assert list(group.members) == ["m"]


def test_failed_append_restores_the_groups_counted_indexes(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"], assignor="range"))
    b = ok(h.cgh("g", "b", names=["t", "u"], regex="^v.*$"))
    group = h.shard.consumer_group("g")
    assert group is not None
    before = (group.subscribed_topic_names(), group.subscribed_regexes(), dict(group.assignor_votes()))
    h.fail_next_append()
    assert h.cgh("g", "b", b.member_epoch, names=["u"], regex="").error is ErrorCode.NOT_COORDINATOR
    h.fail_next_append()
    assert h.cgh("g", "a", -1).error is ErrorCode.NOT_COORDINATOR
    h.fail_next_append()
    assert h.cgh("g", "c", names=["u"], assignor="uniform").error is ErrorCode.NOT_COORDINATOR
    group = h.shard.consumer_group("g")  # a copy, with the indexes as the shard has them
    assert group is not None
    after = (group.subscribed_topic_names(), group.subscribed_regexes(), dict(group.assignor_votes()))
    assert after == before == (frozenset({"t", "u"}), {"^v.*$"}, {"range": 1})
    group.check_invariants()  # the counts match the members; no undo journal left behind


def test_steady_state_heartbeat_does_no_work_proportional_to_the_group(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's steady-state heartbeat touches the member only: no copy of the group as an undo snapshot,
    no walk over the members for subscribed names or regexes, no metadata hash recomputed."""
    for i in range(20):
        ok(h.cgh("g", f"m{i}", names=["t"]))
    for _ in range(3):  # every member heartbeats owning what it was given, as a client does
        for i in range(20):
            group = h.shard.consumer_group("g")
            assert group is not None
            member = group.members[f"m{i}"]
            owned: dict[uuid.UUID, list[int]] = {}
            for tid, p in member.assigned:
                owned.setdefault(tid, []).append(p)
            ok(h.cgh("g", f"m{i}", member.member_epoch, owned=owned))
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.state is ConsumerGroupState.STABLE

    from regroup.group import consumer_group as cg
    from regroup.group import topics_image

    if compiled():  # compiled callers call the compiled methods, whatever the class attribute says
        pytest.skip("checks the calls by patching methods, which only the pure-Python build sees")

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a steady-state heartbeat walked the group")

    monkeypatch.setattr(cg.ConsumerGroup, "copy", forbidden)
    monkeypatch.setattr(cg.ConsumerGroup, "member_topic_names", forbidden)
    monkeypatch.setattr(topics_image.TopicsImage, "group_hash", forbidden)
    log_size = len(h.log)
    for i in range(20):
        response = ok(h.cgh("g", f"m{i}", group.group_epoch))
        assert response.assignment is None
    assert len(h.log) == log_size  # nothing written


def test_an_epoch_bump_event_lists_only_the_members_its_operation_changed() -> None:
    """One bump per joining member: listing every member made forming a group O(members²)."""
    from regroup.group.consumer_group_events import ConsumerGroupEpochBumped

    h = Harness(GroupConfig(consumer_assignment_interval_ms=1000), now=10_000, topics=image({"t": 40}))
    for i in range(30):
        ok(h.cgh("g", f"m{i:02}", names=["t"]))
    bumps = [e for e in h.notifications if isinstance(e, ConsumerGroupEpochBumped)]
    assert len(bumps) == 30
    # the first join computed the target: m00 alone; later joins wait for the interval: the joiner only
    assert [[m.member_id for m in e.members] for e in bumps] == [[f"m{i:02}"] for i in range(30)]
    assert [(e.member_count, e.waiting_count) for e in bumps[:3]] == [(1, 0), (2, 0), (3, 0)]
    h.advance(1000)
    h.notifications.clear()
    ok(h.cgh("g", "n", names=["t"]))  # a bump that also recomputes the target: whose target changed
    (bump,) = [e for e in h.notifications if isinstance(e, ConsumerGroupEpochBumped)]
    group = h.shard.consumer_group("g")
    assert group is not None
    listed = {m.member_id for m in bump.members}
    assert "n" in listed
    assert listed == {m for m, target in group.targets.items() if target}  # all got new partitions
    assert bump.member_count == 31
    assert bump.waiting_count == 31 - group.reconciled_count()


def test_assignment_is_recomputed_at_most_once_per_interval() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=1000), now=10_000, topics=image({"t": 4}))
    ok(h.cgh("g", "a", names=["t"]))  # target computed at t=10000, epoch 2
    b = ok(h.cgh("g", "b", names=["t"]))  # epoch 3, target deferred
    group = h.shard.consumer_group("g")
    assert group is not None
    assert (group.group_epoch, group.assignment_epoch) == (3, 2)
    assert b.member_epoch == 2
    assert response_partitions(b) == {}
    h.advance(1000)
    b = ok(h.cgh("g", "b", 2, owned={}))
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.assignment_epoch == 3
    assert b.member_epoch == 3


def test_consumer_settings_have_kafkas_defaults_and_bounds() -> None:
    config = GroupConfig()
    assert (
        config.consumer_session_timeout_ms,
        config.consumer_heartbeat_interval_ms,
        config.consumer_max_size,
        config.consumer_assignors,
        config.consumer_assignment_interval_ms,
        config.consumer_migration_policy,
    ) == (45_000, 5_000, 2**31 - 1, ("uniform", "range"), 1_000, "bidirectional")
    for bad in (
        {"consumer_assignors": ()},
        {"consumer_assignors": ("uniform", "uniform")},
        {"consumer_assignors": ("custom",)},
        {"consumer_heartbeat_interval_ms": 45_000},
        {"consumer_max_size": 0},
        {"consumer_assignment_interval_ms": -1},
        {"consumer_migration_policy": "sideways"},
    ):
        with pytest.raises(ValueError, match=r"group\.consumer\."):
            GroupConfig(**bad)  # type: ignore[arg-type]


def test_group_epoch_only_bumps_for_own_topic_names_not_rack_or_timeout(h: Harness) -> None:
    ok(h.cgh("g", "m", names=["t"]))
    before = len(h.log)
    response = ok(h.cgh("g", "m", 2, rack_id="r2", rebalance_timeout_ms=9_000, owned={T: [0, 1, 2]}))
    assert response.member_epoch == 2
    assert h.record_types(before) == [5]
    assert group_epoch(h) == 2
