"""ListGroups (key 16) v0-5: every group of every coordinator partition this node leads.

The whole request fails with COORDINATOR_LOAD_IN_PROGRESS while any partition is loading (as Kafka);
unloaded partitions are skipped. v4 filters by state, v5 by group type (both case-insensitive).
"""

from __future__ import annotations

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse


async def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    coord = coordinator(ctx)
    if coord is None:
        return ListGroupsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    version = ctx.api_version
    states = request.states_filter if version >= 4 else []
    types = request.types_filter if version >= 5 else []
    error, groups = await coord.list_groups(states, types)
    return ListGroupsResponse(throttle_time_ms=0, error_code=error, groups=groups)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.LIST_GROUPS, 0, 5, handle)
