"""OffsetCommit (key 8) v1-9.

Broker-level checks come first, as in Kafka's ``KafkaApis``: a partition of an unknown topic, or beyond the
topic's partition count, gets UNKNOWN_TOPIC_OR_PARTITION; the rest goes to the group coordinator and the
two answers are merged back in request order. When no partition survives, the coordinator is not consulted
(no group validation at all). The response comes once the commit records are durable.

v0 is not served: it stored offsets in ZooKeeper, a KRaft broker answers it with UNSUPPORTED_VERSION and
Kafka 4 no longer advertises it (KIP-896); no client that negotiates versions needs it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, install, known_partitions
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.runtime.responses import offset_commit_error


def handle(
    ctx: RequestContext, request: OffsetCommitRequest
) -> OffsetCommitResponse | Awaitable[OffsetCommitResponse]:
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
        return _merge(request, masks, offset_commit_error(filtered, ErrorCode.COORDINATOR_NOT_AVAILABLE))
    # Kafka 4.3 resolves each committed topic's id from its metadata and stores it in the offset record.
    topic_ids = {t.name: info.topic_id for t in kept if (info := ctx.broker.logs.topic(t.name)) is not None}
    pending = coord.offset_commit(ctx.client_id, ctx.client_address, ctx.api_version, filtered, topic_ids)

    async def finish() -> OffsetCommitResponse:
        return _merge(request, masks, await pending)

    return finish()


def _merge(
    request: OffsetCommitRequest, masks: list[list[bool]], answered: OffsetCommitResponse | None
) -> OffsetCommitResponse:
    results = iter([p for t in answered.topics for p in t.partitions] if answered is not None else [])
    topics: list[OffsetCommitResponseTopic] = []
    for topic, mask in zip(request.topics, masks, strict=True):
        partitions: list[OffsetCommitResponsePartition] = []
        for p, ok in zip(topic.partitions, mask, strict=True):
            result = next(results, None) if ok else None
            if result is None:
                code = ErrorCode.UNKNOWN_SERVER_ERROR if ok else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result = OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            partitions.append(result)
        topics.append(OffsetCommitResponseTopic(name=topic.name, partitions=partitions))
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def register(registry: HandlerRegistry) -> None:
    install(registry)
    registry.register(ApiKey.OFFSET_COMMIT, 1, 9, handle)
