"""The ``roundrobin`` assignor (Java's ``RoundRobinAssignor``).

All partitions of all subscribed topics, sorted by topic then partition, are dealt one at a time to the
members in ``MemberInfo`` order, circularly, skipping members not subscribed to the partition's topic.
"""

from __future__ import annotations

from collections.abc import Mapping

from regroup.client.assignors.base import PartitionAssignor, member_order_key
from regroup.client.consumer_protocol import Subscription
from regroup.client.types import TopicPartition, java_order

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(PartitionAssignor):
    name = "roundrobin"

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = sorted(subscriptions, key=lambda m: member_order_key(m, subscriptions[m].group_instance_id))
        if not members:
            return assignment
        topics = {m: frozenset(subscriptions[m].topics) for m in members}
        cursor = 0
        for topic in sorted(partitions_per_topic, key=java_order):
            for p in range(partitions_per_topic[topic]):
                # Every topic here comes from some member's subscription, so this terminates.
                while topic not in topics[members[cursor]]:
                    cursor = (cursor + 1) % len(members)
                assignment[members[cursor]].append(TopicPartition(topic, p))
                cursor = (cursor + 1) % len(members)
        return assignment
