"""Synthetic ``__consumer_offsets`` records and data directories, encoded with regroup's codecs: for the
benchmark, and for tests that need records no client would produce (old value versions, explicit expire
timestamps, broken assignments)."""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from crc32c import crc32c

from regroup.protocol.record_batch import Record, build_batch
from regroup.protocol.records.consumer_group_metadata import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)
from regroup.protocol.records.group_metadata import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue

__all__ = [
    "MemberSpec",
    "PartitionWriter",
    "consumer_group_metadata",
    "consumer_group_tombstone",
    "group_metadata",
    "group_tombstone",
    "offset_commit",
    "offset_tombstone",
]

_I16: Final = struct.Struct(">h")
_I64: Final = struct.Struct(">q")
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21


def offset_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    commit_ts: int,
    key_version: int = 1,
    value_version: int = 3,
    metadata: str = "",
    leader_epoch: int = -1,
    expire_ts: int = -1,
) -> tuple[bytes, bytes]:
    """(key, value) of an offset commit record."""
    key = OffsetCommitKey(group=group, topic=topic, partition=partition).encode_versioned(key_version)
    value = OffsetCommitValue(
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp=commit_ts,
        expire_timestamp=expire_ts,
    ).encode_versioned(value_version)
    return key, value


def offset_tombstone(group: str, topic: str, partition: int, *, key_version: int = 1) -> tuple[bytes, None]:
    return OffsetCommitKey(group=group, topic=topic, partition=partition).encode_versioned(key_version), None


@dataclass(frozen=True)
class MemberSpec:
    """A group member as a GroupMetadata record stores it, with a consumer-protocol subscription and
    assignment (``subscription`` / ``assignment`` bytes override the encoded ones)."""

    member_id: str
    topics: Sequence[str]
    assignment: Mapping[str, Sequence[int]] = field(default_factory=dict)
    group_instance_id: str | None = None
    client_id: str = "client"
    client_host: str = "/127.0.0.1"
    session_timeout: int = 45000
    rebalance_timeout: int = 300000
    subscription_version: int = 1
    assignment_version: int = 0
    subscription: bytes | None = None
    assignment_bytes: bytes | None = None

    def encode(self) -> MemberMetadata:
        subscription = self.subscription
        if subscription is None:
            subscription = ConsumerProtocolSubscription(
                topics=sorted(self.topics),
                owned_partitions=[
                    ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=list(ps))
                    for t, ps in sorted(self.assignment.items())
                ],
            ).encode_versioned(self.subscription_version)
        assignment = self.assignment_bytes
        if assignment is None:
            assignment = ConsumerProtocolAssignment(
                assigned_partitions=[
                    ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=list(ps))
                    for t, ps in sorted(self.assignment.items())
                ]
            ).encode_versioned(self.assignment_version)
        return MemberMetadata(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout=self.rebalance_timeout,
            session_timeout=self.session_timeout,
            subscription=subscription,
            assignment=assignment,
        )


def group_metadata(
    group: str,
    generation: int,
    members: Sequence[MemberSpec] = (),
    *,
    state_ts: int = -1,
    protocol_type: str = "consumer",
    protocol: str | None = "range",
    leader: str | None = None,
    value_version: int = 3,
) -> tuple[bytes, bytes]:
    """(key, value) of a GroupMetadata record; with no members, protocol and leader are null as Kafka
    writes them when a group becomes Empty."""
    if not members:
        protocol, leader = None, None
    elif leader is None:
        leader = members[0].member_id
    value = GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp=state_ts,
        members=[m.encode() for m in members],
    )
    return GroupMetadataKey(group=group).encode_versioned(2), value.encode_versioned(value_version)


def group_tombstone(group: str) -> tuple[bytes, None]:
    return GroupMetadataKey(group=group).encode_versioned(2), None


def consumer_group_metadata(group: str, epoch: int) -> tuple[bytes, bytes]:
    """(key, value) of a KIP-848 ConsumerGroupMetadata record (key type 3), as a ``consumer`` group's
    coordinator writes it."""
    key = ConsumerGroupMetadataKey(group_id=group).encode_versioned(3)
    return key, ConsumerGroupMetadataValue(epoch=epoch).encode_versioned(0)


def consumer_group_tombstone(group: str) -> tuple[bytes, None]:
    return ConsumerGroupMetadataKey(group_id=group).encode_versioned(3), None


def _topic_id(topic: str) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_URL, f"regroup-synthetic:{topic}")
    return base64.urlsafe_b64encode(digest.bytes).rstrip(b"=").decode()


class PartitionWriter:
    """Writes one partition directory in the broker layout: ``<root>/<topic>-<p>/<base:020d>.log`` and
    ``partition.metadata`` (no index files: readers rebuild or do without them)."""

    def __init__(self, root: Path, topic: str, partition: int) -> None:
        self.directory = Path(root) / f"{topic}-{partition}"
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "partition.metadata").write_text(f"version: 0\ntopic_id: {_topic_id(topic)}\n")
        self._file = (self.directory / f"{0:020d}.log").open("ab")
        self.next_offset = 0

    def append(
        self,
        records: Iterable[tuple[int, bytes | None, bytes | None]],
        *,
        compression: int = 0,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> None:
        """Append one batch of ``(timestamp, key, value)`` records."""
        recs = [
            Record(self.next_offset + i, ts, key, value, list(headers))
            for i, (ts, key, value) in enumerate(records)
        ]
        if not recs:
            return
        self._file.write(build_batch(recs, base_offset=self.next_offset, compression=compression))
        self.next_offset += len(recs)

    def append_raw(self, batch: bytes) -> None:
        """Append an encoded batch as it is (its base offset must be ``next_offset``)."""
        self._file.write(batch)
        (last_delta,) = struct.unpack_from(">i", batch, 23)
        self.next_offset += last_delta + 1

    def close(self) -> None:
        self._file.close()


def rebase_batch(
    template: bytes, base_offset: int, timestamp_shift: int, patches: Sequence[tuple[int, int]] = ()
) -> bytes:
    """A copy of an uncompressed batch moved to ``base_offset``, its timestamps shifted by
    ``timestamp_shift`` ms, int64 fields at ``patches`` positions overwritten, and its CRC recomputed
    (how the benchmark makes millions of batches without encoding each record in Python)."""
    buf = bytearray(template)
    _I64.pack_into(buf, 0, base_offset)
    base_ts, max_ts = struct.unpack_from(">qq", buf, 27)
    struct.pack_into(">qq", buf, 27, base_ts + timestamp_shift, max_ts + timestamp_shift)
    for pos, value in patches:
        _I64.pack_into(buf, pos, value)
    struct.pack_into(">I", buf, _CRC_OFFSET, crc32c(bytes(buf[_ATTRIBUTES_OFFSET:])))
    return bytes(buf)
