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
    for info in broker.logs.topics():
        if info.name != name and info.name.replace(".", "_") == key:
            return info.name
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
    """Create one topic as CreateTopics does; every failure becomes an error code and message."""
    problem = topic_name_error(name)
    if problem is not None:
        return CreateOutcome(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if broker.logs.topic(name) is not None:
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
    if replication_factor == -1:
        replication_factor = 1  # default.replication.factor other than 1 is ignored (single node)
    elif replication_factor <= 0:
        return CreateOutcome(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    elif replication_factor > 1:
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
    internal = name in INTERNAL_TOPICS
    if name == OFFSETS_TOPIC:
        overrides = {**internal_topic_configs(broker, name)[1], **overrides}
    try:
        validate_topic_configs(overrides)
        info = broker.logs.create_topic(
            name, num_partitions, overrides, internal=internal, validate_only=validate_only
        )
    except KafkaError as exc:
        return CreateOutcome(exc.code, exc.message)
    if not validate_only:
        log.info(
            "Created topic %s with %d partitions and configs %s (id %s)",
            name,
            num_partitions,
            overrides,
            topic_id_to_str(info.topic_id),
        )
    return CreateOutcome(ErrorCode.NONE, None, info, num_partitions, replication_factor, overrides)


def auto_create_topic(broker: BrokerPort, name: str) -> CreateOutcome:
    """Auto-creation on a Metadata request (Kafka's ``AutoTopicCreationManager``)."""
    if name == OFFSETS_TOPIC:
        partitions, configs = internal_topic_configs(broker, name)
        return create_topic(broker, name, partitions, -1, dict(configs))
    if name in INTERNAL_TOPICS:
        return CreateOutcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    return create_topic(broker, name, -1, -1, {})
