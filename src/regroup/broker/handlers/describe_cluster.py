"""DescribeCluster (key 60) v0-1: this node as the only broker and as the controller clients see."""

from __future__ import annotations

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._common import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)

_ENDPOINT_BROKERS = 1


def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    broker = ctx.broker
    if ctx.api_version >= 1 and request.endpoint_type != _ENDPOINT_BROKERS:
        # Kafka brokers refuse to describe controllers (only controllers do that, KIP-919).
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="The broker does not support controller endpoints",
            endpoint_type=request.endpoint_type,
            cluster_id=broker.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    host, port = ctx.advertised()
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=_ENDPOINT_BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[DescribeClusterBroker(broker.node_id, host, port, None)],
        cluster_authorized_operations=(
            CLUSTER_OPERATIONS
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle)
