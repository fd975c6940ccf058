"""Shared by the group API handlers: the coordinator service, its lifecycle hooks and its settings."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from regroup.broker.config import BrokerConfig
from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.group.config import GroupConfig
from regroup.protocol.errors import ErrorCode
from regroup.runtime.coordinator import CoordinatorConfig, GroupCoordinator
from regroup.runtime.events import GroupEventsConfig

if TYPE_CHECKING:
    from regroup.broker.state import Broker

__all__ = ["SERVICE", "coordinator", "coordinator_config", "install", "merge_partitions", "split_known"]

_Topic = TypeVar("_Topic", bound=Any)  # a request topic: ``name`` and ``partitions`` with ``partition_index``
_Answer = TypeVar("_Answer")

SERVICE: Final = "group_coordinator"

_installed: weakref.WeakSet[HandlerRegistry] = weakref.WeakSet()


def coordinator_config(config: BrokerConfig) -> CoordinatorConfig:
    """The coordinator's settings from the broker's (Kafka's names)."""
    return CoordinatorConfig(
        group=GroupConfig(
            group_min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
            group_initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            group_max_size=config.get_int("group.max.size"),
            offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=config.get_int("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=config.get_int("offset.metadata.max.bytes"),
            offsets_topic_num_partitions=config.get_int("offsets.topic.num.partitions"),
            offsets_commit_value_version=config.get_int("offsets.commit.value.version"),
        ),
        offsets_topic_segment_bytes=config.get_int("offsets.topic.segment.bytes"),
        offsets_topic_compression_codec=config.get_int("offsets.topic.compression.codec"),
        offsets_load_buffer_size=config.get_int("offsets.load.buffer.size"),
        offsets_commit_timeout_ms=config.get_int("offsets.commit.timeout.ms"),
        # The broker's log cleaner compacts every cleanup.policy=compact partition, this one included.
        compaction_interval_ms=None,
        group_events=GroupEventsConfig(
            enabled=bool(config.get("group.events.enable")),
            retention_ms=config.get_int("group.events.retention.ms"),
            retention_bytes=config.get_int("group.events.retention.bytes"),
        ),
    )


async def _start(broker: Broker) -> None:
    coord = GroupCoordinator(
        broker.logs, coordinator_config(broker.config), clock=broker.coordinator_clock, gate_for=broker.gate
    )
    broker.services[SERVICE] = coord
    await coord.start()

    def shutting_down(_: object) -> None:
        # Resign at once so parked JoinGroup/SyncGroup requests are answered (NOT_COORDINATOR) while the
        # server waits for in-flight requests, instead of holding the shutdown for its grace period.
        coord.begin_shutdown()

    broker.stopping.add_done_callback(shutting_down)


async def _stop(broker: Broker) -> None:
    coord = broker.services.get(SERVICE)
    if isinstance(coord, GroupCoordinator):
        await coord.stop()


def install(registry: HandlerRegistry) -> None:
    """Add the coordinator's start/stop hooks to ``registry`` (once, whichever group module asks first)."""
    if registry in _installed:
        return
    _installed.add(registry)
    registry.on_start(_start)
    registry.on_stop(_stop)


def coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    coord = ctx.broker.services.get(SERVICE)
    return coord if isinstance(coord, GroupCoordinator) and coord.running else None


def split_known(ctx: RequestContext, topics: Sequence[_Topic]) -> tuple[list[list[bool]], list[_Topic]]:
    """Which requested partitions exist (one mask per topic) and the request topics cut down to them
    (topics left without a partition dropped). Kafka's broker answers the others
    UNKNOWN_TOPIC_OR_PARTITION itself before consulting the coordinator (OffsetCommit, TxnOffsetCommit,
    OffsetDelete)."""
    logs = ctx.broker.logs
    masks: list[list[bool]] = []
    kept: list[_Topic] = []
    for topic in topics:
        info = logs.topic(topic.name)
        count = -1 if info is None else info.partitions
        mask = [0 <= p.partition_index < count for p in topic.partitions]
        masks.append(mask)
        if any(mask):
            partitions = [p for p, ok in zip(topic.partitions, mask, strict=True) if ok]
            kept.append(replace(topic, partitions=partitions))
    return masks, kept


def merge_partitions(
    topics: Sequence[_Topic],
    masks: list[list[bool]],
    answered: Iterable[_Answer],
    unanswered: Callable[[int, ErrorCode], _Answer],
) -> list[list[_Answer]]:
    """Per requested topic, its partitions' answers in request order: the coordinator's ``answered`` ones
    (in the order :func:`split_known` kept them) for known partitions, ``unanswered(partition_index,
    code)`` for the rest — UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_SERVER_ERROR should the coordinator
    have left one out."""
    results = iter(answered)
    merged: list[list[_Answer]] = []
    for topic, mask in zip(topics, masks, strict=True):
        partitions: list[_Answer] = []
        for p, ok in zip(topic.partitions, mask, strict=True):
            result = next(results, None) if ok else None
            if result is None:
                code = ErrorCode.UNKNOWN_SERVER_ERROR if ok else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result = unanswered(p.partition_index, code)
            partitions.append(result)
        merged.append(partitions)
    return merged
