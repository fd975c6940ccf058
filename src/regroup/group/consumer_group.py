"""KIP-848 consumer groups: group and member data, member and group states, and the partition ownership
the reconciliation relies on.

A member is two immutable halves, each the content of one ``__consumer_offsets`` record: its
:class:`MemberSubscription` (ConsumerGroupMemberMetadata, type 5) and its :class:`MemberAssignment`
(ConsumerGroupCurrentMemberAssignment, type 8). The group changes only through the ``apply_*`` methods, one
per record type, which the live path and the load path (replay) both call: what a heartbeat does to a group
is exactly what replaying its records does, as in Kafka, where the coordinator replays its own writes.

Besides the records' content the group keeps derived bookkeeping — the static instance → member id map and
the owner of every partition held by a member (assigned or pending revocation; Kafka's
``currentPartitionEpoch``) — and the topic names the regexes were last resolved on (not persisted: after a
load every regex is re-resolved once, which bumps only if a resolution changed). The metadata hash (type 3),
the assignment timestamp (type 6), per-partition assignment epochs (type 8) and the regex resolutions
(type 16) are record content and survive a load.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from regroup.protocol.primitives import Uuid

__all__ = [
    "DEFAULT_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ClassicMemberMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "MemberAssignment",
    "MemberState",
    "MemberSubscription",
    "Partitions",
    "TopicPartition",
    "by_topic",
    "flatten",
]

TopicPartition = tuple[Uuid, int]
Partitions = frozenset[TopicPartition]

DEFAULT_EPOCH = 1
"""Kafka 4.3 (KAFKA-20268): a group without a ConsumerGroupMetadata record has group and assignment epoch 1;
the first computed assignment is epoch 2."""
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """The reconciliation state of a member (the State byte of record type 8)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_byte(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def flatten(by_topic_ids: Iterable[tuple[Uuid, Iterable[int]]]) -> Partitions:
    return frozenset((tid, p) for tid, ps in by_topic_ids for p in ps)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[Uuid, list[int]]:
    """Partitions grouped by topic id, topics and partitions sorted (records and responses)."""
    grouped: dict[Uuid, list[int]] = {}
    for tid, p in sorted(partitions):
        grouped.setdefault(tid, []).append(p)
    return grouped


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer group
    sent in its JoinGroup (the ClassicMemberMetadata tagged field of record type 5; §9 of
    docs/design/consumer-group-semantics.md): its session timeout and its (name, metadata) protocols in
    preference order. ``None`` on a member using the consumer protocol."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What a member asked for (record type 5)."""

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()  # sorted
    subscribed_topic_regex: str | None = None  # None: no regex ("" on the wire clears it)
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """Where a member stands in its reconciliation (record type 8)."""

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = frozenset()
    pending_revocation: Partitions = frozenset()
    # KIP-1251 (4.3): the epoch at which the member received each partition it holds (assigned or pending
    # revocation), the AssignmentEpochs of record type 8; a record without them (≤4.2) reads as
    # max(member_epoch, 0) for every partition, Kafka's default.
    assignment_epochs: Mapping[TopicPartition, int] = field(default_factory=dict, compare=False)

    @property
    def held(self) -> Partitions:
        return self.assigned | self.pending_revocation


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    subscription: MemberSubscription = MemberSubscription()
    assignment: MemberAssignment = MemberAssignment()

    @property
    def instance_id(self) -> str | None:
        return self.subscription.instance_id

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    @property
    def previous_member_epoch(self) -> int:
        return self.assignment.previous_member_epoch

    @property
    def state(self) -> MemberState:
        return self.assignment.state

    @property
    def assigned(self) -> Partitions:
        return self.assignment.assigned

    @property
    def pending_revocation(self) -> Partitions:
        return self.assignment.pending_revocation

    @property
    def uses_classic_protocol(self) -> bool:
        return self.subscription.classic is not None

    def with_subscription(self, subscription: MemberSubscription) -> ConsumerGroupMember:
        return replace(self, subscription=subscription)

    def with_assignment(self, assignment: MemberAssignment) -> ConsumerGroupMember:
        return replace(self, assignment=assignment)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


class ConsumerGroup:
    """One consumer group of a shard."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = DEFAULT_EPOCH
        self.assignment_epoch = DEFAULT_EPOCH
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.targets: dict[str, Partitions] = {}
        self._owners: dict[TopicPartition, str] = {}
        self.metadata_hash = 0  # type 3; 0 also when read from a record without it (≤4.0)
        self.assignment_timestamp_ms = 0  # type 6
        self.resolved_regexes: dict[str, frozenset[str]] = {}  # type 16
        # not persisted (see the module docstring): the topic names the regexes were resolved on
        self.regex_topic_names: frozenset[str] | None = None

    def copy(self) -> ConsumerGroup:
        """A copy to restore when an append fails (members and targets are immutable values)."""
        other = ConsumerGroup(self.group_id)
        other.group_epoch = self.group_epoch
        other.assignment_epoch = self.assignment_epoch
        other.members = dict(self.members)
        other.static_members = dict(self.static_members)
        other.targets = dict(self.targets)
        other._owners = dict(self._owners)
        other.metadata_hash = self.metadata_hash
        other.assignment_timestamp_ms = self.assignment_timestamp_ms
        other.resolved_regexes = dict(self.resolved_regexes)
        other.regex_topic_names = self.regex_topic_names
        return other

    # ------------------------------------------------------------------------------------------ queries

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner(self, tp: TopicPartition) -> str | None:
        """The member holding ``tp`` (assigned or pending revocation), if any."""
        return self._owners.get(tp)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def classic_members(self) -> list[ConsumerGroupMember]:
        return [m for m in self.members.values() if m.uses_classic_protocol]

    def all_classic_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` speaks the classic protocol (CG
        ``allMembersUseClassicProtocolExcept``)."""
        return all(m.uses_classic_protocol for m in self.members.values() if m.member_id != member_id)

    def supports_classic_protocols(self, protocol_type: str, names: frozenset[str]) -> bool:
        """CG ``supportsClassicProtocols``: the type is ``consumer`` and, unless the group is empty, one of
        ``names`` is supported by every classic member."""
        if protocol_type != "consumer":
            return False
        if not self.members:
            return bool(names)
        classic = [m.subscription.classic for m in self.members.values() if m.subscription.classic]
        return any(all(name in c.protocol_names for c in classic) for name in names)

    def subscribed_regexes(self) -> set[str]:
        return {
            m.subscription.subscribed_topic_regex
            for m in self.members.values()
            if m.subscription.subscribed_topic_regex
        }

    def member_topic_names(self, member: ConsumerGroupMember) -> set[str]:
        """The topic names a member subscribes to: its names and what its regex resolved to."""
        names = set(member.subscription.subscribed_topic_names)
        regex = member.subscription.subscribed_topic_regex
        if regex:
            names |= self.resolved_regexes.get(regex, frozenset())
        return names

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for member in self.members.values():
            names |= self.member_topic_names(member)
        return names

    # ------------------------------------------------------------------------------------------ records

    def apply_group_metadata(self, epoch: int, metadata_hash: int) -> None:
        """ConsumerGroupMetadata (type 3)."""
        self.group_epoch = epoch
        self.metadata_hash = metadata_hash

    def apply_target_metadata(self, epoch: int, timestamp_ms: int) -> None:
        """ConsumerGroupTargetAssignmentMetadata (type 6); a tombstone is epoch −1."""
        self.assignment_epoch = epoch
        self.assignment_timestamp_ms = timestamp_ms

    def apply_regex(self, regex: str, topics: frozenset[str] | None) -> None:
        """ConsumerGroupRegularExpression (type 16): what ``regex`` resolved to; None: tombstone."""
        if topics is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = topics

    def apply_target_member(self, member_id: str, target: Partitions | None) -> None:
        """ConsumerGroupTargetAssignmentMember (type 7); None: tombstone."""
        if target is None:
            self.targets.pop(member_id, None)
        else:
            self.targets[member_id] = target

    def apply_member_subscription(self, member_id: str, subscription: MemberSubscription | None) -> None:
        """ConsumerGroupMemberMetadata (type 5); None: tombstone, the member goes."""
        old = self.members.get(member_id)
        if subscription is None:
            if old is not None:
                self._release(old)
                del self.members[member_id]
                if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            return
        if (
            old is not None
            and old.instance_id is not None
            and old.instance_id != subscription.instance_id
            and self.static_members.get(old.instance_id) == member_id
        ):
            del self.static_members[old.instance_id]
        member = (old or ConsumerGroupMember(member_id)).with_subscription(subscription)
        self.members[member_id] = member
        if subscription.instance_id is not None:
            self.static_members[subscription.instance_id] = member_id

    def apply_member_assignment(self, member_id: str, assignment: MemberAssignment | None) -> None:
        """ConsumerGroupCurrentMemberAssignment (type 8); a tombstone sets epoch −1 and clears partitions."""
        if assignment is None:
            assignment = MemberAssignment(member_epoch=-1, previous_member_epoch=-1)
        old = self.members.get(member_id)
        if old is not None:
            self._release(old)
        member = (old or ConsumerGroupMember(member_id)).with_assignment(assignment)
        self.members[member_id] = member
        for tp in assignment.held:
            self._owners[tp] = member_id

    def _release(self, member: ConsumerGroupMember) -> None:
        for tp in member.assignment.held:
            if self._owners.get(tp) == member.member_id:
                del self._owners[tp]

    # ------------------------------------------------------------------------------------------ checks

    def check_invariants(self) -> None:
        seen: dict[TopicPartition, str] = {}
        for member in self.members.values():
            for tp in member.assignment.held:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {member.member_id}"
                seen[tp] = member.member_id
        assert seen == self._owners, (seen, self._owners)
        for instance_id, member_id in self.static_members.items():
            assert self.members[member_id].instance_id == instance_id
        assert self.assignment_epoch <= self.group_epoch, (self.assignment_epoch, self.group_epoch)
