"""Metadata (key 3) v0-12: the nodes, the controller and every partition's leader, leader epoch, replicas
and ISR, as the broker's :class:`~regroup.cluster.topology.Topology` knows them (a single node leads every
partition at epoch 0; a cluster node answers from its metadata image; a partition without a leader is
LEADER_NOT_AVAILABLE).

Unknown topics are auto-created when the request allows it (always before v4) and
``auto.create.topics.enable`` is on. Kafka answers LEADER_NOT_AVAILABLE for a topic whose creation it has
just requested and lets the client ask again; a cluster node does the same, while a single node creates the
topic synchronously and answers with its metadata at once, which is exactly what that second request would
return, minus a round trip.
"""

from __future__ import annotations

import logging
import uuid

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._common import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
    TOPIC_OPERATIONS,
    topic_name_error,
)
from regroup.broker.topics import INTERNAL_TOPICS, auto_create_topic, create_topic_in_cluster
from regroup.cluster.topology import TopicDescription, Topology
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from regroup.protocol.primitives import ZERO_UUID

log = logging.getLogger("regroup.broker.metadata")


def _topic(topology: Topology, topic: TopicDescription, ops: int) -> MetadataResponseTopic:
    partitions: list[MetadataResponsePartition] = []
    for index in range(topic.partitions):
        lead = topology.partition(topic.name, index)
        if lead is None:
            continue
        partitions.append(
            MetadataResponsePartition(
                error_code=ErrorCode.NONE if lead.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=lead.leader,
                leader_epoch=lead.leader_epoch,
                replica_nodes=list(lead.replicas),
                isr_nodes=list(lead.isr),
                offline_replicas=list(lead.offline),
            )
        )
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        topic_authorized_operations=ops,
    )


def _error(name: str | None, code: ErrorCode, topic_id: uuid.UUID = ZERO_UUID) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=[],
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _auto_create(ctx: RequestContext, name: str, ops: int) -> MetadataResponseTopic:
    broker = ctx.broker
    cluster = broker.cluster
    if cluster is None:
        outcome = auto_create_topic(broker, name)
        if outcome.info is None:
            return _error(name, outcome.error)
        described = broker.topology.topic(name)
        return _error(name, outcome.error) if described is None else _topic(broker.topology, described, ops)
    if name in INTERNAL_TOPICS:
        return _error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    async def create() -> None:
        outcome = await create_topic_in_cluster(broker, name, -1, -1, {})
        if outcome.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("Auto-creating topic %s failed: %s %s", name, outcome.error.name, outcome.message)

    # As Kafka: the creation is requested and the client asks again (LEADER_NOT_AVAILABLE meanwhile).
    cluster.run_once(f"create topic {name}", create)
    return _error(name, ErrorCode.LEADER_NOT_AVAILABLE)


def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    topology = broker.topology
    version = ctx.api_version
    ops = TOPIC_OPERATIONS if request.include_topic_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
    topics: list[MetadataResponseTopic] = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        topics = [_topic(topology, t, ops) for t in topology.topics()]
    else:
        allow_create = (version < 4 or request.allow_auto_topic_creation) and bool(
            broker.config.get("auto.create.topics.enable")
        )
        seen: set[str | uuid.UUID] = set()
        for entry in requested:
            name = entry.name
            topic_id = entry.topic_id if version >= 10 else ZERO_UUID
            if name is None or topic_id != ZERO_UUID:
                if version < 12:
                    # Kafka: topic ids in Metadata requests are only supported from v12.
                    topics.append(_error(name, ErrorCode.INVALID_REQUEST, topic_id))
                    continue
                if topic_id in seen:
                    continue
                seen.add(topic_id)
                found = topology.topic_by_id(topic_id)
                if found is None:
                    topics.append(_error(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
                else:
                    topics.append(_topic(topology, found, ops))
                continue
            if name in seen:
                continue
            seen.add(name)
            found = topology.topic(name)
            if found is not None:
                topics.append(_topic(topology, found, ops))
                continue
            if topic_name_error(name) is not None:
                topics.append(_error(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            if not allow_create:
                topics.append(_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            topics.append(_auto_create(ctx, name, ops))
    advertised = ctx.advertised()
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponseBroker(n.node_id, n.host, n.port, n.rack)
            for n in topology.brokers(ctx.listener, advertised)
        ],
        cluster_id=broker.cluster_id,
        controller_id=topology.controller_id(),
        topics=topics,
        cluster_authorized_operations=(
            CLUSTER_OPERATIONS
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.METADATA, 0, 12, handle)
