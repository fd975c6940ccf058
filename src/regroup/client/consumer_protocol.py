"""The consumer embedded protocol: what members put in JoinGroup metadata and get back from SyncGroup.

Byte-compatible with Java's ``ConsumerProtocol`` and librdkafka: an int16 version followed by the
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` struct at that version (0-3). Members
write version 3; readers accept any version ≥ 0, parsing newer ones with the highest known schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from regroup.client.types import TopicPartition, java_order, sorted_partitions
from regroup.protocol.primitives import DecodeError
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "CONSUMER_PROTOCOL_VERSION",
    "Assignment",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
CONSUMER_PROTOCOL_VERSION = 3


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's subscription as the leader sees it.

    ``generation_id`` is -1 when the member sent none (subscription v0-1) or had no generation.
    ``group_instance_id`` is not encoded: the leader fills it in from the JoinGroup member list.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None

    @property
    def generation(self) -> int | None:
        """The generation, or None when absent (Java's ``Optional<Integer> generationId()``)."""
        return self.generation_id if self.generation_id >= 0 else None


@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions (and optional assignor user data) given to one member."""

    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None

    def partition_set(self) -> frozenset[TopicPartition]:
        return frozenset(self.partitions)


def _group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def encode_subscription(subscription: Subscription, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    """Serialize as Java does: topics sorted, owned partitions sorted by topic then partition."""
    owned = _group_by_topic(sorted_partitions(subscription.owned_partitions))
    data = ConsumerProtocolSubscription(
        topics=sorted(subscription.topics, key=java_order),
        user_data=subscription.user_data,
        owned_partitions=[
            ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=ps) for t, ps in owned.items()
        ],
        generation_id=subscription.generation_id,
        rack_id=subscription.rack_id,
    )
    return data.encode_versioned(version)


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """Parse a member's JoinGroup metadata; raises ``DecodeError`` when it is malformed."""
    sub, _ = ConsumerProtocolSubscription.decode_versioned(data, lenient=True)
    owned = tuple(TopicPartition(tp.topic, p) for tp in sub.owned_partitions for p in tp.partitions)
    return Subscription(
        topics=tuple(sub.topics),
        user_data=sub.user_data,
        owned_partitions=owned,
        generation_id=sub.generation_id,
        rack_id=sub.rack_id or None,
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment, version: int = CONSUMER_PROTOCOL_VERSION) -> bytes:
    """Serialize as Java does: one entry per topic in order of first appearance, partitions as given."""
    grouped = _group_by_topic(assignment.partitions)
    data = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=ps) for t, ps in grouped.items()
        ],
        user_data=assignment.user_data,
    )
    return data.encode_versioned(version)


def decode_assignment(data: bytes) -> Assignment:
    """Parse a SyncGroup assignment; fewer than two bytes (no version) is a ``DecodeError``."""
    if len(data) < 2:
        # Java's ConsumerCoordinator refuses an assignment without even the version (a buggy leader, or a
        # static member whose assignment the coordinator lost).
        raise DecodeError(f"assignment of {len(data)} bytes has no version")
    asg, _ = ConsumerProtocolAssignment.decode_versioned(data, lenient=True)
    return Assignment(
        partitions=tuple(
            TopicPartition(tp.topic, p) for tp in asg.assigned_partitions for p in tp.partitions
        ),
        user_data=asg.user_data,
    )
