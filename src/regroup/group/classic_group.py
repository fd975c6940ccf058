"""Classic group and member data, with the invariants every handler relies on.

The group keeps, besides its members (insertion-ordered: "the first member" is well defined), the
derived bookkeeping Kafka's ``ClassicGroup`` keeps: the static instance → member id map, the pending
(MEMBER_ID_REQUIRED) ids, the count of parked JoinGroups, per-protocol support counts, the pending-sync set
and the subscribed topics. Only the methods here touch that bookkeeping, so it cannot drift from the members.

Parked requests are plain (ticket, api version) pairs: answering one is the caller's job (it builds the
response for that version and emits a :class:`~regroup.group.effects.Reply`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from regroup.group.effects import Ticket, TimerKey
from regroup.group.state import GroupState, IllegalStateTransition
from regroup.protocol.errors import ErrorCode
from regroup.protocol.primitives import DecodeError
from regroup.protocol.records.consumer_protocol import ConsumerProtocolSubscription

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ClassicGroup",
    "ClassicGroupMember",
    "GroupSnapshot",
    "MemberSnapshot",
    "Parked",
    "Protocol",
]

CONSUMER_PROTOCOL_TYPE = "consumer"

Protocol = tuple[str, bytes]
"""One entry of a member's ordered protocol list: (name, metadata)."""


@dataclass(slots=True, unsafe_hash=True)
class Parked:
    """A parked JoinGroup or SyncGroup: the ticket to answer and the version to answer it in."""

    ticket: Ticket
    api_version: int


@dataclass(slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    awaiting_join: Parked | None = None
    awaiting_sync: Parked | None = None
    is_new: bool = False
    session_key: TimerKey | None = field(default=None, compare=False, repr=False)
    """The key of this member's session timer, built when it joins (the timer tables keep the same object
    as their key)."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)

    def has_satisfied_heartbeat(self) -> bool:
        """A member with a parked JoinGroup/SyncGroup is alive — unless it is brand new, which is covered
        by the new-member join timeout instead (Kafka's ``ClassicGroupMember.hasSatisfiedHeartbeat``)."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol_name}")

    def matches(self, protocols: Sequence[Protocol]) -> bool:
        return tuple(protocols) == self.protocols

    def vote(self, candidates: frozenset[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of the candidate protocols")


@dataclass(slots=True, unsafe_hash=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[Protocol, ...]
    assignment: bytes
    awaiting_join: bool
    awaiting_sync: bool


@dataclass(slots=True, unsafe_hash=True)
class GroupSnapshot:
    """A read-only copy of a group's state (for observability and tests)."""

    group_id: str
    state: GroupState
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int | None
    members: tuple[MemberSnapshot, ...]
    pending_members: tuple[str, ...]
    pending_sync_members: tuple[str, ...]
    subscribed_topics: frozenset[str] | None

    def member(self, member_id: str) -> MemberSnapshot | None:
        for member in self.members:
            if member.member_id == member_id:
                return member
        return None


class ClassicGroup:
    """One classic group (Kafka's ``ClassicGroup``)."""

    def __init__(
        self,
        group_id: str,
        state: GroupState,
        current_state_timestamp_ms: int | None,
        *,
        generation_id: int = 0,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = GroupState.DEAD
        self.current_state_timestamp_ms = current_state_timestamp_ms
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, int] = {}  # pending member id -> its JoinGroup's session timeout
        self.pending_sync_members: dict[str, None] = {}  # ordered set
        self.new_member_added = False
        self.subscribed_topics: frozenset[str] | None = None
        self._num_awaiting_join = 0
        self._supported_protocols: Counter[str] = Counter()

    # ------------------------------------------------------------------ queries

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty_state(self) -> bool:
        return self.state is GroupState.EMPTY

    @property
    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    @property
    def num_awaiting_join(self) -> int:
        return self._num_awaiting_join

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self._num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the current members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state.can_transition_to(GroupState.PREPARING_REBALANCE)

    def candidate_protocols(self) -> frozenset[str]:
        n = len(self.members)
        return frozenset(name for name, count in self._supported_protocols.items() if count == n)

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        """Kafka's compatibility rule: an Empty group accepts any non-empty type with at least one
        protocol; otherwise the type must match and one protocol must be supported by every member."""
        names = frozenset(protocol_names)
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        """Each member votes for its first listed protocol that every member supports; most votes win.

        Ties go to the protocol that reached the winning count first in member order (Kafka leaves ties
        to hash-map order, i.e. unspecified)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``validateMember``: the instance id (if given) must map to this member id, then the
        member must exist."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        # Unknown subscriptions: a consumer group is assumed to use every topic, any other type none.
        return self.uses_consumer_protocol

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Union of the members' subscribed topics, parsed from the selected protocol's metadata with the
        version-0 prefix of ConsumerProtocolSubscription; ``None`` when unknown (not a consumer group, no
        protocol selected, or unparseable metadata)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                data = member.metadata(self.protocol_name)
                if len(data) < 2 or int.from_bytes(data[:2], "big", signed=True) < 0:
                    return None
                subscription, _ = ConsumerProtocolSubscription.read(data, 2, 0)
            except (KeyError, DecodeError):
                return None
            topics.update(subscription.topics)
        return frozenset(topics)

    def current_members_for_join_response(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, instance id, selected-protocol metadata) of every member, for the leader."""
        if self.protocol_name is None:
            raise ValueError(f"group {self.group_id} has no selected protocol")
        name = self.protocol_name
        return [(m.member_id, m.group_instance_id, m.metadata(name)) for m in self.members.values()]

    def assignments(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    # ------------------------------------------------------------------ mutations

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if not self.state.can_transition_to(target):
            raise IllegalStateTransition(
                f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}"
            )
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp_ms = now_ms

    def add(self, member: ClassicGroupMember, parked: Parked | None = None) -> None:
        if member.member_id in self.members:
            raise ValueError(f"member {member.member_id} is already in group {self.group_id}")
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(
                    f"static member {member.group_instance_id} is already in group {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the group's and the member's protocol types differ")
        if not self.supports_protocols(member.protocol_type, member.protocol_names):
            raise ValueError("none of the member's protocols is supported by the group")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._share(member)
        self._supported_protocols.update(member.protocol_names)
        member.awaiting_join = parked
        if parked is not None:
            self._num_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        """Remove a member or pending member; if it led the group, the first remaining member leads."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported_protocols.subtract(member.protocol_names)
            self._drop_zero_counts()
            if member.awaiting_join is not None:
                self._num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.pop(member_id, None)
        return member

    def add_pending_member(self, member_id: str, session_timeout_ms: int) -> None:
        if member_id in self.members:
            raise ValueError(f"pending member {member_id} is already a member of group {self.group_id}")
        self.pending_members[member_id] = session_timeout_ms

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: Sequence[Protocol],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        parked: Parked | None,
    ) -> Parked | None:
        """Replace the member's protocols and timeouts and its parked JoinGroup; returns the JoinGroup it
        superseded, if any."""
        self._supported_protocols.subtract(member.protocol_names)
        member.protocols = tuple(protocols)
        self._supported_protocols.update(member.protocol_names)
        self._drop_zero_counts()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._share(member)
        superseded = member.awaiting_join
        if parked is not None and superseded is None:
            self._num_awaiting_join += 1
        elif parked is None and superseded is not None:
            self._num_awaiting_join -= 1
        member.awaiting_join = parked
        return superseded

    def _share(self, member: ClassicGroupMember) -> None:
        """The members of one application send the same protocols and timeouts: a member whose values
        equal the leader's keeps the leader's objects instead of its own copies (a subscription's bytes,
        two ints), which is most of what an idle member holds besides its ids."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None or leader is member:
            return
        if member.protocols == leader.protocols:
            member.protocols = leader.protocols
        if member.session_timeout_ms == leader.session_timeout_ms:
            member.session_timeout_ms = leader.session_timeout_ms
        if member.rebalance_timeout_ms == leader.rebalance_timeout_ms:
            member.rebalance_timeout_ms = leader.rebalance_timeout_ms

    def take_join(self, member: ClassicGroupMember) -> Parked | None:
        """Un-park the member's JoinGroup (the caller answers it)."""
        parked = member.awaiting_join
        if parked is not None:
            member.awaiting_join = None
            self._num_awaiting_join -= 1
        return parked

    def take_sync(self, member: ClassicGroupMember) -> Parked | None:
        parked = member.awaiting_sync
        member.awaiting_sync = None
        return parked

    def park_sync(self, member: ClassicGroupMember, parked: Parked) -> Parked | None:
        superseded = member.awaiting_sync
        member.awaiting_sync = parked
        return superseded

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[ClassicGroupMember, ClassicGroupMember]:
        """Swap a static member's id, keeping everything else (client, protocols, timeouts, assignment);
        returns (old member object, new member object). The old object keeps its parked requests so the
        caller can fence them; the pending-sync set is left alone (as in Kafka)."""
        old = self.members.get(old_member_id)
        if old is None:
            raise KeyError(f"cannot replace unknown member {old_member_id} of group {self.group_id}")
        if old.awaiting_join is not None:
            self._num_awaiting_join -= 1
        new = ClassicGroupMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        # the new id takes the old one's place in member order
        self.members = {
            (new_member_id if mid == old_member_id else mid): (new if mid == old_member_id else m)
            for mid, m in self.members.items()
        }
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return old, new

    def maybe_elect_new_joined_leader(self) -> bool:
        """At join completion: keep the leader if it rejoined, else elect the first member that did.
        False when there is no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def _drop_zero_counts(self) -> None:
        for name in [n for n, c in self._supported_protocols.items() if c <= 0]:
            del self._supported_protocols[name]

    # ------------------------------------------------------------------ views

    def snapshot(self) -> GroupSnapshot:
        return GroupSnapshot(
            group_id=self.group_id,
            state=self.state,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            current_state_timestamp_ms=self.current_state_timestamp_ms,
            members=tuple(
                MemberSnapshot(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocols=m.protocols,
                    assignment=m.assignment,
                    awaiting_join=m.awaiting_join is not None,
                    awaiting_sync=m.awaiting_sync is not None,
                )
                for m in self.members.values()
            ),
            pending_members=tuple(self.pending_members),
            pending_sync_members=tuple(self.pending_sync_members),
            subscribed_topics=self.subscribed_topics,
        )

    def check_invariants(self) -> None:
        """Raise AssertionError if the derived bookkeeping disagrees with the members (tests call this)."""
        assert self._num_awaiting_join == sum(1 for m in self.members.values() if m.awaiting_join)
        expected: Counter[str] = Counter()
        for m in self.members.values():
            expected.update(m.protocol_names)
        assert +self._supported_protocols == expected, (self._supported_protocols, expected)
        assert self.static_members == {
            m.group_instance_id: m.member_id for m in self.members.values() if m.group_instance_id is not None
        }
        assert (self.leader_id is None) == (not self.members) or self.state is GroupState.DEAD
        assert self.leader_id is None or self.leader_id in self.members
        assert not (set(self.pending_members) & set(self.members))
