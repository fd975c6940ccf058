"""OffsetForLeaderEpoch (key 23) v0-4: where a leader epoch ends in this leader's log.

Followers ask it before fetching from a new leader, to truncate where their log diverges (KIP-101,
KIP-279); consumers ask it to validate their position after a leader change (KIP-320). Like Kafka's
``ReplicaManager.lastOffsetForLeaderEpoch``, only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere),
the request's current leader epoch (v2+) is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), and the
answer comes from the partition's leader-epoch cache: the largest epoch ≤ the requested one and the offset
where it ends (the log end for the latest epoch), or -1/-1 when no such epoch is known. A single node, which
records no epochs, has led every partition at epoch 0 since its log start.
"""

from __future__ import annotations

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.log import PartitionLog
from regroup.log.leader_epoch import LeaderEpochCache
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)


def _epochs(plog: PartitionLog) -> LeaderEpochCache:
    if plog.epochs.latest_epoch is not None:
        return plog.epochs
    single = LeaderEpochCache()
    single.assign(0, plog.log_start_offset)
    return single


def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    broker = ctx.broker
    version = ctx.api_version
    topics: list[OffsetForLeaderTopicResult] = []
    for topic in request.topics:
        results: list[EpochEndOffset] = []
        topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=results))
        for p in topic.partitions:
            current = p.current_leader_epoch if version >= 2 else -1
            error = broker.topology.leader_error(topic.topic, p.partition, current)
            plog = broker.logs.partition(topic.topic, p.partition) if error is ErrorCode.NONE else None
            if plog is None:
                code = error if error is not ErrorCode.NONE else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results.append(EpochEndOffset(error_code=code, partition=p.partition))
                continue
            epoch, end_offset = _epochs(plog).end_offset_for(p.leader_epoch, plog.log_end_offset)
            results.append(
                EpochEndOffset(
                    error_code=ErrorCode.NONE,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, handle)
