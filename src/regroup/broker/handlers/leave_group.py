"""LeaveGroup (key 13) v0-5: handed to the group coordinator (single member before v3, a batch from v3)."""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, now_or_later
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from regroup.runtime.responses import leave_group_error


def handle(
    ctx: RequestContext, request: LeaveGroupRequest
) -> LeaveGroupResponse | Awaitable[LeaveGroupResponse]:
    coord = coordinator(ctx)
    if coord is None:
        return leave_group_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return now_or_later(coord.leave_group(ctx.client_id, ctx.client_address, ctx.api_version, request))


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.LEAVE_GROUP, 0, 5, handle)
