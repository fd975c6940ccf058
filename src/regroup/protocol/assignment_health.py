"""Assignment health of a consumer group, from the member metadata and assignments DescribeGroups returns.

The consumer embedded protocol (``protocol_type`` ``consumer``) carries each member's subscription in its
JoinGroup metadata and its partitions in the leader's SyncGroup assignment. A Stable group whose leader
left a subscribed partition to nobody, or gave one partition to two members, is almost always an assignor
bug (or a custom assignor doing something deliberate): both the broker (a log line and a metric) and
``regroup groups --describe --state --health`` (client-side, so it works against any Kafka broker) judge it
with :func:`check_assignment`. Pure: bytes and partition counts in, a verdict out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from regroup.protocol.primitives import DecodeError
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "AssignmentHealth",
    "MemberAssignment",
    "check_assignment",
    "decode_member",
]

CONSUMER_PROTOCOL_TYPE = "consumer"

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """One member's decoded subscription and assignment; ``error`` says why either could not be read."""

    member_id: str
    topics: tuple[str, ...]
    partitions: tuple[TopicPartitionKey, ...]
    error: str | None = None


def decode_member(member_id: str, metadata: bytes, assignment: bytes) -> MemberAssignment:
    """Decode a member's consumer-protocol metadata (subscription) and assignment (either may be empty: a
    member that has not synced yet has no assignment)."""
    topics: tuple[str, ...] = ()
    partitions: tuple[TopicPartitionKey, ...] = ()
    try:
        if metadata:
            sub, _ = ConsumerProtocolSubscription.decode_versioned(metadata, lenient=True)
            topics = tuple(sub.topics)
        if assignment:
            asg, _ = ConsumerProtocolAssignment.decode_versioned(assignment, lenient=True)
            partitions = tuple((tp.topic, p) for tp in asg.assigned_partitions for p in tp.partitions)
    except DecodeError as exc:
        return MemberAssignment(member_id, topics, partitions, f"undecodable consumer protocol data: {exc}")
    return MemberAssignment(member_id, topics, partitions)


@dataclass(frozen=True, slots=True)
class AssignmentHealth:
    """What is wrong with a group's assignment; healthy when every tuple is empty."""

    unowned: tuple[TopicPartitionKey, ...] = ()
    """Partitions of subscribed (existing) topics that no member was assigned."""
    duplicated: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    """(topic, partition, member ids) for every partition assigned to more than one member."""
    undecodable: tuple[str, ...] = ()
    """Members whose metadata or assignment is not valid consumer-protocol data."""

    @property
    def ok(self) -> bool:
        return not (self.unowned or self.duplicated or self.undecodable)

    def summary(self) -> str:
        """``OK`` or e.g. ``UNOWNED=2,DUPLICATED=1`` (a single token: it fills one table column)."""
        if self.ok:
            return "OK"
        parts = []
        if self.unowned:
            parts.append(f"UNOWNED={len(self.unowned)}")
        if self.duplicated:
            parts.append(f"DUPLICATED={len(self.duplicated)}")
        if self.undecodable:
            parts.append(f"UNDECODABLE={len(self.undecodable)}")
        return ",".join(parts)

    def describe(self) -> str:
        """A sentence for a log line."""
        if self.ok:
            return "every subscribed partition is owned by exactly one member"
        parts = []
        if self.unowned:
            parts.append(f"{len(self.unowned)} subscribed partitions unowned ({_partitions(self.unowned)})")
        if self.duplicated:
            shown = ", ".join(f"{t}-{p} by {' and '.join(m)}" for t, p, m in self.duplicated[:10])
            parts.append(f"{len(self.duplicated)} partitions assigned twice ({shown})")
        if self.undecodable:
            parts.append(f"undecodable member data from {', '.join(self.undecodable)}")
        return "; ".join(parts)


def _partitions(keys: tuple[TopicPartitionKey, ...], limit: int = 10) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in keys[:limit])
    return shown + (", ..." if len(keys) > limit else "")


def check_assignment(
    members: Iterable[MemberAssignment], partition_count: Callable[[str], int | None] | Mapping[str, int]
) -> AssignmentHealth:
    """Judge a (Stable) consumer group's assignment. ``partition_count`` gives a topic's partition count, or
    None for a topic that does not exist (its partitions cannot be owned, so they are not reported)."""
    count = partition_count.get if isinstance(partition_count, Mapping) else partition_count
    owners: dict[TopicPartitionKey, list[str]] = {}
    subscribed: set[str] = set()
    undecodable: list[str] = []
    for member in members:
        if member.error is not None:
            undecodable.append(member.member_id)
            continue
        subscribed.update(member.topics)
        for key in member.partitions:
            owners.setdefault(key, []).append(member.member_id)
    unowned: list[TopicPartitionKey] = []
    for topic in sorted(subscribed):
        partitions = count(topic)
        if partitions is None:
            continue
        unowned.extend((topic, p) for p in range(partitions) if (topic, p) not in owners)
    duplicated = tuple(
        (topic, partition, tuple(ids)) for (topic, partition), ids in sorted(owners.items()) if len(ids) > 1
    )
    return AssignmentHealth(tuple(unowned), duplicated, tuple(undecodable))
