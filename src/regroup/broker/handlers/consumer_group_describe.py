"""ConsumerGroupDescribe (key 69) v0–v1: KIP-848 consumer groups as admins see them, each from its
coordinator partition, in request order. v1 (KIP-1099) adds each member's MemberType (0 classic, 1 consumer).

Served only when ``group.coordinator.rebalance.protocols`` lists ``consumer`` (as ConsumerGroupHeartbeat).
With ``IncludeAuthorizedOperations`` a described group reports every operation a group resource supports,
as Kafka does without an authorizer; otherwise the field keeps its "not requested" default.
"""

from __future__ import annotations

from regroup.broker.config import BrokerConfig
from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._consumer_groups import consumer_protocol_enabled
from regroup.broker.handlers._groups import coordinator
from regroup.broker.handlers.describe_groups import GROUP_OPERATIONS
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from regroup.runtime.responses import consumer_described_group_error


async def handle(ctx: RequestContext, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    coord = coordinator(ctx)
    if coord is None:
        groups = [
            consumer_described_group_error(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in request.group_ids
        ]
    else:
        groups = await coord.consumer_group_describe(request.group_ids, ctx.api_version)
    if request.include_authorized_operations:
        for group in groups:
            if group.error_code == ErrorCode.NONE:
                group.authorized_operations = GROUP_OPERATIONS
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)


def served(config: BrokerConfig) -> bool:
    return consumer_protocol_enabled(config)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, handle)
