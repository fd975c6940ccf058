"""DeleteGroups (key 42) v0-2: duplicate ids collapsed, each group deleted by its coordinator partition,
results in request order (answered once the tombstones are durable)."""

from __future__ import annotations

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from regroup.runtime.responses import deletable_group_error


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    group_ids = list(dict.fromkeys(request.groups_names))
    coord = coordinator(ctx)
    if coord is None:
        results = [deletable_group_error(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in group_ids]
    else:
        results = await coord.delete_groups(group_ids)
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.DELETE_GROUPS, 0, 2, handle)
