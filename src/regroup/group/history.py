"""Why every rebalance happened: typed causes, one record per generation, and the Notify events.

A rebalance starts with exactly one :data:`RebalanceCause` (the event that moved the group to
PreparingRebalance); whatever else changes membership during the join phase is kept as ``events``. When the
rebalance has to wait for members a :class:`RebalanceStarted` event names them with the time each is
evicted if it does not rejoin. When the join phase completes a :class:`GenerationRecord` is appended to the
group's bounded history and a :class:`GenerationCompleted` event is emitted; when the leader's assignment
is durable the record gets its sync-phase duration and a :class:`GenerationStable` event follows. A static
member replaced without a rebalance is reported as :class:`StaticMemberSwapped`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

__all__ = [
    "AssignmentAppendFailed",
    "AwaitedMember",
    "GenerationCompleted",
    "GenerationRecord",
    "GenerationStable",
    "JoinDeadlineEvicted",
    "LeaderRejoined",
    "LeftMember",
    "LoadedOverCapacity",
    "MemberJoined",
    "MemberLeft",
    "MemberMetadataChanged",
    "MemberRejected",
    "PendingMemberExpired",
    "PendingSyncExpired",
    "RebalanceCause",
    "RebalanceForced",
    "RebalanceHistory",
    "RebalanceStarted",
    "SessionExpired",
    "StaticMemberReplaced",
    "StaticMemberSwapped",
    "membership_reasons",
]


def _reason(reason: str | None) -> str:
    return f" (reason: {reason})" if reason else ""


def _instance(instance_id: str | None) -> str:
    return f" (instance {instance_id})" if instance_id is not None else ""


@dataclass(slots=True, unsafe_hash=True)
class MemberJoined:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None

    def describe(self) -> str:
        return f"new member {self.member_id}{_instance(self.group_instance_id)} joined{_reason(self.reason)}"


@dataclass(slots=True, unsafe_hash=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class MemberLeft:
    members: tuple[LeftMember, ...]

    def describe(self) -> str:
        parts = [f"{m.member_id}{_instance(m.group_instance_id)}{_reason(m.reason)}" for m in self.members]
        noun = "member" if len(parts) == 1 else "members"
        return f"{noun} {', '.join(parts)} left the group"


@dataclass(slots=True, unsafe_hash=True)
class SessionExpired:
    member_id: str
    timeout_ms: int
    new_member: bool = False

    def describe(self) -> str:
        if self.new_member:
            return (
                f"new member {self.member_id} did not complete its join within {self.timeout_ms} ms "
                "and was removed"
            )
        return f"member {self.member_id}'s session expired after {self.timeout_ms} ms without a heartbeat"


@dataclass(slots=True, unsafe_hash=True)
class PendingMemberExpired:
    member_id: str
    timeout_ms: int

    def describe(self) -> str:
        return f"pending member {self.member_id} did not rejoin within {self.timeout_ms} ms"


@dataclass(slots=True, unsafe_hash=True)
class LeaderRejoined:
    member_id: str
    metadata_changed: bool = False
    reason: str | None = None

    def describe(self) -> str:
        changed = " with changed protocols" if self.metadata_changed else ""
        return f"leader {self.member_id} rejoined{changed}{_reason(self.reason)}"


@dataclass(slots=True, unsafe_hash=True)
class MemberMetadataChanged:
    member_id: str
    reason: str | None = None

    def describe(self) -> str:
        return f"member {self.member_id} changed its subscription/protocols{_reason(self.reason)}"


@dataclass(slots=True, unsafe_hash=True)
class StaticMemberReplaced:
    group_instance_id: str
    old_member_id: str
    new_member_id: str
    reason: str | None = None

    def describe(self) -> str:
        return (
            f"static member {self.group_instance_id} replaced ({self.old_member_id} -> "
            f"{self.new_member_id}){_reason(self.reason)}"
        )


@dataclass(slots=True, unsafe_hash=True)
class PendingSyncExpired:
    member_ids: tuple[str, ...]
    timeout_ms: int

    def describe(self) -> str:
        return (
            f"pending-sync timeout ({self.timeout_ms} ms) evicted {', '.join(self.member_ids)} "
            "(no SyncGroup received)"
        )


@dataclass(slots=True, unsafe_hash=True)
class JoinDeadlineEvicted:
    member_ids: tuple[str, ...]
    timeout_ms: int

    def describe(self) -> str:
        return f"join-phase deadline ({self.timeout_ms} ms) evicted {', '.join(self.member_ids)}"


@dataclass(slots=True, unsafe_hash=True)
class MemberRejected:
    member_id: str
    max_size: int

    def describe(self) -> str:
        return f"member {self.member_id} was removed: group.max.size {self.max_size} reached"


@dataclass(slots=True, unsafe_hash=True)
class LoadedOverCapacity:
    size: int
    max_size: int

    def describe(self) -> str:
        return f"group loaded with {self.size} members, over group.max.size {self.max_size}"


@dataclass(slots=True, unsafe_hash=True)
class AssignmentAppendFailed:
    leader_id: str
    error: str

    def describe(self) -> str:
        return f"storing leader {self.leader_id}'s assignment failed with {self.error}"


@dataclass(slots=True, unsafe_hash=True)
class RebalanceForced:
    """A rebalance requested from outside the protocol (``regroup.testing``'s ``force_rebalance``)."""

    reason: str

    def describe(self) -> str:
        return f"rebalance forced: {self.reason}"


RebalanceCause = (
    MemberJoined
    | MemberLeft
    | SessionExpired
    | PendingMemberExpired
    | LeaderRejoined
    | MemberMetadataChanged
    | StaticMemberReplaced
    | PendingSyncExpired
    | JoinDeadlineEvicted
    | MemberRejected
    | LoadedOverCapacity
    | AssignmentAppendFailed
    | RebalanceForced
)


@dataclass(slots=True, unsafe_hash=True)
class GenerationRecord:
    """One completed join phase (generation ``generation_id``) and why it happened."""

    group_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[tuple[str, str | None], ...]  # (member id, group instance id)
    cause: RebalanceCause
    events: tuple[RebalanceCause, ...]
    waited_for: tuple[str, ...]  # members (and pending ids) that had not joined when the phase began
    joined: tuple[str, ...]  # member ids new since the previous generation
    left: tuple[str, ...]  # member ids of the previous generation that are gone
    rebalance_started_ms: int
    join_completed_ms: int
    stable_ms: int | None = None

    @property
    def join_phase_ms(self) -> int:
        return self.join_completed_ms - self.rebalance_started_ms

    @property
    def sync_phase_ms(self) -> int | None:
        return None if self.stable_ms is None else self.stable_ms - self.join_completed_ms

    def describe(self) -> str:
        head = f"group {self.group_id} generation {self.generation_id}: " + (
            f"{len(self.members)} members, leader {self.leader_id}, protocol {self.protocol_name}"
            if self.members
            else "empty"
        )
        parts = [head, f"cause: {self.cause.describe()}", f"join phase {self.join_phase_ms} ms"]
        if self.sync_phase_ms is not None:
            parts.append(f"sync phase {self.sync_phase_ms} ms")
        if self.waited_for:
            parts.append(f"waited for {', '.join(self.waited_for)}")
        if self.joined:
            parts.append(f"joined {', '.join(self.joined)}")
        if self.left:
            parts.append(f"left {', '.join(self.left)}")
        if self.events:
            parts.append("also: " + "; ".join(e.describe() for e in self.events))
        return "; ".join(parts)


@dataclass(slots=True, unsafe_hash=True)
class GenerationCompleted:
    """The join phase completed (the group is now CompletingRebalance, or Empty)."""

    record: GenerationRecord

    def message(self) -> str:
        return "join phase completed: " + self.record.describe()


@dataclass(slots=True, unsafe_hash=True)
class GenerationStable:
    """The leader's assignment is durable and was handed out (the group is now Stable)."""

    record: GenerationRecord

    def message(self) -> str:
        return "group stable: " + self.record.describe()


@dataclass(slots=True, unsafe_hash=True)
class StaticMemberSwapped:
    """A static member was replaced in a Stable group without a rebalance (the selected protocol stays):
    the generation goes on under the new member id."""

    group_id: str
    generation_id: int
    replaced: StaticMemberReplaced
    time_ms: int

    def message(self) -> str:
        return (
            f"group {self.group_id} generation {self.generation_id}: {self.replaced.describe()} "
            "without a rebalance"
        )


def membership_reasons(causes: Iterable[RebalanceCause]) -> tuple[dict[str, str], dict[str, str]]:
    """Why members joined and why members left, from a rebalance's cause and events: two maps of member
    id -> reason (members not named by any cause are absent)."""
    joined: dict[str, str] = {}
    left: dict[str, str] = {}
    for cause in causes:
        if isinstance(cause, MemberJoined):
            joined[cause.member_id] = "new member" + _reason(cause.reason)
        elif isinstance(cause, MemberLeft):
            for m in cause.members:
                left[m.member_id] = "left the group (LeaveGroup)" + _reason(m.reason)
        elif isinstance(cause, SessionExpired):
            left[cause.member_id] = (
                f"did not complete its join within {cause.timeout_ms} ms"
                if cause.new_member
                else f"session expired ({cause.timeout_ms} ms without a heartbeat)"
            )
        elif isinstance(cause, PendingMemberExpired):
            left[cause.member_id] = f"pending member did not rejoin within {cause.timeout_ms} ms"
        elif isinstance(cause, StaticMemberReplaced):
            instance = cause.group_instance_id
            left[cause.old_member_id] = f"replaced by {cause.new_member_id} (static member {instance})"
            joined[cause.new_member_id] = (
                f"replaced {cause.old_member_id} (static member {instance})" + _reason(cause.reason)
            )
        elif isinstance(cause, PendingSyncExpired):
            for member_id in cause.member_ids:
                left[member_id] = f"no SyncGroup within {cause.timeout_ms} ms"
        elif isinstance(cause, JoinDeadlineEvicted):
            for member_id in cause.member_ids:
                left[member_id] = f"did not rejoin within the rebalance timeout ({cause.timeout_ms} ms)"
        elif isinstance(cause, MemberRejected):
            left[cause.member_id] = f"turned away: group.max.size {cause.max_size} reached"
    return joined, left


@dataclass(slots=True, unsafe_hash=True)
class AwaitedMember:
    """A member the join phase is waiting for, and when it is evicted if it does not rejoin."""

    member_id: str
    group_instance_id: str | None
    deadline_ms: int | None  # None: no timer armed (it is not evicted while the join phase lasts)
    evicted_by: str  # "session timeout", "rebalance timeout" or "join timeout" (pending member)


@dataclass(slots=True, unsafe_hash=True)
class RebalanceStarted:
    """The group entered (or is in) PreparingRebalance and waits for ``awaiting`` to (re)join."""

    group_id: str
    generation_id: int  # the generation being replaced
    cause: RebalanceCause
    events: tuple[RebalanceCause, ...]
    rebalance_started_ms: int
    join_deadline_ms: int | None  # the join phase completes at the latest then (evicting laggards)
    awaiting: tuple[AwaitedMember, ...]

    def message(self) -> str:
        waiting = ", ".join(
            f"{m.member_id}{_instance(m.group_instance_id)}"
            + (f" (evicted by {m.evicted_by} at {m.deadline_ms})" if m.deadline_ms is not None else "")
            for m in self.awaiting
        )
        return (
            f"group {self.group_id} preparing rebalance from generation {self.generation_id}: "
            f"cause: {self.cause.describe()}" + (f"; waiting for {waiting}" if waiting else "")
        )


@dataclass(slots=True)
class _Pending:
    cause: RebalanceCause
    started_ms: int
    waited_for: tuple[str, ...]
    events: list[RebalanceCause] = field(default_factory=list)


class RebalanceHistory:
    """Per-group bounded generation history plus the rebalance in progress."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._records: dict[str, collections.deque[GenerationRecord]] = {}
        self._pending: dict[str, _Pending] = {}
        self._previous_members: dict[str, tuple[str, ...]] = {}

    def started(self, group_id: str, cause: RebalanceCause, now_ms: int, waited_for: Iterable[str]) -> None:
        self._pending[group_id] = _Pending(cause, now_ms, tuple(waited_for))

    def event(self, group_id: str, cause: RebalanceCause, now_ms: int) -> None:
        pending = self._pending.get(group_id)
        if pending is None:
            # A join phase that no recorded event started (e.g. a loaded group that is rejoined): this
            # event is the first thing that shaped it.
            self._pending[group_id] = _Pending(cause, now_ms, ())
        else:
            pending.events.append(cause)

    def completed(
        self,
        group_id: str,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        leader_id: str | None,
        members: tuple[tuple[str, str | None], ...],
        now_ms: int,
    ) -> GenerationRecord:
        pending = self._pending.pop(group_id, None)
        if pending is None:
            pending = _Pending(MemberLeft(()), now_ms, ())
        ids = tuple(m for m, _ in members)
        previous = self._previous_members.get(group_id, ())
        previous_set = set(previous)
        current_set = set(ids)
        record = GenerationRecord(
            group_id=group_id,
            generation_id=generation_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            leader_id=leader_id,
            members=members,
            cause=pending.cause,
            events=tuple(pending.events),
            waited_for=pending.waited_for,
            joined=tuple(m for m in ids if m not in previous_set),
            left=tuple(m for m in previous if m not in current_set),
            rebalance_started_ms=pending.started_ms,
            join_completed_ms=now_ms,
        )
        self._previous_members[group_id] = ids
        records = self._records.get(group_id)
        if records is None:
            records = self._records[group_id] = collections.deque(maxlen=self._size)
        records.append(record)
        return record

    def stable(self, group_id: str, generation_id: int, now_ms: int) -> GenerationRecord | None:
        records = self._records.get(group_id)
        if not records or records[-1].generation_id != generation_id:
            return None
        record = replace(records[-1], stable_ms=now_ms)
        records[-1] = record
        return record

    def in_progress(self, group_id: str) -> RebalanceCause | None:
        pending = self._pending.get(group_id)
        return None if pending is None else pending.cause

    def pending(self, group_id: str) -> tuple[RebalanceCause, int, tuple[RebalanceCause, ...]] | None:
        """The running rebalance's cause, start time and later events, or None."""
        pending = self._pending.get(group_id)
        return None if pending is None else (pending.cause, pending.started_ms, tuple(pending.events))

    def replaced(self, group_id: str, old_member_id: str, new_member_id: str) -> None:
        """A static member goes on under a new id without a rebalance: it is not "joined" next time."""
        previous = self._previous_members.get(group_id)
        if previous is not None:
            self._previous_members[group_id] = tuple(
                new_member_id if m == old_member_id else m for m in previous
            )

    def seed(self, group_id: str, member_ids: Iterable[str]) -> None:
        """The members of a loaded generation, so the next record's joined/left compare against them."""
        self._previous_members.setdefault(group_id, tuple(member_ids))

    def records(self, group_id: str) -> tuple[GenerationRecord, ...]:
        return tuple(self._records.get(group_id, ()))

    def forget(self, group_id: str) -> None:
        self._records.pop(group_id, None)
        self._pending.pop(group_id, None)
        self._previous_members.pop(group_id, None)
