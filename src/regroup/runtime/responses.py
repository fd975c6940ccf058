"""Responses for requests the coordinator answers with an error before any group logic runs.

Shapes follow Kafka's ``GroupCoordinatorService`` error paths (and the response classes' defaults): a
JoinGroup echoes the request's member id with generation -1 and no protocol (a null protocol name is ""
before v7); a SyncGroup carries an empty assignment and no protocol; commits put the error on every
partition; DescribeGroups entries have empty state, protocol type and protocol data; a ConsumerGroupHeartbeat
carries only the error and its message (``ConsumerGroupHeartbeatRequest.getErrorResponse``), a
ConsumerGroupDescribe entry only the group id, error and message.
"""

from __future__ import annotations

from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_describe import DescribedGroup as ConsumerDescribedGroup
from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse
from regroup.protocol.messages.delete_groups import DeletableGroupResult
from regroup.protocol.messages.describe_groups import DescribedGroup
from regroup.protocol.messages.heartbeat import HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.protocol.messages.offset_delete import OffsetDeleteResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchResponseGroup
from regroup.protocol.messages.sync_group import SyncGroupResponse
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

__all__ = [
    "consumer_described_group_error",
    "consumer_group_heartbeat_error",
    "deletable_group_error",
    "described_group_error",
    "heartbeat_error",
    "join_group_error",
    "leave_group_error",
    "offset_commit_error",
    "offset_delete_error",
    "offset_fetch_group_error",
    "sync_group_error",
    "txn_offset_commit_error",
]


def join_group_error(req: JoinGroupRequest, api_version: int, code: ErrorCode) -> JoinGroupResponse:
    return JoinGroupResponse(
        error_code=code,
        generation_id=-1,
        protocol_type=None,
        protocol_name=None if api_version >= 7 else "",
        leader="",
        member_id=req.member_id,
    )


def sync_group_error(code: ErrorCode) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, protocol_type=None, protocol_name=None, assignment=b"")


def heartbeat_error(code: ErrorCode) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code)


def leave_group_error(code: ErrorCode) -> LeaveGroupResponse:
    return LeaveGroupResponse(error_code=code)


def offset_commit_error(req: OffsetCommitRequest, code: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def txn_offset_commit_error(
    req: TxnOffsetCommitRequest, api_version: int, code: ErrorCode
) -> TxnOffsetCommitResponse:
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and api_version < 2:
        # Kafka rewrites it for v0-1 clients, which do not retry it here.
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in req.topics
        ]
    )


def offset_delete_error(code: ErrorCode) -> OffsetDeleteResponse:
    return OffsetDeleteResponse(error_code=code)


def offset_fetch_group_error(group_id: str, code: ErrorCode) -> OffsetFetchResponseGroup:
    return OffsetFetchResponseGroup(group_id=group_id, error_code=code)


def described_group_error(group_id: str, code: ErrorCode) -> DescribedGroup:
    return DescribedGroup(error_code=code, group_id=group_id)


def deletable_group_error(group_id: str, code: ErrorCode) -> DeletableGroupResult:
    return DeletableGroupResult(group_id=group_id, error_code=code)


def consumer_group_heartbeat_error(code: ErrorCode) -> ConsumerGroupHeartbeatResponse:
    # Kafka's coordinator-level exceptions (NotCoordinator, CoordinatorLoadInProgress, …) carry their
    # error's default message, which the response echoes.
    return ConsumerGroupHeartbeatResponse(error_code=code, error_message=code.message)


def consumer_described_group_error(group_id: str, code: ErrorCode) -> ConsumerDescribedGroup:
    return ConsumerDescribedGroup(group_id=group_id, error_code=code, error_message=code.message)
