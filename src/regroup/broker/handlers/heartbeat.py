"""Heartbeat (key 12) v0-4: handed to the group coordinator (NONE while the partition loads, as Kafka)."""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, now_or_later
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.runtime.responses import heartbeat_error


def handle(
    ctx: RequestContext, request: HeartbeatRequest
) -> HeartbeatResponse | Awaitable[HeartbeatResponse]:
    coord = coordinator(ctx)
    if coord is None:
        return heartbeat_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return now_or_later(coord.heartbeat(ctx.client_id, ctx.client_address, ctx.api_version, request))


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.HEARTBEAT, 0, 4, handle)
