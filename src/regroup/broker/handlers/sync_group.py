"""SyncGroup (key 14) v0-5: handed to the group coordinator, which parks it until the leader's assignment
is durable (or answers at once in Stable).

As Kafka's ``KafkaApis``, a v5+ request without its mandatory protocol type and name is answered
INCONSISTENT_GROUP_PROTOCOL before the coordinator sees it.
"""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, now_or_later
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from regroup.runtime.responses import sync_group_error


def handle(
    ctx: RequestContext, request: SyncGroupRequest
) -> SyncGroupResponse | Awaitable[SyncGroupResponse]:
    if ctx.api_version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return sync_group_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    coord = coordinator(ctx)
    if coord is None:
        return sync_group_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return now_or_later(coord.sync_group(ctx.client_id, ctx.client_address, ctx.api_version, request))


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.SYNC_GROUP, 0, 5, handle)
