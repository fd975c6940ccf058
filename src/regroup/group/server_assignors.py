"""Server-side assignors of consumer groups (``group.consumer.assignors``): ``uniform`` and ``range``.

An assignor maps every member to the partitions of its subscribed, existing topics, so that each such
partition goes to exactly one subscriber. ``uniform`` (Kafka's default) is balanced first and sticky second:
members keep what they have as far as balance allows, and only partitions that must move do. ``range`` is
Kafka's RangeAssignor: per topic, contiguous ranges over the topic's subscribers ordered static members
first (by instance id), then dynamic members (by member id); not sticky.

Both are deterministic (ties broken by member id and partition), as tests and replays rely on it.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from regroup.group.consumer_group import Partitions, TopicPartition
from regroup.group.topics_image import TopicsImage
from regroup.protocol.primitives import Uuid

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "AssignorError",
    "MemberSpec",
    "RangeAssignor",
    "UniformAssignor",
]

_HETEROGENEOUS_BALANCE_PASSES = 16
"""Kafka's UniformHeterogeneousAssignmentBuilder caps its final balancing phase at 16 iterations."""


class AssignorError(Exception):
    """The assignor could not compute an assignment (answered UNKNOWN_SERVER_ERROR, as Kafka's
    ``PartitionAssignorException``)."""


@dataclass(slots=True, unsafe_hash=True)
class MemberSpec:
    """What an assignor knows of a member: identity, rack, subscribed topic ids (existing topics only) and
    its current target."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[Uuid]
    current: Partitions


class Assignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSpec], topics: TopicsImage) -> dict[str, Partitions]: ...


def _topic_partitions(topic_id: Uuid, topics: TopicsImage) -> list[TopicPartition]:
    topic = topics.by_id(topic_id)
    return [] if topic is None else [(topic_id, p) for p in range(topic.num_partitions)]


class UniformAssignor:
    """Balanced, then sticky. Homogeneous subscriptions end with max − min ≤ 1 partitions per member; with
    heterogeneous ones each partition goes to its least-loaded subscriber, then up to 16 balancing passes
    move partitions from more to less loaded subscribers."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], topics: TopicsImage) -> dict[str, Partitions]:
        if not members:
            return {}
        order = sorted(members)
        if len({members[m].subscribed_topic_ids for m in order}) == 1:
            return self._assign_homogeneous(members, order, topics)
        eligible: dict[TopicPartition, list[str]] = {}
        for member_id in order:
            for topic_id in sorted(members[member_id].subscribed_topic_ids):
                for tp in _topic_partitions(topic_id, topics):
                    eligible.setdefault(tp, []).append(member_id)
        homogeneous = len({members[m].subscribed_topic_ids for m in order}) == 1

        owned: dict[str, set[TopicPartition]] = {m: set() for m in order}
        taken: set[TopicPartition] = set()
        # Stickiness: keep current partitions that are still valid (each kept once).
        for member_id in order:
            for tp in sorted(members[member_id].current):
                if tp in eligible and member_id in eligible[tp] and tp not in taken:
                    owned[member_id].add(tp)
                    taken.add(tp)
        if homogeneous:
            self._trim_to_quota(owned, len(eligible))
            taken = set().union(*owned.values())

        # Unassigned partitions go to their least-loaded subscriber; partitions with fewer candidates first.
        unassigned = sorted(
            (tp for tp in eligible if tp not in taken), key=lambda tp: (len(eligible[tp]), tp)
        )
        for tp in unassigned:
            target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owned[target].add(tp)

        self._balance(owned, eligible, None if homogeneous else _HETEROGENEOUS_BALANCE_PASSES)
        return {m: frozenset(ps) for m, ps in owned.items()}

    def _assign_homogeneous(
        self, members: Mapping[str, MemberSpec], order: list[str], topics: TopicsImage
    ) -> dict[str, Partitions]:
        """Every member subscribes to the same topics: the general path's result without its per-partition
        list of every member (O(partitions × members)). The same stickiness and quota trim; each unassigned
        partition, in partition order, to the least-loaded member (ties by member id) from a heap; the
        result is then balanced (max − min ≤ 1), where the general path's balancing moves nothing."""
        subscribed = members[order[0]].subscribed_topic_ids
        partitions = [tp for topic_id in sorted(subscribed) for tp in _topic_partitions(topic_id, topics)]
        valid = set(partitions)
        owned: dict[str, set[TopicPartition]] = {m: set() for m in order}
        taken: set[TopicPartition] = set()
        for member_id in order:
            for tp in sorted(members[member_id].current):
                if tp in valid and tp not in taken:
                    owned[member_id].add(tp)
                    taken.add(tp)
        self._trim_to_quota(owned, len(partitions))
        taken = set().union(*owned.values())
        loads = [(len(owned[m]), m) for m in order]
        heapq.heapify(loads)
        for tp in sorted(tp for tp in partitions if tp not in taken):
            load, member_id = heapq.heappop(loads)
            owned[member_id].add(tp)
            heapq.heappush(loads, (load + 1, member_id))
        return {m: frozenset(ps) for m, ps in owned.items()}

    @staticmethod
    def _trim_to_quota(owned: dict[str, set[TopicPartition]], num_partitions: int) -> None:
        """Homogeneous: ⌊P/M⌋ each, P mod M members one more; members keeping the most get the extra slots."""
        quota, extra = divmod(num_partitions, len(owned))
        for member_id in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            limit = quota + 1 if extra > 0 and len(owned[member_id]) > quota else quota
            if limit > quota:
                extra -= 1
            keep = sorted(owned[member_id])[:limit]
            owned[member_id] = set(keep)

    @staticmethod
    def _balance(
        owned: dict[str, set[TopicPartition]],
        eligible: Mapping[TopicPartition, list[str]],
        max_passes: int | None,
    ) -> None:
        passes = 0
        while max_passes is None or passes < max_passes:
            passes += 1
            moved = False
            for donor in sorted(owned, key=lambda m: (-len(owned[m]), m)):
                for tp in sorted(owned[donor], reverse=True):
                    candidates = [m for m in eligible[tp] if len(owned[m]) < len(owned[donor]) - 1]
                    if candidates:
                        receiver = min(candidates, key=lambda m: (len(owned[m]), m))
                        owned[donor].discard(tp)
                        owned[receiver].add(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                return


class RangeAssignor:
    """Per topic, contiguous ranges: subscribers ordered static (by instance id) then dynamic (by member
    id); ⌊P/n⌋ partitions each, the first P mod n one more."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], topics: TopicsImage) -> dict[str, Partitions]:
        def order(spec: MemberSpec) -> tuple[int, str, str]:
            if spec.instance_id is not None:
                return (0, spec.instance_id, spec.member_id)
            return (1, spec.member_id, "")

        ordered = sorted(members.values(), key=order)
        result: dict[str, set[TopicPartition]] = {m: set() for m in members}
        all_topics = sorted(set().union(*(s.subscribed_topic_ids for s in ordered)) if ordered else set())
        for topic_id in all_topics:
            partitions = _topic_partitions(topic_id, topics)
            subscribers = [s.member_id for s in ordered if topic_id in s.subscribed_topic_ids]
            quota, extra = divmod(len(partitions), len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                size = quota + (1 if i < extra else 0)
                result[member_id].update(partitions[start : start + size])
                start += size
        return {m: frozenset(ps) for m, ps in result.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": UniformAssignor(), "range": RangeAssignor()}
