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
from regroup.broker.handlers._groups import coordinator, merge_partitions, split_known, then
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
    masks, kept = split_known(ctx, request.topics)
    coord = coordinator(ctx)
    if coord is None:
        return offset_delete_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    pending = coord.offset_delete(
        ctx.api_version, request if masks is None else replace(request, topics=kept)
    )

    def finish(answered: OffsetDeleteResponse) -> OffsetDeleteResponse:
        if answered.error_code != ErrorCode.NONE:
            return OffsetDeleteResponse(error_code=answered.error_code, throttle_time_ms=0)
        merged = merge_partitions(
            request.topics,
            masks,
            [p for t in answered.topics for p in t.partitions],
            lambda index, code: OffsetDeleteResponsePartition(partition_index=index, error_code=code),
        )
        topics = [
            OffsetDeleteResponseTopic(name=t.name, partitions=ps)
            for t, ps in zip(request.topics, merged, strict=True)
        ]
        return OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=topics)

    return then(pending, finish)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.OFFSET_DELETE, 0, 0, handle)
