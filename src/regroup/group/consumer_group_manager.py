"""KIP-848 consumer groups of one shard: ConsumerGroupHeartbeat (join, heartbeat, subscription changes,
revocation acknowledgements, leave), the target assignment, member reconciliation, session and rebalance
timers, static membership, ConsumerGroupDescribe, and the records of all that, written in Kafka 4.3's order
and replayed on load.

Mirrors Kafka 4.3's ``GroupMetadataManager`` consumer-group paths (docs/design/consumer-group-semantics.md):
the validation order and error codes of §2.3, the heartbeat algorithm of §3.1, the target assignment of §3.2
(recomputed at most once per ``group.consumer.assignment.interval.ms``), reconciliation (§3.3, in
:mod:`regroup.group.reconciliation`), timers (§4) and static membership (§5). Every change to a group is a
record applied to the group by the same method replay uses, so the live group and a group loaded from the
log agree.

Topic metadata is injected (:class:`~regroup.group.topics_image.TopicsImage`) with each heartbeat; timers
and leaves use the most recent image this shard was given. Regex subscriptions are resolved synchronously
against that image (see :mod:`regroup.group.topic_regex`).

Online migration (§9): a ConsumerGroupHeartbeat converts a non-empty classic group (upgrade), and the last
consumer-protocol member leaving converts the group back when only classic members remain (downgrade); the
classic members' own requests are :mod:`regroup.group.classic_members`'s. Not served yet: the downgrade when a
classic static joiner replaces the last consumer-protocol member; group-level config overrides. Offsets of
consumer groups (§7) are :mod:`regroup.group.offset_manager`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from regroup.group.classic_group import ClassicGroup, ClassicGroupMember
from regroup.group.config import GroupConfig
from regroup.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Checkpoint,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberAssignment,
    MemberState,
    MemberSubscription,
    Partitions,
    TopicPartition,
    by_topic,
    flatten,
)
from regroup.group.context import GroupRequestContext, MemberIdFactory
from regroup.group.effects import CoordinatorRecord, Result, TimerKey, TimerKind
from regroup.group.group_manager import GroupManager
from regroup.group.outcome import Outcome, TimerTable
from regroup.group.reconciliation import FencedMemberEpoch, reconcile
from regroup.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE,
    CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE,
    CONSUMER_GROUP_METADATA_RECORD_TYPE,
    CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE,
    DecodedConsumerGroupRecord,
    consumer_group_metadata_record,
    consumer_group_metadata_tombstone,
    current_assignment_record,
    current_assignment_tombstone,
    group_metadata_record,
    group_metadata_tombstone,
    member_metadata_record,
    member_subscription_tombstone,
    partition_metadata_tombstone,
    regular_expression_record,
    regular_expression_tombstone,
    target_member_record,
    target_member_tombstone,
    target_metadata_record,
    target_metadata_tombstone,
)
from regroup.group.server_assignors import ASSIGNORS, AssignorError, MemberSpec
from regroup.group.state import GroupState
from regroup.group.topic_regex import InvalidRegularExpression, compile_regex, resolve
from regroup.group.topics_image import TopicsImage
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_describe import Assignment as DescribedAssignment
from regroup.protocol.messages.consumer_group_describe import DescribedGroup as ConsumerDescribedGroup
from regroup.protocol.messages.consumer_group_describe import Member as DescribedMember
from regroup.protocol.messages.consumer_group_describe import TopicPartitions as DescribedTopicPartitions
from regroup.protocol.messages.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from regroup.protocol.messages.list_groups import ListedGroup
from regroup.protocol.primitives import DecodeError, Uuid
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
)

__all__ = [
    "CONSUMER_GROUP_TYPE",
    "ConsumerGroupManager",
    "classic_join_timeout_key",
    "classic_sync_timeout_key",
    "rebalance_timeout_key",
    "session_timeout_key",
]

CONSUMER_GROUP_TYPE = "consumer"
_TIMER_RETRY_BACKOFF_MS = 500
"""Kafka's coordinator runtime retries a failed timer write after this long."""


def session_timeout_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey(TimerKind.CONSUMER_SESSION, group_id, member_id)


def rebalance_timeout_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey(TimerKind.CONSUMER_REBALANCE, group_id, member_id)


def classic_join_timeout_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey(TimerKind.CONSUMER_JOIN, group_id, member_id)


def classic_sync_timeout_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey(TimerKind.CONSUMER_SYNC, group_id, member_id)


_MEMBER_TIMER_KINDS = (
    TimerKind.CONSUMER_SESSION,
    TimerKind.CONSUMER_REBALANCE,
    TimerKind.CONSUMER_JOIN,
    TimerKind.CONSUMER_SYNC,
)


def decode_classic_subscription(protocols: tuple[tuple[str, bytes], ...]) -> ConsumerProtocolSubscription:
    """The ConsumerProtocol subscription embedded in a classic member's protocols (every protocol carries
    the same one, so the first is read, as Kafka's ``deserializeSubscription``); DecodeError if malformed."""
    if not protocols:
        raise DecodeError("no protocol")
    subscription, _ = ConsumerProtocolSubscription.decode_versioned(protocols[0][1], lenient=True)
    return subscription


def encode_classic_assignment(
    partitions: Iterable[TopicPartition], topics: TopicsImage, metadata: bytes
) -> bytes:
    """A ConsumerProtocol assignment of ``partitions`` (topics the image does not know are left out), at the
    version of the subscription ``metadata`` (Kafka's ``prepareAssignment``: version of the member's first
    protocol), capped at the highest version regroup writes."""
    version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
    version = min(max(version, 0), ConsumerProtocolAssignment.MAX_VERSION)
    assigned = []
    for topic_id, ps in sorted(by_topic(partitions).items(), key=lambda item: str(item[0])):
        topic = topics.by_id(topic_id)
        if topic is not None:
            assigned.append(ConsumerProtocolAssignmentTopicPartition(topic=topic.name, partitions=ps))
    return ConsumerProtocolAssignment(assigned_partitions=assigned).encode_versioned(version)


class _Rejected(Exception):
    """A heartbeat answered with an error; nothing it changed is kept."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _error_response(error: ErrorCode, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    """Kafka's ``ConsumerGroupHeartbeatRequest.getErrorResponse``: only the error is set."""
    return ConsumerGroupHeartbeatResponse(error_code=error.value, error_message=message)


def _blank(value: str | None) -> bool:
    return value is not None and value.strip() == ""


def _validate(req: ConsumerGroupHeartbeatRequest, version: int, config: GroupConfig) -> _Rejected | None:
    """GCS ``throwIfConsumerGroupHeartbeatRequestIsInvalid``, then the assignor check."""
    epoch = req.member_epoch
    invalid = ErrorCode.INVALID_REQUEST
    if req.member_id.strip() == "" and (version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH):
        return _Rejected(invalid, "MemberId can't be empty.")
    if req.group_id.strip() == "":
        return _Rejected(invalid, "GroupId can't be empty.")
    if _blank(req.instance_id):
        return _Rejected(invalid, "InstanceId can't be empty.")
    if _blank(req.rack_id):
        return _Rejected(invalid, "RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            return _Rejected(invalid, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            return _Rejected(invalid, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return _Rejected(
                invalid,
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            return _Rejected(invalid, "InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return _Rejected(invalid, f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    if req.server_assignor is not None and req.server_assignor not in config.consumer_assignors:
        return _Rejected(
            ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported."
        )
    return None


@dataclass(slots=True, unsafe_hash=True)
class _RebalanceDeadline:
    """Payload of a rebalance timer: the member epoch it was armed at (a later epoch makes it stale)."""

    member_epoch: int


class ConsumerGroupManager:
    """The consumer groups of one shard."""

    def __init__(
        self,
        config: GroupConfig,
        member_id_factory: MemberIdFactory,
        timers: TimerTable,
        classic: GroupManager,
    ) -> None:
        self.config = config
        self._groups: dict[str, ConsumerGroup] = {}
        self._new_member_id = member_id_factory
        self._timers = timers
        self._classic = classic
        self._image = TopicsImage()

    # ------------------------------------------------------------------------------------------ store

    def note_topics(self, topics: TopicsImage) -> None:
        """The cluster's topics now (classic-protocol requests come without them; timers use them too)."""
        self._image = topics

    @property
    def topics(self) -> TopicsImage:
        return self._image

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def groups(self) -> list[ConsumerGroup]:
        return list(self._groups.values())

    # ------------------------------------------------------------------------------------------ heartbeat

    def heartbeat(
        self,
        ctx: GroupRequestContext,
        req: ConsumerGroupHeartbeatRequest,
        now_ms: int,
        topics: TopicsImage,
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        self._image = topics
        version = ctx.api_version
        if version < 1:
            req = replace(req, subscribed_topic_regex=None)
        rejected = _validate(req, version, self.config)
        if rejected is not None:
            return Result(reply=_error_response(rejected.error, rejected.message))
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(req, now_ms)

        group_id = req.group_id
        existing = self._groups.get(group_id)
        # Undo by journal, not by a copy of the group: a heartbeat that changes nothing costs nothing here.
        checkpoint = None if existing is None else existing.checkpoint()
        replaced_classic = None
        if existing is None:
            if req.member_epoch != 0:
                return Result(
                    reply=_error_response(
                        ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found."
                    )
                )
            replaced_classic = self._classic.group(group_id)
            if replaced_classic is not None and replaced_classic.members:
                # Online upgrade (§9, GMM ``validateOnlineUpgrade`` / ``convertToConsumerGroup``).
                upgrade_error = self._online_upgrade_error(replaced_classic)
                if upgrade_error is None:
                    try:
                        group = self._from_classic(replaced_classic, topics)
                    except _Rejected as exc:
                        upgrade_error = exc.message
                if upgrade_error is not None:
                    return Result(reply=_error_response(ErrorCode.GROUP_ID_NOT_FOUND, upgrade_error))
            else:
                group = ConsumerGroup(group_id)
            self._groups[group_id] = group
        else:
            group = existing

        out = Outcome()
        upgraded = replaced_classic is not None and bool(replaced_classic.members)
        if upgraded:
            assert replaced_classic is not None
            self._conversion_records(out, group)
        try:
            response = self._heartbeat(out, ctx, req, group, now_ms, topics)
        except _Rejected as exc:
            self._undo(group_id, existing, checkpoint)
            return Result(reply=_error_response(exc.error, exc.message))

        if replaced_classic is not None:
            # The classic group of the same id is replaced, its GroupMetadata tombstoned first. Its timers
            # stay armed until the write succeeds: they find no classic group and do nothing meanwhile.
            out.records.insert(0, group_metadata_tombstone(group_id))
            self._classic.detach_group(group_id)
            if upgraded:
                # Rejoining classic members learn of the new rebalance (GMM ``convertToConsumerGroup``).
                self._classic.answer_parked(out, replaced_classic, ErrorCode.REBALANCE_IN_PROGRESS)
                for member in group.classic_members():
                    if member.subscription.classic is not None and member.member_id != response.member_id:
                        self._timers.schedule(
                            out,
                            session_timeout_key(group_id, member.member_id),
                            now_ms + member.subscription.classic.session_timeout_ms,
                        )

        # A partial, not a nested function: compiled, a nested function and the frame it closes over
        # reference each other, a cycle per heartbeat for the collector.
        out.after_append(partial(self._heartbeat_appended, group, existing, checkpoint, replaced_classic))
        return out.result(response, _error_response)

    def _heartbeat_appended(
        self,
        group: ConsumerGroup,
        existing: ConsumerGroup | None,
        checkpoint: Checkpoint | None,
        replaced_classic: ClassicGroup | None,
        error: ErrorCode | None,
        after: Outcome,
    ) -> None:
        group_id = group.group_id
        if error is not None:
            self._undo(group_id, existing, checkpoint)
            if replaced_classic is not None:
                self._classic.restore_group(replaced_classic)
                for member_id in list(group.members):
                    if replaced_classic.members.get(member_id) is not None:
                        self._timers.cancel(after, session_timeout_key(group_id, member_id))
        else:
            self._keep(existing, checkpoint)
            if replaced_classic is not None:
                self._classic.cancel_timers(after, group_id)
                self._classic.forget_history(group_id)

    # ------------------------------------------------------------------------------------------ migration

    def _migration_enabled(self, direction: str) -> bool:
        policy = self.config.consumer_migration_policy.lower()
        return policy in ("bidirectional", direction)

    def _online_upgrade_error(self, classic: ClassicGroup) -> str | None:
        """GMM ``validateOnlineUpgrade``: why ``classic`` may not become a consumer group (None: it may)."""
        group_id = classic.group_id
        if not self._migration_enabled("upgrade"):
            return (
                f"Cannot upgrade classic group {group_id} to consumer group because the online upgrade is "
                "disabled."
            )
        if not classic.uses_consumer_protocol:
            return (
                f"Cannot upgrade classic group {group_id} to consumer group because the group does not use "
                "the consumer embedded protocol."
            )
        if len(classic.members) > self.config.consumer_max_size:
            return (
                f"Cannot upgrade classic group {group_id} to consumer group because the group size exceeds "
                "the consumer group maximum size."
            )
        return None

    def _from_classic(self, classic: ClassicGroup, topics: TopicsImage) -> ConsumerGroup:
        """CG ``fromClassicGroup``: group and assignment epoch = generation; every member STABLE at that
        epoch with its last assignment as current and target, its subscription and rack from its embedded
        ConsumerProtocol subscription. Raises _Rejected (the message of GROUP_ID_NOT_FOUND) when the
        embedded protocol is malformed or an assignment carries user data (a custom assignor)."""
        group_id = classic.group_id
        malformed = (
            f"Cannot upgrade the classic group {group_id} to consumer group because the embedded consumer "
            "protocol is malformed."
        )
        protocol_name = classic.protocol_name
        if protocol_name is None:
            raise _Rejected(ErrorCode.GROUP_ID_NOT_FOUND, malformed)
        generation = classic.generation_id
        group = ConsumerGroup(group_id)
        group.group_epoch = generation
        group.assignment_epoch = generation
        for cm in classic.members.values():
            try:
                subscription, _ = ConsumerProtocolSubscription.decode_versioned(
                    cm.metadata(protocol_name), lenient=True
                )
                # An empty assignment (none received yet) does not parse in Kafka either.
                assignment, _ = ConsumerProtocolAssignment.decode_versioned(cm.assignment, lenient=True)
            except (DecodeError, KeyError) as exc:
                raise _Rejected(ErrorCode.GROUP_ID_NOT_FOUND, malformed) from exc
            if assignment.user_data:
                raise _Rejected(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Cannot upgrade classic group {group_id} to consumer group because an unsupported "
                    "custom assignor is in use. Please refer to the documentation or switch to a default "
                    "assignor before re-attempting the upgrade.",
                )
            assigned: set[TopicPartition] = set()
            for tp in assignment.assigned_partitions:
                topic = topics.by_name(tp.topic)
                if topic is not None:
                    assigned.update((topic.topic_id, p) for p in tp.partitions)
            partitions = frozenset(assigned)
            group.apply_member_subscription(
                cm.member_id,
                MemberSubscription(
                    instance_id=cm.group_instance_id,
                    rack_id=subscription.rack_id,
                    client_id=cm.client_id,
                    client_host=cm.client_host,
                    subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                    rebalance_timeout_ms=cm.rebalance_timeout_ms,
                    classic=ClassicMemberMetadata(cm.session_timeout_ms, cm.protocols),
                ),
            )
            group.apply_target_member(cm.member_id, partitions)
            group.apply_member_assignment(
                cm.member_id,
                MemberAssignment(
                    member_epoch=generation,
                    previous_member_epoch=generation,
                    state=MemberState.STABLE,
                    assigned=partitions,
                    assignment_epochs=dict.fromkeys(partitions, generation),
                ),
            )
        group.metadata_hash = group.metadata_hash_for(topics)
        return group

    def _conversion_records(self, out: Outcome, group: ConsumerGroup) -> None:
        """CG ``createConsumerGroupRecords``: 5 per member, 3, 7 per member, 6, 8 per member (the group
        already holds what they say)."""
        group_id = group.group_id
        for member in group.members.values():
            self._emit(out, member_metadata_record(group_id, member.member_id, member.subscription))
        self._emit(out, consumer_group_metadata_record(group_id, group.group_epoch, group.metadata_hash))
        for member in group.members.values():
            self._emit(
                out,
                target_member_record(
                    group_id, member.member_id, group.targets.get(member.member_id, frozenset())
                ),
            )
        self._emit(
            out, target_metadata_record(group_id, group.assignment_epoch, group.assignment_timestamp_ms)
        )
        for member in group.members.values():
            self._emit(out, current_assignment_record(group_id, member.member_id, member.assignment))

    def online_downgrade_allowed(self, group: ConsumerGroup, leaving: frozenset[str]) -> bool:
        """GMM ``validateOnlineDowngradeWithFencedMembers``: the members leaving include the last ones using
        the consumer protocol, others remain, downgrade is enabled and they fit in ``group.max.size``."""
        # O(leaving), not O(members): the group counts its classic members.
        gone = [group.members[m] for m in leaving if m in group.members]
        remaining = len(group.members) - len(gone)
        classic_remaining = group.classic_member_count() - sum(m.uses_classic_protocol for m in gone)
        return (
            classic_remaining == remaining
            and remaining > 0
            and self._migration_enabled("downgrade")
            and remaining <= self.config.group_max_size
        )

    def downgrade(self, out: Outcome, group: ConsumerGroup, leaving: frozenset[str], now_ms: int) -> None:
        """GMM ``convertToClassicGroup`` (leave path): the consumer group's tombstones, then a GroupMetadata
        record of a Stable classic group at generation = group epoch whose members' assignments are their
        targets (ConsumerProtocol-encoded), then a rebalance (``ClassicGroup.fromConsumerGroup``)."""
        group_id = group.group_id
        out.records.extend(self.tombstones(group_id))
        classic = ClassicGroup(
            group_id,
            GroupState.STABLE,
            now_ms,
            generation_id=group.group_epoch,
            protocol_type=CONSUMER_GROUP_TYPE,
        )
        for member in group.members.values():
            meta = member.subscription.classic
            if member.member_id in leaving or meta is None:
                continue
            classic.add(
                ClassicGroupMember(
                    member_id=member.member_id,
                    group_instance_id=member.instance_id,
                    client_id=member.subscription.client_id,
                    client_host=member.subscription.client_host,
                    rebalance_timeout_ms=member.subscription.rebalance_timeout_ms,
                    session_timeout_ms=meta.session_timeout_ms,
                    protocol_type=CONSUMER_GROUP_TYPE,
                    protocols=meta.protocols,
                )
            )
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        for cm in classic.members.values():
            cm.assignment = encode_classic_assignment(
                group.targets.get(cm.member_id, frozenset()), self._image, cm.metadata(classic.protocol_name)
            )
        out.records.append(group_metadata_record(classic, classic.assignments()))
        # The group itself is not changed from here on: a failed write puts it back as it is.
        del self._groups[group_id]
        for key in self._timers.keys_for_group(group_id):
            if key.kind in _MEMBER_TIMER_KINDS:
                self._timers.cancel(out, key)
        self._classic.adopt_group(
            out, classic, f"Downgrade group {group_id} from consumer to classic.", now_ms
        )

        def applied(error: ErrorCode | None, after: Outcome) -> None:
            if error is not None:
                self._classic.detach_group(group_id)
                self._classic.cancel_timers(after, group_id)
                self._classic.forget_history(group_id)
                self._groups[group_id] = group
                for member in group.members.values():
                    self._schedule_session(after, group_id, member, now_ms)

        out.after_append(applied)

    def _schedule_session(
        self, out: Outcome, group_id: str, member: ConsumerGroupMember, now_ms: int
    ) -> None:
        """The member's session timer: its classic session timeout for a classic member (§4)."""
        classic = member.subscription.classic
        timeout = self.config.consumer_session_timeout_ms if classic is None else classic.session_timeout_ms
        self._timers.schedule(out, session_timeout_key(group_id, member.member_id), now_ms + timeout)

    def on_classic_timeout(self, out: Outcome, key: TimerKey, now_ms: int) -> None:
        """A classic member's join or sync timer fired: fence it (GMM
        ``consumerGroupFenceMemberOperation``)."""
        group = self._groups.get(key.group_id)
        member = None if group is None else group.members.get(key.member_id)
        if group is not None and member is not None:
            self._fence_or_retry(out, group, member, key, None, now_ms)

    def _undo(self, group_id: str, group: ConsumerGroup | None, checkpoint: Checkpoint | None) -> None:
        """A write failed or a heartbeat was rejected: the group as it was at ``checkpoint`` (None: the
        operation created it, it goes)."""
        if group is None or checkpoint is None:
            self._groups.pop(group_id, None)
        else:
            group.rollback(checkpoint)
            self._groups[group_id] = group

    @staticmethod
    def _keep(group: ConsumerGroup | None, checkpoint: Checkpoint | None) -> None:
        """The operation's write succeeded: its undo journal is no longer needed."""
        if group is not None and checkpoint is not None:
            group.release(checkpoint)

    def _heartbeat(
        self,
        out: Outcome,
        ctx: GroupRequestContext,
        req: ConsumerGroupHeartbeatRequest,
        group: ConsumerGroup,
        now_ms: int,
        topics: TopicsImage,
    ) -> ConsumerGroupHeartbeatResponse:
        member_id = req.member_id
        instance_id = req.instance_id
        epoch = req.member_epoch
        owned = (
            None
            if req.topic_partitions is None
            else flatten((tp.topic_id, tp.partitions) for tp in req.topic_partitions)
        )

        # throwIfConsumerGroupIsFull (4.3.1: also for a static instance returning under a new member id)
        max_size = self.config.consumer_max_size
        if len(group.members) >= max_size and (member_id == "" or member_id not in group.members):
            raise _Rejected(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {max_size} members.",
            )

        replaced: ConsumerGroupMember | None = None
        member: ConsumerGroupMember
        if instance_id is None:
            known = group.members.get(member_id) if member_id else None
            if known is None:
                if epoch != 0:
                    raise _Rejected(
                        ErrorCode.UNKNOWN_MEMBER_ID,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                if not member_id:  # v0: the coordinator names the member
                    member_id = self._new_member_id(ctx.client_id)
                known = ConsumerGroupMember(member_id)
            member = known
        else:
            static = group.static_member(instance_id)
            if epoch == 0:
                if static is None:
                    if not member_id:
                        member_id = self._new_member_id(instance_id)
                    member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                elif (
                    static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                    and not static.uses_classic_protocol
                ):
                    # A classic instance is replaced whatever its epoch (GMM
                    # ``getOrMaybeSubscribeStaticConsumerGroupMember``).
                    raise _Rejected(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {instance_id} cannot join the group "
                        f"because the instance id is owned by {static.member_id} member.",
                    )
                else:
                    replaced = static
                    if not member_id:
                        member_id = self._new_member_id(instance_id)
                    member = ConsumerGroupMember(
                        member_id,
                        static.subscription,
                        MemberAssignment(assigned=static.assigned),
                    )
            elif static is None:
                raise _Rejected(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Instance id {instance_id} is unknown in group {group.group_id}.",
                )
            elif static.member_id != member_id:
                raise _Rejected(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} was fenced by member "
                    f"{static.member_id}.",
                )
            else:
                member = static

        if epoch not in (0, member.member_epoch):
            # throwIfConsumerGroupMemberEpochIsInvalid: a lost response is tolerated (previous epoch with
            # owned partitions all still assigned), anything else is fenced.
            lost_response = (
                epoch < member.member_epoch
                and epoch == member.previous_member_epoch
                and owned is not None
                and owned <= member.assigned
            )
            if not lost_response:
                relation = "greater" if epoch > member.member_epoch else "smaller"
                raise _Rejected(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a {relation} member epoch ({epoch}) than the one known "
                    f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                    "partitions and rejoin.",
                )

        # For a new member the old subscription is the empty default; a static replacement starts from the
        # replaced member's, so the same subscription does not bump the epoch.
        old_sub = sub = member.subscription
        new_sub = MemberSubscription(
            instance_id=instance_id if instance_id is not None else sub.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else sub.rack_id,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            subscribed_topic_names=(
                tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None
                else sub.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (req.subscribed_topic_regex or None)
                if req.subscribed_topic_regex is not None
                else sub.subscribed_topic_regex
            ),
            rebalance_timeout_ms=req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else sub.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else sub.server_assignor,
        )
        names_changed = new_sub.subscribed_topic_names != old_sub.subscribed_topic_names
        regex_changed = new_sub.subscribed_topic_regex != old_sub.subscribed_topic_regex
        new_regex = new_sub.subscribed_topic_regex
        regex_known = new_regex is not None and new_regex in group.resolved_regexes
        if regex_changed and new_regex is not None and not group.is_regex_subscribed(new_regex):
            try:
                compile_regex(new_regex)
            except InvalidRegularExpression as exc:
                raise _Rejected(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from exc

        # ---- from here on the heartbeat is accepted: records are written
        old_assigned = member.assigned if member_id in group.members else frozenset()
        if replaced is not None:
            old_target = group.targets.get(replaced.member_id)
            self._remove_member(out, group, replaced)
            self._write_subscription(out, group, member_id, new_sub)
            if old_target is not None:
                self._write_target(out, group, member_id, old_target)
            self._write_assignment(out, group, member_id, member.assignment)
            old_assigned = frozenset()
        elif member_id not in group.members or new_sub != member.subscription:
            self._write_subscription(out, group, member_id, new_sub)

        bump = names_changed
        if regex_changed and (new_regex is None or regex_known):
            bump = True  # REGEX_UPDATED_AND_RESOLVED (or cleared)
        bump |= self._update_regexes(out, group, topics, now_ms)
        # Cached on the group with the names and the image it was computed on (Kafka's ModernGroup keeps
        # the subscribed names counted and hashes them only when they or the metadata image change).
        metadata_hash = group.metadata_hash_for(topics)
        if bump or metadata_hash != group.metadata_hash:
            self._write_group_epoch(out, group, group.group_epoch + 1, metadata_hash)

        self._maybe_update_target(out, group, now_ms, topics)

        member = group.members[member_id]
        subscription_changed = names_changed or regex_changed
        if subscription_changed or not member.is_reconciled_to(group.assignment_epoch):
            self._reconcile(out, group, member, owned, subscription_changed, topics, now_ms)
        member = group.members[member_id]
        self._timers.schedule(
            out,
            session_timeout_key(group.group_id, member_id),
            now_ms + self.config.consumer_session_timeout_ms,
        )

        full = (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.topic_partitions is not None
        )
        assignment = None
        if epoch == 0 or full or member.assigned != old_assigned:
            assignment = Assignment(
                topic_partitions=[
                    ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in by_topic(member.assigned).items()
                ]
            )
        return ConsumerGroupHeartbeatResponse(
            member_id=member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.config.consumer_heartbeat_interval_ms,
            assignment=assignment,
        )

    def _reconcile(
        self,
        out: Outcome,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        owned: Partitions | None,
        subscription_changed: bool,
        topics: TopicsImage,
        now_ms: int,
    ) -> None:
        member_id = member.member_id

        def held_by_other(tp: TopicPartition) -> bool:
            owner = group.owner(tp)
            return owner is not None and owner != member_id

        try:
            updated = reconcile(
                member,
                group.assignment_epoch,
                group.targets.get(member_id, frozenset()),
                self._subscribed_topic_ids(group, member, topics),
                owned,
                held_by_other,
                subscription_changed,
            )
        except FencedMemberEpoch as exc:
            raise _Rejected(
                ErrorCode.FENCED_MEMBER_EPOCH, "The member is in an unknown state and owns partitions."
            ) from exc
        if updated.assignment == member.assignment and updated.assignment.assignment_epochs == (
            member.assignment.assignment_epochs
        ):
            return
        self._write_assignment(out, group, member_id, updated.assignment)
        key = rebalance_timeout_key(group.group_id, member_id)
        if updated.uses_classic_protocol:
            # A classic member revokes by rejoining: its join and sync timers watch it instead.
            return
        if updated.state is MemberState.UNREVOKED_PARTITIONS:
            self._timers.schedule(
                out,
                key,
                now_ms + max(updated.subscription.rebalance_timeout_ms, 0),
                _RebalanceDeadline(updated.member_epoch),
            )
        else:
            self._timers.cancel(out, key)

    # ------------------------------------------------------------------------------------------ leave

    def _leave(
        self, req: ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        group = self._groups.get(req.group_id)
        if group is None:
            return Result(
                reply=_error_response(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found."
                )
            )
        if req.instance_id is not None:
            member = group.static_member(req.instance_id)
            if member is None:
                return Result(
                    reply=_error_response(
                        ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown."
                    )
                )
            if member.member_id != req.member_id:
                return Result(
                    reply=_error_response(
                        ErrorCode.FENCED_INSTANCE_ID,
                        f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                        f"member {member.member_id}.",
                    )
                )
        else:
            found = group.members.get(req.member_id)
            if found is None:
                return Result(
                    reply=_error_response(
                        ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of the group."
                    )
                )
            member = found
        checkpoint = group.checkpoint()
        out = Outcome()
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The instance will be back: its partitions stay reserved; no bump, no timer change.
            assignment = replace(
                member.assignment,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                pending_revocation=frozenset(),
                assignment_epochs=dict.fromkeys(member.assigned, 0),
            )
            self._write_assignment(out, group, member.member_id, assignment)
        else:
            self._fence(out, group, member, now_ms)

        def applied(error: ErrorCode | None, _after: Outcome) -> None:
            if error is not None:
                self._undo(group.group_id, group, checkpoint)
            else:
                group.release(checkpoint)

        out.after_append(applied)
        return out.result(
            ConsumerGroupHeartbeatResponse(
                member_id=req.member_id, member_epoch=req.member_epoch, heartbeat_interval_ms=0
            ),
            _error_response,
        )

    # ------------------------------------------------------------------------------------------ timers

    def on_session_timeout(self, out: Outcome, group_id: str, member_id: str, now_ms: int) -> None:
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is not None and member is not None:
            self._fence_or_retry(out, group, member, session_timeout_key(group_id, member_id), None, now_ms)

    def on_rebalance_timeout(
        self, out: Outcome, group_id: str, member_id: str, payload: object, now_ms: int
    ) -> None:
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if (
            group is not None
            and member is not None
            and isinstance(payload, _RebalanceDeadline)
            and member.member_epoch == payload.member_epoch
        ):
            self._fence_or_retry(
                out, group, member, rebalance_timeout_key(group_id, member_id), payload, now_ms
            )

    def fence_member(self, out: Outcome, group_id: str, member_id: str, now_ms: int) -> bool:
        """Remove a member now, as its session timer would (test tooling)."""
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return False
        checkpoint = group.checkpoint()
        self._fence(out, group, member, now_ms)

        def applied(error: ErrorCode | None, _after: Outcome) -> None:
            if error is not None:
                self._undo(group_id, group, checkpoint)
            else:
                group.release(checkpoint)

        out.after_append(applied)
        return True

    def expire_rebalance_timeout(
        self, out: Outcome, group_id: str, member_id: str, now_ms: int
    ) -> str | None:
        """Re-arm a revoking member's rebalance timer for ``now_ms`` (test tooling): the runtime then fires
        it as if the member's rebalance timeout had passed, and :meth:`on_rebalance_timeout` fences it.
        Returns why it cannot (no such member, or the member is not revoking partitions)."""
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return f"consumer group {group_id!r} has no member {member_id!r}"
        key = rebalance_timeout_key(group_id, member_id)
        if self._timers.deadline(key) is None:
            # Kafka arms the timer only while a consumer-protocol member revokes (UNREVOKED_PARTITIONS);
            # classic members inside the group are watched by their join and sync timers instead.
            kind = "classic" if member.uses_classic_protocol else "consumer"
            return (
                f"member {member_id!r} ({kind} protocol) is {member.state.name}: it has no rebalance "
                "timeout running"
            )
        self._timers.schedule(out, key, now_ms, _RebalanceDeadline(member.member_epoch))
        return None

    def _fence_or_retry(
        self,
        out: Outcome,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        key: TimerKey,
        payload: object,
        now_ms: int,
    ) -> None:
        """Fence on a timer; when the write fails the group is restored and the timer retried after a
        backoff, as Kafka's coordinator runtime retries these timer operations."""
        checkpoint = group.checkpoint()
        self._fence(out, group, member, now_ms)

        def applied(error: ErrorCode | None, after: Outcome) -> None:
            if error is not None:
                self._undo(group.group_id, group, checkpoint)
                self._timers.schedule(after, key, now_ms + _TIMER_RETRY_BACKOFF_MS, payload)
            else:
                group.release(checkpoint)

        out.after_append(applied)

    # ------------------------------------------------------------------------------------------ the steps

    def _fence(self, out: Outcome, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> None:
        """Remove a member and bump the group epoch (GMM ``consumerGroupFenceMember``) — or, when only
        classic members would remain, convert the group back to a classic group (§9 downgrade)."""
        if self.online_downgrade_allowed(group, frozenset({member.member_id})):
            self.downgrade(out, group, frozenset({member.member_id}), now_ms)
            return
        self._remove_member(out, group, member)
        self._drop_unsubscribed_regexes(out, group)
        metadata_hash = group.metadata_hash_for(self._image)
        self._write_group_epoch(out, group, group.group_epoch + 1, metadata_hash)

    def _remove_member(self, out: Outcome, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Tombstones 8, 7, 5 (GMM ``removeMember``) and the member's timers."""
        member_id = member.member_id
        self._emit(out, current_assignment_tombstone(group.group_id, member_id))
        group.apply_member_assignment(member_id, None)
        self._emit(out, target_member_tombstone(group.group_id, member_id))
        group.apply_target_member(member_id, None)
        self._emit(out, member_subscription_tombstone(group.group_id, member_id))
        group.apply_member_subscription(member_id, None)
        self._timers.cancel(out, session_timeout_key(group.group_id, member_id))
        self._timers.cancel(out, rebalance_timeout_key(group.group_id, member_id))
        self._timers.cancel(out, classic_join_timeout_key(group.group_id, member_id))
        self._timers.cancel(out, classic_sync_timeout_key(group.group_id, member_id))

    def _drop_unsubscribed_regexes(self, out: Outcome, group: ConsumerGroup) -> None:
        """Tombstone (type 16) every resolved regex no member subscribes to any more (GMM
        ``maybeDeleteResolvedRegularExpressions``)."""
        for regex in sorted(set(group.resolved_regexes) - group.subscribed_regexes()):
            self._emit(out, regular_expression_tombstone(group.group_id, regex))
            group.apply_regex(regex, None)

    def _update_regexes(self, out: Outcome, group: ConsumerGroup, topics: TopicsImage, now_ms: int) -> bool:
        """Resolve the group's regexes that are new or were resolved on another topic set, writing a type-16
        record per resolution (GMM ``handleRegularExpressionsResult``); tombstone those no member uses.
        True when a resolved topic set changed."""
        self._drop_unsubscribed_regexes(out, group)
        subscribed = group.subscribed_regexes()
        changed = False
        stale = group.regex_topic_names is not topics.names and group.regex_topic_names != topics.names
        for regex in sorted(subscribed):
            previous = group.resolved_regexes.get(regex)
            if previous is not None and not stale:
                continue
            resolved = resolve(regex, topics.names)
            if resolved != (previous or frozenset()):
                changed = True
            # Version: Kafka's metadata image offset; regroup's topic images have none, so 0.
            self._emit(out, regular_expression_record(group.group_id, regex, resolved, 0, now_ms))
            group.apply_regex(regex, resolved)
        group.regex_topic_names = topics.names if subscribed else None
        return changed

    def _subscribed_topic_ids(
        self, group: ConsumerGroup, member: ConsumerGroupMember, topics: TopicsImage
    ) -> frozenset[Uuid]:
        ids: set[Uuid] = set()
        for name in group.member_topic_names(member):
            topic = topics.by_name(name)
            if topic is not None:
                ids.add(topic.topic_id)
        return frozenset(ids)

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The ServerAssignor most members name (ties: the configured order), else the first configured."""
        votes = group.assignor_votes()  # counted as members come, go and resubscribe
        configured = self.config.consumer_assignors
        if not votes:
            return configured[0]
        best = max(votes.values())
        tied = [name for name, count in votes.items() if count == best]
        return min(tied, key=lambda n: (configured.index(n) if n in configured else len(configured), n))

    def _maybe_update_target(
        self, out: Outcome, group: ConsumerGroup, now_ms: int, topics: TopicsImage
    ) -> None:
        if group.assignment_epoch >= group.group_epoch:
            return
        interval = self.config.consumer_assignment_interval_ms
        last = group.assignment_timestamp_ms
        if last != 0 and interval != 0 and now_ms < last + interval:
            # KIP-1263: deferred; the next heartbeat after the interval computes it (no timer, as Kafka).
            return
        specs = {
            m.member_id: MemberSpec(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.subscription.rack_id,
                subscribed_topic_ids=self._subscribed_topic_ids(group, m, topics),
                current=group.targets.get(m.member_id, frozenset()),
            )
            for m in group.members.values()
        }
        assignor = ASSIGNORS[self.preferred_assignor(group)]
        try:
            targets = assignor.assign(specs, topics)
        except AssignorError as exc:
            raise _Rejected(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from exc
        for member_id in group.members:
            target = targets.get(member_id, frozenset())
            if target != group.targets.get(member_id, frozenset()):
                self._write_target(out, group, member_id, target)
        self._emit(out, target_metadata_record(group.group_id, group.group_epoch, now_ms))
        group.apply_target_metadata(group.group_epoch, now_ms)

    # ------------------------------------------------------------------------------------------ writes

    @staticmethod
    def _emit(out: Outcome, record: CoordinatorRecord) -> None:
        out.records.append(record)

    def _write_group_epoch(self, out: Outcome, group: ConsumerGroup, epoch: int, metadata_hash: int) -> None:
        # --- the __group_events timeline (regroup.group.consumer_group_events): why the epoch is bumped
        from regroup.group.consumer_group_events import note_epoch_bump

        note_epoch_bump(
            out, group, epoch, metadata_hash, self.config, self.topics, self.preferred_assignor(group)
        )
        # ---
        self._emit(out, consumer_group_metadata_record(group.group_id, epoch, metadata_hash))
        group.apply_group_metadata(epoch, metadata_hash)

    def _write_subscription(
        self, out: Outcome, group: ConsumerGroup, member_id: str, sub: MemberSubscription
    ) -> None:
        self._emit(out, member_metadata_record(group.group_id, member_id, sub))
        group.apply_member_subscription(member_id, sub)

    def _write_target(self, out: Outcome, group: ConsumerGroup, member_id: str, target: Partitions) -> None:
        self._emit(out, target_member_record(group.group_id, member_id, target))
        group.apply_target_member(member_id, target)

    def _write_assignment(
        self, out: Outcome, group: ConsumerGroup, member_id: str, assignment: MemberAssignment
    ) -> None:
        self._emit(out, current_assignment_record(group.group_id, member_id, assignment))
        group.apply_member_assignment(member_id, assignment)

    # ------------------------------------------------------------------------------------------ delete

    def delete_error(self, group_id: str) -> ErrorCode | None:
        """None when ``group_id`` is not a consumer group; else whether DeleteGroups may delete it."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        return ErrorCode.NON_EMPTY_GROUP if group.members else ErrorCode.NONE

    def tombstones(self, group_id: str) -> list[CoordinatorRecord]:
        """CG ``createGroupTombstoneRecords``: all 8s, all 7s, 6, all 5s, all 16s, 4, 3."""
        group = self._groups[group_id]
        records = [current_assignment_tombstone(group_id, m) for m in group.members]
        records += [target_member_tombstone(group_id, m) for m in group.targets]
        records.append(target_metadata_tombstone(group_id))
        records += [member_subscription_tombstone(group_id, m) for m in group.members]
        records += [regular_expression_tombstone(group_id, r) for r in sorted(group.resolved_regexes)]
        records.append(partition_metadata_tombstone(group_id))
        records.append(consumer_group_metadata_tombstone(group_id))
        return records

    def restore_group(self, group: ConsumerGroup) -> None:
        """Put back a group removed by a write that failed (an empty group replaced by a classic group)."""
        self._groups.setdefault(group.group_id, group)

    def remove_group(self, out: Outcome, group_id: str) -> None:
        if self._groups.pop(group_id, None) is not None:
            for key in self._timers.keys_for_group(group_id):
                if key.kind in _MEMBER_TIMER_KINDS:
                    self._timers.cancel(out, key)

    # ------------------------------------------------------------------------------------------ reads

    def describe(self, group_id: str, topics: TopicsImage) -> ConsumerDescribedGroup:
        if not group_id:
            return ConsumerDescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.INVALID_GROUP_ID.value,
            )
        group = self._groups.get(group_id)
        if group is None:
            return ConsumerDescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.GROUP_ID_NOT_FOUND.value,
                error_message=f"Group {group_id} not found.",
            )

        def described(partitions: Iterable[TopicPartition]) -> DescribedAssignment:
            topic_partitions = []
            for topic_id, ps in by_topic(partitions).items():
                topic = topics.by_id(topic_id)
                if topic is not None:
                    topic_partitions.append(
                        DescribedTopicPartitions(topic_id=topic_id, topic_name=topic.name, partitions=ps)
                    )
            return DescribedAssignment(topic_partitions=topic_partitions)

        return ConsumerDescribedGroup(
            group_id=group_id,
            group_state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self.preferred_assignor(group),
            members=[
                DescribedMember(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.subscription.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.subscription.client_id,
                    client_host=m.subscription.client_host,
                    subscribed_topic_names=list(m.subscription.subscribed_topic_names),
                    subscribed_topic_regex=m.subscription.subscribed_topic_regex or "",
                    assignment=described(m.assignment.held),
                    target_assignment=described(group.targets.get(m.member_id, frozenset())),
                    member_type=0 if m.uses_classic_protocol else 1,  # v1+ (KIP-1099)
                )
                for m in group.members.values()
            ],
        )

    def list_groups(self, states_filter: Sequence[str], types_filter: Sequence[str]) -> list[ListedGroup]:
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if types and CONSUMER_GROUP_TYPE not in types:
            return []
        return [
            ListedGroup(
                group_id=group.group_id,
                protocol_type=CONSUMER_GROUP_TYPE,
                group_state=group.state.value,
                group_type=CONSUMER_GROUP_TYPE,
            )
            for group in self._groups.values()
            if not states or group.state.value.lower() in states
        ]

    # ------------------------------------------------------------------------------------------ load

    def replay(self, record: DecodedConsumerGroupRecord, drop_classic: Callable[[str], None]) -> None:
        """Apply one consumer-group record (load path). A group's first record creates it, replacing a
        record-less classic group of the same id (``drop_classic``); tombstones of unknown groups are
        ignored."""
        group_id = record.group_id
        group = self._groups.get(group_id)
        value = record.value
        if group is None:
            if value is None:
                return
            drop_classic(group_id)
            group = self._groups[group_id] = ConsumerGroup(group_id)
        kind = record.record_type
        if kind == CONSUMER_GROUP_METADATA_RECORD_TYPE:
            if value is None:
                del self._groups[group_id]
            else:
                assert isinstance(value, int)
                group.apply_group_metadata(value, record.metadata_hash)
        elif kind == CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE:
            assert value is None or isinstance(value, MemberSubscription)
            group.apply_member_subscription(record.member_id, value)
        elif kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_RECORD_TYPE:
            assert value is None or isinstance(value, int)
            group.apply_target_metadata(-1 if value is None else value, record.timestamp_ms)
        elif kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE:
            assert value is None or isinstance(value, frozenset)
            group.apply_target_member(record.member_id, value)
        elif kind == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE:
            assert value is None or isinstance(value, MemberAssignment)
            group.apply_member_assignment(record.member_id, value)
        elif kind == CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE:
            assert value is None or isinstance(value, tuple)
            group.apply_regex(record.regex, None if value is None else frozenset(value))

    def on_loaded(self, out: Outcome, now_ms: int) -> None:
        """Session timers for every member, rebalance timers for members revoking (GMM ``onLoaded``)."""
        for group in self._groups.values():
            for member in group.members.values():
                self._schedule_session(out, group.group_id, member, now_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS and not member.uses_classic_protocol:
                    self._timers.schedule(
                        out,
                        rebalance_timeout_key(group.group_id, member.member_id),
                        now_ms + max(member.subscription.rebalance_timeout_ms, 0),
                        _RebalanceDeadline(member.member_epoch),
                    )
