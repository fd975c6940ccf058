"""CreateTopics (key 19) v0-7, validated in the order of Kafka's controller.

``num_partitions`` -1 takes ``num.partitions``. On a single node replication factor -1 or 1 is accepted,
anything larger gets INVALID_REPLICATION_FACTOR; a cluster node places the replicas (-1:
``default.replication.factor``) on the running nodes, INVALID_REPLICATION_FACTOR when there are too few.
Manual assignments get INVALID_REQUEST. v5+ results carry
the partition count, replication factor and every topic config with its source; v7+ the topic id.
"""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers.describe_configs import topic_config_entries
from regroup.broker.topics import CreateOutcome, create_topic, create_topic_in_cluster
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from regroup.protocol.primitives import ZERO_UUID


def handle(
    ctx: RequestContext, request: CreateTopicsRequest
) -> CreateTopicsResponse | Awaitable[CreateTopicsResponse]:
    wanted, results, duplicates = _parse(request)
    broker = ctx.broker
    if broker.cluster is None:
        for topic, configs in wanted:
            outcome = create_topic(
                broker,
                topic.name,
                topic.num_partitions,
                topic.replication_factor,
                configs,
                has_assignments=bool(topic.assignments),
                validate_only=request.validate_only,
            )
            results.append(_result(broker, topic.name, outcome, request.validate_only))
        return _response(results, duplicates)

    async def in_cluster() -> CreateTopicsResponse:
        for topic, configs in wanted:
            outcome = await create_topic_in_cluster(
                broker,
                topic.name,
                topic.num_partitions,
                topic.replication_factor,
                configs,
                has_assignments=bool(topic.assignments),
                validate_only=request.validate_only,
            )
            results.append(_result(broker, topic.name, outcome, request.validate_only))
        return _response(results, duplicates)

    return in_cluster()


def _parse(
    request: CreateTopicsRequest,
) -> tuple[list[tuple[CreatableTopic, dict[str, str | None]]], list[CreatableTopicResult], list[str]]:
    """The topics to create with their configs, the results of those refused already, and duplicated
    names (answered last, as Kafka does)."""
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    wanted: list[tuple[CreatableTopic, dict[str, str | None]]] = []
    results: list[CreatableTopicResult] = []
    duplicates: list[str] = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            if topic.name not in duplicates:
                duplicates.append(topic.name)
            continue
        configs: dict[str, str | None] = {}
        duplicate_config = None
        for entry in topic.configs:
            if entry.name in configs:
                duplicate_config = entry.name
            configs[entry.name] = entry.value
        if duplicate_config is not None:
            results.append(
                _failed(topic.name, ErrorCode.INVALID_REQUEST, f"Duplicate config name: {duplicate_config}")
            )
            continue
        wanted.append((topic, configs))
    return wanted, results, duplicates


def _result(
    broker: BrokerPort, name: str, outcome: CreateOutcome, validate_only: bool
) -> CreatableTopicResult:
    if outcome.error != ErrorCode.NONE or outcome.info is None:
        return _failed(name, outcome.error, outcome.message)
    info = outcome.info
    entries = topic_config_entries(broker, info, overrides=outcome.configs)
    return CreatableTopicResult(
        name=name,
        topic_id=ZERO_UUID if validate_only else info.topic_id,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=outcome.partitions,
        replication_factor=outcome.replication_factor,
        configs=[
            CreatableTopicConfigs(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=False,
            )
            for e in entries
        ],
    )


def _response(results: list[CreatableTopicResult], duplicates: list[str]) -> CreateTopicsResponse:
    for name in duplicates:
        results.append(_failed(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def _failed(name: str, code: ErrorCode, message: str | None) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=name,
        topic_id=ZERO_UUID,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.CREATE_TOPICS, 0, 7, handle)
