"""The ``sticky`` and ``cooperative-sticky`` assignors (Java's ``AbstractStickyAssignor`` family).

Both balance partition counts (within one when subscriptions allow) while keeping as many partitions as
possible with their previous owners. Previous ownership comes from:

- ``sticky`` (eager): the subscription user data, in Java's ``StickyAssignorUserData`` layout — v0 is
  ``[{topic: string, partitions: [int32]}]``, v1 appends ``generation: int32``;
- ``cooperative-sticky``: the subscription's owned partitions and generation (subscription v2+), else an
  int32 generation in the user data.

When two members claim a partition, the higher generation wins; equal generations invalidate the claim.
``cooperative-sticky`` additionally withholds every partition that would move from one member to
another: its owner revokes it and rejoins, and the follow-up rebalance hands it out.

Two algorithms, as in Java: a fast "constrained" one when all members subscribe to the same topics and a
general one otherwise. Where Java iterates a ``HashMap`` (so its choices depend on hash codes), this port
iterates members in sorted member-id order, which keeps the result deterministic. Rack-aware placement
(subscription v3 racks) is not implemented: racks are ignored, as Java does when no member has one.
"""

from __future__ import annotations

import abc
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from regroup.client.assignors.base import PartitionAssignor, RebalanceProtocol
from regroup.client.consumer_protocol import Assignment, Subscription
from regroup.client.types import TopicPartition, java_order

__all__ = [
    "DEFAULT_GENERATION",
    "AbstractStickyAssignor",
    "CooperativeStickyAssignor",
    "MemberData",
    "StickyAssignor",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
]

DEFAULT_GENERATION = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class MemberData:
    """What an assignor recovers from a subscription: previously owned partitions and their generation."""

    partitions: tuple[TopicPartition, ...]
    generation: int | None


# ------------------------------------------------------------------------------------------ user data


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """``StickyAssignorUserData`` v1 (v0 when ``generation`` is None)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    buf = bytearray(_I32.pack(len(by_topic)))
    for topic in sorted(by_topic, key=java_order):
        name = topic.encode()
        buf += _I16.pack(len(name)) + name
        buf += _I32.pack(len(by_topic[topic]))
        for p in by_topic[topic]:
            buf += _I32.pack(p)
    if generation is not None:
        buf += _I32.pack(generation)
    return bytes(buf)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("buffer underflow")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def array_len(self, element_size: int) -> int:
        n = self.i32()
        if n < 0:
            raise ValueError(f"array size {n} cannot be negative")
        if n * element_size > len(self.data) - self.pos:
            raise ValueError(f"array of size {n} exceeds the remaining bytes")
        return n

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise ValueError("string length cannot be negative")
        # Java decodes with replacement characters rather than failing.
        return self._take(n).decode("utf-8", "replace")


def _read_sticky(data: bytes, with_generation: bool) -> MemberData:
    r = _Reader(data)
    partitions: list[TopicPartition] = []
    for _ in range(r.array_len(1)):
        topic = r.string()
        partitions.extend(TopicPartition(topic, r.i32()) for _ in range(r.array_len(4)))
    generation = r.i32() if with_generation else None
    return MemberData(tuple(partitions), generation)


def decode_sticky_user_data(data: bytes | None) -> MemberData:
    """Parse ``StickyAssignorUserData`` as Java does: try v1, then v0, else nothing owned at generation -1.

    Like Java's ``Schema.read``, trailing bytes are ignored.
    """
    if not data:
        return MemberData((), None)
    for with_generation in (True, False):
        try:
            return _read_sticky(data, with_generation)
        except ValueError:
            continue
    return MemberData((), DEFAULT_GENERATION)


# ---------------------------------------------------------------------------------------- the assignor


class AbstractStickyAssignor(PartitionAssignor):
    """The shared algorithm; subclasses say where previous ownership comes from (``member_data``)."""

    name: ClassVar[str]

    @abc.abstractmethod
    def member_data(self, subscription: Subscription) -> MemberData:
        """Previously owned partitions and generation as this assignor encodes them."""

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        assignment, _ = self.sticky_assign(partitions_per_topic, subscriptions)
        return assignment

    def sticky_assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str] | None]:
        """The assignment, plus the partitions moving between owners (None when the general algorithm
        ran and the caller must compute them from the subscriptions, as in Java)."""
        members = sorted(subscriptions, key=java_order)
        ordered = {m: subscriptions[m] for m in members}
        member_data = {m: self.member_data(sub) for m, sub in ordered.items()}
        all_equal, owned, multi_owned, max_generation = _owned_partitions(
            partitions_per_topic, ordered, member_data
        )
        if all_equal:
            transferring: dict[TopicPartition, str] = {}
            result = _ConstrainedBuilder(partitions_per_topic, owned, multi_owned, transferring).build()
            return result, transferring
        general = _GeneralBuilder(partitions_per_topic, owned, ordered, member_data, max_generation)
        return general.build(), None


def _owned_partitions(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    member_data: Mapping[str, MemberData],
) -> tuple[bool, dict[str, list[TopicPartition]], set[TopicPartition], int]:
    """Java's ``allSubscriptionsEqual``: whether all members subscribe to the same topics, plus each
    member's still-valid previously owned partitions (conflicts resolved by generation), the partitions
    claimed twice in one generation, and the highest generation seen."""
    reference: frozenset[str] | None = None
    all_equal = True
    max_generation = DEFAULT_GENERATION
    owner_of: dict[TopicPartition, str] = {}
    owned: dict[str, list[TopicPartition]] = {}
    multi_owned: set[TopicPartition] = set()
    for member, subscription in subscriptions.items():
        topics = frozenset(subscription.topics)
        # Java seeds the reference from the first member with a non-empty subscription, so that a member
        # subscribed to nothing counted as "equal"; we compare every member, including empty ones.
        if reference is None:
            reference = topics
        elif topics != reference:
            all_equal = False
        data = member_data[member]
        generation = data.generation if data.generation is not None else DEFAULT_GENERATION
        max_generation = max(max_generation, generation)
        mine: list[TopicPartition] = []
        owned[member] = mine
        for tp in data.partitions:
            # Partitions of topics without metadata (or beyond the current count) cannot be kept.
            if not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                continue
            other = owner_of.get(tp)
            if other is None:
                mine.append(tp)
                owner_of[tp] = member
                continue
            other_sub = subscriptions[other]
            # Java compares against the other member's *subscription* generation here.
            other_generation = (
                other_sub.generation if other_sub.generation is not None else DEFAULT_GENERATION
            )
            if generation == other_generation:
                multi_owned.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = member
            elif generation > other_generation:
                mine.append(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = member
    return all_equal, owned, multi_owned, max_generation


def _all_partitions(partitions_per_topic: Mapping[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


class _ConstrainedBuilder:
    """All members subscribe to the same topics: keep owned partitions up to the quotas, then deal the
    rest round-robin to the members below quota (Java's ``ConstrainedAssignmentBuilder``)."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        owned: dict[str, list[TopicPartition]],
        multi_owned: set[TopicPartition],
        transferring: dict[TopicPartition, str],
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.owned = owned
        self.multi_owned = multi_owned
        self.transferring = transferring
        self.maybe_revoked: dict[TopicPartition, str] = {}
        total = sum(partitions_per_topic.values())
        members = len(owned)
        self.min_quota = total // members
        self.max_quota = -(-total // members)
        self.expected_over_min = total % members
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in owned}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []

    def build(self) -> dict[str, list[TopicPartition]]:
        assigned = self._assign_owned()
        self.under_min.sort(key=java_order)
        self.exactly_min.sort(key=java_order)
        all_topics = sorted(self.partitions_per_topic, key=java_order)
        unassigned = [
            tp for tp in _all_partitions(self.partitions_per_topic, all_topics) if tp not in assigned
        ]
        self._assign_round_robin(unassigned)
        self._verify()
        return self.assignment

    def _assign_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for member, owned in self.owned.items():
            # Java keeps the lowest partition numbers first (then topic), not topic order.
            mine = sorted(
                (tp for tp in owned if tp not in self.multi_owned),
                key=lambda tp: (tp.partition, java_order(tp.topic)),
            )
            target = self.assignment[member]
            if len(mine) < self.min_quota:
                target.extend(mine)
                assigned.update(mine)
                self.under_min.append(member)
            elif len(mine) >= self.max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min.clear()
                self._keep(member, mine, self.max_quota, assigned)
            else:
                self._keep(member, mine, self.min_quota, assigned)
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min.append(member)
        return assigned

    def _keep(
        self, member: str, mine: list[TopicPartition], quota: int, assigned: set[TopicPartition]
    ) -> None:
        self.assignment[member].extend(mine[:quota])
        assigned.update(mine[:quota])
        for tp in mine[quota:]:
            self.maybe_revoked[tp] = member

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        # ``cursor`` walks ``under_min`` like Java's list iterator (restarted when exhausted).
        cursor = 0
        for tp in unassigned:
            from_under = True
            if cursor < len(self.under_min):
                member = self.under_min[cursor]
                cursor += 1
            elif not self.under_min and not self.exactly_min:
                raise RuntimeError("sticky assignor: no more unfilled members to assign partitions to")
            elif not self.under_min:
                member = self.exactly_min.pop(0)
                from_under = False
            else:
                cursor = 0
                member = self.under_min[cursor]
                cursor += 1
            count = self._assign_new(tp, member)
            if count == self.min_quota:
                if from_under:
                    cursor -= 1
                    del self.under_min[cursor]
                self.exactly_min.append(member)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new(self, tp: TopicPartition, member: str) -> int:
        target = self.assignment[member]
        target.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member) or tp in self.multi_owned:
            self.transferring[tp] = member
        return len(target)

    def _verify(self) -> None:
        if not self.under_min:
            return
        if self.current_over_min != self.expected_over_min:
            raise RuntimeError("sticky assignor: members left below quota with no partitions to give them")
        for member in self.under_min:
            if len(self.assignment[member]) != self.min_quota:
                raise RuntimeError(f"sticky assignor: member {member} did not reach its minimum quota")


@dataclass(slots=True)
class _Owner:
    member: str
    generation: int


class _Movements:
    """Java's ``PartitionMovements``: which partitions moved between which members during balancing, so
    that a partition moving back and forth is swapped with one that already moved the other way."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], set[TopicPartition]]] = {}
        self.moves: dict[TopicPartition, tuple[str, str]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        topic_moves = self.by_topic[tp.topic]
        topic_moves[pair].discard(tp)
        if not topic_moves[pair]:
            del topic_moves[pair]
        if not topic_moves:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, set()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            src, _ = self._remove(tp)
            if src != new:
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def actual_partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        topic_moves = self.by_topic.get(tp.topic)
        if topic_moves is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = topic_moves.get((new, old))
        if not reverse:
            return tp
        # Java takes whichever element its HashSet yields first; the smallest keeps this deterministic.
        return min(reverse, key=TopicPartition.sort_key)


class _GeneralBuilder:
    """Members subscribe to different topics: keep valid ownership, place unassigned partitions on the
    least loaded eligible member, then move partitions while that improves balance (Java's
    ``GeneralAssignmentBuilder``)."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        current: dict[str, list[TopicPartition]],
        subscriptions: Mapping[str, Subscription],
        member_data: Mapping[str, MemberData],
        max_generation: int,
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.total = sum(partitions_per_topic.values())
        self.current = current
        self.subscriptions = subscriptions
        self.member_data = member_data
        self.max_generation = max_generation
        self.topic_consumers: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
        self.consumer_topics: dict[str, list[str]] = {}
        for member, sub in subscriptions.items():
            mine = [t for t in sub.topics if t in partitions_per_topic]
            self.consumer_topics[member] = mine
            for t in mine:
                self.topic_consumers[t].append(member)
            current.setdefault(member, [])
        self.partition_owner = {tp: m for m, tps in current.items() for tp in tps}
        sorted_topics = sorted(self.topic_consumers, key=self._topic_key)
        self.sorted_all_partitions = _all_partitions(partitions_per_topic, sorted_topics)
        self.active: set[str] = set()
        self.revocation_required = False
        self.movements = _Movements()

    def _topic_key(self, topic: str) -> tuple[int, bytes]:
        return len(self.topic_consumers[topic]), java_order(topic)

    def _member_key(self, member: str) -> tuple[int, bytes]:
        return len(self.current[member]), java_order(member)

    def _sorted_members(self) -> list[str]:
        return sorted(self.active, key=self._member_key)

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_assignment()
        assigned = self._assign_owned()
        unassigned = self._unassigned(assigned)
        self.active.update(self.current)
        self._balance(previous, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[TopicPartition, _Owner]:
        """Ownership reported by members of older generations (Java's ``prepopulateCurrentAssignments``):
        where a partition goes back to when it must leave its current owner."""
        previous: dict[TopicPartition, _Owner] = {}

        def note(partitions: Iterable[TopicPartition], member: str, generation: int) -> None:
            for tp in partitions:
                known = previous.get(tp)
                if known is None or generation > known.generation:
                    previous[tp] = _Owner(member, generation)

        for member in self.subscriptions:
            data = self.member_data[member]
            if data.generation is not None and data.generation < self.max_generation:
                note(data.partitions, member, data.generation)
            elif data.generation is None and self.max_generation > DEFAULT_GENERATION:
                note(data.partitions, member, DEFAULT_GENERATION)
        return previous

    def _assign_owned(self) -> list[TopicPartition]:
        assigned: list[TopicPartition] = []
        for member, partitions in self.current.items():
            subscribed = self.subscriptions[member].topics
            kept: list[TopicPartition] = []
            for tp in partitions:
                if tp.topic not in self.topic_consumers:
                    self.partition_owner.pop(tp, None)
                elif tp.topic not in subscribed:
                    # Still mapped in partition_owner, as in Java; the member is no longer subscribed.
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.append(tp)
            partitions[:] = kept
        return assigned

    def _unassigned(self, assigned: list[TopicPartition]) -> list[TopicPartition]:
        taken = set(assigned)
        return [tp for tp in self.sorted_all_partitions if tp not in taken]

    def _max_assignment_size(self, member: str) -> int:
        topics = self.consumer_topics[member]
        if len(topics) == len(self.partitions_per_topic):
            return self.total
        return sum(self.partitions_per_topic[t] for t in topics)

    def _is_balanced(self) -> bool:
        members = self._sorted_members()
        if not members:
            return True
        smallest = len(self.current[members[0]])
        largest = len(self.current[members[-1]])
        if smallest >= largest - 1:
            return True
        owner_of = {tp: m for m, tps in self.current.items() for tp in tps}
        for member in members:
            mine = self.current[member]
            count = len(mine)
            if count == self._max_assignment_size(member):
                continue
            mine_set = set(mine)
            for topic in self.consumer_topics[member]:
                for p in range(self.partitions_per_topic[topic]):
                    tp = TopicPartition(topic, p)
                    if tp in mine_set:
                        continue
                    other = owner_of.get(tp)
                    if other is not None and count + 1 < len(self.current[other]):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: Mapping[str, list[TopicPartition]]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def _maybe_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if not self.topic_consumers[tp.topic]:
                continue
            for member in self._sorted_members():
                if tp.topic in self.consumer_topics[member]:
                    self.current[member].append(tp)
                    self.partition_owner[tp] = member
                    break

    def _topic_can_move(self, topic: str) -> bool:
        return len(self.topic_consumers[topic]) >= 2

    def _member_can_move(self, member: str) -> bool:
        mine = self.current[member]
        if len(mine) < self._max_assignment_size(member):
            return True
        return any(self._topic_can_move(tp.topic) for tp in mine)

    def _balance(self, previous: dict[TopicPartition, _Owner], unassigned: list[TopicPartition]) -> None:
        members = self._sorted_members()
        initializing = not members or not self.current[members[-1]]
        self._maybe_assign(unassigned)

        fixed_partitions = {
            TopicPartition(t, p)
            for t in self.topic_consumers
            if not self._topic_can_move(t)
            for p in range(self.partitions_per_topic[t])
        }
        self.sorted_all_partitions = [tp for tp in self.sorted_all_partitions if tp not in fixed_partitions]
        unassigned = [tp for tp in unassigned if tp not in fixed_partitions]

        fixed_assignments: dict[str, list[TopicPartition]] = {}
        for member in list(self.consumer_topics):
            if not self._member_can_move(member):
                self.active.discard(member)
                fixed_assignments[member] = self.current.pop(member)

        before = {m: list(tps) for m, tps in self.current.items()}
        before_owners = dict(self.partition_owner)

        # Without subscription-driven revocations, first try moving only the newly placed partitions.
        if not self.revocation_required:
            self._perform_reassignments(unassigned, previous)
        moved = self._perform_reassignments(self.sorted_all_partitions, previous)

        if not initializing and moved and self._balance_score(self.current) >= self._balance_score(before):
            self.current.clear()
            self.current.update(before)
            self.partition_owner = before_owners

        for member, partitions in fixed_assignments.items():
            self.current[member] = partitions
            self.active.add(member)

    def _perform_reassignments(
        self, partitions: list[TopicPartition], previous: dict[TopicPartition, _Owner]
    ) -> bool:
        performed = False
        while True:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                owner = self.partition_owner.get(tp)
                if owner is None or owner not in self.current:
                    continue
                prev = previous.get(tp)
                if (
                    prev is not None
                    and prev.member in self.current
                    and len(self.current[owner]) > len(self.current[prev.member]) + 1
                ):
                    self._reassign(tp, prev.member)
                    performed = modified = True
                    continue
                for other in self.topic_consumers[tp.topic]:
                    if other in self.current and len(self.current[owner]) > len(self.current[other]) + 1:
                        self._reassign_to_least_loaded(tp)
                        performed = modified = True
                        break
            if not modified:
                return performed

    def _reassign_to_least_loaded(self, tp: TopicPartition) -> None:
        for member in self._sorted_members():
            if tp.topic in self.consumer_topics[member]:
                self._reassign(tp, member)
                return
        raise RuntimeError(f"sticky assignor: no member can take {tp}")

    def _reassign(self, tp: TopicPartition, new: str) -> None:
        owner = self.partition_owner[tp]
        actual = self.movements.actual_partition_to_move(tp, owner, new)
        old = self.partition_owner[actual]
        self.movements.move(actual, old, new)
        self.current[old].remove(actual)
        self.current[new].append(actual)
        self.partition_owner[actual] = new


# --------------------------------------------------------------------------------------- concrete ones


class StickyAssignor(AbstractStickyAssignor):
    """``sticky``: eager; the previous assignment travels in ``StickyAssignorUserData`` v1."""

    name = "sticky"

    def __init__(self) -> None:
        self._assignment: tuple[TopicPartition, ...] | None = None
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._assignment = assignment.partitions
        self._generation = generation_id

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        if self._assignment is None:
            return None
        return encode_sticky_user_data(self._assignment, self._generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        # Always from the user data: an eager member has revoked everything before joining.
        return decode_sticky_user_data(subscription.user_data)


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """``cooperative-sticky``: incremental; never hands a partition to a new owner in the rebalance in
    which it is revoked from the old one."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._generation = generation_id

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return _I32.pack(self._generation)

    def member_data(self, subscription: Subscription) -> MemberData:
        if subscription.generation is not None:
            return MemberData(subscription.owned_partitions, subscription.generation)
        data = subscription.user_data
        if data is None:
            generation: int | None = None
        elif len(data) >= 4:
            # Java reads the leading int32 whatever follows (e.g. an old member's sticky layout).
            generation = int(_I32.unpack_from(data, 0)[0])
        else:
            generation = DEFAULT_GENERATION
        return MemberData(subscription.owned_partitions, generation)

    def assign_partitions(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        assignment, transferring = self.sticky_assign(partitions_per_topic, subscriptions)
        if transferring is None:
            transferring = _transferring_ownership(subscriptions, assignment)
        for tp, new_owner in transferring.items():
            assignment[new_owner].remove(tp)
        return assignment


def _transferring_ownership(
    subscriptions: Mapping[str, Subscription], assignment: Mapping[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions newly assigned to one member while another member still reports owning them."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member, assigned in assignment.items():
        owned = set(subscriptions[member].owned_partitions)
        assigned_set = set(assigned)
        for tp in assigned:
            if tp not in owned:
                added[tp] = member
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: m for tp, m in added.items() if tp in revoked}
