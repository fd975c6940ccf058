"""DescribeCluster (key 60) v0-1: the registered nodes and the controller (a single node is both)."""

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
    topology = broker.topology
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=_ENDPOINT_BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=topology.controller_id(),
        brokers=[
            DescribeClusterBroker(n.node_id, n.host, n.port, n.rack)
            for n in topology.brokers(ctx.listener, ctx.advertised())
        ],
        cluster_authorized_operations=(
            CLUSTER_OPERATIONS
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle)
