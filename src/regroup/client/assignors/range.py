"""The ``range`` assignor (Java's ``RangeAssignor``).

Per topic, independently: members subscribed to it in ``MemberInfo`` order (static members by instance
id, then dynamic members by member id); each gets a contiguous range of floor(P/C) partitions and the
first P mod C members one more.
"""

from __future__ import annotations

from collections.abc import Mapping

from regroup.client.assignors.base import PartitionAssignor, member_order_key
from regroup.client.consumer_protocol import Subscription
from regroup.client.types import TopicPartition

__all__ = ["RangeAssignor"]


class RangeAssignor(PartitionAssignor):
    name = "range"

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        ordered = sorted(subscriptions, key=lambda m: member_order_key(m, subscriptions[m].group_instance_id))
        for topic, count in partitions_per_topic.items():
            consumers = [m for m in ordered if topic in subscriptions[m].topics]
            if not consumers:
                continue
            per_consumer, extra = divmod(count, len(consumers))
            start = 0
            for i, member in enumerate(consumers):
                length = per_consumer + (1 if i < extra else 0)
                assignment[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return assignment
