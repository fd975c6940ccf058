"""``__consumer_offsets`` records of classic groups: building them (byte-identical to Kafka's) and reading
them back on load.

Keys are an int16 record type followed by the key struct: type 1 (0 also readable) for offset commits,
type 2 for group metadata. Values are an int16 version followed by the value struct; a ``None`` value is a
tombstone. Written versions follow Kafka 4.3: GroupMetadataValue v3; OffsetCommitValue v4 (flexible, the
committed topic's id in tagged field 0 when the topic is known), or v1 when the commit carries an explicit
expire timestamp. ``offsets.commit.value.version=3`` writes v3 instead, as Kafka up to 4.2 does, for tools
that read ``__consumer_offsets`` themselves and skip v4 (v3 has no topic id). Every readable version is
accepted on load (offset values v0–v4, group metadata values v0–v4).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from regroup.group.classic_group import ClassicGroup, ClassicGroupMember
from regroup.group.effects import CoordinatorRecord
from regroup.group.state import GroupState
from regroup.protocol.primitives import I16, ZERO_UUID, DecodeError, Uuid
from regroup.protocol.records.group_metadata import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue

__all__ = [
    "GROUP_METADATA_RECORD_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_RECORD_TYPE",
    "OFFSET_COMMIT_VALUE_VERSIONS",
    "DecodedGroupMetadata",
    "DecodedOffsetCommit",
    "IgnoredRecord",
    "OffsetCommitRecords",
    "RecordError",
    "StoredOffset",
    "decode_record",
    "empty_group_metadata_record",
    "group_from_value",
    "group_metadata_key",
    "group_metadata_record",
    "group_metadata_tombstone",
    "offset_commit_key",
    "offset_commit_record",
    "offset_commit_tombstone",
    "offset_commit_value_version",
]

OFFSET_COMMIT_RECORD_TYPE = 1
GROUP_METADATA_RECORD_TYPE = 2
GROUP_METADATA_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSIONS = (3, 4)
"""The versions ``offsets.commit.value.version`` may choose for commits without an expire timestamp."""
_OFFSET_COMMIT_VALUE_VERSION = 4
_OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
_LAST_KNOWN_RECORD_TYPE = 15  # KIP-848 consumer-group and KIP-932 share-group records: 3..15


class RecordError(ValueError):
    """A record that cannot be loaded (unknown type, malformed key or value)."""


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """A committed offset as the coordinator stores it (Kafka's coordinator-side ``OffsetAndMetadata``; the
    client's ``OffsetAndMetadata`` is :class:`regroup.client.types.OffsetAndMetadata`)."""

    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None
    topic_id: Uuid = ZERO_UUID
    """The committed topic's id (Kafka 4.3 stores it from the commit); zero when unknown."""


# ---------------------------------------------------------------------------------------------- builders


# Every commit of a partition writes the same key again: encoding it once per (group, topic, partition)
# saves most of a commit record's building cost. Bounded, so group churn cannot grow it without end.
@functools.lru_cache(maxsize=1 << 16)
def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return OffsetCommitKey(group=group_id, topic=topic, partition=partition).encode_versioned(
        OFFSET_COMMIT_RECORD_TYPE
    )


def offset_commit_value_version(offset: StoredOffset, preferred: int = _OFFSET_COMMIT_VALUE_VERSION) -> int:
    return _OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if offset.expire_timestamp_ms is not None else preferred


def offset_commit_record(
    group_id: str,
    topic: str,
    partition: int,
    offset: StoredOffset,
    value_version: int = _OFFSET_COMMIT_VALUE_VERSION,
) -> CoordinatorRecord:
    version = offset_commit_value_version(offset, value_version)
    value = OffsetCommitValue(
        offset=offset.offset,
        # v1 has no leader epoch: Kafka drops it (the field is ignorable)
        leader_epoch=-1 if version == 1 or offset.leader_epoch is None else offset.leader_epoch,
        metadata=offset.metadata,
        commit_timestamp=offset.commit_timestamp_ms,
        expire_timestamp=-1 if offset.expire_timestamp_ms is None else offset.expire_timestamp_ms,
        topic_id=offset.topic_id,
    )
    return CoordinatorRecord(offset_commit_key(group_id, topic, partition), value.encode_versioned(version))


_OFFSET = struct.Struct(">q")


class OffsetCommitRecords:
    """Builds the records of the partitions of one commit, byte-identical to :func:`offset_commit_record`.

    Every OffsetCommitValue version starts with the committed offset (int64) right after its int16 version,
    and the partitions of one commit nearly always share every other field (leader epoch, metadata,
    timestamps, topic id). So the generated codec encodes the first value of each run of equal fields, and
    the next ones splice their offset into its bytes — most of a commit's record-building cost otherwise.
    """

    __slots__ = ("_group_id", "_head", "_shared", "_tail", "_version")

    def __init__(self, group_id: str, value_version: int = _OFFSET_COMMIT_VALUE_VERSION) -> None:
        self._group_id = group_id
        self._version = value_version
        self._shared: tuple[object, ...] | None = None
        self._head = b""
        self._tail = b""

    def record(self, topic: str, partition: int, offset: StoredOffset) -> CoordinatorRecord:
        key = offset_commit_key(self._group_id, topic, partition)
        shared = (
            offset.leader_epoch,
            offset.metadata,
            offset.commit_timestamp_ms,
            offset.expire_timestamp_ms,
            offset.topic_id,
        )
        if shared == self._shared:
            return CoordinatorRecord(key, self._head + _OFFSET.pack(offset.offset) + self._tail)
        record = offset_commit_record(self._group_id, topic, partition, offset, self._version)
        value = record.value
        assert value is not None
        self._shared, self._head, self._tail = shared, value[:2], value[10:]
        return record


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(offset_commit_key(group_id, topic, partition), None)


def group_metadata_key(group_id: str) -> bytes:
    return GroupMetadataKey(group=group_id).encode_versioned(GROUP_METADATA_RECORD_TYPE)


def group_metadata_record(group: ClassicGroup, assignment: Mapping[str, bytes]) -> CoordinatorRecord:
    """A full snapshot of ``group`` with each member's subscription = its metadata for the selected
    protocol and the given assignment (Kafka's ``newGroupMetadataRecord``)."""
    members: list[MemberMetadata] = []
    for member in group.members.values():
        if group.protocol_name is None:
            raise ValueError(f"group {group.group_id} has members but no selected protocol")
        members.append(
            MemberMetadata(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout=member.rebalance_timeout_ms,
                session_timeout=member.session_timeout_ms,
                subscription=member.metadata(group.protocol_name),
                assignment=assignment[member.member_id],
            )
        )
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=(
            -1 if group.current_state_timestamp_ms is None else group.current_state_timestamp_ms
        ),
        members=members,
    )
    return CoordinatorRecord(
        group_metadata_key(group.group_id), value.encode_versioned(GROUP_METADATA_VALUE_VERSION)
    )


def empty_group_metadata_record(group_id: str, current_state_timestamp_ms: int | None) -> CoordinatorRecord:
    """What a JoinGroup that creates a group writes: generation 0, no protocol type, no members."""
    value = GroupMetadataValue(
        protocol_type="",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=-1 if current_state_timestamp_ms is None else current_state_timestamp_ms,
        members=[],
    )
    return CoordinatorRecord(
        group_metadata_key(group_id), value.encode_versioned(GROUP_METADATA_VALUE_VERSION)
    )


def group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(group_metadata_key(group_id), None)


# ---------------------------------------------------------------------------------------------- loading


@dataclass(frozen=True, slots=True)
class DecodedOffsetCommit:
    group_id: str
    topic: str
    partition: int
    value: StoredOffset | None  # None: tombstone
    value_version: int | None


@dataclass(frozen=True, slots=True)
class DecodedGroupMetadata:
    group_id: str
    value: GroupMetadataValue | None  # None: tombstone
    value_version: int | None


@dataclass(frozen=True, slots=True)
class IgnoredRecord:
    """A record of a group type regroup does not implement (KIP-848 consumer groups, share groups)."""

    record_type: int


DecodedRecord = DecodedOffsetCommit | DecodedGroupMetadata | IgnoredRecord


def decode_record(record: CoordinatorRecord) -> DecodedRecord:
    key = record.key
    if len(key) < 2:
        raise RecordError("record key without a type")
    (record_type,) = I16.unpack_from(key, 0)
    try:
        if record_type in (0, OFFSET_COMMIT_RECORD_TYPE):
            okey, end = OffsetCommitKey.read(key, 2, record_type)
            _no_trailing(key, end)
            if record.value is None:
                return DecodedOffsetCommit(okey.group, okey.topic, okey.partition, None, None)
            ovalue, version = OffsetCommitValue.decode_versioned(record.value)
            return DecodedOffsetCommit(
                okey.group,
                okey.topic,
                okey.partition,
                StoredOffset(
                    offset=ovalue.offset,
                    leader_epoch=None if ovalue.leader_epoch == -1 else ovalue.leader_epoch,
                    metadata=ovalue.metadata,
                    commit_timestamp_ms=ovalue.commit_timestamp,
                    expire_timestamp_ms=None if ovalue.expire_timestamp == -1 else ovalue.expire_timestamp,
                    topic_id=ovalue.topic_id,
                ),
                version,
            )
        if record_type == GROUP_METADATA_RECORD_TYPE:
            gkey, end = GroupMetadataKey.read(key, 2, record_type)
            _no_trailing(key, end)
            if record.value is None:
                return DecodedGroupMetadata(gkey.group, None, None)
            gvalue, version = GroupMetadataValue.decode_versioned(record.value)
            return DecodedGroupMetadata(gkey.group, gvalue, version)
    except DecodeError as exc:
        raise RecordError(f"malformed record of type {record_type}: {exc}") from exc
    if 0 <= record_type <= _LAST_KNOWN_RECORD_TYPE:
        return IgnoredRecord(record_type)
    raise RecordError(f"unknown record type {record_type}")


def _no_trailing(data: bytes, end: int) -> None:
    if end != len(data):
        raise DecodeError(f"{len(data) - end} trailing bytes after the record key")


def group_from_value(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    """Rebuild a group from its GroupMetadata value: Stable with members, else Empty; each member's
    protocol list is the selected protocol with its stored subscription; a rebalance timeout of −1 (v0)
    means the session timeout; a state timestamp of −1 (v0–v1) means unknown."""
    if value.members and value.protocol is None:
        raise RecordError(f"group {group_id}: members without a selected protocol")
    group = ClassicGroup(
        group_id,
        GroupState.STABLE if value.members else GroupState.EMPTY,
        None if value.current_state_timestamp == -1 else value.current_state_timestamp,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
    )
    for m in value.members:
        assert value.protocol is not None
        group.add(
            ClassicGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=((value.protocol, m.subscription),),
                assignment=m.assignment,
            )
        )
    group.subscribed_topics = group.compute_subscribed_topics()
    return group
