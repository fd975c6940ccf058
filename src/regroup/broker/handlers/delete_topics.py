"""DeleteTopics (key 20) v0-6, by name or (v6) by topic id, with the checks of Kafka's ``ControllerApis``.

Internal topics (``__consumer_offsets``) are refused with INVALID_REQUEST: deleting them would discard every
group's committed offsets (Kafka's tools refuse too). A topic is deleted once no fsync of its partitions is
running (a flush and a delete of the same log must not overlap).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, coordinator_of
from regroup.broker.topics import INTERNAL_TOPICS
from regroup.log import PartitionLog
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from regroup.protocol.primitives import ZERO_UUID

log = logging.getLogger("regroup.broker.topics")

_T = TypeVar("_T", bound=Hashable)
Add = Callable[[str | None, uuid.UUID, ErrorCode, str | None], None]


def handle(
    ctx: RequestContext, request: DeleteTopicsRequest
) -> DeleteTopicsResponse | Awaitable[DeleteTopicsResponse]:
    broker = ctx.broker
    version = ctx.api_version
    results: list[DeletableTopicResult] = []

    def add(name: str | None, topic_id: uuid.UUID, code: ErrorCode, message: str | None) -> None:
        results.append(
            DeletableTopicResult(
                name=name if name is not None or version >= 6 else "",
                topic_id=topic_id if version >= 6 else ZERO_UUID,
                error_code=code,
                error_message=message if version >= 5 else None,
            )
        )

    names: list[str] = list(request.topic_names)
    ids: list[uuid.UUID] = []
    for entry in request.topics:
        if entry.name is None:
            if entry.topic_id == ZERO_UUID:
                add(None, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
            else:
                ids.append(entry.topic_id)
        elif entry.topic_id == ZERO_UUID:
            names.append(entry.name)
        else:
            add(
                entry.name,
                entry.topic_id,
                ErrorCode.INVALID_REQUEST,
                "You may not specify both topic name and topic id.",
            )

    if not broker.config.get("delete.topic.enable"):
        code = ErrorCode.INVALID_REQUEST if version < 3 else ErrorCode.TOPIC_DELETION_DISABLED
        message = "Topic deletion is disabled."
        for name in dict.fromkeys(names):
            add(name, ZERO_UUID, code, message)
        for topic_id in dict.fromkeys(ids):
            add(None, topic_id, code, message)
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    targets: dict[str, uuid.UUID] = {}  # name -> id, in request order
    for name in _unique(
        names, lambda n: add(n, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    ):
        info = broker.logs.topic(name)
        if info is None:
            add(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        else:
            targets[name] = info.topic_id
    for topic_id in _unique(ids, lambda i: add(None, i, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")):
        by_id = broker.logs.topic_by_id(topic_id)
        if by_id is None:
            add(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID, None)
        elif by_id.name in targets:
            add(
                by_id.name,
                topic_id,
                ErrorCode.INVALID_REQUEST,
                "The provided topic name maps to an ID that was already supplied.",
            )
            del targets[by_id.name]
        else:
            targets[by_id.name] = topic_id
    for name in [n for n in targets if n in INTERNAL_TOPICS]:
        add(
            name,
            targets.pop(name),
            ErrorCode.INVALID_REQUEST,
            f"Topic {name} is a kafka internal topic and is not allowed to be deleted.",
        )

    cluster = broker.cluster
    if cluster is not None:

        async def in_cluster() -> DeleteTopicsResponse:
            # Removed from the metadata store; every replica then deletes its copy (delete_local_topic).
            for name, topic_id in targets.items():
                try:
                    await cluster.node.delete_topic(name)
                except KafkaError as exc:
                    add(name, topic_id, exc.code, exc.message)
                    continue
                log.info("Deleted topic %s", name)
                add(name, topic_id, ErrorCode.NONE, None)
            return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

        return in_cluster()

    coord = coordinator(ctx)
    if coord is None and all(broker.gate(plog).idle for plog in _partition_logs(broker, targets)):
        _delete_all(broker, targets, add)
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    async def later() -> DeleteTopicsResponse:
        for plog in _partition_logs(broker, targets):
            gate = broker.gate(plog)
            await gate.turn()
            gate.release()
        deleted = _delete_all(broker, targets, add)
        if coord is not None and deleted:
            await coord.on_partitions_deleted(deleted)
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    return later()


def _unique(items: list[_T], on_duplicate: Callable[[_T], None]) -> list[_T]:
    counts: dict[_T, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    out = []
    for item, count in counts.items():
        if count > 1:
            on_duplicate(item)
        else:
            out.append(item)
    return out


def _partition_logs(broker: BrokerPort, targets: dict[str, uuid.UUID]) -> list[PartitionLog]:
    plogs: list[PartitionLog] = []
    for name in targets:
        info = broker.logs.topic(name)
        if info is None:
            continue
        for index in range(info.partitions):
            plog = broker.logs.partition(name, index)
            if plog is not None:
                plogs.append(plog)
    return plogs


def _delete_all(broker: BrokerPort, targets: dict[str, uuid.UUID], add: Add) -> list[tuple[str, int]]:
    """Delete the topics; the deleted partitions."""
    deleted: list[tuple[str, int]] = []
    for name, topic_id in targets.items():
        info = broker.logs.topic(name)
        if info is None or info.topic_id != topic_id:
            add(name, topic_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            continue
        plogs = _partition_logs(broker, {name: topic_id})
        deleted += [(name, p) for p in range(info.partitions)]
        broker.logs.delete_topic(name)
        for plog in plogs:
            broker.gates.forget(plog)
        log.info("Deleted topic %s", name)
        add(name, topic_id, ErrorCode.NONE, None)
    return deleted


async def delete_local_topic(broker: BrokerPort, name: str) -> None:
    """A cluster node's copy of a topic the cluster deleted: removed once no fsync of it runs; its
    committed offsets go from every group this node coordinates."""
    info = broker.logs.topic(name)
    if info is None:
        return
    targets = {name: info.topic_id}
    for plog in _partition_logs(broker, targets):
        gate = broker.gate(plog)
        await gate.turn()
        gate.release()
    deleted = _delete_all(broker, targets, lambda *_: None)
    coord = coordinator_of(broker)
    if coord is not None and deleted:
        await coord.on_partitions_deleted(deleted)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.DELETE_TOPICS, 0, 6, handle)
