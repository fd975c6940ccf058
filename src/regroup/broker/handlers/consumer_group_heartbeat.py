"""ConsumerGroupHeartbeat (key 68) v0-1: the KIP-848 consumer protocol's join, heartbeat and leave, handed to
the group coordinator with the current topic metadata.

Served only when ``group.coordinator.rebalance.protocols`` lists ``consumer``; otherwise the API is not
registered, so ApiVersions does not advertise it (Java clients with ``group.protocol=consumer`` then fail
fast, as against a Kafka broker without the protocol). Validation, epochs and assignment are the core's
(:mod:`regroup.group.consumer_group_manager`); no ACLs exist, so GROUP/TOPIC_AUTHORIZATION_FAILED never
arise.
"""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.config import BrokerConfig
from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._consumer_groups import consumer_protocol_enabled
from regroup.broker.handlers._groups import coordinator, now_or_later
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from regroup.runtime.responses import consumer_group_heartbeat_error


def handle(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse | Awaitable[ConsumerGroupHeartbeatResponse]:
    coord = coordinator(ctx)
    if coord is None:
        return consumer_group_heartbeat_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return now_or_later(
        coord.consumer_group_heartbeat(ctx.client_id, ctx.client_address, ctx.api_version, request)
    )


def served(config: BrokerConfig) -> bool:
    return consumer_protocol_enabled(config)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, handle)
