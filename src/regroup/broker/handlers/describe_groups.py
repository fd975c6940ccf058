"""DescribeGroups (key 15) v0-6: each group from its coordinator partition, in request order.

A group that does not exist (or is a consumer-protocol group, which DescribeGroups does not describe) is
answered Dead; from v6 (KIP-1043) also with GROUP_ID_NOT_FOUND and Kafka's message ("Group g not found.",
"Group g is not a classic group."), before v6 without an error.

With ``IncludeAuthorizedOperations`` (v3+), a described group reports every operation a group resource
supports (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS — group configs exist since Kafka 4.0),
which is what Kafka reports when no authorizer is configured.
"""

from __future__ import annotations

from typing import Final

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.runtime.responses import described_group_error

# AclOperation codes READ 3, DELETE 6, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11 as a bit field
# (3400, as Apache Kafka 4.3 reports it).
GROUP_OPERATIONS: Final = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coord = coordinator(ctx)
    if coord is None:
        groups = [described_group_error(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in request.groups]
    else:
        groups = await coord.describe_groups(request.groups, ctx.api_version)
    if ctx.api_version >= 3 and request.include_authorized_operations:
        for group in groups:
            if group.error_code == ErrorCode.NONE:
                group.authorized_operations = GROUP_OPERATIONS
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.DESCRIBE_GROUPS, 0, 6, handle)
