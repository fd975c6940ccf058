"""``__consumer_offsets`` records (docs/design/group-semantics.md §9): the exact bytes Kafka writes, when they
are written, and loading every readable version."""

from __future__ import annotations

import itertools
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.group.classic_group import ClassicGroup, ClassicGroupMember
from regroup.group.effects import CoordinatorRecord
from regroup.group.records import (
    DecodedGroupMetadata,
    DecodedOffsetCommit,
    IgnoredRecord,
    OffsetCommitDecoder,
    OffsetCommitRecords,
    RecordError,
    StoredOffset,
    decode_offset_commit,
    decode_record,
    empty_group_metadata_record,
    group_metadata_record,
    group_metadata_tombstone,
    offset_commit_record,
    offset_commit_tombstone,
)
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode
from regroup.protocol.records.group_metadata import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue

from .harness import HOST, Harness, assignment, subscription

S = GroupState


# The layout of the spec, written out by hand: int16-length strings (-1 = null), int32-length bytes and
# arrays, big-endian integers.
def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s(v: str | None) -> bytes:
    if v is None:
        return i16(-1)
    raw = v.encode()
    return i16(len(raw)) + raw


def b(v: bytes) -> bytes:
    return i32(len(v)) + v


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return i16(1) + s(group) + s(topic) + i32(partition)


def group_key(group: str) -> bytes:
    return i16(2) + s(group)


def member_v3(
    member_id: str,
    instance: str | None,
    client_id: str,
    host: str,
    rebalance: int,
    session: int,
    sub: bytes,
    assign: bytes,
) -> bytes:
    return (
        s(member_id)
        + s(instance)
        + s(client_id)
        + s(host)
        + i32(rebalance)
        + i32(session)
        + b(sub)
        + b(assign)
    )


# -------------------------------------------------------------------------------------------- bytes


def test_offset_commit_record_v4_bytes() -> None:
    """Kafka 4.3: flexible v4, compact metadata string, the topic id in tagged field 0 when known."""
    topic_id = uuid.UUID("0b7e3c4a-1f2d-4e5f-8a9b-0c1d2e3f4a5b")
    record = offset_commit_record(
        "grp", "topic", 7, StoredOffset(123456789012, 5, "meta", 1700000000000, topic_id=topic_id)
    )
    assert record.key == offset_key("grp", "topic", 7)
    assert record.value == (
        i16(4)
        + i64(123456789012)
        + i32(5)
        + b"\x05meta"
        + i64(1700000000000)
        + b"\x01\x00\x10"
        + topic_id.bytes
    )
    no_topic_id = offset_commit_record("g", "t", 0, StoredOffset(1, None, "", 2))
    assert no_topic_id.value == i16(4) + i64(1) + i32(-1) + b"\x01" + i64(2) + b"\x00"
    decoded = decode_record(record)
    assert isinstance(decoded, DecodedOffsetCommit)
    assert decoded.value is not None
    assert decoded.value.topic_id == topic_id


def test_offset_commit_record_v3_bytes() -> None:
    """``offsets.commit.value.version=3`` (Kafka up to 4.2): no topic id."""
    offset = StoredOffset(123456789012, 5, "meta", 1700000000000, topic_id=uuid.uuid4())
    record = offset_commit_record("grp", "topic", 7, offset, 3)
    assert record.value == i16(3) + i64(123456789012) + i32(5) + s("meta") + i64(1700000000000)
    no_epoch = offset_commit_record("g", "t", 0, StoredOffset(1, None, "", 2), 3)
    assert no_epoch.value == i16(3) + i64(1) + i32(-1) + s("") + i64(2)


def test_offset_commit_record_v1_with_expire_timestamp() -> None:
    record = offset_commit_record("g", "t", 0, StoredOffset(9, None, "m", 1000, 6000))
    assert record.value == i16(1) + i64(9) + s("m") + i64(1000) + i64(6000)


_TOPIC_IDS = (uuid.UUID(int=0), uuid.UUID("6fa0b9a4-3b35-4a83-9b5e-1d1c8f0b2a77"))
_stored_offsets = st.builds(
    StoredOffset,
    offset=st.integers(-1, 2**63 - 1),
    leader_epoch=st.sampled_from([None, 0, 7]),
    metadata=st.sampled_from(["", "m", "\u00e9t\u00e9"]),
    commit_timestamp_ms=st.sampled_from([0, 1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_256]),
    expire_timestamp_ms=st.sampled_from([None, None, 1_700_000_060_000]),
    topic_id=st.sampled_from(_TOPIC_IDS),
)


@given(
    version=st.sampled_from([3, 4]),
    commits=st.lists(
        st.tuples(
            st.sampled_from(["g", "h"]), st.sampled_from(["t", "u"]), st.integers(0, 9), _stored_offsets
        ),
        max_size=12,
    ),
)
def test_commit_records_splice_the_same_bytes_as_the_codec(
    version: int, commits: list[tuple[str, str, int, StoredOffset]]
) -> None:
    # Runs of equal fields with different offsets (within a commit and across commits of any group) are
    # what the builder shortcuts; every value must still be what the generated codec writes for it.
    records = OffsetCommitRecords(version)
    for group_id, topic, partition, offset in commits:
        assert records.record(group_id, topic, partition, offset) == offset_commit_record(
            group_id, topic, partition, offset, version
        )
    # The same runs built a topic's offsets at a time, as a commit does.
    batched = OffsetCommitRecords(version)
    built: list[CoordinatorRecord] = []
    for (group_id, topic), run in itertools.groupby(commits, key=lambda c: (c[0], c[1])):
        batched.extend(built, group_id, topic, [(partition, offset) for _, _, partition, offset in run])
    assert built == [offset_commit_record(g, t, p, o, version) for g, t, p, o in commits]


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("expire", [None, 1_700_000_060_000])
def test_commit_records_of_the_next_milliseconds_splice_their_timestamp_as_the_codec_writes_it(
    version: int, expire: int | None
) -> None:
    records = OffsetCommitRecords(version)
    for stamp in (1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_255, 1_700_000_000_256, 0):
        for partition in range(3):
            offset = StoredOffset(10 + partition, 4, "meta", stamp, expire, _TOPIC_IDS[1])
            assert records.record("g", "t", partition, offset) == offset_commit_record(
                "g", "t", partition, offset, version
            )


def test_offset_tombstone_bytes() -> None:
    assert offset_commit_tombstone("g", "t", 3) == CoordinatorRecord(offset_key("g", "t", 3), None)
    assert group_metadata_tombstone("g") == CoordinatorRecord(group_key("g"), None)


def test_empty_group_record_bytes() -> None:
    record = empty_group_metadata_record("grp", 1234)
    assert record.key == group_key("grp")
    assert record.value == i16(3) + s("") + i32(0) + s(None) + s(None) + i64(1234) + i32(0)


def test_group_metadata_record_v3_bytes() -> None:
    group = ClassicGroup("grp", GroupState.PREPARING_REBALANCE, 0)
    for mid, iid in (("m1", None), ("m2", "inst")):
        group.add(
            ClassicGroupMember(
                member_id=mid,
                group_instance_id=iid,
                client_id="cid",
                client_host="/10.0.0.1",
                rebalance_timeout_ms=60000,
                session_timeout_ms=10000,
                protocol_type="consumer",
                protocols=(("range", b"R-" + mid.encode()), ("rr", b"X")),
            ),
        )
    group.init_next_generation(5555)
    record = group_metadata_record(group, {"m1": b"A1", "m2": b""})
    assert record.value == (
        i16(3)
        + s("consumer")
        + i32(1)
        + s("range")
        + s("m1")
        + i64(5555)
        + i32(2)
        + member_v3("m1", None, "cid", "/10.0.0.1", 60000, 10000, b"R-m1", b"A1")
        + member_v3("m2", "inst", "cid", "/10.0.0.1", 60000, 10000, b"R-m2", b"")
    )
    # and what the generated codec decodes from Kafka's layout is the same record
    value, version = GroupMetadataValue.decode_versioned(record.value or b"")
    assert version == 3
    assert value.members[1].group_instance_id == "inst"


# --------------------------------------------------------------------------------------------- when


def group_value(record: CoordinatorRecord) -> GroupMetadataValue:
    decoded = decode_record(record)
    assert isinstance(decoded, DecodedGroupMetadata)
    assert decoded.value is not None
    assert decoded.value_version == 3
    return decoded.value


def test_join_creating_group_writes_empty_record(h: Harness) -> None:
    h.advance(777)
    h.join("g")
    assert h.log == [empty_group_metadata_record("g", 777)]
    h.join("g")  # the group exists now: a second MEMBER_ID_REQUIRED writes nothing
    assert len(h.log) == 1


def test_no_record_at_join_completion_heartbeat_or_pending(h: Harness) -> None:
    call = h.join("g", version=3)
    h.advance(3000)
    assert call.done
    assert len(h.log) == 1
    h.heartbeat("g", call.response.member_id, call.response.generation_id)
    h.join("g")
    assert len(h.log) == 1


def test_leader_sync_record(h: Harness) -> None:
    a = h.join("g", version=3, client_id="ca")
    b_ = h.join("g", version=3, client_id="cb", session_timeout_ms=20_000, rebalance_timeout_ms=40_000)
    h.advance(6000)
    completing_since = h.now
    gen = a.response.generation_id
    h.advance(500)
    plan = {a.response.member_id: assignment({"t": [0]})}
    h.sync("g", a.response.member_id, gen, plan)
    value = group_value(h.log[-1])
    assert (value.protocol_type, value.generation, value.protocol, value.leader) == (
        "consumer",
        gen,
        "range",
        a.response.member_id,
    )
    assert value.current_state_timestamp == completing_since
    assert [
        (
            m.member_id,
            m.client_id,
            m.client_host,
            m.session_timeout,
            m.rebalance_timeout,
            m.subscription,
            m.assignment,
        )
        for m in value.members
    ] == [
        (a.response.member_id, "ca", HOST, 10_000, 30_000, subscription("t"), plan[a.response.member_id]),
        (b_.response.member_id, "cb", HOST, 20_000, 40_000, subscription("t"), b""),
    ]


def test_group_becoming_empty_record(h: Harness) -> None:
    ids, gen = h.form_group("g", 1)
    h.advance(100)
    h.leave("g", ids[0])
    value = group_value(h.log[-1])
    assert (value.protocol_type, value.generation, value.protocol, value.leader, value.members) == (
        "consumer",
        gen + 1,
        None,
        None,
        [],
    )
    assert value.current_state_timestamp == h.now


def test_static_replacement_record(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, static=True)
    call = h.join("g", instance_id="i1")
    value = group_value(h.log[-1])
    assert value.generation == gen
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in value.members] == [
        (ids[0], "i0", assignment({"t": [0]})),
        (call.response.member_id, "i1", assignment({"t": [1]})),
    ]


def test_commit_writes_one_record_per_accepted_partition(h: Harness) -> None:
    h.advance(42)
    h.commit("g", {("t", 0): 1, ("t", 1): 2}, metadata="x", leader_epoch=3)
    assert h.log == [
        offset_commit_record("g", "t", 0, StoredOffset(1, 3, "x", 42)),
        offset_commit_record("g", "t", 1, StoredOffset(2, 3, "x", 42)),
    ]


# ------------------------------------------------------------------------------------------ loading


@pytest.mark.parametrize("key_version", [0, 1])
@pytest.mark.parametrize("value_version", [0, 1, 2, 3, 4])
def test_replay_every_offset_version(key_version: int, value_version: int) -> None:
    key = OffsetCommitKey(group="g", topic="t", partition=2).encode_versioned(key_version)
    value = OffsetCommitValue(
        offset=99,
        leader_epoch=6 if value_version >= 3 else -1,
        metadata="md",
        commit_timestamp=1000,
        expire_timestamp=5000 if value_version == 1 else -1,
    ).encode_versioned(value_version)
    h = Harness()
    shard = h.replayed_shard([CoordinatorRecord(key, value)])
    assert shard.offsets("g") == {
        ("t", 2): StoredOffset(
            99, 6 if value_version >= 3 else None, "md", 1000, 5000 if value_version == 1 else None
        )
    }
    snap = shard.group("g")
    assert snap is not None
    assert snap.state is S.EMPTY
    assert snap.protocol_type is None
    shard.replay(CoordinatorRecord(key, None))
    assert shard.offsets("g") == {}
    assert shard.group("g") is not None  # an offset tombstone does not remove the group


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_replay_every_group_metadata_version(version: int) -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=7,
        protocol="range",
        leader="m1",
        current_state_timestamp=4242 if version >= 2 else -1,
        members=[
            MemberMetadata(
                member_id="m1",
                group_instance_id="i1" if version >= 3 else None,
                client_id="c",
                client_host="/h",
                rebalance_timeout=50_000 if version >= 1 else -1,
                session_timeout=11_000,
                subscription=subscription("a", "b"),
                assignment=b"as",
            )
        ],
    )
    record = CoordinatorRecord(
        GroupMetadataKey(group="g").encode_versioned(2), value.encode_versioned(version)
    )
    shard = Harness().replayed_shard([record])
    snap = shard.group("g")
    assert snap is not None
    assert (snap.state, snap.generation_id, snap.protocol_type, snap.protocol_name, snap.leader_id) == (
        S.STABLE,
        7,
        "consumer",
        "range",
        "m1",
    )
    assert snap.current_state_timestamp_ms == (4242 if version >= 2 else None)
    (member,) = snap.members
    assert member.group_instance_id == ("i1" if version >= 3 else None)
    assert member.rebalance_timeout_ms == (50_000 if version >= 1 else 11_000)
    assert member.protocols == (("range", subscription("a", "b")),)
    assert member.assignment == b"as"
    assert snap.subscribed_topics == frozenset({"a", "b"})


def test_replay_empty_group_and_tombstone() -> None:
    shard = Harness().replayed_shard([empty_group_metadata_record("g", 5)])
    snap = shard.group("g")
    assert snap is not None
    assert snap.state is S.EMPTY
    assert snap.protocol_type is None
    assert snap.current_state_timestamp_ms == 5
    shard.replay(group_metadata_tombstone("g"))
    assert shard.group("g") is None


def test_replay_rejects_unknown_and_malformed_records() -> None:
    shard = Harness().replayed_shard([])
    with pytest.raises(RecordError):
        shard.replay(CoordinatorRecord(i16(99) + b"x", b""))
    with pytest.raises(RecordError):
        shard.replay(CoordinatorRecord(group_key("g") + b"trailing", None))
    with pytest.raises(RecordError):
        shard.replay(CoordinatorRecord(group_key("g"), i16(9) + b"future"))
    with pytest.raises(RecordError):
        shard.replay(CoordinatorRecord(b"\x00", None))
    assert isinstance(decode_record(CoordinatorRecord(i16(4) + s("g"), None)), IgnoredRecord)
    shard.replay(CoordinatorRecord(i16(5) + s("g") + s("m"), None))  # a tombstone of an unknown group: no-op
    assert shard.groups() == []


def test_malformed_offset_commit_records_are_record_errors() -> None:
    """The offset commit records' load shortcut rejects what the generic decoder would."""
    shard = Harness().replayed_shard([])
    value = OffsetCommitValue(offset=5, metadata="", commit_timestamp=1).encode_versioned(3)
    for key, val in [
        (offset_key("g", "t", 0) + b"x", None),  # trailing key bytes
        (offset_key("g", "t", 0)[:-1], None),  # truncated key
        (offset_key("g", "t", 0), value + b"x"),  # trailing value bytes
        (offset_key("g", "t", 0), value[:-1]),  # truncated value
        (offset_key("g", "t", 0), i16(-1) + value[2:]),  # negative version
        (offset_key("g", "t", 0), i16(99) + value[2:]),  # unknown version
        (offset_key("g", "t", 0), b"\x00"),  # no version
        (i16(0) + s("g") + s("t") + b"\xff\xff", None),  # version-0 key cut short
        (i16(1) + b"\x00\x05\xff\xfe\xfd\xfc\xfb" + s("t") + i32(0), None),  # not UTF-8
    ]:
        with pytest.raises(RecordError):
            shard.replay(CoordinatorRecord(key, val))
        with pytest.raises(RecordError):
            decode_record(CoordinatorRecord(key, val))
    assert shard.offsets("g") == {}
    shard.replay(CoordinatorRecord(offset_key("g", "t", 0), value))
    assert shard.offsets("g")[("t", 0)].offset == 5


_records_then_mutations = st.lists(
    st.tuples(
        st.sampled_from(["g", "h"]),
        st.sampled_from(["t", "u"]),
        st.integers(-(2**31), 2**31 - 1),
        st.one_of(st.none(), _stored_offsets),
        st.sampled_from([0, 1, 2, 3, 4]),
        st.sampled_from(["none", "append", "truncate", "flip"]),
        st.booleans(),  # mutate the key (else the value)
        st.one_of(st.integers(0, 3), st.integers(0, 200)),  # where (the versions, often)
    ),
    max_size=30,
)


@given(_records_then_mutations)
def test_the_load_decoder_answers_as_the_full_decoder(
    records: list[tuple[str, str, int, StoredOffset | None, int, str, bool, int]],
) -> None:
    # Whatever came before, the decoder that remembers names and shared fields answers (or refuses) every
    # key and value exactly as a full decode does.
    decoder = OffsetCommitDecoder()
    for group, topic, partition, offset, version, mutation, in_key, at in records:
        record = (
            offset_commit_tombstone(group, topic, partition)
            if offset is None
            else offset_commit_record(group, topic, partition, offset, version)
        )
        key, value = record.key, record.value
        target = key if in_key or value is None else value
        i = at % len(target)
        if mutation == "append":
            target = target + bytes([at % 256])
        elif mutation == "truncate":
            target = target[:i]
        elif mutation == "flip":
            target = target[:i] + bytes([target[i] ^ (1 + at % 255)]) + target[i + 1 :]
        if in_key or value is None:
            key = target
        else:
            value = target
        try:
            expected = decode_offset_commit(key, value)
        except RecordError:
            with pytest.raises(RecordError):
                decoder.decode(key, value)
        else:
            assert decoder.decode(key, value) == expected


def test_the_load_decoder_reads_a_known_value_of_another_version_in_full() -> None:
    decoder = OffsetCommitDecoder()
    record = offset_commit_record("g", "t", 0, StoredOffset(5, None, "", 1))
    assert decoder.decode(record.key, record.value) == decode_offset_commit(record.key, record.value)
    assert record.value is not None
    for version in (-1, 0, 2, 99):
        value = i16(version) + record.value[2:]
        with pytest.raises(RecordError):
            decoder.decode(record.key, value)


def test_decode_tombstones() -> None:
    assert decode_record(offset_commit_tombstone("g", "t", 1)) == DecodedOffsetCommit("g", "t", 1, None, None)
    assert decode_record(group_metadata_tombstone("g")) == DecodedGroupMetadata("g", None, None)


def test_load_arms_sessions_and_answers_nothing(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, session_timeout_ms=15_000)
    h.advance(1000)
    h.reload()
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.STABLE
    assert snap.generation_id == gen
    assert {k.member_id: d for k, (d, _) in h.timers.items() if k.member_id} == dict.fromkeys(
        ids, h.now + 15000
    )
    assert h.heartbeat("g", ids[1], gen).error is ErrorCode.NONE
    assert h.sync("g", ids[1], gen).response.assignment == assignment({"t": [1]})


def test_unload_answers_parked_requests_not_coordinator(h: Harness) -> None:
    ids, gen = h.form_group("g", 3)
    parked_join = h.join("g", ids[0])
    h2 = Harness()
    ids2, _ = h2.form_group("g", 2)
    h2.join("g", ids2[0])
    h2.join("g", ids2[1])
    parked_sync = h2.sync("g", ids2[1], 2)
    h.apply(h.shard.on_unloaded())
    h2.apply(h2.shard.on_unloaded())
    assert parked_join.error is ErrorCode.NOT_COORDINATOR
    assert parked_join.response.member_id == ids[0]
    assert parked_sync.error is ErrorCode.NOT_COORDINATOR
    assert h.timers == {}
    assert h2.timers == {}
    assert h.shard.group("g").state is S.DEAD  # type: ignore[union-attr]
    del gen


def test_reload_after_rebalance_comes_back_at_last_persisted_generation(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    h.join("g", ids[0])
    h.join("g", ids[1])  # generation gen+1, CompletingRebalance, not persisted
    h.reload()
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.STABLE
    assert snap.generation_id == gen
