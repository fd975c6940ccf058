"""Metadata (key 3) v0-12: this node as the only broker, controller and leader of every partition.

Unknown topics are auto-created when the request allows it (always before v4) and
``auto.create.topics.enable`` is on. Kafka answers LEADER_NOT_AVAILABLE for a topic whose creation it has
just requested and lets the client ask again; regroup creates the topic synchronously and answers with its
metadata at once, which is exactly what that second request would return, minus a round trip.
"""

from __future__ import annotations

import uuid

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._common import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
    TOPIC_OPERATIONS,
    topic_name_error,
)
from regroup.broker.topics import INTERNAL_TOPICS, auto_create_topic
from regroup.log import TopicInfo
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


def _topic(info: TopicInfo, node_id: int, ops: int) -> MetadataResponseTopic:
    replicas = [node_id]
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=[
            MetadataResponsePartition(
                error_code=ErrorCode.NONE,
                partition_index=index,
                leader_id=node_id,
                leader_epoch=0,
                replica_nodes=replicas,
                isr_nodes=replicas,
                offline_replicas=[],
            )
            for index in range(info.partitions)
        ],
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


def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    logs = broker.logs
    node_id = broker.node_id
    version = ctx.api_version
    ops = TOPIC_OPERATIONS if request.include_topic_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
    topics: list[MetadataResponseTopic] = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        topics = [_topic(info, node_id, ops) for info in logs.topics()]
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
                info = logs.topic_by_id(topic_id)
                if info is None:
                    topics.append(_error(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
                else:
                    topics.append(_topic(info, node_id, ops))
                continue
            if name in seen:
                continue
            seen.add(name)
            info = logs.topic(name)
            if info is not None:
                topics.append(_topic(info, node_id, ops))
                continue
            if topic_name_error(name) is not None:
                topics.append(_error(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            if not allow_create:
                topics.append(_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            outcome = auto_create_topic(broker, name)
            if outcome.info is not None:
                topics.append(_topic(outcome.info, node_id, ops))
            else:
                topics.append(_error(name, outcome.error))
    host, port = ctx.advertised()
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(node_id, host, port, None)],
        cluster_id=broker.cluster_id,
        controller_id=node_id,
        topics=topics,
        cluster_authorized_operations=(
            CLUSTER_OPERATIONS
            if request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.METADATA, 0, 12, handle)
