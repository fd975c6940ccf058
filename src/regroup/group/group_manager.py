"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups, the
rebalance machinery behind them (join phase, initial delay, sync phase, leader election) and the three
group timers (member session / new-member join timeout / pending member; join phase; pending sync).

Mirrors the classic-protocol paths of Kafka 4.x's ``GroupMetadataManager``: same validation order, same
error codes and response fields per api version, same moments at which records are written. Where Kafka
leaves a parked request unanswered forever (a JoinGroup/SyncGroup superseded by a newer one from the same
member, or the parked SyncGroup of a member removed by LeaveGroup), regroup answers it — REBALANCE_IN_PROGRESS
and UNKNOWN_MEMBER_ID respectively — so the runtime never holds a dead ticket.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from regroup.group.classic_group import ClassicGroup, ClassicGroupMember, Parked, Protocol
from regroup.group.config import GroupConfig
from regroup.group.context import GroupRequestContext, MemberIdFactory
from regroup.group.effects import Result, TimerKey, TimerKind
from regroup.group.history import (
    AssignmentAppendFailed,
    AwaitedMember,
    GenerationCompleted,
    GenerationStable,
    JoinDeadlineEvicted,
    LeaderRejoined,
    LeftMember,
    LoadedOverCapacity,
    MemberJoined,
    MemberLeft,
    MemberMetadataChanged,
    MemberRejected,
    PendingMemberExpired,
    PendingSyncExpired,
    RebalanceCause,
    RebalanceForced,
    RebalanceHistory,
    RebalanceStarted,
    SessionExpired,
    StaticMemberReplaced,
    StaticMemberSwapped,
)
from regroup.group.outcome import AppendCallback, Outcome, TimerTable
from regroup.group.records import empty_group_metadata_record, group_from_value, group_metadata_record
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_groups import DescribedGroup, DescribedGroupMember
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse
from regroup.protocol.messages.list_groups import ListedGroup
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from regroup.protocol.records.group_metadata import GroupMetadataValue

__all__ = [
    "GroupManager",
    "InitialDelay",
    "heartbeat_key",
    "join_key",
    "join_response",
    "sync_key",
    "sync_response",
    "undescribed_group",
]

_FailureReply = Callable[[ErrorCode], JoinGroupResponse]

_CLASSIC_GROUP_TYPE = "classic"


# ---------------------------------------------------------------------------------------------- responses


def join_response(
    version: int,
    *,
    error: ErrorCode = ErrorCode.NONE,
    member_id: str = "",
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str | None = "",
    members: Sequence[tuple[str, str | None, bytes]] = (),
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    """A JoinGroup response shaped for ``version`` (Kafka's ``JoinGroupResponse`` constructor: a null
    protocol name is sent as "" before v7, an empty one as null from v7)."""
    if version < 7:
        protocol_name = protocol_name or ""
        protocol_type = None
    elif protocol_name == "":
        protocol_name = None
    return JoinGroupResponse(
        error_code=error.value,
        generation_id=generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader or "",
        skip_assignment=skip_assignment if version >= 9 else False,
        member_id=member_id,
        members=[
            JoinGroupResponseMember(
                member_id=mid, group_instance_id=iid if version >= 5 else None, metadata=metadata
            )
            for mid, iid, metadata in members
        ],
    )


def sync_response(
    version: int,
    *,
    error: ErrorCode = ErrorCode.NONE,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=error.value,
        protocol_type=protocol_type if version >= 5 else None,
        protocol_name=protocol_name if version >= 5 else None,
        assignment=assignment,
    )


def _leave_response(version: int, results: Sequence[MemberResponse]) -> LeaveGroupResponse:
    if version >= 3:
        return LeaveGroupResponse(members=list(results))
    # v0-2: one member, its error is the top-level error (Kafka's LeaveGroupResponse constructor)
    return LeaveGroupResponse(error_code=results[0].error_code if results else 0)


# ---------------------------------------------------------------------------------------------- timers


@dataclass(slots=True, unsafe_hash=True)
class InitialDelay:
    """Payload of the join timer of an initial rebalance: the delay just waited and the budget left."""

    delay_ms: int
    remaining_ms: int


@dataclass(slots=True, unsafe_hash=True)
class _JoinDeadline:
    """Payload of the join timer of a non-initial rebalance."""


@dataclass(slots=True, unsafe_hash=True)
class _SyncDeadline:
    generation_id: int


_NONE = ErrorCode.NONE.value
_REBALANCE_IN_PROGRESS = ErrorCode.REBALANCE_IN_PROGRESS.value


def heartbeat_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey(TimerKind.HEARTBEAT, group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return TimerKey(TimerKind.JOIN, group_id)


def sync_key(group_id: str) -> TimerKey:
    return TimerKey(TimerKind.SYNC, group_id)


@dataclass(slots=True, unsafe_hash=True)
class _Join:
    """A JoinGroup request, normalized for its version."""

    ctx: GroupRequestContext
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    reason: str | None
    now_ms: int

    @property
    def version(self) -> int:
        return self.ctx.api_version

    @property
    def parked(self) -> Parked:
        return Parked(self.ctx.ticket, self.ctx.api_version)

    @property
    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.protocols)


class GroupManager:
    """The classic groups of one shard and every membership API."""

    def __init__(
        self,
        config: GroupConfig,
        member_id_factory: MemberIdFactory,
        timers: TimerTable,
        history: RebalanceHistory,
    ) -> None:
        self.config = config
        self._groups: dict[str, ClassicGroup] = {}
        self._new_member_id = member_id_factory
        self._timers = timers
        self._history = history

    # ------------------------------------------------------------------------------------------ JoinGroup

    def join_group(
        self, ctx: GroupRequestContext, req: JoinGroupRequest, now_ms: int
    ) -> Result[JoinGroupResponse]:
        version = ctx.api_version
        # Interned, as the ids the coordinator generates are: the member, its timers and the group's
        # history then share one string instead of holding the request's copy beside the generated one.
        member_id = sys.intern(req.member_id)
        if not req.group_id:
            return Result(reply=join_response(version, error=ErrorCode.INVALID_GROUP_ID, member_id=member_id))
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return Result(
                reply=join_response(version, error=ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
            )
        join = _Join(
            ctx=ctx,
            group_id=req.group_id,
            member_id=member_id,
            group_instance_id=req.group_instance_id if version >= 5 else None,
            session_timeout_ms=req.session_timeout_ms,
            # JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout
            rebalance_timeout_ms=req.session_timeout_ms if version == 0 else req.rebalance_timeout_ms,
            # Interned: every member of a group names the same protocol type and protocols.
            protocol_type=sys.intern(req.protocol_type),
            protocols=tuple((sys.intern(p.name), p.metadata) for p in req.protocols),
            reason=req.reason if version >= 8 else None,
            now_ms=now_ms,
        )
        group = self._groups.get(req.group_id)
        created = group is None
        if group is None:
            if member_id != "":
                return Result(
                    reply=join_response(version, error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
                )
            group = ClassicGroup(req.group_id, GroupState.EMPTY, now_ms)
            self._groups[req.group_id] = group

        out = Outcome()
        failure: _FailureReply | None = None
        reply: JoinGroupResponse | None
        if not self._accept_joining_member(group, member_id):
            # The id (member or pending) is dropped; nothing of it is parked at this point.
            if group.remove(member_id) is not None and group.is_in(GroupState.PREPARING_REBALANCE):
                self._history.event(group.group_id, MemberRejected(member_id, cfg.group_max_size), now_ms)
            if member_id:
                self._timers.cancel(out, heartbeat_key(group.group_id, member_id))
            reply = join_response(version, error=ErrorCode.GROUP_MAX_SIZE_REACHED)
        elif member_id == "":
            reply, failure = self._join_new_member(out, group, join)
        else:
            reply = self._join_existing_member(out, group, join)

        if created:
            # Kafka commits a newly created group with an "empty" GroupMetadata record; if that append
            # fails the creation is rolled back and the join answered with the error.
            out.records.append(empty_group_metadata_record(group.group_id, group.current_state_timestamp_ms))
            out.after_append(self._rollback_created_group(group))
            failure = _created_group_failure(version)
        return out.result(reply, failure)

    def _rollback_created_group(self, group: ClassicGroup) -> AppendCallback:
        def callback(error: ErrorCode | None, out: Outcome) -> None:
            if error is not None:
                self.forget_created_group(out, group)

        return callback

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # Parked joins, not members, are counted: the member count may exceed a lowered limit, and this
            # lets the last re-joiners be the ones turned away (Kafka's acceptJoiningMember).
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or (
                group.num_awaiting_join < self.config.group_max_size
            )
        return group.has_member(member_id) or len(group.members) < self.config.group_max_size

    def _join_new_member(
        self, out: Outcome, group: ClassicGroup, join: _Join
    ) -> tuple[JoinGroupResponse | None, _FailureReply | None]:
        version = join.version
        if group.is_in(GroupState.DEAD):
            return join_response(version, error=ErrorCode.COORDINATOR_NOT_AVAILABLE), None
        if not group.supports_protocols(join.protocol_type, join.protocol_names):
            return join_response(version, error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL), None
        if join.group_instance_id is not None:
            new_member_id = self._new_member_id(join.group_instance_id)
            existing = group.static_members.get(join.group_instance_id)
            if existing is not None:
                return self._replace_static_member(out, group, join, existing, new_member_id)
            self._add_member(out, group, join, new_member_id)
            return None, None
        new_member_id = self._new_member_id(join.ctx.client_id)
        if version >= 4:
            group.add_pending_member(new_member_id, join.session_timeout_ms)
            self._timers.schedule(
                out, heartbeat_key(group.group_id, new_member_id), join.now_ms + join.session_timeout_ms
            )
            return join_response(version, error=ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id), None
        self._add_member(out, group, join, new_member_id)
        return None, None

    def _join_existing_member(
        self, out: Outcome, group: ClassicGroup, join: _Join
    ) -> JoinGroupResponse | None:
        version = join.version
        member_id = join.member_id
        if group.is_in(GroupState.DEAD):
            return join_response(version, error=ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not group.supports_protocols(join.protocol_type, join.protocol_names):
            return join_response(version, error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if group.is_pending_member(member_id):
            if join.group_instance_id is not None:
                # Kafka throws an IllegalStateException here, which reaches the client as an unknown error.
                return join_response(version, error=ErrorCode.UNKNOWN_SERVER_ERROR)
            self._add_member(out, group, join, member_id)
            return None
        error = group.validate_member(member_id, join.group_instance_id)
        if error is not None:
            return join_response(version, error=error, member_id=member_id)
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(out, group, member, join, None)
            return None
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(join.protocols):
                # Same metadata (e.g. the member missed its JoinGroup response): answer for the current
                # generation.
                return _generation_response(
                    group, member_id, version, with_members=group.is_leader(member_id)
                )
            self._update_member(out, group, member, join, MemberMetadataChanged(member_id, join.reason))
            return None
        if group.is_in(GroupState.STABLE):
            if group.is_leader(member_id):
                # The leader's JoinGroup always rebalances: it may have seen a change that does not show in
                # its metadata (e.g. new partitions).
                cause: RebalanceCause = LeaderRejoined(
                    member_id, not member.matches(join.protocols), join.reason
                )
                self._update_member(out, group, member, join, cause)
                return None
            if not member.matches(join.protocols):
                self._update_member(out, group, member, join, MemberMetadataChanged(member_id, join.reason))
                return None
            return _generation_response(group, member_id, version)
        # Empty: the member cannot exist (validate_member failed above); kept for parity with Kafka.
        return join_response(version, error=ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)

    def _update_member(
        self,
        out: Outcome,
        group: ClassicGroup,
        member: ClassicGroupMember,
        join: _Join,
        cause: RebalanceCause | None,
    ) -> None:
        superseded = group.update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, join.parked
        )
        if superseded is not None:
            out.reply(
                superseded.ticket,
                join_response(
                    superseded.api_version, error=ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id
                ),
            )
        self._maybe_prepare_rebalance_or_complete_join(out, group, cause, join.now_ms)

    def _add_member(self, out: Outcome, group: ClassicGroup, join: _Join, member_id: str) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=join.group_instance_id,
            client_id=sys.intern(join.ctx.client_id),  # often one client.id for every instance of an app
            client_host=sys.intern(join.ctx.client_host),  # shared by the members on one client machine
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=join.session_timeout_ms,
            protocol_type=join.protocol_type,
            protocols=join.protocols,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True  # lets the initial rebalance wait one more delay
        key = member.session_key = heartbeat_key(group.group_id, member_id)
        if group.is_pending_member(member_id):
            # The timer tables keep the key object they were first given: the pending id's key goes, so
            # that they and the member share one key for the member's whole life.
            self._timers.cancel(out, key)
        group.add(member, join.parked)
        # A new member cannot heartbeat while its JoinGroup is parked; if the join phase does not finish in
        # time it is dropped (its client retries).
        self._timers.schedule(out, key, join.now_ms + self.config.new_member_join_timeout_ms)
        cause = MemberJoined(member_id, join.group_instance_id, join.reason)
        self._maybe_prepare_rebalance_or_complete_join(out, group, cause, join.now_ms)

    def _replace_static_member(
        self, out: Outcome, group: ClassicGroup, join: _Join, old_member_id: str, new_member_id: str
    ) -> tuple[JoinGroupResponse | None, _FailureReply | None]:
        """A static member rejoined under a new member id (Kafka's
        ``updateStaticMemberThenRebalanceOrCompleteJoin``): the old id is fenced and its session moves to the
        new one; what follows depends on the group's state."""
        instance_id = join.group_instance_id
        assert instance_id is not None
        now_ms = join.now_ms
        leader_before = group.leader_id
        old, new = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._fence_replaced_member(out, old, old_member_id)
        self._timers.cancel(out, heartbeat_key(group.group_id, old_member_id))
        self._timers.schedule(
            out, heartbeat_key(group.group_id, new_member_id), now_ms + new.session_timeout_ms
        )
        # Captured before the update so that a failed append restores them (the KAFKA-13581 fix).
        before = _MemberSettings(
            new.protocols, new.rebalance_timeout_ms, new.session_timeout_ms, leader_before
        )
        group.update_member(
            new, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, join.parked
        )
        cause = StaticMemberReplaced(instance_id, old_member_id, new_member_id, join.reason)

        if group.is_in(GroupState.STABLE):
            if (group.protocol_name or "") != group.select_protocol():
                self._maybe_prepare_rebalance_or_complete_join(out, group, cause, now_ms)
                return None, None
            # The selected protocol stays: persist the new member id, no rebalance.
            return None, self._persist_static_replacement(out, group, new, join, cause, before)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already be computing an assignment for the old id: always rebalance.
            self._prepare_rebalance(out, group, cause, now_ms)
            return None, None
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._history.event(group.group_id, cause, now_ms)
            self._maybe_complete_join_phase(out, group, now_ms)
            return None, None
        raise AssertionError(
            f"static member {instance_id} rejoined group {group.group_id} in state {group.state}"
        )

    @staticmethod
    def _fence_replaced_member(out: Outcome, old: ClassicGroupMember, old_member_id: str) -> None:
        """Answer whoever still waits under the replaced member id with FENCED_INSTANCE_ID."""
        if old.awaiting_join is not None:
            out.reply(
                old.awaiting_join.ticket,
                join_response(
                    old.awaiting_join.api_version,
                    error=ErrorCode.FENCED_INSTANCE_ID,
                    member_id=old_member_id,
                    leader="",
                ),
            )
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            out.reply(
                old.awaiting_sync.ticket,
                sync_response(old.awaiting_sync.api_version, error=ErrorCode.FENCED_INSTANCE_ID),
            )
            old.awaiting_sync = None

    def _persist_static_replacement(
        self,
        out: Outcome,
        group: ClassicGroup,
        new: ClassicGroupMember,
        join: _Join,
        cause: StaticMemberReplaced,
        before: _MemberSettings,
    ) -> _FailureReply:
        """A Stable group keeps its assignment: write the group with the new member id and answer the
        parked join once durable; a failed append swaps the old member back."""
        now_ms = join.now_ms
        old_member_id, new_member_id = cause.old_member_id, cause.new_member_id
        version = join.version
        leader_before = before.leader_id
        out.records.append(group_metadata_record(group, group.assignments()))

        def callback(error: ErrorCode | None, after: Outcome) -> None:
            if error is not None:
                group.update_member(
                    new, before.protocols, before.rebalance_timeout_ms, before.session_timeout_ms, None
                )
                _, restored = group.replace_static_member(
                    cause.group_instance_id, new_member_id, old_member_id
                )
                self._timers.cancel(after, heartbeat_key(group.group_id, new_member_id))
                self._timers.schedule(
                    after,
                    heartbeat_key(group.group_id, old_member_id),
                    now_ms + restored.session_timeout_ms,
                )
                return
            self._history.replaced(group.group_id, old_member_id, new_member_id)
            after.notify(StaticMemberSwapped(group.group_id, group.generation_id, cause, now_ms))
            parked = group.take_join(new)
            if parked is not None:
                after.reply(
                    parked.ticket, _static_rejoin_response(group, version, new_member_id, leader_before)
                )

        out.after_append(callback)

        def failure(error: ErrorCode) -> JoinGroupResponse:
            return join_response(
                version,
                error=error,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=leader_before,
            )

        return failure

    # ------------------------------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance_or_complete_join(
        self, out: Outcome, group: ClassicGroup, cause: RebalanceCause | None, now_ms: int
    ) -> None:
        if group.can_rebalance():
            assert cause is not None, "a rebalance always has a cause"
            self._prepare_rebalance(out, group, cause, now_ms)
        else:
            if cause is not None:
                self._history.event(group.group_id, cause, now_ms)
            self._maybe_complete_join_phase(out, group, now_ms)

    def _prepare_rebalance(
        self, out: Outcome, group: ClassicGroup, cause: RebalanceCause, now_ms: int
    ) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # Parked SyncGroups are sent back to rejoin, and the assignment being built is void.
            self._reset_and_propagate_assignment(out, group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        self._remove_sync_expiration(out, group)
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._timers.schedule(
                out, join_key(group.group_id), now_ms + delay, InitialDelay(delay, remaining)
            )
        waited_for = [m.member_id for m in group.not_yet_rejoined()] + list(group.pending_members)
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        self._history.started(group.group_id, cause, now_ms, waited_for)
        if not initial:
            self._maybe_complete_join_else_schedule(out, group, now_ms)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            started = self.rebalance_progress(group.group_id)
            if started is not None:
                out.notify(started)

    def rebalance_progress(self, group_id: str) -> RebalanceStarted | None:
        """The rebalance ``group_id`` is preparing: whom the join phase waits for and when each is evicted
        (None unless the group is in PreparingRebalance)."""
        group = self._groups.get(group_id)
        pending = self._history.pending(group_id)
        if group is None or pending is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return None
        cause, started_ms, events = pending
        join_deadline = self._timers.deadline(join_key(group_id))
        awaiting: list[AwaitedMember] = []
        for member in group.not_yet_rejoined():
            session = self._timers.deadline(heartbeat_key(group_id, member.member_id))
            deadline, by = session, "session timeout"
            # A dynamic member that misses the join deadline is evicted when the join phase completes;
            # a static one stays until its session expires (Kafka's completeClassicGroupJoin).
            by_join = join_deadline is not None and (deadline is None or join_deadline < deadline)
            if by_join and not member.is_static:
                deadline, by = join_deadline, "rebalance timeout"
            awaiting.append(AwaitedMember(member.member_id, member.group_instance_id, deadline, by))
        for member_id in group.pending_members:
            deadline = self._timers.deadline(heartbeat_key(group_id, member_id))
            awaiting.append(AwaitedMember(member_id, None, deadline, "join timeout"))
        return RebalanceStarted(
            group_id=group_id,
            generation_id=group.generation_id,
            cause=cause,
            events=events,
            rebalance_started_ms=started_ms,
            join_deadline_ms=join_deadline,
            awaiting=tuple(awaiting),
        )

    def _maybe_complete_join_else_schedule(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        if group.has_all_members_joined():
            self._complete_join(out, group, now_ms)
        else:
            self._timers.schedule(
                out, join_key(group.group_id), now_ms + group.rebalance_timeout_ms(), _JoinDeadline()
            )

    def _maybe_complete_join_phase(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.previous_state is GroupState.EMPTY:
            return  # the initial rebalance only completes on its timer
        if group.has_all_members_joined():
            self._complete_join(out, group, now_ms)

    def _complete_join(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        self._timers.cancel(out, join_key(group.group_id))
        evicted = [m for m in group.not_yet_rejoined() if not m.is_static]
        if evicted:
            timeout = group.rebalance_timeout_ms()
            for member in evicted:
                self._remove(out, group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            self._history.event(
                group.group_id, JoinDeadlineEvicted(tuple(m.member_id for m in evicted), timeout), now_ms
            )
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members that stay): wait another rebalance timeout; sessions
            # expiring will eventually empty the group.
            self._timers.schedule(
                out, join_key(group.group_id), now_ms + group.rebalance_timeout_ms(), _JoinDeadline()
            )
            return
        group.init_next_generation(now_ms)
        record = self._history.completed(
            group.group_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id,
            tuple((m.member_id, m.group_instance_id) for m in group.members.values()),
            now_ms,
        )
        out.notify(GenerationCompleted(record))
        if group.is_in(GroupState.EMPTY):
            # The group is now empty: persist it. Kafka only logs a failure of this append (the previous
            # generation stays in the log until the next write).
            out.records.append(group_metadata_record(group, {}))
            return
        all_members = group.current_members_for_join_response()
        for member in group.members.values():
            parked = group.take_join(member)
            if parked is not None:
                is_leader = group.is_leader(member.member_id)
                out.reply(
                    parked.ticket,
                    join_response(
                        parked.api_version,
                        member_id=member.member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id,
                        members=all_members if is_leader else (),
                    ),
                )
            # Every member's session restarts now, static members that did not rejoin included.
            self._schedule_session(out, group, member, now_ms)
            member.is_new = False
            group.pending_sync_members[member.member_id] = None
        self._timers.schedule(
            out,
            sync_key(group.group_id),
            now_ms + group.rebalance_timeout_ms(),
            _SyncDeadline(group.generation_id),
        )

    def _schedule_session(
        self, out: Outcome, group: ClassicGroup, member: ClassicGroupMember, now_ms: int
    ) -> None:
        key = member.session_key
        if key is None:
            key = member.session_key = heartbeat_key(group.group_id, member.member_id)
        self._timers.schedule(out, key, now_ms + member.session_timeout_ms)

    def _remove(
        self, out: Outcome, group: ClassicGroup, member: ClassicGroupMember, error: ErrorCode
    ) -> None:
        """Remove a member, cancelling its session timer and answering what it has parked with ``error``."""
        self._timers.cancel(out, heartbeat_key(group.group_id, member.member_id))
        parked = group.take_join(member)
        if parked is not None:
            out.reply(parked.ticket, join_response(parked.api_version, error=error))
        parked = group.take_sync(member)
        if parked is not None:
            out.reply(parked.ticket, sync_response(parked.api_version, error=error))
        group.remove(member.member_id)

    def _reset_and_propagate_assignment(
        self, out: Outcome, group: ClassicGroup, error: ErrorCode, now_ms: int
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(out, group, error, now_ms)

    def _propagate_assignment(self, out: Outcome, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            parked = group.take_sync(member)
            if parked is None:
                continue
            out.reply(
                parked.ticket,
                sync_response(
                    parked.api_version,
                    error=error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                ),
            )
            # Its session may have "expired" while it waited (ignored then): restart it.
            self._schedule_session(out, group, member, now_ms)

    def _remove_sync_expiration(self, out: Outcome, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._timers.cancel(out, sync_key(group.group_id))

    def _remove_pending_sync_member(self, out: Outcome, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.pop(member_id, None)
        if (
            not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            or not group.pending_sync_members
        ):
            self._timers.cancel(out, sync_key(group.group_id))

    # ------------------------------------------------------------------------------------------ timers

    def on_heartbeat_expired(self, out: Outcome, group_id: str, member_id: str, now_ms: int) -> None:
        self._expire(out, group_id, member_id, now_ms, force=False)

    def expire_member(self, out: Outcome, group_id: str, member_id: str, now_ms: int) -> bool:
        """End a member's (or pending member's) session now, through the session-expiry path, even while it
        has a JoinGroup/SyncGroup parked (which a real expiry spares). False when there is no such member."""
        return self._expire(out, group_id, member_id, now_ms, force=True)

    def _expire(self, out: Outcome, group_id: str, member_id: str, now_ms: int, *, force: bool) -> bool:
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return False
        if group.is_pending_member(member_id):
            timeout = group.pending_members[member_id]
            group.remove(member_id)
            if force:
                self._timers.cancel(out, heartbeat_key(group_id, member_id))
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self._history.event(group_id, PendingMemberExpired(member_id, timeout), now_ms)
                if group.has_all_members_joined():
                    self._complete_join(out, group, now_ms)
            return True
        member = group.members.get(member_id)
        if member is None or (not force and member.has_satisfied_heartbeat()):
            return False
        timeout = self.config.new_member_join_timeout_ms if member.is_new else member.session_timeout_ms
        cause = SessionExpired(member_id, timeout, member.is_new)
        self._remove(out, group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(out, group, cause, now_ms)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._history.event(group_id, cause, now_ms)
            # Unlike LeaveGroup, an expiry completes the join phase even during an initial rebalance (Kafka).
            if group.has_all_members_joined():
                self._complete_join(out, group, now_ms)
        return True

    def force_rebalance(self, out: Outcome, group_id: str, reason: str, now_ms: int) -> bool:
        """Start a rebalance of a Stable or CompletingRebalance group with :class:`RebalanceForced` as its
        cause; in PreparingRebalance the request joins the running rebalance as an event. False when the
        group does not exist or is Empty or Dead (there is nobody to rebalance)."""
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return False
        cause = RebalanceForced(reason)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._history.event(group_id, cause, now_ms)
        else:
            self._prepare_rebalance(out, group, cause, now_ms)
        return True

    def on_join_timer(self, out: Outcome, group_id: str, payload: object, now_ms: int) -> None:
        group = self._groups.get(group_id)
        if group is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if isinstance(payload, InitialDelay) and group.new_member_added and payload.remaining_ms != 0:
            # Someone joined during this window: wait one more delay, within the remaining budget (which
            # shrinks by the delay just waited).
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, payload.remaining_ms)
            remaining = max(payload.remaining_ms - payload.delay_ms, 0)
            self._timers.schedule(out, join_key(group_id), now_ms + delay, InitialDelay(delay, remaining))
            return
        self._complete_join(out, group, now_ms)

    def on_sync_timer(self, out: Outcome, group_id: str, payload: object, now_ms: int) -> None:
        group = self._groups.get(group_id)
        if group is None or not isinstance(payload, _SyncDeadline):
            return
        if payload.generation_id != group.generation_id:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        timeout = group.rebalance_timeout_ms()
        laggards = list(group.pending_sync_members)
        for member_id in laggards:
            member = group.members.get(member_id)
            if member is not None:
                self._remove(out, group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                # A static member replaced after the join phase leaves its old id here (as in Kafka).
                group.remove(member_id)
                self._timers.cancel(out, heartbeat_key(group_id, member_id))
        self._prepare_rebalance(out, group, PendingSyncExpired(tuple(laggards), timeout), now_ms)

    # ------------------------------------------------------------------------------------------ SyncGroup

    def sync_group(
        self, ctx: GroupRequestContext, req: SyncGroupRequest, now_ms: int
    ) -> Result[SyncGroupResponse]:
        version = ctx.api_version
        if version >= 5 and (req.protocol_type is None or req.protocol_name is None):
            # Mandatory from v5; Kafka's broker checks this before anything else.
            return Result(reply=sync_response(version, error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if not req.group_id:
            return Result(reply=sync_response(version, error=ErrorCode.INVALID_GROUP_ID))
        group = self._groups.get(req.group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            return Result(reply=sync_response(version, error=ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.DEAD):
            return Result(reply=sync_response(version, error=ErrorCode.COORDINATOR_NOT_AVAILABLE))
        instance_id = req.group_instance_id if version >= 3 else None
        error = group.validate_member(req.member_id, instance_id)
        if error is None and req.generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and (
            _inconsistent(req.protocol_type, group.protocol_type)
            or _inconsistent(req.protocol_name, group.protocol_name)
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is None and group.is_in(GroupState.PREPARING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            return Result(reply=sync_response(version, error=error))

        out = Outcome()
        member = group.members[req.member_id]
        if group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(out, group, member.member_id)
            response = sync_response(
                version,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            )
            return out.result(response)

        # CompletingRebalance: park until the leader's assignment is durable.
        superseded = group.park_sync(member, Parked(ctx.ticket, version))
        if superseded is not None:
            out.reply(
                superseded.ticket,
                sync_response(superseded.api_version, error=ErrorCode.REBALANCE_IN_PROGRESS),
            )
        self._remove_pending_sync_member(out, group, member.member_id)
        if group.is_leader(member.member_id):
            given = {a.member_id: a.assignment for a in req.assignments}
            assignment = {mid: given.get(mid, b"") for mid in group.members}
            out.records.append(group_metadata_record(group, assignment))
            generation_id = group.generation_id
            leader_id = member.member_id

            def callback(error: ErrorCode | None, after: Outcome) -> None:
                if (
                    self._groups.get(group.group_id) is not group
                    or not group.is_in(GroupState.COMPLETING_REBALANCE)
                    or group.generation_id != generation_id
                ):
                    return
                if error is not None:
                    self._reset_and_propagate_assignment(after, group, error, now_ms)
                    self._maybe_prepare_rebalance_or_complete_join(
                        after, group, AssignmentAppendFailed(leader_id, error.name), now_ms
                    )
                    return
                for m in group.members.values():
                    m.assignment = assignment.get(m.member_id, b"")
                self._propagate_assignment(after, group, ErrorCode.NONE, now_ms)
                group.transition_to(GroupState.STABLE, now_ms)
                record = self._history.stable(group.group_id, generation_id, now_ms)
                if record is not None:
                    after.notify(GenerationStable(record))

            out.after_append(callback)
        return out.result(None)

    # ------------------------------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, ctx: GroupRequestContext, req: HeartbeatRequest, now_ms: int
    ) -> Result[HeartbeatResponse]:
        if not req.group_id:
            return Result(reply=HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID.value))
        group = self._groups.get(req.group_id)
        if group is None:
            return Result(reply=HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID.value))
        state = group.state
        if state is GroupState.DEAD:
            return Result(reply=HeartbeatResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE.value))
        instance_id = req.group_instance_id if ctx.api_version >= 3 else None
        error = group.validate_member(req.member_id, instance_id)
        if error is None and req.generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and state is GroupState.EMPTY:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error is not None:
            return Result(reply=HeartbeatResponse(error_code=error.value))
        out = Outcome()
        self._schedule_session(out, group, group.members[req.member_id], now_ms)
        # CompletingRebalance answers NONE (Kafka's implementation, despite its state Javadoc).
        code = _REBALANCE_IN_PROGRESS if state is GroupState.PREPARING_REBALANCE else _NONE
        return out.result(HeartbeatResponse(error_code=code))

    def reschedule_session(self, out: Outcome, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_session(out, group, member, now_ms)

    # ------------------------------------------------------------------------------------------ LeaveGroup

    def leave_group(
        self, ctx: GroupRequestContext, req: LeaveGroupRequest, now_ms: int
    ) -> Result[LeaveGroupResponse]:
        version = ctx.api_version
        if not req.group_id:
            return Result(reply=LeaveGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID.value))
        if version >= 3:
            identities = [
                (m.member_id, m.group_instance_id, m.reason if version >= 5 else None) for m in req.members
            ]
        else:
            identities = [(req.member_id, None, None)]
        group = self._groups.get(req.group_id)
        if group is None:
            results = [
                MemberResponse(
                    member_id=mid, group_instance_id=iid, error_code=ErrorCode.UNKNOWN_MEMBER_ID.value
                )
                for mid, iid, _ in identities
            ]
            return Result(reply=_leave_response(version, results))
        if group.is_in(GroupState.DEAD):
            return Result(reply=LeaveGroupResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE.value))

        out = Outcome()
        results = []
        left: list[LeftMember] = []
        for member_id, instance_id, reason in identities:
            error: ErrorCode | None = None
            if member_id == "":
                # Administrative removal of a static member by instance id.
                static_id = group.static_members.get(instance_id) if instance_id is not None else None
                if static_id is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._remove(out, group, group.members[static_id], ErrorCode.UNKNOWN_MEMBER_ID)
                    left.append(LeftMember(static_id, instance_id, reason))
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self._timers.cancel(out, heartbeat_key(group.group_id, member_id))
                left.append(LeftMember(member_id, instance_id, reason))
            else:
                error = group.validate_member(member_id, instance_id)
                if error is None:
                    self._remove(out, group, group.members[member_id], ErrorCode.UNKNOWN_MEMBER_ID)
                    left.append(LeftMember(member_id, instance_id, reason))
            results.append(
                MemberResponse(
                    member_id=member_id,
                    group_instance_id=instance_id,
                    error_code=(error or ErrorCode.NONE).value,
                )
            )

        if left:
            # Like Kafka's coordinator, a batch that only removed pending members still rebalances a Stable
            # or CompletingRebalance group.
            cause = MemberLeft(tuple(left))
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(out, group, cause, now_ms)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._history.event(group.group_id, cause, now_ms)
                self._maybe_complete_join_phase(out, group, now_ms)

        def failure(error: ErrorCode) -> LeaveGroupResponse:
            return LeaveGroupResponse(error_code=error.value)

        return out.result(_leave_response(version, results), failure)

    # ------------------------------------------------------------------------------------------ reads

    def describe_group(self, group_id: str, api_version: int) -> DescribedGroup:
        group = self._groups.get(group_id)
        if group is None:
            return undescribed_group(group_id, api_version, f"Group {group_id} not found.")
        stable = group.is_in(GroupState.STABLE) and group.protocol_name is not None
        return DescribedGroup(
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=[
                DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id if api_version >= 4 else None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(group.protocol_name)
                    if stable and group.protocol_name is not None
                    else b"",
                    member_assignment=m.assignment,
                )
                for m in group.members.values()
            ],
        )

    def list_groups(self, states_filter: Sequence[str], types_filter: Sequence[str]) -> list[ListedGroup]:
        states = {s.strip().lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and _CLASSIC_GROUP_TYPE not in types:
            return []
        return [
            ListedGroup(
                group_id=group.group_id,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
                group_type=_CLASSIC_GROUP_TYPE,
            )
            for group in self._groups.values()
            if not states or group.state.value.lower() in states
        ]

    # ------------------------------------------------------------------------------------------ lifecycle

    def on_loaded(self, out: Outcome, now_ms: int) -> None:
        for group in self._groups.values():
            self._history.seed(group.group_id, group.members)
            for member in group.members.values():
                self._schedule_session(out, group, member, now_ms)
            if len(group.members) > self.config.group_max_size:
                # The limit may have been lowered since: rebalance so the extra members are turned away.
                cause = LoadedOverCapacity(len(group.members), self.config.group_max_size)
                self._prepare_rebalance(out, group, cause, now_ms)

    def on_unloaded(self, out: Outcome, now_ms: int) -> None:
        for group in self._groups.values():
            group.transition_to(GroupState.DEAD, now_ms)
            for member in group.members.values():
                parked = group.take_join(member)
                if parked is not None:
                    out.reply(
                        parked.ticket,
                        join_response(
                            parked.api_version, error=ErrorCode.NOT_COORDINATOR, member_id=member.member_id
                        ),
                    )
                parked = group.take_sync(member)
                if parked is not None:
                    out.reply(
                        parked.ticket, sync_response(parked.api_version, error=ErrorCode.NOT_COORDINATOR)
                    )

    # ------------------------------------------------------------------------------------------ the store

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def groups(self) -> list[ClassicGroup]:
        """Every group of the shard (a copy: callers may remove groups while iterating)."""
        return list(self._groups.values())

    def create_simple_group(self, group_id: str, now_ms: int | None) -> ClassicGroup:
        group = ClassicGroup(group_id, GroupState.EMPTY, now_ms)
        self._groups[group_id] = group
        return group

    # online migration (§9 of docs/design/consumer-group-semantics.md): the consumer-group manager takes a
    # classic group over (upgrade) and hands one back (downgrade)

    def detach_group(self, group_id: str) -> ClassicGroup | None:
        """Take a group out of the shard, leaving its timers armed (they find no group and do nothing, as
        Kafka's classic timers do after an upgrade); :meth:`restore_group` puts it back."""
        return self._groups.pop(group_id, None)

    def answer_parked(self, out: Outcome, group: ClassicGroup, error: ErrorCode) -> None:
        """Answer every parked JoinGroup and SyncGroup with ``error`` (Kafka's ``completeAllJoinFutures`` /
        ``completeAllSyncFutures``)."""
        for member in group.members.values():
            parked = group.take_join(member)
            if parked is not None:
                out.reply(
                    parked.ticket, join_response(parked.api_version, error=error, member_id=member.member_id)
                )
            parked = group.take_sync(member)
            if parked is not None:
                out.reply(parked.ticket, sync_response(parked.api_version, error=error))

    def cancel_timers(self, out: Outcome, group_id: str) -> None:
        """Cancel the classic timers (member sessions, join and sync phases) of ``group_id``."""
        for key in self._timers.keys_for_group(group_id):
            if key.kind in (TimerKind.HEARTBEAT, TimerKind.JOIN, TimerKind.SYNC):
                self._timers.cancel(out, key)

    def adopt_group(self, out: Outcome, group: ClassicGroup, reason: str | None, now_ms: int) -> None:
        """Install a Stable group converted from a consumer group: member sessions armed and, with a
        ``reason``, a rebalance (Kafka's ``convertToClassicGroup`` after a member left)."""
        self._groups[group.group_id] = group
        self._history.seed(group.group_id, group.members)
        for member in group.members.values():
            self._schedule_session(out, group, member, now_ms)
        if reason is not None:
            self._prepare_rebalance(out, group, RebalanceForced(reason), now_ms)

    def forget_history(self, group_id: str) -> None:
        self._history.forget(group_id)

    def restore_group(self, group: ClassicGroup) -> None:
        """Put back a group removed by a write that failed (an empty group replaced by a consumer group)."""
        self._groups.setdefault(group.group_id, group)

    def forget_created_group(self, out: Outcome, group: ClassicGroup) -> None:
        """Undo the creation of ``group`` whose first record failed to append, unless something replaced
        it meanwhile."""
        if self._groups.get(group.group_id) is group:
            self.remove_group(out, group.group_id)

    def delete_error(self, group_id: str) -> ErrorCode:
        """Whether DeleteGroups may delete ``group_id`` (Kafka's ``validateDeleteGroup``)."""
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not group.is_in(GroupState.EMPTY):
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def replay(self, group_id: str, value: GroupMetadataValue | None) -> None:
        """Apply a GroupMetadata record (load path); a tombstone removes the group and its history."""
        if value is None:
            self._groups.pop(group_id, None)
            self._history.forget(group_id)
        else:
            self._groups[group_id] = group_from_value(group_id, value)

    def remove_group(self, out: Outcome, group_id: str) -> None:
        group = self._groups.pop(group_id, None)
        if group is None:
            return
        for key in self._timers.keys_for_group(group_id):
            self._timers.cancel(out, key)
        self._history.forget(group_id)


@dataclass(slots=True, unsafe_hash=True)
class _MemberSettings:
    """What a static member's replacement changes, kept to restore it when the append fails, and to answer
    pre-v9 joins with the leader as it was."""

    protocols: tuple[Protocol, ...]
    rebalance_timeout_ms: int
    session_timeout_ms: int
    leader_id: str | None


class _CurrentLeader:
    """The group's leader as the answer's leader (the default of :func:`_generation_response`)."""


_CURRENT_LEADER: Final = _CurrentLeader()


def _generation_response(
    group: ClassicGroup,
    member_id: str,
    version: int,
    *,
    with_members: bool = False,
    skip_assignment: bool = False,
    leader: str | _CurrentLeader | None = _CURRENT_LEADER,
) -> JoinGroupResponse:
    """The JoinGroup answer of a member of the group's current generation (the members' metadata only
    for the leader)."""
    return join_response(
        version,
        member_id=member_id,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=group.leader_id if isinstance(leader, _CurrentLeader) else leader,
        members=group.current_members_for_join_response() if with_members else (),
        skip_assignment=skip_assignment,
    )


def _static_rejoin_response(
    group: ClassicGroup, version: int, new_member_id: str, leader_before: str | None
) -> JoinGroupResponse:
    """The JoinGroup answer of a static member replaced in a Stable group (no rebalance)."""
    if version >= 9:
        is_leader = group.is_leader(new_member_id)
        return _generation_response(
            group, new_member_id, version, with_members=is_leader, skip_assignment=is_leader
        )
    # Before v9 the old leader id is returned, so a replaced leader does not see its own id and does not
    # run the assignor.
    return _generation_response(group, new_member_id, version, leader=leader_before)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _created_group_failure(version: int) -> _FailureReply:
    def failure(error: ErrorCode) -> JoinGroupResponse:
        return join_response(version, error=error)

    return failure


def undescribed_group(group_id: str, api_version: int, message: str) -> DescribedGroup:
    """DescribeGroups' answer for a group it does not describe (none by that id, or not a classic group):
    Dead and no error before v6; from v6 (KIP-1043) also GROUP_ID_NOT_FOUND with Kafka's ``message``."""
    if api_version >= 6:
        return DescribedGroup(
            group_id=group_id,
            group_state=GroupState.DEAD.value,
            error_code=ErrorCode.GROUP_ID_NOT_FOUND.value,
            error_message=message,
        )
    return DescribedGroup(group_id=group_id, group_state=GroupState.DEAD.value)
