"""Version-aware builders and readers for the requests whose shape changes across versions.

Pure functions: given the negotiated version they build the message a Java client would send and
normalise the response (batched FindCoordinator v4+, LeaveGroup v3+, OffsetFetch v8+, …).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from regroup.client.errors import UnsupportedApiVersionError
from regroup.client.types import OffsetAndMetadata, TopicPartition, java_order, sorted_partitions
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from regroup.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from regroup.protocol.primitives import ZERO_UUID

__all__ = [
    "MAX_REASON_LENGTH",
    "CoordinatorAnswer",
    "FetchedOffset",
    "find_coordinator_request",
    "leave_group_request",
    "metadata_request",
    "offset_commit_request",
    "offset_fetch_request",
    "read_find_coordinator",
    "read_leave_group",
    "read_metadata",
    "read_metadata_topic_ids",
    "read_offset_commit",
    "read_offset_fetch",
    "truncate_reason",
]

# JoinGroupRequest.maybeTruncateReason / LeaveGroup reasons are cut to 255 characters.
MAX_REASON_LENGTH = 255
_COORDINATOR_KEY_TYPE_GROUP = 0


def truncate_reason(reason: str | None) -> str | None:
    if reason is None or len(reason) <= MAX_REASON_LENGTH:
        return reason
    return reason[:MAX_REASON_LENGTH]


# -------------------------------------------------------------------------------------- FindCoordinator


@dataclass(frozen=True, slots=True)
class CoordinatorAnswer:
    error: ErrorCode
    node_id: int
    host: str
    port: int
    message: str | None


def find_coordinator_request(version: int, group_id: str) -> FindCoordinatorRequest:
    if version >= 4:
        return FindCoordinatorRequest(key_type=_COORDINATOR_KEY_TYPE_GROUP, coordinator_keys=[group_id])
    return FindCoordinatorRequest(key=group_id)


def read_find_coordinator(version: int, resp: FindCoordinatorResponse) -> CoordinatorAnswer:
    if version >= 4:
        if len(resp.coordinators) != 1:
            return CoordinatorAnswer(
                ErrorCode.UNKNOWN_SERVER_ERROR, -1, "", -1, "expected exactly one coordinator in the response"
            )
        c = resp.coordinators[0]
        return CoordinatorAnswer(
            ErrorCode.from_code(c.error_code), c.node_id, c.host, c.port, c.error_message
        )
    return CoordinatorAnswer(
        ErrorCode.from_code(resp.error_code), resp.node_id, resp.host, resp.port, resp.error_message
    )


# ------------------------------------------------------------------------------------------- LeaveGroup


def leave_group_request(
    version: int, group_id: str, member_id: str, group_instance_id: str | None, reason: str | None
) -> LeaveGroupRequest:
    if version >= 3:
        member = MemberIdentity(
            member_id=member_id,
            group_instance_id=group_instance_id,
            reason=truncate_reason(reason) if version >= 5 else None,
        )
        return LeaveGroupRequest(group_id=group_id, members=[member])
    if group_instance_id is not None:
        raise UnsupportedApiVersionError(f"LeaveGroup v{version} cannot identify a static member")
    return LeaveGroupRequest(group_id=group_id, member_id=member_id)


def read_leave_group(resp: LeaveGroupResponse) -> ErrorCode:
    """The top-level error, else the (single) member's error."""
    error = ErrorCode.from_code(resp.error_code)
    if error is ErrorCode.NONE:
        for member in resp.members:
            if member.error_code != ErrorCode.NONE:
                return ErrorCode.from_code(member.error_code)
    return error


# --------------------------------------------------------------------------------------------- Metadata


def metadata_request(
    version: int, topics: Iterable[str] | None, allow_auto_topic_creation: bool
) -> MetadataRequest:
    """Metadata of ``topics`` (None: of all topics, v1+)."""
    return MetadataRequest(
        topics=None
        if topics is None
        else [MetadataRequestTopic(name=t) for t in sorted(topics, key=java_order)],
        # v0-3 have no flag (the broker auto-creates); the codec rejects a non-default value there.
        allow_auto_topic_creation=allow_auto_topic_creation if version >= 4 else True,
    )


def read_metadata(resp: MetadataResponse) -> dict[str, int]:
    """Partition counts of the topics the broker knows (topics with an error are left out)."""
    return {
        t.name: len(t.partitions)
        for t in resp.topics
        if t.name is not None and t.error_code == ErrorCode.NONE
    }


def read_metadata_topic_ids(resp: MetadataResponse) -> dict[uuid.UUID, str]:
    """Topic id → name of the topics the broker knows (v10+; topics with an error are left out)."""
    return {
        t.topic_id: t.name
        for t in resp.topics
        if t.name is not None and t.error_code == ErrorCode.NONE and t.topic_id != ZERO_UUID
    }


# ----------------------------------------------------------------------------------------- OffsetCommit


def offset_commit_request(
    version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> OffsetCommitRequest:
    if group_instance_id is not None and version < 7:
        raise UnsupportedApiVersionError(
            f"OffsetCommit v{version} cannot carry group.instance.id; the broker needs v7+ for static members"
        )
    topics: dict[str, OffsetCommitRequestTopic] = {}
    for tp in sorted_partitions(offsets):
        om = offsets[tp]
        topic = topics.setdefault(tp.topic, OffsetCommitRequestTopic(name=tp.topic))
        topic.partitions.append(
            OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=om.offset,
                committed_leader_epoch=om.leader_epoch
                if om.leader_epoch is not None and version >= 6
                else -1,
                committed_metadata=om.metadata,
            )
        )
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=list(topics.values()),
    )


def read_offset_commit(resp: OffsetCommitResponse) -> dict[TopicPartition, ErrorCode]:
    return {
        TopicPartition(t.name, p.partition_index): ErrorCode.from_code(p.error_code)
        for t in resp.topics
        for p in t.partitions
    }


# ------------------------------------------------------------------------------------------ OffsetFetch


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    error: ErrorCode
    offset: OffsetAndMetadata | None


def offset_fetch_request(
    version: int, group_id: str, partitions: Iterable[TopicPartition], require_stable: bool
) -> OffsetFetchRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted_partitions(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    stable = require_stable and version >= 7
    if version >= 8:
        group = OffsetFetchRequestGroup(
            group_id=group_id,
            topics=[OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        )
        return OffsetFetchRequest(groups=[group], require_stable=stable)
    return OffsetFetchRequest(
        group_id=group_id,
        topics=[OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        require_stable=stable,
    )


def read_offset_fetch(
    version: int, resp: OffsetFetchResponse, group_id: str
) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
    """(group-level error, per-partition results); an offset of -1 means nothing committed."""
    out: dict[TopicPartition, FetchedOffset] = {}
    if version >= 8:
        for group in resp.groups:
            if group.group_id != group_id:
                continue
            for t in group.topics:
                for p in t.partitions:
                    out[TopicPartition(t.name, p.partition_index)] = _fetched(
                        p.error_code, p.committed_offset, p.committed_leader_epoch, p.metadata
                    )
            return ErrorCode.from_code(group.error_code), out
        return ErrorCode.UNKNOWN_SERVER_ERROR, out
    for topic in resp.topics:
        for part in topic.partitions:
            out[TopicPartition(topic.name, part.partition_index)] = _fetched(
                part.error_code, part.committed_offset, part.committed_leader_epoch, part.metadata
            )
    return (ErrorCode.from_code(resp.error_code) if version >= 2 else ErrorCode.NONE), out


def _fetched(error_code: int, offset: int, epoch: int, metadata: str | None) -> FetchedOffset:
    if offset < 0:
        return FetchedOffset(ErrorCode.from_code(error_code), None)
    return FetchedOffset(
        ErrorCode.from_code(error_code),
        OffsetAndMetadata(offset, metadata or "", epoch if epoch >= 0 else None),
    )
