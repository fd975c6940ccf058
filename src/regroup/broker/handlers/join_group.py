"""JoinGroup (key 11) v0-9: handed to the group coordinator, which may park it until the join phase ends.

The response comes once the group's records are durable; a parked request is answered by the coordinator
when the join phase completes, when the member is removed, or with NOT_COORDINATOR when its partition is
unloaded (shutdown included). Client-side timeouts are the client's business. Kafka 4.0 dropped v0-1
(KIP-896) and 4.0.1 restored them (KAFKA-19444); regroup serves all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, now_or_later
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from regroup.runtime.responses import join_group_error


def handle(
    ctx: RequestContext, request: JoinGroupRequest
) -> JoinGroupResponse | Awaitable[JoinGroupResponse]:
    coord = coordinator(ctx)
    if coord is None:
        return join_group_error(request, ctx.api_version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return now_or_later(coord.join_group(ctx.client_id, ctx.client_address, ctx.api_version, request))


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.JOIN_GROUP, 0, 9, handle)
