"""Committed offsets of KIP-848 consumer groups (docs/design/consumer-group-semantics.md §7, checklist rows
22 and 36–40; Kafka 4.3 behaviour): OffsetCommit validated by member epoch with KIP-1251's per-partition
assignment epochs, OffsetFetch v9 by member id and epoch, OffsetDelete refusing subscribed topics,
DeleteGroups tombstoning offsets, and expiration that spares subscribed topics.

Record types from :meth:`Harness.record_types` (tombstones negative): 1 offset commit, 3 group epoch,
6 target assignment epoch.
"""

from __future__ import annotations

import pytest

from regroup.group.config import GroupConfig
from regroup.group.consumer_group import MemberState
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse
from regroup.protocol.messages.offset_commit import OffsetCommitResponse

from .harness import Call, Harness, image, response_partitions, topic_id

T = topic_id("t")
IDS = {"t": T, "u": topic_id("u")}
CONFIG = GroupConfig(
    consumer_assignment_interval_ms=0,
    offsets_retention_ms=100_000,
    offsets_retention_check_interval_ms=10_000,
)


@pytest.fixture
def h() -> Harness:
    harness = Harness(CONFIG, now=1000, topics=image({"t": 3, "u": 2}))
    harness.apply(harness.shard.on_loaded(harness.now))
    return harness


def ok(call: Call[ConsumerGroupHeartbeatResponse]) -> ConsumerGroupHeartbeatResponse:
    assert call.error is ErrorCode.NONE, call.response
    return call.response


def errors(call: Call[OffsetCommitResponse]) -> set[ErrorCode]:
    return {ErrorCode(p.error_code) for t in call.response.topics for p in t.partitions}


def commit(
    h: Harness, offsets: dict[tuple[str, int], int], member_id: str = "", epoch: int = -1, version: int = 9
) -> set[ErrorCode]:
    return errors(
        h.commit("g", offsets, generation_id=epoch, member_id=member_id, version=version, topic_ids=IDS)
    )


def two_members(h: Harness) -> tuple[list[int], list[int]]:
    """a joins t (epoch 2, all three partitions), b joins (epoch 3); a revokes and both reconcile to 3.
    Returns the partitions of t that a kept (held since epoch 2) and those b got (at epoch 3)."""
    ok(h.cgh("g", "a", names=["t"]))
    ok(h.cgh("g", "b", names=["t"]))
    kept = response_partitions(ok(h.cgh("g", "a", 2, owned={T: [0, 1, 2]})))
    assert kept is not None
    assert ok(h.cgh("g", "a", 2, owned=kept)).member_epoch == 3
    b = response_partitions(ok(h.cgh("g", "b", 3, owned={})))
    assert b is not None
    group = h.shard.consumer_group("g")
    assert group is not None
    assert {m.member_epoch for m in group.members.values()} == {3}
    return kept[T], b[T]


# ------------------------------------------------------------------------------------------ OffsetCommit


def test_commit_below_v9_from_a_consumer_protocol_member_is_unsupported(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("t", 0): 5}, "a", 2, version=8) == {ErrorCode.UNSUPPORTED_VERSION}
    assert commit(h, {("t", 0): 5}, "a", 2, version=9) == {ErrorCode.NONE}
    assert h.fetched("g", "t", 0)[0] == 5


def test_commit_from_an_unknown_member_is_unknown_member_id(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    # the member check comes before the version check
    assert commit(h, {("t", 0): 5}, "zz", 2, version=8) == {ErrorCode.UNKNOWN_MEMBER_ID}


def test_commit_with_an_epoch_above_the_members_is_stale(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    before = len(h.log)
    assert commit(h, {("t", 0): 5}, "a", 3) == {ErrorCode.STALE_MEMBER_EPOCH}
    assert h.log[before:] == []


def test_older_epoch_commits_partitions_held_since_then_kip_1251(h: Harness) -> None:
    kept, moved = two_members(h)
    # a is at epoch 3 and has held `kept` since epoch 2: a commit at epoch 2 is still good
    assert commit(h, {("t", p): 7 for p in kept}, "a", 2) == {ErrorCode.NONE}
    assert h.fetched("g", "t", kept[0])[0] == 7
    # a no longer holds `moved`: one such partition fails the whole request
    both = {("t", kept[0]): 8, ("t", moved[0]): 8}
    assert commit(h, both, "a", 2) == {ErrorCode.STALE_MEMBER_EPOCH}
    assert h.fetched("g", "t", kept[0])[0] == 7
    # b got `moved` at epoch 3: a commit of it at epoch 2 is stale, at 3 fine
    assert commit(h, {("t", moved[0]): 9}, "b", 2) == {ErrorCode.STALE_MEMBER_EPOCH}
    assert commit(h, {("t", moved[0]): 9}, "b", 3) == {ErrorCode.NONE}


def test_a_member_revoking_may_commit_its_pending_partitions_at_the_older_epoch(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    ok(h.cgh("g", "b", names=["t"]))
    kept = response_partitions(ok(h.cgh("g", "a", 2, owned={T: [0, 1, 2]})))
    assert kept is not None
    group = h.shard.consumer_group("g")
    assert group is not None
    a = group.members["a"]
    assert a.state is MemberState.UNREVOKED_PARTITIONS
    (pending,) = (p for _, p in a.pending_revocation)
    # the usual last commit before giving a partition up
    assert commit(h, {("t", pending): 11}, "a", 2) == {ErrorCode.NONE}
    # at an epoch before the partition was assigned it is stale
    assert commit(h, {("t", pending): 12}, "a", 1) == {ErrorCode.STALE_MEMBER_EPOCH}


def test_commit_at_the_members_epoch_is_not_checked_per_partition(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("u", 0): 3}, "a", 2) == {ErrorCode.NONE}


def test_admin_commit_needs_an_empty_group(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("t", 0): 5}) == {ErrorCode.UNKNOWN_MEMBER_ID}
    ok(h.cgh("g", "a", -1))
    assert commit(h, {("t", 0): 5}) == {ErrorCode.NONE}
    assert h.fetched("g", "t", 0)[0] == 5
    # no classic "simple" group is created beside the consumer group
    assert h.shard.group("g") is None
    h.shard.check_invariants()


def test_commits_replay_into_the_consumer_group(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("t", 1): 4}, "a", 2) == {ErrorCode.NONE}
    shard = h.replayed_shard()
    assert shard.group("g") is None
    assert shard.consumer_group("g") is not None
    assert shard.offsets("g")[("t", 1)].offset == 4
    shard.check_invariants()


# ------------------------------------------------------------------------------------------ OffsetFetch


def test_fetch_v9_checks_member_id_and_exact_epoch(h: Harness) -> None:
    kept, _ = two_members(h)
    assert commit(h, {("t", kept[0]): 6}, "a", 3) == {ErrorCode.NONE}
    stale = h.fetch("g", {"t": [kept[0]]}, member_id="a", member_epoch=2)
    assert stale.error_code == ErrorCode.STALE_MEMBER_EPOCH
    assert stale.topics == []
    assert h.fetch("g", {"t": [kept[0]]}, member_id="zz", member_epoch=3).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    good = h.fetch("g", {"t": [kept[0]]}, member_id="a", member_epoch=3)
    assert good.error_code == ErrorCode.NONE
    assert good.topics[0].partitions[0].committed_offset == 6
    # no member id and a negative epoch: an admin fetch, unchecked; all topics too
    admin = h.fetch("g", None)
    assert admin.error_code == ErrorCode.NONE
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in admin.topics] == [("t", [6])]


# ------------------------------------------------------------------------------------------ OffsetDelete


def test_offset_delete_refuses_subscribed_topics_in_any_state(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("t", 0): 1, ("u", 0): 2}, "a", 2) == {ErrorCode.NONE}
    before = len(h.log)
    response = h.offset_delete("g", {"t": [0], "u": [0]}).response
    assert response.error_code == ErrorCode.NONE
    by_topic = {t.name: [ErrorCode(p.error_code) for p in t.partitions] for t in response.topics}
    assert by_topic == {"t": [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC], "u": [ErrorCode.NONE]}
    assert h.record_types(before) == [-1]
    assert h.fetched("g", "t", 0)[0] == 1
    assert h.fetched("g", "u", 0)[0] == -1


# ------------------------------------------------------------------------------------------ DeleteGroups


def test_delete_groups_tombstones_offsets_then_the_empty_group(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("t", 0): 1}, "a", 2) == {ErrorCode.NONE}
    assert [r.error_code for r in h.delete_groups("g")] == [ErrorCode.NON_EMPTY_GROUP]
    ok(h.cgh("g", "a", -1))
    before = len(h.log)
    assert [r.error_code for r in h.delete_groups("g")] == [ErrorCode.NONE]
    assert h.record_types(before) == [-1, -6, -4, -3]
    assert h.shard.consumer_group("g") is None
    assert h.shard.offsets("g") == {}
    assert h.replayed_shard().consumer_group("g") is None


# ------------------------------------------------------------------------------------------ expiration


def test_subscribed_topics_never_expire_others_do_from_their_commit(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"], rebalance_timeout_ms=30_000))
    assert commit(h, {("t", 0): 1, ("u", 0): 2}, "a", 2) == {ErrorCode.NONE}
    for _ in range(15):  # 150 s, heartbeating every 10 s: past the retention of 100 s
        h.advance(10_000)
        ok(h.cgh("g", "a", 2, owned={T: [0, 1, 2]}))
    assert h.fetched("g", "t", 0)[0] == 1
    assert h.fetched("g", "u", 0)[0] == -1
    assert h.shard.consumer_group("g") is not None


def test_an_empty_group_goes_with_its_last_expired_offset(h: Harness) -> None:
    ok(h.cgh("g", "a", names=["t"]))
    assert commit(h, {("t", 0): 1}, "a", 2) == {ErrorCode.NONE}
    committed_at = h.now
    ok(h.cgh("g", "a", -1))
    h.advance_to(committed_at + 99_999)
    assert h.fetched("g", "t", 0)[0] == 1
    before = len(h.log)
    h.advance_to(committed_at + 110_000)
    assert h.fetched("g", "t", 0)[0] == -1
    assert h.shard.consumer_group("g") is None
    assert h.record_types(before) == [-1, -6, -4, -3]
