"""The assignor interface (Java's ``ConsumerPartitionAssignor``) and helpers shared by the built-ins."""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from typing import ClassVar

from regroup.client.consumer_protocol import Assignment, Subscription
from regroup.client.types import TopicPartition, java_order

__all__ = [
    "PartitionAssignor",
    "RebalanceProtocol",
    "member_order_key",
    "partitions_of",
]


class RebalanceProtocol(enum.IntEnum):
    """How partitions move between generations; the id is Java's ``RebalanceProtocol.id()``."""

    EAGER = 0
    COOPERATIVE = 1


def member_order_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes, bytes]:
    """Java's ``MemberInfo`` order: static members first by instance id, then dynamic ones by member id."""
    if group_instance_id is not None:
        return 0, java_order(group_instance_id), java_order(member_id)
    return 1, java_order(member_id), b""


def partitions_of(topic: str, count: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


class PartitionAssignor(abc.ABC):
    """A client-side assignor, run by the group leader over every member's subscription.

    Instances are per member and may keep state between rebalances (``on_assignment`` →
    ``subscription_user_data``); ``assign`` itself must be deterministic in its arguments.
    """

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """User data this member puts in its subscription (None for the stateless assignors)."""
        return None

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:  # noqa: B027
        """Called on every member after SyncGroup with its assignment and the new generation."""

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Assign the partitions of every subscribed topic to the members.

        ``partitions_per_topic`` maps topic names to partition counts from the leader's metadata; topics
        missing from it (or with no partitions) are skipped, as Java does. Every member gets an entry.
        """
        subscribed: set[str] = set()
        for sub in subscriptions.values():
            subscribed.update(sub.topics)
        per_topic = {
            t: n for t in sorted(subscribed, key=java_order) if (n := partitions_per_topic.get(t, 0)) > 0
        }
        raw = self.assign_partitions(per_topic, subscriptions)
        return {member: Assignment(tuple(parts)) for member, parts in raw.items()}

    @abc.abstractmethod
    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        """The assignment proper; ``partitions_per_topic`` holds only subscribed, non-empty topics."""
