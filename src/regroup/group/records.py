"""``__consumer_offsets`` records of classic and consumer groups: building them (byte-identical to Kafka's)
and reading them back on load.

Keys are an int16 record type followed by the key struct: type 1 (0 also readable) for offset commits,
type 2 for group metadata; types 3, 5, 6, 7, 8 and 16 for KIP-848 consumer groups (group epoch, member
subscription, target assignment epoch, member target, member current assignment, resolved regular
expression). Values are an int16
version followed by the value struct; a ``None`` value is a tombstone. Written versions follow Kafka 4.3:
GroupMetadataValue v3; OffsetCommitValue v4 (flexible, the committed topic's id in tagged field 0 when the
topic is known), or v1 when the commit carries an explicit expire timestamp.
``offsets.commit.value.version=3`` writes v3 instead, as Kafka up to 4.2 does, for tools that read
``__consumer_offsets`` themselves and skip v4 (v3 has no topic id). Every readable version is accepted on
load (offset values v0–v4, group metadata values v0–v4).

Consumer-group records are written at value version 0 with Kafka 4.3's tagged fields (codecs generated
from the 4.3 specs in ``tools/codegen/spec-overlay/``): ConsumerGroupMetadata.MetadataHash (4.1+),
ConsumerGroupTargetAssignmentMetadata.AssignmentTimestamp and
ConsumerGroupCurrentMemberAssignment.AssignmentEpochs (4.3). Records written without them (older Kafka)
read as hash 0, timestamp 0 and every assignment epoch max(member epoch, 0), Kafka's defaults. Type 16
keys use Kafka 4.0+'s key layout (int16 record type, then the key struct at version 0). Type 4
(PartitionMetadata, ≤4.0) is read as an ignored record.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from regroup.group.classic_group import ClassicGroup, ClassicGroupMember
from regroup.group.consumer_group import (
    ClassicMemberMetadata,
    MemberAssignment,
    MemberState,
    MemberSubscription,
    Partitions,
    TopicPartition,
    by_topic,
    flatten,
)
from regroup.group.effects import CoordinatorRecord
from regroup.group.state import GroupState
from regroup.protocol.message import DECODE_FAILURES
from regroup.protocol.primitives import I16, ZERO_UUID, DecodeError, Uuid
from regroup.protocol.records.consumer_group_current_member_assignment import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
)
from regroup.protocol.records.consumer_group_current_member_assignment import (
    TopicPartitions as CurrentTopicPartitions,
)
from regroup.protocol.records.consumer_group_member_metadata import (
    ClassicMemberMetadata as _ClassicMemberMetadataValue,
)
from regroup.protocol.records.consumer_group_member_metadata import (
    ClassicProtocol as _ClassicProtocolValue,
)
from regroup.protocol.records.consumer_group_member_metadata import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
)
from regroup.protocol.records.consumer_group_metadata import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from regroup.protocol.records.consumer_group_partition_metadata import ConsumerGroupPartitionMetadataKey
from regroup.protocol.records.consumer_group_regular_expression import (
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)
from regroup.protocol.records.consumer_group_target_assignment_member import (
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
)
from regroup.protocol.records.consumer_group_target_assignment_member import (
    TopicPartition as TargetTopicPartition,
)
from regroup.protocol.records.consumer_group_target_assignment_metadata import (
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from regroup.protocol.records.group_metadata import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue

__all__ = [
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE",
    "CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE",
    "CONSUMER_GROUP_METADATA_RECORD_TYPE",
    "CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE",
    "GROUP_METADATA_RECORD_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_RECORD_TYPE",
    "OFFSET_COMMIT_VALUE_VERSIONS",
    "DecodedConsumerGroupRecord",
    "DecodedGroupMetadata",
    "DecodedOffsetCommit",
    "IgnoredRecord",
    "OffsetCommitRecords",
    "RecordError",
    "StoredOffset",
    "consumer_group_metadata_record",
    "consumer_group_metadata_tombstone",
    "current_assignment_record",
    "current_assignment_tombstone",
    "decode_record",
    "empty_group_metadata_record",
    "group_from_value",
    "group_metadata_key",
    "group_metadata_record",
    "group_metadata_tombstone",
    "member_metadata_record",
    "member_subscription_record",
    "member_subscription_tombstone",
    "offset_commit_key",
    "offset_commit_record",
    "offset_commit_tombstone",
    "offset_commit_value_version",
    "partition_metadata_tombstone",
    "record_type",
    "regular_expression_record",
    "regular_expression_tombstone",
    "target_member_record",
    "target_member_tombstone",
    "target_metadata_record",
    "target_metadata_tombstone",
]

OFFSET_COMMIT_RECORD_TYPE = 1
GROUP_METADATA_RECORD_TYPE = 2
GROUP_METADATA_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSIONS = (3, 4)
CONSUMER_GROUP_METADATA_RECORD_TYPE = 3
CONSUMER_GROUP_PARTITION_METADATA_RECORD_TYPE = 4
CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE = 8
CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE = 16
_CONSUMER_GROUP_VALUE_VERSION = 0
"""The versions ``offsets.commit.value.version`` may choose for commits without an expire timestamp."""
_OFFSET_COMMIT_VALUE_VERSION = 4
_OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
_LAST_KNOWN_RECORD_TYPE = 16  # 4 (≤4.0 partition metadata), KIP-932 share groups 9..15, 16 (regexes)


class RecordError(ValueError):
    """A record that cannot be loaded (unknown type, malformed key or value)."""


@dataclass(slots=True, unsafe_hash=True, init=False)
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

    # Its own __init__: compiled, a dataclass's generated one runs as Python (~7x slower per object).
    def __init__(
        self,
        offset: int,
        leader_epoch: int | None,
        metadata: str,
        commit_timestamp_ms: int,
        expire_timestamp_ms: int | None = None,
        topic_id: Uuid = ZERO_UUID,
    ) -> None:
        self.offset = offset
        self.leader_epoch = leader_epoch
        self.metadata = metadata
        self.commit_timestamp_ms = commit_timestamp_ms
        self.expire_timestamp_ms = expire_timestamp_ms
        self.topic_id = topic_id


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
_OFFSET_END = 2 + _OFFSET.size  # every OffsetCommitValue version: int16 version, then the int64 offset
_PARTITION = struct.Struct(">i")  # every OffsetCommitKey version ends with the int32 partition
_PARTITION_LEN = _PARTITION.size


class OffsetCommitRecords:
    """Builds offset commit records, byte-identical to :func:`offset_commit_record`.

    Every OffsetCommitValue version starts with the committed offset (int64) right after its int16 version,
    and the partitions of one commit nearly always share every other field (leader epoch, metadata,
    timestamps, topic id) — as do the commits handled within one millisecond, which share the commit
    timestamp. So the generated codec encodes a value only when those fields differ from the last one
    encoded, and the next ones splice their offset into its bytes: most of a commit's record-building cost
    otherwise. When only the commit timestamp moved (the next millisecond), it is spliced too, at the place
    the codec put it (found by encoding the value once more with another timestamp). A coordinator keeps one
    builder for all its commits.
    """

    __slots__ = ("_head", "_shared", "_stamp_at", "_tail", "version")

    def __init__(self, value_version: int = _OFFSET_COMMIT_VALUE_VERSION) -> None:
        self.version = value_version
        self._shared: tuple[object, ...] | None = None
        self._head = b""
        self._tail = b""
        self._stamp_at = -1  # where the commit timestamp's int64 starts in _tail; -1: not known

    def record(self, group_id: str, topic: str, partition: int, offset: StoredOffset) -> CoordinatorRecord:
        out: list[CoordinatorRecord] = []
        self.extend(out, group_id, topic, ((partition, offset),))
        return out[0]

    def extend(
        self,
        out: list[CoordinatorRecord],
        group_id: str,
        topic: str,
        offsets: Iterable[tuple[int, StoredOffset]],
    ) -> None:
        """Append the records of one topic's ``(partition, offset)`` pairs to ``out``, in one pass."""
        pack = _OFFSET.pack
        known, head, tail = self._shared, self._head, self._tail
        for partition, offset in offsets:
            shared = (
                offset.leader_epoch,
                offset.metadata,
                offset.commit_timestamp_ms,
                offset.expire_timestamp_ms,
                offset.topic_id,
            )
            if shared != known:
                self._prime(group_id, topic, partition, offset, shared)
                known, head, tail = shared, self._head, self._tail
            key = offset_commit_key(group_id, topic, partition)
            out.append(CoordinatorRecord(key, head + pack(offset.offset) + tail))

    def _prime(
        self, group_id: str, topic: str, partition: int, offset: StoredOffset, shared: tuple[object, ...]
    ) -> None:
        """Make the spliced bytes those of ``offset``'s shared fields, which differ from the last ones."""
        known = self._shared
        at = self._stamp_at
        self._shared = shared
        if at >= 0 and known is not None and shared[:2] == known[:2] and shared[3:] == known[3:]:
            tail = self._tail
            self._tail = tail[:at] + _OFFSET.pack(offset.commit_timestamp_ms) + tail[at + _OFFSET.size :]
            return
        value = offset_commit_record(group_id, topic, partition, offset, self.version).value
        assert value is not None
        self._head, self._tail = value[:2], value[_OFFSET_END:]
        self._stamp_at = self._stamp_position(group_id, topic, partition, offset)

    def _stamp_position(self, group_id: str, topic: str, partition: int, offset: StoredOffset) -> int:
        stamp = offset.commit_timestamp_ms
        moved = dataclasses.replace(offset, commit_timestamp_ms=stamp ^ 1)
        other = offset_commit_record(group_id, topic, partition, moved, self.version).value
        assert other is not None
        tail, other = self._tail, other[_OFFSET_END:]
        if len(other) != len(tail):
            return -1
        differ = [i for i in range(len(tail)) if tail[i] != other[i]]
        # stamp ^ 1 changes the last byte of a big-endian int64, and nothing else
        at = differ[0] - (_OFFSET.size - 1) if len(differ) == 1 else -1
        return at if at >= 0 and tail[at : at + _OFFSET.size] == _OFFSET.pack(stamp) else -1


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


# ------------------------------------------------------------------------------------------ consumer groups


def record_type(record: CoordinatorRecord) -> int:
    if len(record.key) < 2:
        raise RecordError("record key without a type")
    value: int = I16.unpack_from(record.key, 0)[0]
    return value


def _cg_key(group_id: str) -> bytes:
    return ConsumerGroupMetadataKey(group_id=group_id).encode_versioned(CONSUMER_GROUP_METADATA_RECORD_TYPE)


def consumer_group_metadata_record(group_id: str, epoch: int, metadata_hash: int = 0) -> CoordinatorRecord:
    """Type 3: the group epoch and (tagged, 4.1+) the metadata hash of the subscribed topics."""
    value = ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash).encode_versioned(
        _CONSUMER_GROUP_VALUE_VERSION
    )
    return CoordinatorRecord(_cg_key(group_id), value)


def partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    """Type 4 (ConsumerGroupPartitionMetadata, written only by Kafka ≤4.0): Kafka 4.1+ still tombstones it
    when it deletes a group (CG ``createGroupTombstoneRecords``)."""
    key = ConsumerGroupPartitionMetadataKey(group_id=group_id).encode_versioned(
        CONSUMER_GROUP_PARTITION_METADATA_RECORD_TYPE
    )
    return CoordinatorRecord(key, None)


def consumer_group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(_cg_key(group_id), None)


def _member_key(group_id: str, member_id: str) -> bytes:
    return ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id).encode_versioned(
        CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE
    )


def member_subscription_record(group_id: str, member_id: str, sub: MemberSubscription) -> CoordinatorRecord:
    """Type 5 (topic names sorted, as Kafka writes them). ClassicMemberMetadata is written as an explicit
    null (tag 0, null marker), as Kafka does: its spec default is an empty struct, so a reader that does not
    find the tag takes the member for a classic one."""
    value = ConsumerGroupMemberMetadataValue(
        classic_member_metadata=None,
        instance_id=sub.instance_id,
        rack_id=sub.rack_id,
        client_id=sub.client_id,
        client_host=sub.client_host,
        subscribed_topic_names=sorted(sub.subscribed_topic_names),
        subscribed_topic_regex=sub.subscribed_topic_regex or "",  # Kafka writes "" for none
        rebalance_timeout_ms=sub.rebalance_timeout_ms,
        server_assignor=sub.server_assignor,
    )
    return CoordinatorRecord(
        _member_key(group_id, member_id), value.encode_versioned(_CONSUMER_GROUP_VALUE_VERSION)
    )


def member_subscription_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(_member_key(group_id, member_id), None)


def _target_metadata_key(group_id: str) -> bytes:
    return ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id).encode_versioned(
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE
    )


def target_metadata_record(group_id: str, assignment_epoch: int, timestamp_ms: int = 0) -> CoordinatorRecord:
    """Type 6: the assignment epoch and (tagged, 4.3) when the assignment was computed."""
    value = ConsumerGroupTargetAssignmentMetadataValue(
        assignment_epoch=assignment_epoch, assignment_timestamp=timestamp_ms
    )
    return CoordinatorRecord(
        _target_metadata_key(group_id), value.encode_versioned(_CONSUMER_GROUP_VALUE_VERSION)
    )


def target_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(_target_metadata_key(group_id), None)


def _target_member_key(group_id: str, member_id: str) -> bytes:
    return ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id).encode_versioned(
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE
    )


def target_member_record(group_id: str, member_id: str, target: Partitions) -> CoordinatorRecord:
    """Type 7."""
    value = ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=[
            TargetTopicPartition(topic_id=t, partitions=ps) for t, ps in by_topic(target).items()
        ]
    )
    return CoordinatorRecord(
        _target_member_key(group_id, member_id), value.encode_versioned(_CONSUMER_GROUP_VALUE_VERSION)
    )


def target_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(_target_member_key(group_id, member_id), None)


def _current_key(group_id: str, member_id: str) -> bytes:
    return ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id).encode_versioned(
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE
    )


def _current_topics(
    partitions: Partitions, epochs: Mapping[TopicPartition, int], default_epoch: int
) -> list[CurrentTopicPartitions]:
    return [
        CurrentTopicPartitions(
            topic_id=t, partitions=ps, assignment_epochs=[epochs.get((t, p), default_epoch) for p in ps]
        )
        for t, ps in by_topic(partitions).items()
    ]


def current_assignment_record(
    group_id: str, member_id: str, assignment: MemberAssignment
) -> CoordinatorRecord:
    """Type 8, with (tagged, 4.3) each partition's assignment epoch, assigned and pending revocation alike
    (a partition without one gets max(member epoch, 0), the epoch a reader would default it to)."""
    epochs = assignment.assignment_epochs
    default_epoch = max(assignment.member_epoch, 0)
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=assignment.member_epoch,
        previous_member_epoch=assignment.previous_member_epoch,
        state=int(assignment.state),
        assigned_partitions=_current_topics(assignment.assigned, epochs, default_epoch),
        partitions_pending_revocation=_current_topics(assignment.pending_revocation, epochs, default_epoch),
    )
    return CoordinatorRecord(
        _current_key(group_id, member_id), value.encode_versioned(_CONSUMER_GROUP_VALUE_VERSION)
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(_current_key(group_id, member_id), None)


def _regex_key(group_id: str, regex: str) -> bytes:
    # A Kafka 4.0+ ``coordinator-key``: the record type, then the key struct at version 0.
    buf = bytearray(I16.pack(CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE))
    ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=regex).write(buf, 0)
    return bytes(buf)


def regular_expression_record(
    group_id: str, regex: str, topics: Iterable[str], version: int, timestamp_ms: int
) -> CoordinatorRecord:
    """Type 16: what a regex resolved to (topic names sorted, as Kafka writes them), the metadata version
    it was resolved on and when."""
    value = ConsumerGroupRegularExpressionValue(
        topics=sorted(topics), version=version, timestamp=timestamp_ms
    )
    return CoordinatorRecord(
        _regex_key(group_id, regex), value.encode_versioned(_CONSUMER_GROUP_VALUE_VERSION)
    )


def regular_expression_tombstone(group_id: str, regex: str) -> CoordinatorRecord:
    return CoordinatorRecord(_regex_key(group_id, regex), None)


# ---------------------------------------------------------------------------------------------- loading


@dataclass(slots=True, unsafe_hash=True)
class DecodedOffsetCommit:
    group_id: str
    topic: str
    partition: int
    value: StoredOffset | None  # None: tombstone
    value_version: int | None


@dataclass(slots=True, unsafe_hash=True)
class DecodedGroupMetadata:
    group_id: str
    value: GroupMetadataValue | None  # None: tombstone
    value_version: int | None


@dataclass(slots=True, unsafe_hash=True)
class IgnoredRecord:
    """A record of a group type regroup does not implement (KIP-848 consumer groups, share groups)."""

    record_type: int


@dataclass(slots=True, unsafe_hash=True)
class DecodedConsumerGroupRecord:
    """A consumer-group record (types 3, 5, 6, 7, 8, 16): ``value`` is None for a tombstone, else the group
    epoch (3), a :class:`MemberSubscription` (5), the assignment epoch (6), the member's target (7), a
    :class:`MemberAssignment` (8) or the sorted topic names a regex resolved to (16). ``metadata_hash`` is
    type 3's; ``timestamp_ms`` type 6's assignment timestamp or type 16's resolution time; ``regex`` and
    ``version`` are type 16's."""

    record_type: int
    group_id: str
    member_id: str
    value: int | MemberSubscription | Partitions | MemberAssignment | tuple[str, ...] | None
    metadata_hash: int = 0
    timestamp_ms: int = 0
    regex: str = ""
    version: int = 0


DecodedRecord = DecodedOffsetCommit | DecodedGroupMetadata | DecodedConsumerGroupRecord | IgnoredRecord


def decode_record(record: CoordinatorRecord) -> DecodedRecord:
    key = record.key
    if len(key) < 2:
        raise RecordError("record key without a type")
    offset_commit = decode_offset_commit(key, record.value)
    if offset_commit is not None:
        return DecodedOffsetCommit(*offset_commit)
    (record_type,) = I16.unpack_from(key, 0)
    try:
        if record_type == GROUP_METADATA_RECORD_TYPE:
            gkey, end = GroupMetadataKey.read(key, 2, record_type)
            _no_trailing(key, end)
            if record.value is None:
                return DecodedGroupMetadata(gkey.group, None, None)
            gvalue, version = GroupMetadataValue.decode_versioned(record.value)
            return DecodedGroupMetadata(gkey.group, gvalue, version)
        if record_type in _CONSUMER_GROUP_DECODERS:
            return _CONSUMER_GROUP_DECODERS[record_type](key, record.value)
    except DecodeError as exc:
        raise RecordError(f"malformed record of type {record_type}: {exc}") from exc
    if 0 <= record_type <= _LAST_KNOWN_RECORD_TYPE:
        return IgnoredRecord(record_type)
    raise RecordError(f"unknown record type {record_type}")


_OFFSET_COMMIT_KEY_READ: Final = OffsetCommitKey.reader(1)  # key versions 0 and 1 share one layout
_OFFSET_COMMIT_VALUE_READ: Final = {
    v: OffsetCommitValue.reader(v)
    for v in range(OffsetCommitValue.MIN_VERSION, OffsetCommitValue.MAX_VERSION + 1)
}


def decode_offset_commit(
    key: bytes, value: bytes | None
) -> tuple[str, str, int, StoredOffset | None, int | None] | None:
    """An offset commit record's group, topic, partition, offset (None: a tombstone) and value version;
    None when ``key`` is of another record type. Most of a ``__consumer_offsets`` log is these, so loading
    one calls the generated readers directly and builds nothing but the :class:`StoredOffset`."""
    if len(key) < 2 or key[0] != 0 or key[1] > OFFSET_COMMIT_RECORD_TYPE:  # int16 type 0 or 1
        return None
    try:
        okey, end = _OFFSET_COMMIT_KEY_READ(key, 2)
        _no_trailing(key, end)
        if value is None:
            return okey.group, okey.topic, okey.partition, None, None
        if len(value) < 2:
            raise DecodeError("missing int16 version prefix")
        version = value[0] << 8 | value[1]  # a negative int16 reads as ≥ 32768: unknown too
        read = _OFFSET_COMMIT_VALUE_READ.get(version)
        if read is None:
            raise DecodeError(f"unknown OffsetCommitValue version {version}")
        ovalue, end = read(value, 2)
        if end != len(value):
            raise DecodeError(f"{len(value) - end} trailing bytes after OffsetCommitValue v{version}")
    except (DecodeError, *DECODE_FAILURES) as exc:
        raise RecordError(f"malformed record of type {key[1]}: {exc}") from exc
    epoch = ovalue.leader_epoch
    expire = ovalue.expire_timestamp
    stored = StoredOffset(
        ovalue.offset,
        None if epoch == -1 else epoch,
        ovalue.metadata,
        ovalue.commit_timestamp,
        None if expire == -1 else expire,
        ovalue.topic_id,
    )
    return okey.group, okey.topic, okey.partition, stored, version


class OffsetCommitDecoder:
    """:func:`decode_offset_commit` for loading a log, which decodes few distinct keys and values in full.

    A commit's records share their key up to the partition (the key's last four bytes, in every key
    version) and their value apart from the offset (the eight bytes after the value's version, in every
    value version). Bytes equal to ones decoded in full before are as valid as those were, so the names
    and shared fields are looked up instead of decoded: most of a load's cost otherwise."""

    __slots__ = ("_names", "_shared")

    _LIMIT: Final = 4096  # remembered keys and values each (a commit's share; forgotten all at once)

    def __init__(self) -> None:
        self._names: dict[bytes, tuple[str, str]] = {}
        self._shared: dict[bytes, tuple[bytes, int, int | None, str, int, int | None, Uuid]] = {}

    def decode(
        self, key: bytes, value: bytes | None
    ) -> tuple[str, str, int, StoredOffset | None, int | None] | None:
        names = self._names.get(key[:-_PARTITION_LEN])
        if names is None or (value is not None and len(value) < _OFFSET_END):
            return self._decode_in_full(key, value)
        (partition,) = _PARTITION.unpack_from(key, len(key) - _PARTITION_LEN)
        if value is None:
            return names[0], names[1], partition, None, None
        shared = self._shared.get(value[_OFFSET_END:])
        if shared is None or shared[0] != value[:2]:
            return self._decode_in_full(key, value)
        _version_bytes, version, epoch, metadata, commit_ms, expire_ms, topic_id = shared
        (offset,) = _OFFSET.unpack_from(value, 2)
        stored = StoredOffset(offset, epoch, metadata, commit_ms, expire_ms, topic_id)
        return names[0], names[1], partition, stored, version

    def _decode_in_full(
        self, key: bytes, value: bytes | None
    ) -> tuple[str, str, int, StoredOffset | None, int | None] | None:
        decoded = decode_offset_commit(key, value)
        if decoded is None:
            return None
        group, topic, _partition, stored, version = decoded
        if len(self._names) >= self._LIMIT:
            self._names.clear()
        self._names[key[:-_PARTITION_LEN]] = (group, topic)
        if stored is not None and value is not None and version is not None:
            if len(self._shared) >= self._LIMIT:
                self._shared.clear()
            self._shared[value[_OFFSET_END:]] = (
                value[:2],
                version,
                stored.leader_epoch,
                stored.metadata,
                stored.commit_timestamp_ms,
                stored.expire_timestamp_ms,
                stored.topic_id,
            )
        return decoded


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


def _decode_cg_metadata(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    k, end = ConsumerGroupMetadataKey.read(key, 2, CONSUMER_GROUP_METADATA_RECORD_TYPE)
    _no_trailing(key, end)
    if value is None:
        return DecodedConsumerGroupRecord(CONSUMER_GROUP_METADATA_RECORD_TYPE, k.group_id, "", None)
    v, _ = ConsumerGroupMetadataValue.decode_versioned(value)
    return DecodedConsumerGroupRecord(
        CONSUMER_GROUP_METADATA_RECORD_TYPE, k.group_id, "", v.epoch, metadata_hash=v.metadata_hash
    )


def _decode_member_metadata(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    k, end = ConsumerGroupMemberMetadataKey.read(key, 2, CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE)
    _no_trailing(key, end)
    sub = None
    if value is not None:
        v, _ = ConsumerGroupMemberMetadataValue.decode_versioned(value)
        sub = MemberSubscription(
            instance_id=v.instance_id,
            rack_id=v.rack_id,
            client_id=v.client_id,
            client_host=v.client_host,
            subscribed_topic_names=tuple(sorted(v.subscribed_topic_names)),
            subscribed_topic_regex=v.subscribed_topic_regex or None,
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor,
        )
    return DecodedConsumerGroupRecord(
        CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE, k.group_id, k.member_id, sub
    )


def _decode_target_metadata(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    k, end = ConsumerGroupTargetAssignmentMetadataKey.read(
        key, 2, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE
    )
    _no_trailing(key, end)
    if value is None:
        return DecodedConsumerGroupRecord(
            CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE, k.group_id, "", None
        )
    v, _ = ConsumerGroupTargetAssignmentMetadataValue.decode_versioned(value)
    return DecodedConsumerGroupRecord(
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE,
        k.group_id,
        "",
        v.assignment_epoch,
        timestamp_ms=v.assignment_timestamp,
    )


def _decode_target_member(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    k, end = ConsumerGroupTargetAssignmentMemberKey.read(
        key, 2, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE
    )
    _no_trailing(key, end)
    target = None
    if value is not None:
        v, _ = ConsumerGroupTargetAssignmentMemberValue.decode_versioned(value)
        target = flatten((tp.topic_id, tp.partitions) for tp in v.topic_partitions)
    return DecodedConsumerGroupRecord(
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE, k.group_id, k.member_id, target
    )


def _decode_current_assignment(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    k, end = ConsumerGroupCurrentMemberAssignmentKey.read(
        key, 2, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE
    )
    _no_trailing(key, end)
    assignment = None
    if value is not None:
        v, _ = ConsumerGroupCurrentMemberAssignmentValue.decode_versioned(value)
        default_epoch = max(v.member_epoch, 0)
        epochs: dict[TopicPartition, int] = {}
        for tp in (*v.assigned_partitions, *v.partitions_pending_revocation):
            # U ``assignmentFromTopicPartitions``: epochs missing or of the wrong length → the default
            tp_epochs = tp.assignment_epochs
            if tp_epochs is None or len(tp_epochs) != len(tp.partitions):
                tp_epochs = [default_epoch] * len(tp.partitions)
            epochs.update(((tp.topic_id, p), e) for p, e in zip(tp.partitions, tp_epochs, strict=True))
        assignment = MemberAssignment(
            member_epoch=v.member_epoch,
            previous_member_epoch=v.previous_member_epoch,
            state=MemberState.from_byte(v.state),
            assigned=flatten((tp.topic_id, tp.partitions) for tp in v.assigned_partitions),
            pending_revocation=flatten(
                (tp.topic_id, tp.partitions) for tp in v.partitions_pending_revocation
            ),
            assignment_epochs=epochs,
        )
    return DecodedConsumerGroupRecord(
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE, k.group_id, k.member_id, assignment
    )


def _decode_regular_expression(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    k, end = ConsumerGroupRegularExpressionKey.read(key, 2, 0)  # a 4.0+ key: struct version 0
    _no_trailing(key, end)
    if value is None:
        return DecodedConsumerGroupRecord(
            CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE, k.group_id, "", None, regex=k.regular_expression
        )
    v, _ = ConsumerGroupRegularExpressionValue.decode_versioned(value)
    return DecodedConsumerGroupRecord(
        CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE,
        k.group_id,
        "",
        tuple(sorted(v.topics)),
        timestamp_ms=v.timestamp,
        regex=k.regular_expression,
        version=v.version,
    )


_CONSUMER_GROUP_DECODERS = {
    CONSUMER_GROUP_METADATA_RECORD_TYPE: _decode_cg_metadata,
    CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE: _decode_member_metadata,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE: _decode_target_metadata,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE: _decode_target_member,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE: _decode_current_assignment,
    CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE: _decode_regular_expression,
}


# ---------------------------------------------------------------------------------- classic members (§9)
# Added for online migration: type 5 with its ClassicMemberMetadata tagged field (session timeout and the
# JoinGroup protocols of a member speaking the classic protocol inside a consumer group), written and read.


def member_metadata_record(group_id: str, member_id: str, sub: MemberSubscription) -> CoordinatorRecord:
    """Type 5 as :func:`member_subscription_record`, with ClassicMemberMetadata if ``sub.classic`` is set."""
    value = ConsumerGroupMemberMetadataValue(
        instance_id=sub.instance_id,
        rack_id=sub.rack_id,
        client_id=sub.client_id,
        client_host=sub.client_host,
        subscribed_topic_names=sorted(sub.subscribed_topic_names),
        subscribed_topic_regex=sub.subscribed_topic_regex or "",  # Kafka writes "" for none
        rebalance_timeout_ms=sub.rebalance_timeout_ms,
        server_assignor=sub.server_assignor,
        classic_member_metadata=None
        if sub.classic is None
        else _ClassicMemberMetadataValue(
            session_timeout_ms=sub.classic.session_timeout_ms,
            supported_protocols=[_ClassicProtocolValue(name=n, metadata=m) for n, m in sub.classic.protocols],
        ),
    )
    return CoordinatorRecord(
        _member_key(group_id, member_id), value.encode_versioned(_CONSUMER_GROUP_VALUE_VERSION)
    )


def _decode_member_metadata_with_classic(key: bytes, value: bytes | None) -> DecodedConsumerGroupRecord:
    decoded = _decode_member_metadata(key, value)
    if value is None or not isinstance(decoded.value, MemberSubscription):
        return decoded
    classic = ConsumerGroupMemberMetadataValue.decode_versioned(value)[0].classic_member_metadata
    # No tag reads as the spec's default, an empty struct (Kafka would take it for a classic member):
    # records regroup wrote before it wrote the explicit null lack the tag, and a classic member always
    # has protocols, so an empty one is a consumer-protocol member.
    if classic is None or not classic.supported_protocols:
        return decoded
    sub = dataclasses.replace(
        decoded.value,
        classic=ClassicMemberMetadata(
            session_timeout_ms=classic.session_timeout_ms,
            protocols=tuple((p.name, p.metadata) for p in classic.supported_protocols),
        ),
    )
    return dataclasses.replace(decoded, value=sub)


_CONSUMER_GROUP_DECODERS[CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE] = _decode_member_metadata_with_classic
