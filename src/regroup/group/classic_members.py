"""Members speaking the classic protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) inside a KIP-848
consumer group — online migration, §9 of docs/design/consumer-group-semantics.md.

Mirrors Kafka 4.3's ``GroupMetadataManager`` paths ``classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup`` and
``classicGroupLeaveToConsumerGroup``. A classic member is an ordinary consumer-group member whose type-5
record carries ClassicMemberMetadata (session timeout, JoinGroup protocols); its subscription, rack and owned
partitions come from the ConsumerProtocol subscription embedded in its JoinGroup, and it goes through the same
bump / target / reconciliation steps as a ConsumerGroupHeartbeat. It never waits in a join phase: a JoinGroup
is answered at once with generation = member epoch, SyncGroup returns the member's assigned partitions, and a
Heartbeat answers REBALANCE_IN_PROGRESS whenever the member should rejoin to move on (it is behind the target
epoch, has partitions to revoke, or partitions it waited for are free) — revoking is rejoining with the
partitions it still owns. Join and sync timers (§4) fence a member that does not come back in time.
"""

from __future__ import annotations

from regroup.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberAssignment,
    MemberState,
    MemberSubscription,
    TopicPartition,
)
from regroup.group.consumer_group_manager import (
    ConsumerGroupManager,
    _Rejected,
    classic_join_timeout_key,
    classic_sync_timeout_key,
    decode_classic_subscription,
    encode_classic_assignment,
    session_timeout_key,
)
from regroup.group.context import GroupRequestContext
from regroup.group.effects import Result
from regroup.group.group_manager import join_response, sync_response
from regroup.group.outcome import Outcome
from regroup.group.topics_image import TopicsImage
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from regroup.protocol.primitives import DecodeError

__all__ = ["ClassicMembers"]


class ClassicMembers:
    """The classic-protocol APIs for the consumer groups of one shard (the manager's groups and records)."""

    def __init__(self, manager: ConsumerGroupManager) -> None:
        self._m = manager
        self._timers = manager._timers

    # ------------------------------------------------------------------------------------------ helpers

    def _member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        """GMM ``validateConsumerGroupMember``."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _Rejected(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
            return member
        static = group.static_member(instance_id)
        if static is None:
            raise _Rejected(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member with instance id {instance_id} is not a member of group {group.group_id}.",
            )
        if static.member_id != member_id:
            raise _Rejected(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {instance_id} was fenced.")
        return static

    @staticmethod
    def _classic(member: ConsumerGroupMember) -> ClassicMemberMetadata:
        meta = member.subscription.classic
        if meta is None:
            raise _Rejected(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol."
            )
        return meta

    def _schedule_join_timeout_if_absent(
        self, out: Outcome, group_id: str, member: ConsumerGroupMember, now_ms: int
    ) -> None:
        key = classic_join_timeout_key(group_id, member.member_id)
        if self._timers.deadline(key) is None:
            self._timers.schedule(out, key, now_ms + max(member.subscription.rebalance_timeout_ms, 0))

    # ------------------------------------------------------------------------------------------ JoinGroup

    def join(
        self, ctx: GroupRequestContext, req: JoinGroupRequest, now_ms: int, topics: TopicsImage
    ) -> Result[JoinGroupResponse]:
        m = self._m
        version = ctx.api_version
        group = m.group(req.group_id)
        assert group is not None
        assert group.members
        cfg = m.config
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return Result(
                reply=join_response(version, error=ErrorCode.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
            )
        if cfg.consumer_migration_policy.lower() == "disabled":
            return Result(
                reply=join_response(
                    version, error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id
                )
            )
        checkpoint = group.checkpoint()  # undo journal (see ConsumerGroup.checkpoint)
        out = Outcome()
        try:
            response = self._join(out, ctx, req, group, now_ms, topics)
        except _Rejected as exc:
            m._undo(group.group_id, group, checkpoint)
            return Result(reply=join_response(version, error=exc.error, member_id=req.member_id))
        if response.error_code != ErrorCode.NONE.value:
            group.release(checkpoint)
            return Result(reply=response)
        group_id = group.group_id
        member = group.members[response.member_id]
        session_ms = self._classic(member).session_timeout_ms
        rebalance_ms = max(member.subscription.rebalance_timeout_ms, 0)

        def applied(error: ErrorCode | None, after: Outcome) -> None:
            if error is not None:
                m._undo(group_id, group, checkpoint)
                return
            group.release(checkpoint)
            if m.group(group_id) is not group:
                return  # converted back to a classic group meanwhile
            self._timers.cancel(after, classic_join_timeout_key(group_id, member.member_id))
            self._timers.schedule(after, session_timeout_key(group_id, member.member_id), now_ms + session_ms)
            self._timers.schedule(
                after, classic_sync_timeout_key(group_id, member.member_id), now_ms + rebalance_ms
            )

        out.after_append(applied)
        return out.result(
            response, lambda error: join_response(version, error=error, member_id=req.member_id)
        )

    def _join(
        self,
        out: Outcome,
        ctx: GroupRequestContext,
        req: JoinGroupRequest,
        group: ConsumerGroup,
        now_ms: int,
        topics: TopicsImage,
    ) -> JoinGroupResponse:
        m = self._m
        version = ctx.api_version
        instance_id = req.group_instance_id if version >= 5 else None
        unknown = req.member_id == ""
        member_id = m._new_member_id(instance_id or ctx.client_id) if unknown else req.member_id

        max_size = m.config.consumer_max_size
        if len(group.members) >= max_size and member_id not in group.members:
            raise _Rejected(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {max_size} members.",
            )
        names = frozenset(p.name for p in req.protocols)
        if not group.supports_classic_protocols(req.protocol_type, names):
            raise _Rejected(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported."
            )
        if unknown and instance_id is None and version >= 4:
            # JoinGroup v4+: a dynamic member first learns its id (MEMBER_ID_REQUIRED), then joins with it.
            return join_response(version, error=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)

        protocols = tuple((p.name, p.metadata) for p in req.protocols)
        try:
            subscription = decode_classic_subscription(protocols)
        except DecodeError as exc:
            raise _Rejected(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "Malformed consumer protocol metadata."
            ) from exc

        replaced: ConsumerGroupMember | None = None
        member: ConsumerGroupMember
        if instance_id is None:
            member = group.members.get(member_id) or ConsumerGroupMember(member_id)
        else:
            static = group.static_member(instance_id)
            if static is None:
                member = group.members.get(member_id) or ConsumerGroupMember(member_id)
            elif static.member_id == member_id:
                member = static
            elif not unknown:
                raise _Rejected(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} was fenced by member "
                    f"{static.member_id}.",
                )
            else:
                # A classic joiner replaces the instance whatever the old member's epoch (GMM
                # ``getOrMaybeSubscribeStaticConsumerGroupMember``), keeping its subscription and partitions.
                replaced = static
                member = ConsumerGroupMember(
                    member_id, static.subscription, MemberAssignment(assigned=static.assigned)
                )

        old_sub = member.subscription
        new_sub = MemberSubscription(
            instance_id=instance_id if instance_id is not None else old_sub.instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else old_sub.rack_id,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,  # a classic member has no regex (Kafka sets "")
            rebalance_timeout_ms=req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms,
            server_assignor=old_sub.server_assignor,
            classic=ClassicMemberMetadata(req.session_timeout_ms, protocols),
        )
        names_changed = new_sub.subscribed_topic_names != old_sub.subscribed_topic_names
        regex_changed = old_sub.subscribed_topic_regex is not None

        # ---- accepted: records are written
        if replaced is not None:
            old_target = group.targets.get(replaced.member_id)
            m._remove_member(out, group, replaced)
            m._write_subscription(out, group, member_id, new_sub)
            if old_target is not None:
                m._write_target(out, group, member_id, old_target)
            m._write_assignment(out, group, member_id, member.assignment)
        elif member_id not in group.members or new_sub != member.subscription:
            m._write_subscription(out, group, member_id, new_sub)

        bump = names_changed or regex_changed
        bump |= m._update_regexes(out, group, topics, now_ms)
        metadata_hash = group.metadata_hash_for(topics)
        if bump or metadata_hash != group.metadata_hash:
            m._write_group_epoch(out, group, group.group_epoch + 1, metadata_hash)
        m._maybe_update_target(out, group, now_ms, topics)

        owned: set[TopicPartition] = set()
        for tp in subscription.owned_partitions:
            topic = topics.by_name(tp.topic)
            if topic is not None:
                owned.update((topic.topic_id, p) for p in tp.partitions)
        member = group.members[member_id]
        subscription_changed = names_changed or regex_changed
        if subscription_changed or not member.is_reconciled_to(group.assignment_epoch):
            m._reconcile(out, group, member, frozenset(owned), subscription_changed, topics, now_ms)
        member = group.members[member_id]
        return join_response(
            version,
            member_id=member_id,
            generation_id=member.member_epoch,
            protocol_type="consumer",
            protocol_name=protocols[0][0],
            leader="",
        )

    # ------------------------------------------------------------------------------------------ SyncGroup

    def sync(
        self, ctx: GroupRequestContext, req: SyncGroupRequest, now_ms: int, topics: TopicsImage
    ) -> Result[SyncGroupResponse]:
        version = ctx.api_version
        group = self._m.group(req.group_id)
        assert group is not None
        out = Outcome()
        try:
            if version >= 5 and (req.protocol_type is None or req.protocol_name is None):
                raise _Rejected(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if not group.members:
                raise _Rejected(ErrorCode.UNKNOWN_MEMBER_ID)
            member = self._member(group, req.member_id, req.group_instance_id if version >= 3 else None)
            meta = self._classic(member)
            if req.generation_id != member.member_epoch:
                raise _Rejected(ErrorCode.ILLEGAL_GENERATION)
            protocol_name = meta.protocols[0][0]
            if (req.protocol_type is not None and req.protocol_type != "consumer") or (
                req.protocol_name is not None and req.protocol_name != protocol_name
            ):
                raise _Rejected(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if (
                group.assignment_epoch > member.member_epoch
                and member.state is not MemberState.UNREVOKED_PARTITIONS
            ):
                # A new target exists: the member rejoins to catch up (GMM ``throwIfRebalanceInProgress``).
                self._schedule_join_timeout_if_absent(out, group.group_id, member, now_ms)
                return out.result(sync_response(version, error=ErrorCode.REBALANCE_IN_PROGRESS))
        except _Rejected as exc:
            return Result(reply=sync_response(version, error=exc.error))
        self._timers.cancel(out, classic_sync_timeout_key(group.group_id, member.member_id))
        self._timers.schedule(
            out, session_timeout_key(group.group_id, member.member_id), now_ms + meta.session_timeout_ms
        )
        assignment = encode_classic_assignment(member.assigned, topics, meta.protocols[0][1])
        return out.result(
            sync_response(
                version, protocol_type="consumer", protocol_name=protocol_name, assignment=assignment
            )
        )

    # ------------------------------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, ctx: GroupRequestContext, req: HeartbeatRequest, now_ms: int
    ) -> Result[HeartbeatResponse]:
        group = self._m.group(req.group_id)
        assert group is not None
        out = Outcome()
        try:
            member = self._member(
                group, req.member_id, req.group_instance_id if ctx.api_version >= 3 else None
            )
            meta = self._classic(member)
            if req.generation_id != member.member_epoch:
                raise _Rejected(ErrorCode.ILLEGAL_GENERATION)
        except _Rejected as exc:
            return Result(reply=HeartbeatResponse(error_code=exc.error.value))
        group_id = group.group_id
        self._timers.schedule(
            out, session_timeout_key(group_id, member.member_id), now_ms + meta.session_timeout_ms
        )
        # Rejoin when behind the target epoch, when partitions are to be revoked (a classic member revokes by
        # rejoining), or when partitions it waited for have been released.
        rejoin = (
            member.member_epoch < group.assignment_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not self._waiting_on_unreleased(group, member)
            )
        )
        error = ErrorCode.NONE
        if rejoin:
            error = ErrorCode.REBALANCE_IN_PROGRESS
            self._schedule_join_timeout_if_absent(out, group_id, member, now_ms)
        return out.result(HeartbeatResponse(error_code=error.value))

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """CG ``waitingOnUnreleasedPartition``: a partition of its target is still held by another member."""
        for tp in group.targets.get(member.member_id, frozenset()):
            if tp not in member.assigned:
                owner = group.owner(tp)
                if owner is not None and owner != member.member_id:
                    return True
        return False

    # ------------------------------------------------------------------------------------------ LeaveGroup

    def leave(
        self, ctx: GroupRequestContext, req: LeaveGroupRequest, now_ms: int
    ) -> Result[LeaveGroupResponse]:
        m = self._m
        version = ctx.api_version
        group = m.group(req.group_id)
        assert group is not None
        if version >= 3:
            identities = [(mi.member_id, mi.group_instance_id) for mi in req.members]
        else:
            identities = [(req.member_id, None)]
        results: list[MemberResponse] = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for requested_id, instance_id in identities:
            member_id = requested_id
            error = ErrorCode.NONE
            if instance_id is None:
                found = group.members.get(member_id)
                if found is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    leaving[found.member_id] = found
            else:
                static = group.static_member(instance_id)
                if static is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id not in ("", static.member_id):
                    error = ErrorCode.FENCED_INSTANCE_ID
                else:
                    # Administrative removal by instance id comes with no member id.
                    member_id = static.member_id
                    leaving[static.member_id] = static
            results.append(
                MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=error.value)
            )

        def respond(errors: list[MemberResponse]) -> LeaveGroupResponse:
            if version >= 3:
                return LeaveGroupResponse(members=errors)
            return LeaveGroupResponse(error_code=errors[0].error_code if errors else 0)

        if not leaving:
            return Result(reply=respond(results))
        checkpoint = group.checkpoint()
        out = Outcome()
        gone = frozenset(leaving)
        if m.online_downgrade_allowed(group, gone):
            m.downgrade(out, group, gone, now_ms)
        else:
            # GMM ``consumerGroupFenceMembers``: tombstones of every leaving member, then one epoch bump.
            for member in leaving.values():
                m._remove_member(out, group, member)
            m._drop_unsubscribed_regexes(out, group)
            metadata_hash = group.metadata_hash_for(m._image)
            m._write_group_epoch(out, group, group.group_epoch + 1, metadata_hash)

        def applied(error: ErrorCode | None, _after: Outcome) -> None:
            if error is not None:
                m._undo(group.group_id, group, checkpoint)
            else:
                group.release(checkpoint)

        out.after_append(applied)
        return out.result(respond(results), lambda error: LeaveGroupResponse(error_code=error.value))
