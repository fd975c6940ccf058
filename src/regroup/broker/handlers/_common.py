"""Constants and helpers shared by handler modules."""

from __future__ import annotations

from typing import Final

from regroup.log import validate_topic_name
from regroup.protocol.errors import KafkaError

# Kafka sends Integer.MIN_VALUE when authorized operations were not requested.
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)


def _bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. Without an authorizer Kafka reports every
# operation the resource type supports.
TOPIC_OPERATIONS: Final = _bits(3, 4, 5, 6, 7, 8, 10, 11)
CLUSTER_OPERATIONS: Final = _bits(5, 7, 8, 9, 10, 11, 12)


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's ``Topic.validate``), or None when it is."""
    try:
        validate_topic_name(name or "")
    except KafkaError as exc:
        return exc.message
    return None
