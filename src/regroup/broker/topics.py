"""Topic administration shared by Metadata (auto-creation), CreateTopics and DeleteTopics.

Validation follows Kafka's controller (``ReplicationControlManager``) in order: name, collision with an
existing name that differs only by '.' vs '_', existence, partition count, replication factor, configs.
``__consumer_offsets`` is always created the way Kafka creates it (``offsets.topic.*`` settings, compacted,
marked internal), whoever asks for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from regroup.broker.context import BrokerPort
from regroup.broker.handlers._common import topic_name_error
from regroup.cluster.store import StoreError
from regroup.log import TopicInfo, topic_id_to_str
from regroup.log.config import validate_topic_configs
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.group_events import GROUP_EVENTS_TOPIC

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "CreateOutcome",
    "auto_create_topic",
    "collision",
    "create_topic",
    "create_topic_in_cluster",
    "internal_topic_configs",
]

log = logging.getLogger("regroup.broker.topics")

OFFSETS_TOPIC: Final = "__consumer_offsets"
TRANSACTION_TOPIC: Final = "__transaction_state"
SHARE_STATE_TOPIC: Final = "__share_group_state"
# __group_events is regroup's rebalance timeline (written by the coordinator, readable by anyone).
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC, SHARE_STATE_TOPIC, GROUP_EVENTS_TOPIC})


@dataclass(slots=True)
class CreateOutcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    info: TopicInfo | None = None
    partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # the topic's overrides


def collision(broker: BrokerPort, name: str) -> str | None:
    """The existing topic whose name collides with ``name`` ('.' and '_' are interchangeable in metric
    names, so Kafka refuses such pairs), or None."""
    if "." not in name and "_" not in name:
        return None
    key = name.replace(".", "_")
    for topic in broker.topology.topics():
        if topic.name != name and topic.name.replace(".", "_") == key:
            return topic.name
    return None


def internal_topic_configs(broker: BrokerPort, name: str) -> tuple[int, dict[str, str]]:
    """Partitions and configs Kafka gives an internal topic it creates itself."""
    config = broker.config
    if name == OFFSETS_TOPIC:
        return config.get_int("offsets.topic.num.partitions"), {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
        }
    raise KeyError(name)


@dataclass(frozen=True, slots=True)
class _Creation:
    """A CreateTopics request for one topic after validation: what to create."""

    name: str
    partitions: int
    replication_factor: int
    overrides: dict[str, str]
    internal: bool


def _validate(
    broker: BrokerPort,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str | None],
    has_assignments: bool,
) -> _Creation | CreateOutcome:
    """Kafka's checks in the controller's order; the creation to make, or the outcome refusing it."""
    problem = topic_name_error(name)
    if problem is not None:
        return CreateOutcome(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if broker.topology.topic(name) is not None:
        return CreateOutcome(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    other = collision(broker, name)
    if other is not None:
        return CreateOutcome(
            ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}"
        )
    if has_assignments:
        return CreateOutcome(
            ErrorCode.INVALID_REQUEST, "Manual replica assignments are not supported by regroup."
        )
    if num_partitions == -1:
        num_partitions = (
            internal_topic_configs(broker, name)[0]
            if name == OFFSETS_TOPIC
            else broker.config.get_int("num.partitions")
        )
    elif num_partitions <= 0:
        return CreateOutcome(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
        )
    clustered = broker.topology.clustered
    if replication_factor == -1:
        # A single node ignores default.replication.factor other than 1 (it keeps one copy).
        replication_factor = broker.config.get_int("default.replication.factor") if clustered else 1
        if name == OFFSETS_TOPIC and clustered:
            replication_factor = broker.config.get_int("offsets.topic.replication.factor")
    elif replication_factor <= 0:
        return CreateOutcome(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    elif replication_factor > 1 and not clustered:
        return CreateOutcome(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): The target replication "
            f"factor of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
        )
    for key, value in configs.items():
        if value is None:
            return CreateOutcome(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {key}"
            )
    overrides = {k: v for k, v in configs.items() if v is not None}
    if name == OFFSETS_TOPIC:
        overrides = {**internal_topic_configs(broker, name)[1], **overrides}
    try:
        validate_topic_configs(overrides)
    except KafkaError as exc:
        return CreateOutcome(exc.code, exc.message)
    return _Creation(name, num_partitions, replication_factor, overrides, name in INTERNAL_TOPICS)


def _created(creation: _Creation, info: TopicInfo, validate_only: bool) -> CreateOutcome:
    if not validate_only:
        log.info(
            "Created topic %s with %d partitions, replication factor %d and configs %s (id %s)",
            creation.name,
            creation.partitions,
            creation.replication_factor,
            creation.overrides,
            topic_id_to_str(info.topic_id),
        )
    return CreateOutcome(
        ErrorCode.NONE, None, info, creation.partitions, creation.replication_factor, creation.overrides
    )


def create_topic(
    broker: BrokerPort,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str | None],
    *,
    has_assignments: bool = False,
    validate_only: bool = False,
) -> CreateOutcome:
    """Create one topic on a single node as CreateTopics does; every failure becomes an error code and
    message. (A cluster node uses :func:`create_topic_in_cluster`.)"""
    creation = _validate(broker, name, num_partitions, replication_factor, configs, has_assignments)
    if isinstance(creation, CreateOutcome):
        return creation
    try:
        info = broker.logs.create_topic(
            name,
            creation.partitions,
            creation.overrides,
            internal=creation.internal,
            validate_only=validate_only,
        )
    except KafkaError as exc:
        return CreateOutcome(exc.code, exc.message)
    return _created(creation, info, validate_only)


async def create_topic_in_cluster(
    broker: BrokerPort,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str | None],
    *,
    has_assignments: bool = False,
    validate_only: bool = False,
) -> CreateOutcome:
    """Create one topic in the cluster: replicas placed on the running nodes, recorded in the metadata
    store; the outcome once this node's image has it (its local log included)."""
    cluster = broker.cluster
    assert cluster is not None
    creation = _validate(broker, name, num_partitions, replication_factor, configs, has_assignments)
    if isinstance(creation, CreateOutcome):
        return creation
    try:
        validated = broker.logs.create_topic(
            name, creation.partitions, creation.overrides, internal=creation.internal, validate_only=True
        )
        await cluster.node.create_topic(
            name,
            creation.partitions,
            creation.replication_factor,
            creation.overrides,
            internal=creation.internal,
            validate_only=validate_only,
        )
    except KafkaError as exc:
        return CreateOutcome(exc.code, exc.message)
    except StoreError as exc:
        return CreateOutcome(ErrorCode.REQUEST_TIMED_OUT, f"The metadata store did not answer: {exc}")
    info = broker.logs.topic(name) if not validate_only else None
    return _created(creation, info or validated, validate_only)


def auto_create_topic(broker: BrokerPort, name: str) -> CreateOutcome:
    """Auto-creation on a Metadata request (Kafka's ``AutoTopicCreationManager``), on a single node."""
    if name == OFFSETS_TOPIC:
        partitions, configs = internal_topic_configs(broker, name)
        return create_topic(broker, name, partitions, -1, dict(configs))
    if name in INTERNAL_TOPICS:
        return CreateOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    return create_topic(broker, name, -1, -1, {})
