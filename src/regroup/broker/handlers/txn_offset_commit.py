"""TxnOffsetCommit (key 28) v0-4.

regroup has no transaction coordinator (InitProducerId with a transactional id is refused with
COORDINATOR_NOT_AVAILABLE), so no transaction can be ongoing: after Kafka's broker-level
UNKNOWN_TOPIC_OR_PARTITION checks, the coordinator answers every partition with the error Kafka's
transaction verification gives for a producer without an ongoing transaction. Group-id and
coordinator-level errors are reported as for any group request (v0-1 get COORDINATOR_NOT_AVAILABLE instead
of COORDINATOR_LOAD_IN_PROGRESS, as Kafka does for them).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, install, known_partitions
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from regroup.runtime.responses import txn_offset_commit_error


def handle(
    ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse | Awaitable[TxnOffsetCommitResponse]:
    masks = known_partitions(
        ctx, [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]
    )
    kept = [
        replace(t, partitions=[p for p, ok in zip(t.partitions, mask, strict=True) if ok])
        for t, mask in zip(request.topics, masks, strict=True)
        if any(mask)
    ]
    if not kept:
        return _merge(request, masks, None)
    filtered = replace(request, topics=kept)
    coord = coordinator(ctx)
    if coord is None:
        error = txn_offset_commit_error(filtered, ctx.api_version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return _merge(request, masks, error)
    pending = coord.txn_offset_commit(ctx.client_id, ctx.client_address, ctx.api_version, filtered)

    async def finish() -> TxnOffsetCommitResponse:
        return _merge(request, masks, await pending)

    return finish()


def _merge(
    request: TxnOffsetCommitRequest, masks: list[list[bool]], answered: TxnOffsetCommitResponse | None
) -> TxnOffsetCommitResponse:
    results = iter([p for t in answered.topics for p in t.partitions] if answered is not None else [])
    topics: list[TxnOffsetCommitResponseTopic] = []
    for topic, mask in zip(request.topics, masks, strict=True):
        partitions: list[TxnOffsetCommitResponsePartition] = []
        for p, ok in zip(topic.partitions, mask, strict=True):
            result = next(results, None) if ok else None
            if result is None:
                code = ErrorCode.UNKNOWN_SERVER_ERROR if ok else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result = TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            partitions.append(result)
        topics.append(TxnOffsetCommitResponseTopic(name=topic.name, partitions=partitions))
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=topics)


def register(registry: HandlerRegistry) -> None:
    install(registry)
    registry.register(ApiKey.TXN_OFFSET_COMMIT, 0, 4, handle)
