"""OffsetDelete (key 47) v0.

Partitions of unknown topics (or beyond a topic's partition count) get UNKNOWN_TOPIC_OR_PARTITION from
the broker; the coordinator is always consulted, even when no partition survives (it validates the group).
A group-level error is the whole answer, as in Kafka's ``KafkaApis``; otherwise both answers are merged
in request order.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, install, known_partitions
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from regroup.runtime.responses import offset_delete_error


def handle(
    ctx: RequestContext, request: OffsetDeleteRequest
) -> OffsetDeleteResponse | Awaitable[OffsetDeleteResponse]:
    masks = known_partitions(
        ctx, [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]
    )
    kept = [
        replace(t, partitions=[p for p, ok in zip(t.partitions, mask, strict=True) if ok])
        for t, mask in zip(request.topics, masks, strict=True)
        if any(mask)
    ]
    coord = coordinator(ctx)
    if coord is None:
        return offset_delete_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    pending = coord.offset_delete(ctx.api_version, replace(request, topics=kept))

    async def finish() -> OffsetDeleteResponse:
        answered = await pending
        if answered.error_code != ErrorCode.NONE:
            return OffsetDeleteResponse(error_code=answered.error_code, throttle_time_ms=0)
        results = iter([p for t in answered.topics for p in t.partitions])
        topics: list[OffsetDeleteResponseTopic] = []
        for topic, mask in zip(request.topics, masks, strict=True):
            partitions: list[OffsetDeleteResponsePartition] = []
            for p, ok in zip(topic.partitions, mask, strict=True):
                result = next(results, None) if ok else None
                if result is None:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR if ok else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    result = OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=code)
                partitions.append(result)
            topics.append(OffsetDeleteResponseTopic(name=topic.name, partitions=partitions))
        return OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=topics)

    return finish()


def register(registry: HandlerRegistry) -> None:
    install(registry)
    registry.register(ApiKey.OFFSET_DELETE, 0, 0, handle)
