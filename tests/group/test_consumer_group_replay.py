"""Consumer-group records: bytes round trips and the exact bytes of types 3, 6, 8 and 16 (Kafka 4.3's tagged
fields), and a shard loaded from the log gives the same groups, epochs, member states, assignments, static
members, metadata hash, assignment timestamp, assignment epochs and regex resolutions, with timers re-armed
and no epoch bump (checklist row 51)."""

from __future__ import annotations

import struct
import uuid

from regroup.group.config import GroupConfig
from regroup.group.consumer_group import MemberAssignment, MemberState, MemberSubscription
from regroup.group.consumer_group_manager import rebalance_timeout_key, session_timeout_key
from regroup.group.effects import CoordinatorRecord
from regroup.group.records import (
    DecodedConsumerGroupRecord,
    consumer_group_metadata_record,
    current_assignment_record,
    decode_record,
    member_subscription_record,
    regular_expression_record,
    regular_expression_tombstone,
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
        (regular_expression_tombstone("g", "x.*"), 16, "", None),
        (target_member_record("g", "m", frozenset({(T, 1)})), 7, "m", frozenset({(T, 1)})),
        (current_assignment_record("g", "m", assignment), 8, "m", assignment),
        (target_metadata_tombstone("g"), 6, "", None),
    ]
    for record, kind, member_id, value in cases:
        decoded = decode_record(record)
        assert (decoded.record_type, decoded.group_id, decoded.member_id, decoded.value) == (  # type: ignore[union-attr]
            kind,
            "g",
            member_id,
            value,
        )
    assert decode_record(consumer_group_metadata_record("g", 4, -5)) == DecodedConsumerGroupRecord(
        3, "g", "", 4, metadata_hash=-5
    )
    assert decode_record(target_metadata_record("g", 4, 99)) == DecodedConsumerGroupRecord(
        6, "g", "", 4, timestamp_ms=99
    )


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


def persisted_state(h: Harness) -> dict[str, tuple[object, ...]]:
    """:func:`consumer_hard_state` plus what Kafka 4.3's tagged fields and type 16 carry: the metadata hash,
    the assignment timestamp, every member's assignment epochs and the regex resolutions."""
    hard = consumer_hard_state(h.shard)
    return {
        g.group_id: (
            *hard[g.group_id],
            g.metadata_hash,
            g.assignment_timestamp_ms,
            {m.member_id: dict(m.assignment.assignment_epochs) for m in g.members.values()},
            dict(g.resolved_regexes),
        )
        for g in h.shard.consumer_groups()
    }


def test_reload_keeps_hash_timestamp_assignment_epochs_and_regexes() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3, "u": 2}))
    _busy_group(h)
    assert h.cgh("r", "x", regex="u|v").error is ErrorCode.NONE
    before = persisted_state(h)
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.metadata_hash != 0
    assert group.assignment_timestamp_ms == 1000
    # a kept partitions from epoch 2 while revoking: the epochs are not all max(member epoch, 0)
    assert set(group.members["a"].assignment.assignment_epochs.values()) == {2}
    h.advance(1000)
    h.reload()
    assert persisted_state(h) == before
    h.shard.check_invariants()


def test_reload_does_not_bump_the_group_epoch() -> None:
    # MetadataHash is persisted (Kafka 4.1+): the first heartbeat after a load finds the same hash.
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3}))
    assert h.cgh("g", "m", names=["t"]).response.member_epoch == 2
    assert h.cgh("g", "r", regex="t|x").response.member_epoch == 3
    assert h.cgh("g", "m", 2, owned={T: [0, 1, 2]}).response.member_epoch == 2  # revoking 2
    assert h.cgh("g", "m", 2, owned={T: [0, 1]}).response.member_epoch == 3
    assert h.cgh("g", "r", 3, owned={}).error is ErrorCode.NONE
    group = h.shard.consumer_group("g")
    assert group is not None
    # m kept 0 and 1 from epoch 2, r received 2 at epoch 3
    assert dict(group.members["m"].assignment.assignment_epochs) == {(T, 0): 2, (T, 1): 2}
    assert dict(group.members["r"].assignment.assignment_epochs) == {(T, 2): 3}
    epochs = (group.group_epoch, group.assignment_epoch)
    assigned = {
        m.member_id: (m.member_epoch, dict(m.assignment.assignment_epochs)) for m in group.members.values()
    }
    h.reload()
    since = len(h.log)
    response = h.cgh("g", "m", 3, owned={T: [0, 1]}).response
    assert response.member_epoch == 3
    assert response.assignment is None  # same partitions
    assert h.cgh("g", "r", 3, owned={T: [2]}).response.member_epoch == 3
    group = h.shard.consumer_group("g")
    assert group is not None
    assert (group.group_epoch, group.assignment_epoch) == epochs
    assert {
        m.member_id: (m.member_epoch, dict(m.assignment.assignment_epochs)) for m in group.members.values()
    } == assigned
    # the regex is re-resolved once after the load (the topic names it was resolved on are not persisted):
    # same topics, so a type-16 record and no epoch bump
    assert h.record_types(since) == [16]


def test_older_records_without_the_tagged_fields_read_as_kafka_defaults() -> None:
    # A ≤4.0 ConsumerGroupMetadata (no MetadataHash) and a ≤4.2 assignment (no AssignmentEpochs).
    metadata = CoordinatorRecord(i16(3) + s("g"), i16(0) + i32(4) + b"\x00")
    current = CoordinatorRecord(
        i16(8) + s("g") + s("m"),
        i16(0)
        + i32(5)
        + i32(4)
        + bytes([0])
        + uvarint(2)
        + T.bytes
        + uvarint(3)
        + i32(0)
        + i32(1)
        + b"\x00"
        + uvarint(1)
        + b"\x00",
    )
    decoded = decode_record(metadata)
    assert (decoded.value, decoded.metadata_hash) == (4, 0)
    value = decode_record(current).value
    assert isinstance(value, MemberAssignment)
    assert dict(value.assignment_epochs) == {(T, 0): 5, (T, 1): 5}


def test_regex_record_written_on_resolution_and_tombstoned_with_the_last_subscriber() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3, "u": 2}))
    assert h.cgh("g", "a", regex="t|u").error is ErrorCode.NONE
    # 5 (member), 16 (resolution), 3 (bump), then the target and the member's assignment
    assert h.record_types() == [5, 16, 3, 7, 6, 8]
    assert decode_record(h.log[1]) == DecodedConsumerGroupRecord(
        16, "g", "", ("t", "u"), timestamp_ms=1000, regex="t|u"
    )
    assert h.cgh("g", "b", regex="t|u").error is ErrorCode.NONE
    since = len(h.log)
    assert h.cgh("g", "a", -1).error is ErrorCode.NONE
    assert {16, -16}.isdisjoint(h.record_types(since))  # b still subscribes
    since = len(h.log)
    assert h.cgh("g", "b", names=["t"], regex="").error is ErrorCode.NONE  # b switches to names
    types = h.record_types(since)
    assert types[:3] == [5, -16, 3]
    replayed = h.replayed_shard().consumer_group("g")
    assert replayed is not None
    assert replayed.resolved_regexes == {}
    # the last member leaving: 8, 7, 5 tombstones, then the regex's, then the bumped epoch
    assert h.cgh("e", "x", regex="t").error is ErrorCode.NONE
    since = len(h.log)
    assert h.cgh("e", "x", -1).error is ErrorCode.NONE
    assert h.record_types(since) == [-8, -7, -5, -16, 3]


def test_group_deletion_tombstones_loaded_regexes_before_the_group_epoch() -> None:
    h = Harness(GroupConfig(consumer_assignment_interval_ms=0), now=1000, topics=image({"t": 3}))
    assert h.cgh("g", "x", names=["t"]).error is ErrorCode.NONE
    assert h.cgh("g", "x", -1).error is ErrorCode.NONE
    h.log.append(regular_expression_record("g", "orphan", ["t"], 7, 900))  # e.g. left by another writer
    h.reload()
    group = h.shard.consumer_group("g")
    assert group is not None
    assert group.resolved_regexes == {"orphan": frozenset({"t"})}
    since = len(h.log)
    assert h.delete_groups("g")[0].error_code == 0
    # CG createGroupTombstoneRecords: 8s, 7s, 6, 5s, 16s, 4 (≤4.0's partition metadata), 3
    assert h.record_types(since)[-4:] == [-6, -16, -4, -3]
    assert h.replayed_shard().consumer_groups() == []


# ------------------------------------------------------------------------------ record bytes (spec layout)
# Keys: int16 record type, then int16-length strings (not flexible). Values: int16 version 0, then the
# flexible struct: compact strings/arrays (unsigned varint length + 1), a tagged-field section at the end of
# every struct (varint count, then per field varint tag, varint size, data).


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def s(v: str) -> bytes:
    raw = v.encode()
    return i16(len(raw)) + raw


def cs(v: str) -> bytes:
    raw = v.encode()
    return uvarint(len(raw) + 1) + raw


def tagged(*fields: tuple[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(d)) + d for t, d in fields)


def test_group_metadata_record_bytes() -> None:
    record = consumer_group_metadata_record("g", 4, metadata_hash=0x0102030405060708)
    assert record.key == i16(3) + s("g")
    assert record.value == i16(0) + i32(4) + tagged((0, i64(0x0102030405060708)))
    # no hash (no subscribed topic exists): the tagged field is left out, as Kafka does for a default
    assert consumer_group_metadata_record("g", 4).value == i16(0) + i32(4) + tagged()


def test_member_subscription_record_bytes() -> None:
    # As Kafka 4.3.1 writes a consumer-protocol member: SubscribedTopicRegex "" (not null) when there is none,
    # and ClassicMemberMetadata as an explicit null (its spec default is an empty struct)
    sub = MemberSubscription(
        client_id="c", client_host="/h", subscribed_topic_names=("t",), rebalance_timeout_ms=5000
    )
    record = member_subscription_record("g", "m", sub)
    assert record.key == i16(5) + s("g") + s("m")
    assert record.value == (
        i16(0)
        + b"\x00"
        + b"\x00"
        + cs("c")
        + cs("/h")
        + uvarint(2)
        + cs("t")
        + cs("")
        + i32(5000)
        + b"\x00"
        + tagged((0, b"\x00"))  # ClassicMemberMetadata: an explicit null, as Kafka writes it
    )
    decoded = decode_record(record).value
    assert decoded == sub


def test_target_metadata_record_bytes() -> None:
    record = target_metadata_record("g", 5, 1_700_000_000_123)
    assert record.key == i16(6) + s("g")
    assert record.value == i16(0) + i32(5) + tagged((0, i64(1_700_000_000_123)))


def test_current_assignment_record_bytes() -> None:
    assignment = MemberAssignment(
        member_epoch=7,
        previous_member_epoch=6,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned=frozenset({(T, 0), (T, 1)}),
        pending_revocation=frozenset({(U, 2)}),
        assignment_epochs={(T, 0): 3, (T, 1): 7, (U, 2): 5},
    )
    record = current_assignment_record("g", "m", assignment)
    assert record.key == i16(8) + s("g") + s("m")

    def topic(tid: uuid.UUID, partitions: list[int], epochs: list[int]) -> bytes:
        ints = uvarint(len(partitions) + 1) + b"".join(i32(p) for p in partitions)
        epoch_list = uvarint(len(epochs) + 1) + b"".join(i32(e) for e in epochs)
        return tid.bytes + ints + tagged((0, epoch_list))

    assert record.value == (
        i16(0)
        + i32(7)
        + i32(6)
        + i8(1)
        + uvarint(2)
        + topic(T, [0, 1], [3, 7])
        + uvarint(2)
        + topic(U, [2], [5])
        + tagged()
    )
    decoded = decode_record(record).value
    assert isinstance(decoded, MemberAssignment)
    assert dict(decoded.assignment_epochs) == {(T, 0): 3, (T, 1): 7, (U, 2): 5}


def test_regular_expression_record_bytes() -> None:
    record = regular_expression_record("g", "t.*", ["tb", "ta"], 42, 1_700_000_000_000)
    # a Kafka 4.0+ coordinator key: the record type, then the key struct at version 0
    assert record.key == i16(16) + s("g") + s("t.*")
    assert record.value == (
        i16(0) + uvarint(3) + cs("ta") + cs("tb") + i64(42) + i64(1_700_000_000_000) + tagged()
    )
    assert decode_record(record) == DecodedConsumerGroupRecord(
        16, "g", "", ("ta", "tb"), timestamp_ms=1_700_000_000_000, regex="t.*", version=42
    )
    tombstone = regular_expression_tombstone("g", "t.*")
    assert (tombstone.key, tombstone.value) == (record.key, None)
    assert decode_record(tombstone) == DecodedConsumerGroupRecord(16, "g", "", None, regex="t.*")


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
