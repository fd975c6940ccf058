"""Online migration between classic and consumer groups (§9 of docs/design/consumer-group-semantics.md,
checklist rows 44–50): upgrade on a ConsumerGroupHeartbeat, classic members inside a consumer group, downgrade
when the last consumer-protocol member leaves; the records written and a replay of them."""

from __future__ import annotations

from dataclasses import replace

from regroup.group.config import GroupConfig
from regroup.group.consumer_group import MemberState
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)

from .harness import Harness, assigned_partitions, consumer_hard_state, image, subscription, topic_id

CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, consumer_assignment_interval_ms=0)
T = topic_id("t")


def _harness(**overrides: object) -> Harness:
    return Harness(replace(CONFIG, **overrides), now=1000, topics=image({"t": 3}))  # type: ignore[arg-type]


def _owned_subscription(owned: list[int]) -> bytes:
    return ConsumerProtocolSubscription(
        topics=["t"],
        owned_partitions=[ConsumerProtocolSubscriptionTopicPartition(topic="t", partitions=owned)],
    ).encode_versioned(1)


def _upgraded(h: Harness) -> tuple[list[str], int]:
    """A classic group of two members (t-0, t-1) upgraded by consumer-protocol member "c"."""
    ids, generation = h.form_group("g", 2)
    call = h.cgh("g", "c", names=["t"])
    assert call.error is ErrorCode.NONE, call.response
    return ids, generation


def test_upgrade_converts_the_classic_group_and_answers_parked_joins() -> None:
    h = _harness()
    ids, generation = h.form_group("g", 2)
    parked = h.join("g", ids[0])  # a rebalance: the join waits for the other member
    assert not parked.done
    since = len(h.log)
    call = h.cgh("g", "c", names=["t"])
    assert call.error is ErrorCode.NONE
    assert parked.error is ErrorCode.REBALANCE_IN_PROGRESS
    # GroupMetadata tombstone, then the converted group (5…, 3, 7…, 6, 8…), then the joiner's own records.
    assert h.record_types(since)[:9] == [-2, 5, 5, 3, 7, 7, 6, 8, 8]
    assert h.record_types(since)[9:12] == [5, 3, 7]
    assert h.shard.group("g") is None
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.group_epoch == generation + 1
    assert call.response.member_epoch == generation + 1
    for i, member_id in enumerate(ids):
        member = group.members[member_id]
        assert member.uses_classic_protocol
        assert member.member_epoch == generation
        assert member.state is MemberState.STABLE
        assert member.assigned == {(T, i)}
    h.shard.check_invariants()
    # A replay of the records gives the same group (classic metadata included) and no classic group.
    replayed = h.replayed_shard()
    assert consumer_hard_state(replayed) == consumer_hard_state(h.shard)
    assert replayed.group("g") is None


def test_upgrade_refused_when_disabled_or_not_convertible() -> None:
    for policy in ("downgrade", "disabled"):
        h = _harness(consumer_migration_policy=policy)
        h.form_group("g", 1)
        assert h.cgh("g", "c", names=["t"]).error is ErrorCode.GROUP_ID_NOT_FOUND
        assert h.shard.group("g") is not None
    # a custom assignor's user data in an assignment
    h = _harness()
    ids, _ = h.form_group("g", 1)
    h.shard._groups.group("g").members[ids[0]].assignment = ConsumerProtocolAssignment(  # type: ignore[attr-defined]
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition(topic="t", partitions=[0])],
        user_data=b"x",
    ).encode_versioned(0)
    assert h.cgh("g", "c", names=["t"]).error is ErrorCode.GROUP_ID_NOT_FOUND
    # not the consumer protocol type
    h = _harness()
    join = h.join("other", protocol_type="connect", protocols=(("p", b"x"),))
    join = h.join("other", join.response.member_id, protocol_type="connect", protocols=(("p", b"x"),))
    h.advance(1)
    assert join.error is ErrorCode.NONE
    assert h.cgh("other", "c", names=["t"]).error is ErrorCode.GROUP_ID_NOT_FOUND
    # over group.consumer.max.size
    h = _harness(consumer_max_size=1)
    h.form_group("g", 2)
    assert h.cgh("g", "c", names=["t"]).error is ErrorCode.GROUP_ID_NOT_FOUND


def test_classic_members_rejoin_sync_and_heartbeat_in_a_consumer_group() -> None:
    h = _harness()
    ids, generation = _upgraded(h)
    epoch = generation + 1
    # behind the target: heartbeat says rejoin (row 48), and a join timer watches it
    assert h.heartbeat("g", ids[0], generation).error is ErrorCode.REBALANCE_IN_PROGRESS
    # a cooperative rejoin reporting what it owns: partitions to revoke keep it at its epoch (UNREVOKED)
    join = h.join("g", ids[0], protocols=(("range", _owned_subscription([0])),))
    assert join.error is ErrorCode.NONE
    member = h.shard.consumer_group("g").members[ids[0]]  # type: ignore[union-attr]
    target = h.shard.consumer_group("g").targets[ids[0]]  # type: ignore[union-attr]
    assert join.response.generation_id == member.member_epoch
    assert join.response.leader == ""
    assert join.response.protocol_name == "range"
    # wrong generation → ILLEGAL_GENERATION; right one → the partitions, ConsumerProtocol-encoded (row 47)
    bad = h.sync("g", ids[0], join.response.generation_id + 5, protocol_name="range")
    assert bad.error is ErrorCode.ILLEGAL_GENERATION
    sync = h.sync("g", ids[0], join.response.generation_id, protocol_name="range")
    assert sync.error is ErrorCode.NONE
    assert assigned_partitions(sync.response.assignment) == {("t", p) for _, p in member.assigned}
    if (T, 0) not in target:
        assert member.state is MemberState.UNREVOKED_PARTITIONS
        assert h.heartbeat("g", ids[0], member.member_epoch).error is ErrorCode.REBALANCE_IN_PROGRESS
        join = h.join("g", ids[0], protocols=(("range", _owned_subscription([])),))
        assert join.error is ErrorCode.NONE
    assert join.response.generation_id == epoch
    h.shard.check_invariants()
    # a new dynamic classic member (JoinGroup v4+) first gets its member id (row 46)
    first = h.join("g", protocols=(("range", subscription("t")),))
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    second = h.join("g", first.response.member_id, protocols=(("range", subscription("t")),))
    assert second.error is ErrorCode.NONE
    group = h.shard.consumer_group("g")
    assert group is not None
    assert second.response.generation_id == group.members[first.response.member_id].member_epoch
    assert group.group_epoch == epoch + 1
    # unsupported protocols → INCONSISTENT_GROUP_PROTOCOL
    other = h.join("g", "x", protocols=(("roundrobin", subscription("t")),))
    assert other.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    h.shard.check_invariants()
    replayed = h.replayed_shard()
    assert consumer_hard_state(replayed) == consumer_hard_state(h.shard)


def test_a_classic_member_that_does_not_rejoin_is_fenced_by_its_join_timer() -> None:
    h = _harness()
    ids, generation = _upgraded(h)
    assert h.heartbeat("g", ids[1], generation).error is ErrorCode.REBALANCE_IN_PROGRESS
    h.advance(31_000)  # rebalance timeout 30 s
    group = h.shard.consumer_group("g")
    assert group is None or ids[1] not in group.members


def test_last_consumer_member_leaving_downgrades_to_a_classic_group() -> None:
    h = _harness()
    ids, _ = _upgraded(h)
    cg = h.shard.consumer_group("g")
    assert cg is not None
    epoch = cg.group_epoch
    targets = {m: {("t", p) for _, p in cg.targets.get(m, frozenset())} for m in ids}
    since = len(h.log)
    assert h.cgh("g", "c", -1).error is ErrorCode.NONE
    types = h.record_types(since)
    assert types[-1] == 2  # the GroupMetadata record comes last, after the consumer tombstones
    assert set(types[:-1]) <= {-8, -7, -6, -5, -3, -16, -4}
    assert h.shard.consumer_group("g") is None
    classic = h.shard.group("g")
    assert classic is not None
    assert classic.generation_id == epoch
    assert classic.state is GroupState.PREPARING_REBALANCE
    for m in classic.members:
        assert assigned_partitions(m.assignment) == targets[m.member_id]
    # the log gives the same classic group (Stable, as the record says) and no consumer group
    replayed = h.replayed_shard()
    assert replayed.consumer_group("g") is None
    loaded = replayed.group("g")
    assert loaded is not None
    assert loaded.generation_id == epoch
    assert {m.member_id for m in loaded.members} == set(ids)
    # the classic members rejoin and complete a classic rebalance
    assert h.heartbeat("g", ids[0], epoch).error is ErrorCode.REBALANCE_IN_PROGRESS
    joins = [h.join("g", m) for m in ids]
    assert all(j.done and j.error is ErrorCode.NONE for j in joins)
    assert joins[0].response.generation_id == epoch + 1


def test_downgrade_disabled_keeps_the_consumer_group() -> None:
    h = _harness(consumer_migration_policy="upgrade")
    ids, _ = _upgraded(h)
    assert h.cgh("g", "c", -1).error is ErrorCode.NONE
    group = h.shard.consumer_group("g")
    assert group is not None
    assert set(group.members) == set(ids)


def test_classic_leave_of_all_members_and_empty_consumer_group_gives_way_to_classic_join() -> None:
    h = _harness()
    ids, _ = _upgraded(h)
    leave = h.leave("g", *ids)
    assert [m.error_code for m in leave.response.members] == [0, 0]
    group = h.shard.consumer_group("g")
    assert group is not None
    assert set(group.members) == {"c"}
    assert h.cgh("g", "c", -1).error is ErrorCode.NONE  # last member: the group is Empty
    join = h.join("g", version=3)
    h.advance(1)
    assert join.error is ErrorCode.NONE
    assert h.shard.consumer_group("g") is None
    assert h.shard.group("g") is not None
