"""OffsetCommit (§8.6), TxnOffsetCommit (§8.7), OffsetFetch (§8.8), OffsetDelete (§8.9) and retention (§10)
of docs/design/group-semantics.md."""

from __future__ import annotations

import uuid

import pytest

from regroup.group.config import GroupConfig
from regroup.group.records import DecodedGroupMetadata, DecodedOffsetCommit, StoredOffset, decode_record
from regroup.group.shard import GroupRequestContext
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

from .harness import Harness, subscription
from .states import empty, preparing, stable

S = GroupState


def errors(call) -> list[int]:  # type: ignore[no-untyped-def]
    return [p.error_code for t in call.response.topics for p in t.partitions]


# ------------------------------------------------------------------------------------- OffsetCommit


def test_commit_creates_simple_group(h: Harness) -> None:
    call = h.commit("g", {("t", 0): 10, ("t", 1): 11, ("u", 0): 12})
    assert errors(call) == [0, 0, 0]
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.EMPTY
    assert snap.protocol_type is None
    assert [(g.group_id, g.protocol_type, g.group_state) for g in h.shard.list_groups()] == [
        ("g", "", "Empty")
    ]
    assert h.fetched("g", "t", 1) == (11, -1, "")


def test_empty_group_id_is_legal_for_commit(h: Harness) -> None:
    assert errors(h.commit("", {("t", 0): 1})) == [0]
    assert h.fetched("", "t", 0)[0] == 1


@pytest.mark.parametrize(("version", "error"), [(1, 22), (8, 22), (9, 69)])
def test_commit_unknown_group_with_generation(h: Harness, version: int, error: int) -> None:
    call = h.commit("g", {("t", 0): 1}, generation_id=3, member_id="m", version=version)
    assert errors(call) == [error]
    assert h.shard.group("g") is None


def test_commit_generation_minus_one_on_empty_group_ignores_member(h: Harness) -> None:
    empty(h)
    call = h.commit("g", {("t", 0): 1}, member_id="ghost", instance_id="ghost")
    assert errors(call) == [0]


def test_commit_generation_minus_one_on_live_group(h: Harness) -> None:
    setup = stable(h)
    assert errors(h.commit("g", {("t", 0): 1})) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert errors(h.commit("g", {("t", 0): 1}, member_id=setup.members[0])) == [ErrorCode.ILLEGAL_GENERATION]
    assert errors(h.commit("g", {("t", 0): 1}, generation_id=setup.generation, member_id="x")) == [25]
    assert errors(h.commit("g", {("t", 0): 1}, generation_id=9, member_id=setup.members[0])) == [22]


def test_commit_metadata_too_large_is_per_partition() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=4))
    call = h.commit("g", {("t", 0): 1}, metadata="12345")
    assert errors(call) == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
    assert h.log == []  # nothing accepted, nothing written
    assert errors(h.commit("g", {("t", 0): 1}, metadata="1234")) == [0]
    assert errors(h.commit("g", {("t", 0): 1}, metadata=None)) == [0]
    assert h.fetched("g", "t", 0)[2] == ""
    # lengths are UTF-16 code units, as Java's String.length()
    assert errors(h.commit("g", {("t", 0): 1}, metadata="😀😀")) == [0]
    assert errors(h.commit("g", {("t", 0): 1}, metadata="😀😀a")) == [12]


def test_commit_mixed_partitions() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=1))
    call = h.commit("g", {("t", 0): 5, ("t", 1): 6, ("u", 0): 7}, metadata={("t", 1): "xx", ("u", 0): "x"})
    assert errors(call) == [0, 12, 0]
    assert sorted(h.shard.offsets("g")) == [("t", 0), ("u", 0)]
    assert len(h.log) == 2


def test_commit_stores_the_topic_id_in_an_offset_commit_value_v4(h: Harness) -> None:
    topic_id = uuid.uuid4()
    h.commit("g", {("t", 0): 5, ("u", 0): 6}, topic_ids={"t": topic_id})
    assert h.shard.offsets("g")[("t", 0)].topic_id == topic_id
    assert h.shard.offsets("g")[("u", 0)].topic_id.int == 0  # unknown to the broker: no tagged field
    decoded = [decode_record(r) for r in h.log]
    assert [(d.value.topic_id, d.value_version) for d in decoded if isinstance(d, DecodedOffsetCommit)] == [
        (topic_id, 4),
        (uuid.UUID(int=0), 4),
    ]
    assert h.replayed_shard().offsets("g") == h.shard.offsets("g")


def test_offsets_commit_value_version_3_writes_what_kafka_4_2_writes() -> None:
    h = Harness(config=GroupConfig(offsets_commit_value_version=3))
    h.commit("g", {("t", 0): 5}, topic_ids={"t": uuid.uuid4()})
    (record,) = h.log
    assert (record.value or b"")[:2] == b"\x00\x03"


def test_commit_values_and_timestamps(h: Harness) -> None:
    h.advance(1000)
    h.commit("g", {("t", 0): 7}, leader_epoch=4, metadata="m", version=9)
    assert h.shard.offsets("g")[("t", 0)] == StoredOffset(7, 4, "m", 1000, None)
    h.commit("g", {("t", 0): 8}, leader_epoch=4, version=5)  # no leader epoch before v6
    assert h.shard.offsets("g")[("t", 0)] == StoredOffset(8, None, "", 1000, None)
    h.commit("g", {("t", 0): 9}, version=1, commit_timestamp=555)
    assert h.shard.offsets("g")[("t", 0)].commit_timestamp_ms == 555
    h.commit("g", {("t", 0): 9}, version=1)
    assert h.shard.offsets("g")[("t", 0)].commit_timestamp_ms == 1000
    h.commit("g", {("t", 0): 10}, version=3, retention_time_ms=5000)
    assert h.shard.offsets("g")[("t", 0)] == StoredOffset(10, None, "", 1000, 6000)
    h.commit("g", {("t", 0): 11}, version=4, retention_time_ms=-1)
    assert h.shard.offsets("g")[("t", 0)].expire_timestamp_ms is None
    # no range check on offsets
    h.commit("g", {("t", 0): -42})
    assert h.fetched("g", "t", 0)[0] == -42


def test_commit_visible_only_after_append_and_failure_answers_every_partition() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=1))
    h.commit("g", {("t", 0): 1})
    h.fail_next_append(ErrorCode.REQUEST_TIMED_OUT)
    call = h.commit("g", {("t", 0): 2, ("t", 1): 3}, metadata={("t", 1): "xx"})
    assert errors(call) == [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT]
    h2 = Harness()
    h2.fail_next_append(ErrorCode.NOT_COORDINATOR)
    failed = h2.commit("g", {("t", 0): 2})
    assert errors(failed) == [ErrorCode.NOT_COORDINATOR]
    assert h2.shard.group("g") is None  # the simple group creation is rolled back too
    assert h2.fetched("g", "t", 0) == (-1, -1, "")


def test_offsets_not_visible_before_on_append(h: Harness) -> None:
    req = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequestTopic(
                name="t", partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=5)]
            )
        ],
    )
    result = h.shard.offset_commit(GroupRequestContext("c", "/h", 9, 1), req, {}, 0)
    assert len(result.records) == 1
    assert h.fetched("g", "t", 0) == (-1, -1, "")
    assert result.on_append is not None
    after = result.on_append(None)
    assert after.reply == result.reply
    assert h.fetched("g", "t", 0)[0] == 5


# ---------------------------------------------------------------------------------- TxnOffsetCommit


@pytest.mark.parametrize("version", range(5))
def test_txn_offset_commit_without_transaction_coordinator(h: Harness, version: int) -> None:
    call = h.txn_commit("g", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, version=version)
    assert errors(call) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * 3
    assert h.shard.group("g") is None
    assert h.log == []
    assert errors(h.txn_commit("", {("t", 0): 1}, version=version)) == [ErrorCode.INVALID_GROUP_ID]


# -------------------------------------------------------------------------------------- OffsetFetch


def test_fetch_unknown_group(h: Harness) -> None:
    result = h.fetch("nope", {"t": [0, 1]})
    assert result.error_code == 0
    assert [
        (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
        for p in result.topics[0].partitions
    ] == [(0, -1, -1, "", 0), (1, -1, -1, "", 0)]
    assert h.fetch("nope").topics == []


def test_fetch_all_topics_only_committed(h: Harness) -> None:
    h.commit("g", {("t", 0): 1, ("u", 3): 2}, leader_epoch=7, metadata="md")
    result = h.fetch("g")
    assert [
        (
            t.name,
            [
                (p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
                for p in t.partitions
            ],
        )
        for t in result.topics
    ] == [
        ("t", [(0, 1, 7, "md")]),
        ("u", [(3, 2, 7, "md")]),
    ]
    partial = h.fetch("g", {"t": [0, 1], "zz": [0]})
    assert [[p.committed_offset for p in t.partitions] for t in partial.topics] == [[1, -1], [-1]]
    assert h.fetch("g", {"t": [0]}, require_stable=True) == h.fetch("g", {"t": [0]})


# ------------------------------------------------------------------------------------- OffsetDelete


def test_offset_delete_errors(h: Harness) -> None:
    assert h.offset_delete("", {"t": [0]}).error is ErrorCode.INVALID_GROUP_ID
    assert h.offset_delete("nope", {"t": [0]}).error is ErrorCode.GROUP_ID_NOT_FOUND
    h.join("c", version=3, protocol_type="connect")
    assert h.offset_delete("c", {"t": [0]}).error is ErrorCode.NON_EMPTY_GROUP


def test_offset_delete_subscribed_topics_refused_in_live_consumer_group(h: Harness) -> None:
    setup = stable(h)
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, generation_id=setup.generation, member_id=setup.members[0])
    before = len(h.log)
    call = h.offset_delete("g", {"t": [0, 1], "u": [0, 1]})
    assert call.error is ErrorCode.NONE
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in call.response.topics
    ] == [
        ("t", [(0, 86), (1, 86)]),
        ("u", [(0, 0), (1, 0)]),
    ]
    assert len(h.log) == before + 1  # a tombstone only for the offset that existed
    assert decode_record(h.log[-1]).value is None  # type: ignore[union-attr]
    assert h.fetched("g", "u", 0)[0] == -1
    assert h.fetched("g", "t", 0)[0] == 1


def test_offset_delete_unparseable_subscription_counts_as_everything(h: Harness) -> None:
    h.form_group("g", 1, protocols=(("range", b"\xff\xff"),))
    call = h.offset_delete("g", {"anything": [0]})
    assert call.response.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


def test_offset_delete_empty_and_simple_groups(h: Harness) -> None:
    empty(h)
    h.commit("g", {("t", 0): 1})
    call = h.offset_delete("g", {"t": [0]})
    assert call.response.topics[0].partitions[0].error_code == 0
    assert h.shard.offsets("g") == {}
    h.commit("simple", {("t", 0): 1})
    assert h.offset_delete("simple", {"t": [0]}).response.topics[0].partitions[0].error_code == 0


def test_offset_delete_failure_keeps_offsets(h: Harness) -> None:
    h.commit("g", {("t", 0): 1})
    h.fail_next_append(ErrorCode.NOT_COORDINATOR)
    call = h.offset_delete("g", {"t": [0]})
    assert call.error is ErrorCode.NOT_COORDINATOR
    assert call.response.topics == []
    assert h.fetched("g", "t", 0)[0] == 1


def test_offset_delete_preparing_consumer_group_is_allowed(h: Harness) -> None:
    setup = preparing(h)
    call = h.offset_delete("g", {"t": [0], "other": [0]})
    assert [t.partitions[0].error_code for t in call.response.topics] == [86, 0]
    del setup


# ---------------------------------------------------------------------------------------- retention


RETENTION = GroupConfig(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=10_000)


@pytest.fixture
def r() -> Harness:
    harness = Harness(RETENTION)
    harness.apply(harness.shard.on_loaded(0))
    return harness


def test_empty_group_offsets_expire_retention_after_becoming_empty(r: Harness) -> None:
    ids, gen = r.form_group("g", 1, session_timeout_ms=600_000)
    r.commit("g", {("t", 0): 1}, generation_id=gen, member_id=ids[0])
    # long after the commit, the group is still Stable and subscribed to t: nothing expires
    for _ in range(30):
        r.advance(10_000)
        r.heartbeat("g", ids[0], gen)
    assert r.fetched("g", "t", 0)[0] == 1
    r.leave("g", ids[0])
    became_empty = r.now
    r.advance_to(became_empty + 99_999)
    assert r.fetched("g", "t", 0)[0] == 1
    r.advance_to(became_empty + 110_000)
    assert r.fetched("g", "t", 0)[0] == -1
    assert r.shard.group("g") is None  # every offset expired and the group is Empty: deleted


def test_stable_group_only_unsubscribed_topics_expire(r: Harness) -> None:
    ids, gen = r.form_group("g", 1, session_timeout_ms=600_000)
    r.commit("g", {("t", 0): 1, ("old", 0): 2}, generation_id=gen, member_id=ids[0])
    for _ in range(12):
        r.advance(10_000)
        r.heartbeat("g", ids[0], gen)
    assert r.fetched("g", "t", 0)[0] == 1
    assert r.fetched("g", "old", 0)[0] == -1
    assert r.shard.group("g") is not None


def test_explicit_expire_timestamp(r: Harness) -> None:
    r.commit("g", {("t", 0): 1}, version=2, retention_time_ms=15_000)
    r.advance_to(10_000)
    assert r.fetched("g", "t", 0)[0] == 1
    r.advance_to(20_000)
    assert r.fetched("g", "t", 0)[0] == -1


def test_simple_group_uses_commit_timestamp(r: Harness) -> None:
    r.advance_to(5000)
    r.commit("g", {("t", 0): 1})
    r.advance_to(100_000)
    assert r.fetched("g", "t", 0)[0] == 1
    r.advance_to(110_000)
    assert r.fetched("g", "t", 0)[0] == -1
    assert r.shard.group("g") is None


def test_empty_group_without_offsets_deleted_at_next_check(r: Harness) -> None:
    setup = empty(r)
    assert r.shard.group("g") is not None
    next_check = (r.now // 10_000 + 1) * 10_000
    r.advance_to(next_check)
    assert r.shard.group("g") is None
    tombstone = decode_record(r.log[-1])
    assert isinstance(tombstone, DecodedGroupMetadata)
    assert tombstone.value is None
    assert tombstone.group_id == "g"
    del setup


def test_rebalancing_groups_do_not_expire(r: Harness) -> None:
    ids, gen = r.form_group("g", 2, session_timeout_ms=600_000, rebalance_timeout_ms=600_000)
    r.commit("g", {("old", 0): 1}, generation_id=gen, member_id=ids[0])
    r.join("g", ids[0], session_timeout_ms=600_000, rebalance_timeout_ms=600_000)  # PreparingRebalance
    r.advance(200_000)
    assert r.shard.group("g").state is S.PREPARING_REBALANCE  # type: ignore[union-attr]
    assert r.fetched("g", "old", 0)[0] == 1
    r.join("g", ids[1], session_timeout_ms=600_000, rebalance_timeout_ms=600_000)  # CompletingRebalance
    r.advance(200_000)
    assert r.shard.group("g").state is S.COMPLETING_REBALANCE  # type: ignore[union-attr]
    assert r.fetched("g", "old", 0)[0] == 1


def test_non_consumer_stable_group_keeps_offsets(r: Harness) -> None:
    call = r.join("c", version=3, protocol_type="connect", session_timeout_ms=600_000)
    r.advance(3000)
    member, gen = call.response.member_id, call.response.generation_id
    r.sync("c", member, gen, {}, protocol_type="connect")
    r.commit("c", {("t", 0): 1}, generation_id=gen, member_id=member)
    for _ in range(20):
        r.advance(10_000)
        r.heartbeat("c", member, gen)
    assert r.fetched("c", "t", 0)[0] == 1


def test_expiration_tombstones_written_and_replayable(r: Harness) -> None:
    r.commit("a", {("t", 0): 1, ("t", 1): 2})
    r.commit("b", {("t", 0): 1})
    r.advance_to(150_000)
    tombstones = [decode_record(rec) for rec in r.log if rec.value is None]
    assert {(getattr(d, "topic", None), d.group_id) for d in tombstones} >= {("t", "a"), ("t", "b")}  # type: ignore[union-attr]
    assert r.replayed_shard().groups() == []


def test_expiration_failure_retries_next_pass(r: Harness) -> None:
    r.commit("g", {("t", 0): 1})
    r.advance_to(99_999)
    r.fail_next_append(ErrorCode.NOT_COORDINATOR)
    r.advance_to(100_000)
    assert r.fetched("g", "t", 0)[0] == 1
    r.advance_to(110_000)
    assert r.fetched("g", "t", 0)[0] == -1


def test_old_group_record_without_state_timestamp_uses_commit_time(r: Harness) -> None:
    from regroup.group.effects import CoordinatorRecord
    from regroup.group.records import group_metadata_key, offset_commit_record
    from regroup.protocol.records.group_metadata import GroupMetadataValue

    value = GroupMetadataValue(protocol_type="consumer", generation=3, protocol=None, leader=None, members=[])
    records = [
        CoordinatorRecord(group_metadata_key("g"), value.encode_versioned(1)),
        offset_commit_record("g", "t", 0, StoredOffset(5, None, "", 50_000)),
    ]
    h = Harness(RETENTION)
    h.shard = h.replayed_shard(records)
    h.apply(h.shard.on_loaded(0))
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.current_state_timestamp_ms is None
    assert snap.protocol_type == "consumer"
    h.advance_to(140_000)
    assert h.fetched("g", "t", 0)[0] == 5
    h.advance_to(150_000)
    assert h.fetched("g", "t", 0)[0] == -1
    del r


def test_subscribed_topics_track_generations(h: Harness) -> None:
    ids, gen = h.form_group("g", 1, protocols=(("range", subscription("a", "b", version=3)),))
    assert h.shard.group("g").subscribed_topics == frozenset({"a", "b"})  # type: ignore[union-attr]
    h.leave("g", ids[0])
    assert h.shard.group("g").subscribed_topics == frozenset()  # type: ignore[union-attr]
    del gen


def test_partition_deletion_removes_offsets_everywhere(h: Harness) -> None:
    h.commit("a", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    h.commit("b", {("t", 1): 4})
    before = len(h.log)
    h.apply(h.shard.on_partitions_deleted([("t", 1), ("t", 9), ("zz", 0)], h.now))
    assert sorted(h.shard.offsets("a")) == [("t", 0), ("u", 0)]
    assert h.shard.offsets("b") == {}
    assert len(h.log) == before + 2
    assert all(rec.value is None for rec in h.log[before:])
    h.fail_next_append()
    h.apply(h.shard.on_partitions_deleted([("t", 0)], h.now))
    assert ("t", 0) in h.shard.offsets("a")  # not durable, not applied
