"""Consumer-group records: bytes round trips, and a shard loaded from the log gives the same groups, epochs,
member states, assignments and static members, with timers re-armed (checklist row 51)."""

from __future__ import annotations

from regroup.group.config import GroupConfig
from regroup.group.consumer_group import MemberAssignment, MemberState, MemberSubscription
from regroup.group.consumer_group_manager import rebalance_timeout_key, session_timeout_key
from regroup.group.records import (
    DecodedConsumerGroupRecord,
    consumer_group_metadata_record,
    current_assignment_record,
    decode_record,
    member_subscription_record,
    target_member_record,
    target_metadata_record,
    target_metadata_tombstone,
)
from regroup.protocol.errors import ErrorCode

from .harness import Harness, consumer_hard_state, image, topic_id

T = topic_id("t")
U = topic_id("u")


def test_consumer_group_records_round_trip() -> None:
    sub = MemberSubscription(
        instance_id="i",
        rack_id="r",
        client_id="c",
        client_host="/1.2.3.4",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex="x.*",
        rebalance_timeout_ms=5000,
        server_assignor="range",
    )
    assignment = MemberAssignment(
        member_epoch=7,
        previous_member_epoch=6,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned=frozenset({(T, 0), (U, 1)}),
        pending_revocation=frozenset({(T, 2)}),
    )
    cases = [
        (consumer_group_metadata_record("g", 4), 3, "", 4),
        (member_subscription_record("g", "m", sub), 5, "m", sub),
        (target_metadata_record("g", 4), 6, "", 4),
        (target_member_record("g", "m", frozenset({(T, 1)})), 7, "m", frozenset({(T, 1)})),
        (current_assignment_record("g", "m", assignment), 8, "m", assignment),
        (target_metadata_tombstone("g"), 6, "", None),
    ]
    for record, kind, member_id, value in cases:
        assert decode_record(record) == DecodedConsumerGroupRecord(kind, "g", member_id, value)


def test_unknown_member_state_byte_is_unknown() -> None:
    assert MemberState.from_byte(9) is MemberState.UNKNOWN


def _busy_group(h: Harness) -> None:
    assert h.cgh("g", "a", names=["t"], rebalance_timeout_ms=20_000).error is ErrorCode.NONE
    assert h.cgh("g", "b", names=["t"], instance_id="ib").error is ErrorCode.NONE
    assert h.cgh("g", "a", 2, owned={T: [0, 1, 2]}).error is ErrorCode.NONE  # a: UNREVOKED
    assert h.cgh("g", "s", names=["u"], instance_id="is").error is ErrorCode.NONE
    assert h.cgh("g", "s", -2, instance_id="is").error is ErrorCode.NONE  # s: epoch -2
    assert h.cgh("e", "x", names=["t"]).error is ErrorCode.NONE
    assert h.cgh("e", "x", -1).error is ErrorCode.NONE  # e: Empty


def test_reload_restores_groups_and_rearms_timers() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3, "u": 2}))
    _busy_group(h)
    before = consumer_hard_state(h.shard)
    h.advance(1000)
    h.reload()
    assert consumer_hard_state(h.shard) == before
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert group.members["s"].member_epoch == -2
    assert group.static_members == {"ib": "b", "is": "s"}
    for member_id in ("a", "b", "s"):
        assert h.deadline(session_timeout_key("g", member_id)) == h.now + 45_000
    assert h.deadline(rebalance_timeout_key("g", "a")) == h.now + 20_000
    assert h.deadline(rebalance_timeout_key("g", "b")) is None
    h.shard.check_invariants()
    # the loaded group carries on: a releases, s comes back under a new member id
    assert h.cgh("g", "a", 2, owned={}).error is ErrorCode.NONE
    back = h.cgh("g", "s2", names=["u"], instance_id="is")
    assert back.error is ErrorCode.NONE
    h.shard.check_invariants()


def test_reload_forgets_the_metadata_hash_so_the_next_heartbeat_bumps_once() -> None:
    # The generated ConsumerGroupMetadataValue has no MetadataHash tagged field: a loaded group's hash is
    # unknown, so the first heartbeat recomputes it and bumps the group epoch (even when no subscribed topic
    # exists any more, which a hash of 0 could not tell apart).
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3}))
    assert h.cgh("g", "m", names=["t"]).response.member_epoch == 2
    h.reload()
    response = h.cgh("g", "m", 2, owned={T: [0, 1, 2]}).response
    assert response.member_epoch == 3
    assert response.assignment is None  # same partitions
    assert h.cgh("g", "m", 3, owned={T: [0, 1, 2]}).response.member_epoch == 3


def test_group_tombstone_removes_the_group_on_replay() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3}))
    assert h.cgh("g", "m", names=["t"]).error is ErrorCode.NONE
    assert h.cgh("g", "m", -1).error is ErrorCode.NONE
    assert h.delete_groups("g")[0].error_code == 0
    assert h.replayed_shard().consumer_groups() == []


def test_topic_deleted_while_the_shard_was_away_is_noticed_after_reload() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3}))
    assert h.cgh("g", "m", names=["t"]).response.member_epoch == 2
    h.reload()
    h.topics = image({})
    response = h.cgh("g", "m", 2, owned={T: [0, 1, 2]}).response
    assert response.assignment is not None
    assert response.assignment.topic_partitions == []
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.group_epoch == 3
