"""KIP-848 consumer groups: group and member data, member and group states, and the partition ownership
the reconciliation relies on.

A member is two immutable halves, each the content of one ``__consumer_offsets`` record: its
:class:`MemberSubscription` (ConsumerGroupMemberMetadata, type 5) and its :class:`MemberAssignment`
(ConsumerGroupCurrentMemberAssignment, type 8). The group changes only through the ``apply_*`` methods, one
per record type, which the live path and the load path (replay) both call: what a heartbeat does to a group
is exactly what replaying its records does, as in Kafka, where the coordinator replays its own writes.

Besides the records' content the group keeps derived bookkeeping — the static instance → member id map,
the owner of every partition held by a member (assigned or pending revocation; Kafka's
``currentPartitionEpoch``) and counted indexes of the members' subscriptions and states (see
:class:`ConsumerGroup`), all maintained by the ``apply_*`` methods, so replay builds them too — and the
topic names the regexes were last resolved on (not persisted: after a load every regex is re-resolved once,
which bumps only if a resolution changed). The metadata hash (type 3),
the assignment timestamp (type 6), per-partition assignment epochs (type 8) and the regex resolutions
(type 16) are record content and survive a load.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from regroup.protocol.primitives import Uuid

__all__ = [
    "DEFAULT_EPOCH",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Checkpoint",
    "ClassicMemberMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "MemberAssignment",
    "MemberState",
    "MemberSubscription",
    "Partitions",
    "TopicPartition",
    "TopicsHasher",
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


@dataclass(slots=True, unsafe_hash=True)
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


@dataclass(slots=True, unsafe_hash=True)
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


@dataclass(slots=True, unsafe_hash=True)
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


@dataclass(slots=True, unsafe_hash=True)
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


class Checkpoint:
    """Where :meth:`ConsumerGroup.rollback` returns the group to: the scalars at the time and the length of
    the undo journal (the values the apply methods replaced since)."""

    __slots__ = ("_mark", "_scalars")

    def __init__(self, mark: int, scalars: tuple[int, int, int, int, frozenset[str] | None]) -> None:
        self._mark = mark
        self._scalars = scalars


_MEMBER, _TARGET, _REGEX = 0, 1, 2  # what an undo journal entry restores


class ConsumerGroup:
    """One consumer group of a shard.

    Besides the records' content the group keeps counted indexes of its members, updated only when a member
    is added, removed or changes its subscription or assignment — never by a heartbeat that changes
    nothing — so that a steady-state heartbeat costs the same whatever the group's size (Kafka's
    ``ModernGroup`` keeps ``subscribedTopicNames`` as a name → count map and ``ConsumerGroup`` its
    ``subscribedRegularExpressions`` as regex → count for the same reason): the subscribed topic names and
    regexes, the server assignors named, the classic-protocol members, and how many members are STABLE at
    each member epoch (the group's state). The subscribed topic names are cached until a count reaches or
    leaves zero or a regex resolution changes; the metadata hash of those names is cached with the topics
    image it was computed on (:meth:`metadata_hash_for`).

    Undo: instead of a copy of the whole group before each operation, :meth:`checkpoint` starts a journal
    of the values the ``apply_*`` methods replace and :meth:`rollback` puts them back (through the same
    methods, so the indexes follow): the cost of an undo snapshot is that of what the operation changes.
    """

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
        # ---- counted indexes of the members (see the class docstring)
        self._topic_counts: dict[str, int] = {}
        self._regex_counts: dict[str, int] = {}
        self._assignor_counts: dict[str, int] = {}
        self._classic_count = 0
        self._stable_at: dict[int, int] = {}  # member epoch -> members STABLE at it
        self._names: frozenset[str] | None = None  # subscribed_topic_names(), None: to recompute
        self._hash_memo: tuple[frozenset[str], object, int] | None = None
        # ---- undo journal, while a checkpoint is active: (what, key, value it replaced)
        self._journal: list[tuple[int, str, object]] | None = None

    def copy(self) -> ConsumerGroup:
        """An independent copy (members and targets are immutable values): O(members)."""
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
        other._topic_counts = dict(self._topic_counts)
        other._regex_counts = dict(self._regex_counts)
        other._assignor_counts = dict(self._assignor_counts)
        other._classic_count = self._classic_count
        other._stable_at = dict(self._stable_at)
        other._names = self._names
        other._hash_memo = self._hash_memo
        return other

    # ------------------------------------------------------------------------------------------ undo

    def checkpoint(self) -> Checkpoint:
        """Start (or, when one is active, nest in) an undo journal; :meth:`rollback` returns here,
        :meth:`release` ends it. A shard applies an operation's append outcome before its next event, so a
        checkpoint lives for one operation."""
        if self._journal is None:
            self._journal = []
        return Checkpoint(
            len(self._journal),
            (
                self.group_epoch,
                self.assignment_epoch,
                self.metadata_hash,
                self.assignment_timestamp_ms,
                self.regex_topic_names,
            ),
        )

    def release(self, checkpoint: Checkpoint) -> None:
        """The operation of ``checkpoint`` is kept: forget its journal (the outermost checkpoint ends it)."""
        if checkpoint._mark == 0:
            self._journal = None

    def rollback(self, checkpoint: Checkpoint) -> None:
        """Undo every change since ``checkpoint``, latest first."""
        journal = self._journal
        if journal is not None:
            entries = journal[checkpoint._mark :]
            del journal[checkpoint._mark :]
            self._journal = None  # the undo itself is not journaled
            for what, key, value in reversed(entries):
                if what == _MEMBER:
                    self._put_member(key, value)  # type: ignore[arg-type]
                elif what == _TARGET:
                    self.apply_target_member(key, value)  # type: ignore[arg-type]
                else:
                    self.apply_regex(key, value)  # type: ignore[arg-type]
            self._journal = None if checkpoint._mark == 0 else journal
        (
            self.group_epoch,
            self.assignment_epoch,
            self.metadata_hash,
            self.assignment_timestamp_ms,
            self.regex_topic_names,
        ) = checkpoint._scalars

    # ------------------------------------------------------------------------------------------ queries

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if self.reconciled_count() < len(self.members):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def reconciled_count(self) -> int:
        """Members STABLE at the assignment epoch (O(1): counted per member epoch)."""
        return self._stable_at.get(self.assignment_epoch, 0)

    def owner(self, tp: TopicPartition) -> str | None:
        """The member holding ``tp`` (assigned or pending revocation), if any."""
        return self._owners.get(tp)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def classic_members(self) -> list[ConsumerGroupMember]:
        if not self._classic_count:
            return []
        return [m for m in self.members.values() if m.uses_classic_protocol]

    def classic_member_count(self) -> int:
        return self._classic_count

    def all_classic_except(self, member_id: str) -> bool:
        """Every member but ``member_id`` speaks the classic protocol (CG
        ``allMembersUseClassicProtocolExcept``)."""
        member = self.members.get(member_id)
        excluded = 0 if member is None else 1
        classic_excluded = 1 if member is not None and member.uses_classic_protocol else 0
        return self._classic_count - classic_excluded == len(self.members) - excluded

    def supports_classic_protocols(self, protocol_type: str, names: frozenset[str]) -> bool:
        """CG ``supportsClassicProtocols``: the type is ``consumer`` and, unless the group is empty, one of
        ``names`` is supported by every classic member."""
        if protocol_type != "consumer":
            return False
        if not self.members:
            return bool(names)
        classic = [m.subscription.classic for m in self.classic_members() if m.subscription.classic]
        return any(all(name in c.protocol_names for c in classic) for name in names)

    def subscribed_regexes(self) -> set[str]:
        return set(self._regex_counts)

    def is_regex_subscribed(self, regex: str) -> bool:
        return regex in self._regex_counts

    def assignor_votes(self) -> Mapping[str, int]:
        """How many members name each ServerAssignor."""
        return self._assignor_counts

    def member_topic_names(self, member: ConsumerGroupMember) -> set[str]:
        """The topic names a member subscribes to: its names and what its regex resolved to."""
        names = set(member.subscription.subscribed_topic_names)
        regex = member.subscription.subscribed_topic_regex
        if regex:
            names |= self.resolved_regexes.get(regex, frozenset())
        return names

    def subscribed_topic_names(self) -> frozenset[str]:
        """Every member's topic names and regex resolutions (ModernGroup ``subscribedTopicNames``); cached,
        O(distinct names and regexes) when recomputed."""
        names = self._names
        if names is None:
            found = set(self._topic_counts)
            for regex in self._regex_counts:
                found |= self.resolved_regexes.get(regex, frozenset())
            names = self._names = frozenset(found)
        return names

    def metadata_hash_for(self, topics: TopicsHasher) -> int:
        """The metadata hash of :meth:`subscribed_topic_names` on ``topics``, computed again only when the
        names or the image changed (Kafka recomputes it only then too: GMM ``consumerGroupHeartbeat`` calls
        ``computeMetadataHash`` when the subscriptions or the metadata image changed)."""
        names = self.subscribed_topic_names()
        memo = self._hash_memo
        if memo is not None and memo[0] is names and memo[1] is topics:
            return memo[2]
        value = topics.group_hash(names)
        self._hash_memo = (names, topics, value)
        return value

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
        previous = self.resolved_regexes.get(regex)
        if self._journal is not None:
            self._journal.append((_REGEX, regex, previous))
        if topics is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = topics
        if previous != topics and regex in self._regex_counts:
            self._names = None

    def apply_target_member(self, member_id: str, target: Partitions | None) -> None:
        """ConsumerGroupTargetAssignmentMember (type 7); None: tombstone."""
        if self._journal is not None:
            self._journal.append((_TARGET, member_id, self.targets.get(member_id)))
        if target is None:
            self.targets.pop(member_id, None)
        else:
            self.targets[member_id] = target

    def apply_member_subscription(self, member_id: str, subscription: MemberSubscription | None) -> None:
        """ConsumerGroupMemberMetadata (type 5); None: tombstone, the member goes."""
        if subscription is None:
            if member_id in self.members:
                self._put_member(member_id, None)
            return
        old = self.members.get(member_id)
        self._put_member(member_id, (old or ConsumerGroupMember(member_id)).with_subscription(subscription))

    def apply_member_assignment(self, member_id: str, assignment: MemberAssignment | None) -> None:
        """ConsumerGroupCurrentMemberAssignment (type 8); a tombstone sets epoch −1 and clears partitions."""
        if assignment is None:
            assignment = MemberAssignment(member_epoch=-1, previous_member_epoch=-1)
        old = self.members.get(member_id)
        self._put_member(member_id, (old or ConsumerGroupMember(member_id)).with_assignment(assignment))

    # ------------------------------------------------------------------------------------------ indexes

    def _put_member(self, member_id: str, member: ConsumerGroupMember | None) -> None:
        """Set (None: remove) a member, updating the indexes of the half (subscription, assignment) that
        changed; journaled while a checkpoint is active."""
        old = self.members.get(member_id)
        if self._journal is not None:
            self._journal.append((_MEMBER, member_id, old))
        if member is None:
            if old is not None:
                del self.members[member_id]
                self._unindex_assignment(old)
                self._unindex_subscription(old)
            return
        self.members[member_id] = member
        if old is None or old.subscription is not member.subscription:
            if old is not None:
                self._unindex_subscription(old)
            self._index_subscription(member)
        if old is None or old.assignment is not member.assignment:
            if old is not None:
                self._unindex_assignment(old)
            self._index_assignment(member)

    def _index_subscription(self, member: ConsumerGroupMember) -> None:
        sub = member.subscription
        if sub.instance_id is not None:
            self.static_members[sub.instance_id] = member.member_id
        for name in sub.subscribed_topic_names:
            if _count_up(self._topic_counts, name):
                self._names = None
        if sub.subscribed_topic_regex and _count_up(self._regex_counts, sub.subscribed_topic_regex):
            self._names = None
        if sub.server_assignor:
            _count_up(self._assignor_counts, sub.server_assignor)
        if sub.classic is not None:
            self._classic_count += 1

    def _unindex_subscription(self, member: ConsumerGroupMember) -> None:
        sub = member.subscription
        if sub.instance_id is not None and self.static_members.get(sub.instance_id) == member.member_id:
            del self.static_members[sub.instance_id]
        for name in sub.subscribed_topic_names:
            if _count_down(self._topic_counts, name):
                self._names = None
        if sub.subscribed_topic_regex and _count_down(self._regex_counts, sub.subscribed_topic_regex):
            self._names = None
        if sub.server_assignor:
            _count_down(self._assignor_counts, sub.server_assignor)
        if sub.classic is not None:
            self._classic_count -= 1

    def _index_assignment(self, member: ConsumerGroupMember) -> None:
        assignment = member.assignment
        for tp in assignment.held:
            self._owners[tp] = member.member_id
        if assignment.state is MemberState.STABLE:
            _count_up(self._stable_at, assignment.member_epoch)

    def _unindex_assignment(self, member: ConsumerGroupMember) -> None:
        assignment = member.assignment
        for tp in assignment.held:
            if self._owners.get(tp) == member.member_id:
                del self._owners[tp]
        if assignment.state is MemberState.STABLE:
            _count_down(self._stable_at, assignment.member_epoch)

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
        assert self._journal is None, "an operation's undo journal outlived it"
        fresh = ConsumerGroup(self.group_id)
        fresh.resolved_regexes = self.resolved_regexes
        for member in self.members.values():
            fresh._index_subscription(member)
            fresh._index_assignment(member)
        assert fresh._topic_counts == self._topic_counts, (fresh._topic_counts, self._topic_counts)
        assert fresh._regex_counts == self._regex_counts, (fresh._regex_counts, self._regex_counts)
        assert fresh._assignor_counts == self._assignor_counts
        assert fresh._classic_count == self._classic_count
        assert fresh._stable_at == self._stable_at, (fresh._stable_at, self._stable_at)
        assert self.subscribed_topic_names() == fresh.subscribed_topic_names()


class TopicsHasher(Protocol):
    """What :meth:`ConsumerGroup.metadata_hash_for` needs of a topics image."""

    def group_hash(self, names: Iterable[str]) -> int: ...


def _count_up(counts: dict[Any, int], key: Any) -> bool:
    """Count ``key`` once more; True when it was not counted before."""
    n = counts.get(key, 0)
    counts[key] = n + 1
    return n == 0


def _count_down(counts: dict[Any, int], key: Any) -> bool:
    """Count ``key`` once less; True when it is no longer counted."""
    n = counts.get(key, 0) - 1
    if n <= 0:
        counts.pop(key, None)
        return True
    counts[key] = n
    return False
