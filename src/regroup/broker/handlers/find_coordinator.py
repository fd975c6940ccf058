"""FindCoordinator (key 10) v0-6: the coordinator of a group is the leader of its ``__consumer_offsets``
partition (a single node coordinates every group); there is no transaction or share coordinator.

Group keys (key type 0) are answered with that node and its endpoint on the listener the client used,
whether or not the partition has finished loading (as Kafka: the leader is the coordinator); in a cluster
the first group lookup creates ``__consumer_offsets`` and is answered COORDINATOR_NOT_AVAILABLE. Transaction
keys get COORDINATOR_NOT_AVAILABLE (regroup has no transaction coordinator); share keys
(``groupId:topicId:partition``) are INVALID_REQUEST before v6 or when malformed, else
COORDINATOR_NOT_AVAILABLE. Unknown key types are INVALID_REQUEST. Batched from v4. Kafka's response quirks
are kept: an error carries node -1, host "" and port -1; a v0-3 answer carries ``Errors.message()`` as its
error message, which is the literal "NONE" on success; v4+ entries leave it empty (except for an unknown key
type, which fails the whole request through Kafka's error-response path, message included).
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator
from regroup.cluster.topology import NodeEndpoint
from regroup.group.config import partition_for
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from regroup.runtime.coordinator import OFFSETS_TOPIC

GROUP: Final = 0
TRANSACTION: Final = 1
SHARE: Final = 2


def _valid_share_key(key: str) -> bool:
    """Kafka's ``SharePartitionKey.validate``: ``<group id>:<topic id>:<partition>``."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return False
    try:
        topic_id = base64.urlsafe_b64decode(parts[1] + "==")
        partition = int(parts[2])
    except (ValueError, binascii.Error):
        return False
    return len(topic_id) == 16 and partition >= 0


def _lookup(ctx: RequestContext, key_type: int, key: str) -> ErrorCode | NodeEndpoint:
    """The coordinator of ``key``, or the error to answer."""
    version = ctx.api_version
    if key_type == GROUP:
        return _group_coordinator(ctx, key)
    if key_type == TRANSACTION:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if key_type == SHARE and version >= 6 and _valid_share_key(key):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.INVALID_REQUEST


def _group_coordinator(ctx: RequestContext, group_id: str) -> ErrorCode | NodeEndpoint:
    """The leader of the group's ``__consumer_offsets`` partition (Kafka names it even while it loads);
    COORDINATOR_NOT_AVAILABLE without one, or while this node, its leader, has lost its session."""
    broker = ctx.broker
    advertised = ctx.advertised()
    if broker.cluster is None:
        if coordinator(ctx) is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return NodeEndpoint(broker.node_id, *advertised)
    topology = broker.topology
    offsets = topology.topic(OFFSETS_TOPIC)
    if offsets is None or offsets.partitions <= 0:
        # As Kafka: the first lookup creates the topic; the client asks again.
        broker.request_internal_topics()
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    lead = topology.partition(OFFSETS_TOPIC, partition_for(group_id, offsets.partitions))
    if lead is None or lead.leader < 0:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if lead.leader == broker.node_id and broker.cluster.node.self_fenced:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    endpoint = topology.node(lead.leader, ctx.listener, advertised)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if endpoint is None else endpoint


def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else GROUP
    if version < 4:
        found = _lookup(ctx, key_type, request.key)
        if isinstance(found, NodeEndpoint):
            return FindCoordinatorResponse(
                throttle_time_ms=0,
                error_code=0,
                error_message="NONE",
                node_id=found.node_id,
                host=found.host,
                port=found.port,
            )
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=found, error_message=found.message, node_id=-1, host="", port=-1
        )
    coordinators: list[Coordinator] = []
    for key in request.coordinator_keys:
        found = _lookup(ctx, key_type, key)
        if isinstance(found, NodeEndpoint):
            coordinators.append(
                Coordinator(key=key, node_id=found.node_id, host=found.host, port=found.port, error_code=0)
            )
        else:
            error = found
            # An unknown key type fails the whole request in Kafka (its error response carries the
            # message); per-key errors (a share key before v6 included) leave the message empty.
            message = "" if key_type in (GROUP, TRANSACTION, SHARE) else error.message
            coordinators.append(
                Coordinator(key=key, node_id=-1, host="", port=-1, error_code=error, error_message=message)
            )
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.FIND_COORDINATOR, 0, 6, handle)
