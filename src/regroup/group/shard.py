"""One coordinator shard per ``__consumer_offsets`` partition: the runtime's only entry point into the core.

Every method runs on the shard's serial lane; none blocks, reads a clock or does I/O. Time comes in as
``now_ms``; member ids come from the injected ``member_id_factory(prefix) -> f"{prefix}-{uuid}"`` (prefix =
``client.id`` for dynamic members, ``group.instance.id`` for static ones, as Kafka does).

The surface the runtime relies on is :class:`CoordinatorShard`, a :class:`typing.Protocol`: the runtime
(:mod:`regroup.runtime.shard_runner`) and the core's test harness drive a shard only through it, and mypy
checks :class:`GroupShard` against it. The shard delegates to its managers — :class:`GroupManager` (groups,
membership, rebalances) and :class:`OffsetManager` (committed offsets) — and each manager replays its own
records, as Kafka's ``GroupCoordinatorShard`` delegates ``replay`` to its metadata managers.

Runtime obligations:

* ``ctx`` is a :class:`GroupRequestContext` (client id, client host as ``"/1.2.3.4"``, api version, ticket). A
  JoinGroup/SyncGroup whose ``Result.reply`` is ``None`` is parked under ``ctx.ticket`` and answered later by
  a ``Reply(ticket, response)`` effect of some later Result.
* Responses are the generated classes, filled for the request's api version; the runtime only stamps
  throttle time and encodes.
* Append ``Result.records`` in order, then call ``Result.on_append`` (if set) with ``None`` or the mapped
  append error *before* handing the shard anything else; its Result replaces ``reply`` and may carry more
  records, effects and its own ``on_append``. Release the reply and every ``Reply`` effect only after the
  append attempt finished (a failed append never retracts an effect reply: whatever must change on
  failure comes from ``on_append``).
* Apply ``Schedule``/``Cancel`` in order; a fired timer comes back as ``on_timer(key, now_ms)`` with
  ``now_ms`` ≥ the deadline it was scheduled for. Stale fires (the key was cancelled, or re-armed for a later
  deadline) are recognised and ignored by the shard, so the runtime may deliver them.
* Keys: ``TimerKey(HEARTBEAT, group, member)`` (member session, new-member join timeout, pending member),
  ``TimerKey(JOIN, group)``, ``TimerKey(SYNC, group)``, ``TimerKey(EXPIRATION)`` (one per shard, armed by
  ``on_loaded`` every ``offsets.retention.check.interval.ms``). ``on_unloaded`` cancels every key it armed.
* ``Notify`` events are :class:`~regroup.group.history.RebalanceStarted` (a rebalance has to wait for
  members: who, and when each is evicted), :class:`~regroup.group.history.GenerationCompleted` (join phase
  done) and :class:`~regroup.group.history.GenerationStable` (assignment durable); each has ``message()``,
  one line saying which generation, who leads, and why the rebalance happened.
* Group-id checks that Kafka does before the coordinator are done here too (empty group id →
  INVALID_GROUP_ID for Join/Sync/Heartbeat/Leave/TxnOffsetCommit/OffsetDelete); coordinator-level
  COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (and the heartbeat-while-loading
  quirk: NONE) are the runtime's.
* OffsetCommit / OffsetDelete / TxnOffsetCommit: the broker has already answered partitions of unknown
  topics (UNKNOWN_TOPIC_OR_PARTITION) or unauthorized ones and removed them from ``req``; the shard answers
  exactly the topics/partitions left in ``req``, in request order, and the broker merges its own entries
  back. As in Kafka, an OffsetCommit with no partition left is answered by the broker without calling the
  shard (OffsetDelete is always passed through).
* ``offset_fetch`` returns the v8+ per-group struct; the broker converts to the v0–v7 layout (top-level
  topics and error; for v0–v1 a group-level error is copied into every partition).
* ``delete_groups`` gets this shard's (deduplicated) group ids; the broker answers a null id with
  INVALID_GROUP_ID itself and merges the per-shard results.
* KIP-848 consumer groups (:class:`~regroup.group.consumer_group_manager.ConsumerGroupManager`):
  ``consumer_group_heartbeat`` and ``consumer_group_describe`` take the current
  :class:`~regroup.group.topics_image.TopicsImage`; the shard keeps the last one it was given for timers.
  Keys ``TimerKey(CONSUMER_SESSION, group, member)`` and ``TimerKey(CONSUMER_REBALANCE, group, member)``.
  Classic and consumer groups share one group-id namespace: an empty classic group is replaced by a
  consumer group on its first ConsumerGroupHeartbeat and an empty consumer group by a classic group on a
  JoinGroup; a non-empty group is converted online per ``group.consumer.migration.policy`` (§9), classic
  requests to a consumer group being served by :class:`~regroup.group.classic_members.ClassicMembers`.
  JoinGroup, SyncGroup and LeaveGroup take the current topics too (optional: the last ones given otherwise).
  Offset commits and fetches of consumer groups are validated by member epoch (§7 of
  docs/design/consumer-group-semantics.md, in :class:`OffsetManager`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from regroup.group.classic_group import GroupSnapshot
from regroup.group.classic_members import ClassicMembers
from regroup.group.config import GroupConfig
from regroup.group.consumer_group import ConsumerGroup
from regroup.group.consumer_group_manager import ConsumerGroupManager
from regroup.group.context import GroupRequestContext, MemberIdFactory
from regroup.group.effects import CoordinatorRecord, Result, TimerKey, TimerKind
from regroup.group.group_manager import GroupManager, undescribed_group
from regroup.group.history import GenerationRecord, RebalanceHistory, RebalanceStarted
from regroup.group.offset_manager import OffsetManager
from regroup.group.outcome import STALE, Outcome, TimerTable
from regroup.group.records import (
    DecodedConsumerGroupRecord,
    DecodedGroupMetadata,
    OffsetCommitDecoder,
    StoredOffset,
    decode_record,
    group_metadata_tombstone,
)
from regroup.group.topics_image import TopicsImage
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_describe import DescribedGroup as ConsumerGroupDescribedGroup
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.delete_groups import DeletableGroupResult
from regroup.protocol.messages.describe_groups import DescribedGroup
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from regroup.protocol.messages.list_groups import ListedGroup
from regroup.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from regroup.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchResponseGroup
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from regroup.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from regroup.protocol.primitives import Uuid

__all__ = ["GroupRequestContext", "GroupShard"]

EXPIRATION_KEY = TimerKey(TimerKind.EXPIRATION)


class CoordinatorShard(Protocol):
    """What the runtime may ask of a coordinator shard. Writes return a :class:`Result` (records to append,
    reply, effects, ``on_append``); reads return plain values; nothing blocks, reads a clock or does I/O."""

    # ------------------------------------------------------------------------------------------ writes

    def join_group(
        self,
        ctx: GroupRequestContext,
        req: JoinGroupRequest,
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> Result[JoinGroupResponse]:
        """``topics``: the cluster's topics now, for classic members of consumer groups (None: the last
        ones this shard was given)."""
        ...

    def sync_group(
        self,
        ctx: GroupRequestContext,
        req: SyncGroupRequest,
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> Result[SyncGroupResponse]: ...

    def heartbeat(
        self, ctx: GroupRequestContext, req: HeartbeatRequest, now_ms: int
    ) -> Result[HeartbeatResponse]: ...

    def leave_group(
        self,
        ctx: GroupRequestContext,
        req: LeaveGroupRequest,
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> Result[LeaveGroupResponse]: ...

    def offset_commit(
        self,
        ctx: GroupRequestContext,
        req: OffsetCommitRequest,
        topic_ids: Mapping[str, Uuid],
        now_ms: int,
    ) -> Result[OffsetCommitResponse]:
        """``topic_ids`` maps committed topic names to their ids (stored with the offsets, as Kafka 4.3)."""
        ...

    def txn_offset_commit(
        self, ctx: GroupRequestContext, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Result[TxnOffsetCommitResponse]: ...

    def offset_delete(
        self, ctx: GroupRequestContext, req: OffsetDeleteRequest, now_ms: int
    ) -> Result[OffsetDeleteResponse]: ...

    def delete_groups(self, group_ids: Sequence[str], now_ms: int) -> Result[list[DeletableGroupResult]]: ...

    def consumer_group_heartbeat(
        self,
        ctx: GroupRequestContext,
        req: ConsumerGroupHeartbeatRequest,
        topics: TopicsImage,
        now_ms: int,
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        """KIP-848 join / heartbeat / leave; ``topics`` is the cluster's topic metadata now."""
        ...

    def on_timer(self, key: TimerKey, now_ms: int) -> Result[None]:
        """A timer the shard scheduled fired (stale fires are recognised and ignored)."""
        ...

    def on_partitions_deleted(self, partitions: Sequence[tuple[str, int]], now_ms: int) -> Result[None]:
        """Topic partitions were deleted: their committed offsets go, in every group of this shard."""
        ...

    # forcing (test tooling): the same paths as a session expiry / a membership change

    def expire_member(self, group_id: str, member_id: str, now_ms: int) -> Result[bool]:
        """Expire a member's session now, as its session timer would; False when there is no such member."""
        ...

    def force_rebalance(self, group_id: str, reason: str, now_ms: int) -> Result[bool]:
        """Rebalance a group with a ``RebalanceForced(reason)`` cause; False when the group is missing, Empty
        or Dead."""
        ...

    def expire_rebalance_timeout(self, group_id: str, member_id: str, now_ms: int) -> Result[str]:
        """Bring a consumer-group member's rebalance (revocation) timer due now, so that the runtime fires
        it through the timer path; the reply is empty, or says why the member has no such timer."""
        ...

    # ------------------------------------------------------------------------------------------ reads

    def offset_fetch(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]] | None,
        require_stable: bool,
        api_version: int,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponseGroup:
        """The v8+ per-group struct (``topics`` None: every committed offset of the group); ``member_id`` /
        ``member_epoch`` are v9+'s (checked against a consumer group's members)."""
        ...

    def describe_group(self, group_id: str, api_version: int) -> DescribedGroup: ...

    def consumer_group_describe(
        self, group_id: str, api_version: int, topics: TopicsImage
    ) -> ConsumerGroupDescribedGroup:
        """One group of a ConsumerGroupDescribe (topic names of assignments resolved with ``topics``)."""
        ...

    def list_groups(
        self, states_filter: Sequence[str] = (), types_filter: Sequence[str] = ()
    ) -> list[ListedGroup]: ...

    # ------------------------------------------------------------------------------------------ load

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record of the partition's log, in log order, before ``on_loaded``; raises
        ``RecordError`` on an unreadable record."""
        ...

    def on_loaded(self, now_ms: int) -> Result[None]:
        """The log is replayed: arm session timers and the expiration job, rebalance groups over
        ``group.max.size``."""
        ...

    def on_unloaded(self) -> Result[None]:
        """Resignation: parked requests are answered NOT_COORDINATOR, groups become Dead, timers cancelled."""
        ...

    # ------------------------------------------------------------------------------------------ observability

    def groups(self) -> list[GroupSnapshot]: ...

    def group(self, group_id: str) -> GroupSnapshot | None: ...

    def consumer_groups(self) -> list[ConsumerGroup]:
        """Copies of the shard's KIP-848 consumer groups."""
        ...

    def consumer_group(self, group_id: str) -> ConsumerGroup | None: ...

    def consumer_group_assignor(self, group_id: str) -> str | None:
        """The server assignor of a consumer group (ConsumerGroupDescribe's AssignorName); None when there
        is no such consumer group."""
        ...

    def group_history(self, group_id: str) -> tuple[GenerationRecord, ...]: ...

    def rebalance_progress(self, group_id: str) -> RebalanceStarted | None:
        """Whom a PreparingRebalance group waits for, and when each is evicted."""
        ...

    def offsets(self, group_id: str) -> dict[tuple[str, int], StoredOffset]: ...

    def armed_timers(self) -> dict[TimerKey, int]: ...

    def check_invariants(self) -> None:
        """Raise AssertionError when a group's bookkeeping is inconsistent (a test aid)."""
        ...


class GroupShard(CoordinatorShard):
    """The classic groups and committed offsets of one ``__consumer_offsets`` partition."""

    def __init__(self, partition: int, config: GroupConfig, member_id_factory: MemberIdFactory) -> None:
        self.partition = partition
        self.config = config
        self._now_ms = 0
        self._timers = TimerTable()
        self._history = RebalanceHistory(config.rebalance_history_size)
        self._groups = GroupManager(config, member_id_factory, self._timers, self._history)
        self._consumer_groups = ConsumerGroupManager(config, member_id_factory, self._timers, self._groups)
        self._offsets = OffsetManager(config, self._groups, self._consumer_groups)
        self._classic_members = ClassicMembers(self._consumer_groups)
        self._offset_commits = OffsetCommitDecoder()

    def _tick(self, now_ms: int) -> int:
        self._now_ms = max(self._now_ms, now_ms)
        return now_ms

    # ------------------------------------------------------------------------------------------ writes

    def _topics(self, topics: TopicsImage | None) -> TopicsImage:
        if topics is not None:
            self._consumer_groups.note_topics(topics)
        return self._consumer_groups.topics

    def join_group(
        self,
        ctx: GroupRequestContext,
        req: JoinGroupRequest,
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> Result[JoinGroupResponse]:
        now_ms = self._tick(now_ms)
        image = self._topics(topics)
        consumer_group = self._consumer_groups.group(req.group_id)
        if consumer_group is None:
            return self._groups.join_group(ctx, req, now_ms)
        if consumer_group.members:
            # A classic member joins a consumer group (§9 online migration).
            return self._classic_members.join(ctx, req, now_ms, image)
        # An empty consumer group gives way to a classic group, whatever the migration policy (GMM
        # ``maybeDeleteEmptyConsumerGroup``): its tombstones go first, in the classic join's write.
        tombstones = tuple(self._consumer_groups.tombstones(req.group_id))
        self._consumer_groups.remove_group(Outcome(), req.group_id)
        result = self._groups.join_group(ctx, req, now_ms)
        inner = result.on_append

        def on_append(error: ErrorCode | None) -> Result[JoinGroupResponse]:
            if error is not None and self._groups.group(req.group_id) is None:
                self._consumer_groups.restore_group(consumer_group)
            if inner is None:
                return Result(reply=result.reply)
            return inner(error)

        return Result(
            records=tombstones + result.records,
            reply=result.reply,
            effects=result.effects,
            on_append=on_append,
        )

    def sync_group(
        self,
        ctx: GroupRequestContext,
        req: SyncGroupRequest,
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> Result[SyncGroupResponse]:
        now_ms = self._tick(now_ms)
        image = self._topics(topics)
        if self._consumer_groups.group(req.group_id) is not None:
            return self._classic_members.sync(ctx, req, now_ms, image)
        return self._groups.sync_group(ctx, req, now_ms)

    def heartbeat(
        self, ctx: GroupRequestContext, req: HeartbeatRequest, now_ms: int
    ) -> Result[HeartbeatResponse]:
        now_ms = self._tick(now_ms)
        if self._consumer_groups.group(req.group_id) is not None:
            return self._classic_members.heartbeat(ctx, req, now_ms)
        return self._groups.heartbeat(ctx, req, now_ms)

    def leave_group(
        self,
        ctx: GroupRequestContext,
        req: LeaveGroupRequest,
        now_ms: int,
        topics: TopicsImage | None = None,
    ) -> Result[LeaveGroupResponse]:
        now_ms = self._tick(now_ms)
        self._topics(topics)
        if self._consumer_groups.group(req.group_id) is not None:
            return self._classic_members.leave(ctx, req, now_ms)
        return self._groups.leave_group(ctx, req, now_ms)

    def offset_commit(
        self,
        ctx: GroupRequestContext,
        req: OffsetCommitRequest,
        topic_ids: Mapping[str, Uuid],
        now_ms: int,
    ) -> Result[OffsetCommitResponse]:
        return self._offsets.offset_commit(ctx, req, topic_ids, self._tick(now_ms))

    def txn_offset_commit(
        self, ctx: GroupRequestContext, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Result[TxnOffsetCommitResponse]:
        return self._offsets.txn_offset_commit(ctx, req, self._tick(now_ms))

    def offset_delete(
        self, ctx: GroupRequestContext, req: OffsetDeleteRequest, now_ms: int
    ) -> Result[OffsetDeleteResponse]:
        self._tick(now_ms)
        return self._offsets.offset_delete(req)

    def delete_groups(self, group_ids: Sequence[str], now_ms: int) -> Result[list[DeletableGroupResult]]:
        self._tick(now_ms)
        out = Outcome()
        ids = list(dict.fromkeys(group_ids))
        results: list[DeletableGroupResult] = []
        doomed: list[str] = []
        doomed_consumer: list[str] = []
        for group_id in ids:
            consumer_error = self._consumer_groups.delete_error(group_id)
            if consumer_error is not None:
                if consumer_error is ErrorCode.NONE:
                    self._offsets.delete_all_offsets(out, group_id)
                    out.records.extend(self._consumer_groups.tombstones(group_id))
                    doomed_consumer.append(group_id)
                results.append(DeletableGroupResult(group_id=group_id, error_code=consumer_error.value))
                continue
            error = self._groups.delete_error(group_id)
            if error is ErrorCode.NONE:
                self._offsets.delete_all_offsets(out, group_id)
                out.records.append(group_metadata_tombstone(group_id))
                doomed.append(group_id)
            results.append(DeletableGroupResult(group_id=group_id, error_code=error.value))

        def applied(error: ErrorCode | None, after: Outcome) -> None:
            if error is None:
                for group_id in doomed:
                    self._groups.remove_group(after, group_id)
                for group_id in doomed_consumer:
                    self._consumer_groups.remove_group(after, group_id)

        out.after_append(applied)

        def failure(error: ErrorCode) -> list[DeletableGroupResult]:
            return [DeletableGroupResult(group_id=group_id, error_code=error.value) for group_id in ids]

        return out.result(results, failure)

    def consumer_group_heartbeat(
        self,
        ctx: GroupRequestContext,
        req: ConsumerGroupHeartbeatRequest,
        topics: TopicsImage,
        now_ms: int,
    ) -> Result[ConsumerGroupHeartbeatResponse]:
        return self._consumer_groups.heartbeat(ctx, req, self._tick(now_ms), topics)

    def on_timer(self, key: TimerKey, now_ms: int) -> Result[None]:
        now_ms = self._tick(now_ms)
        payload = self._timers.claim(key, now_ms)
        if payload is STALE:
            return Result()
        out = Outcome()
        if key.kind is TimerKind.CONSUMER_SESSION:
            self._consumer_groups.on_session_timeout(out, key.group_id, key.member_id, now_ms)
        elif key.kind is TimerKind.CONSUMER_REBALANCE:
            self._consumer_groups.on_rebalance_timeout(out, key.group_id, key.member_id, payload, now_ms)
        elif key.kind in (TimerKind.CONSUMER_JOIN, TimerKind.CONSUMER_SYNC):
            self._consumer_groups.on_classic_timeout(out, key, now_ms)
        elif key.kind is TimerKind.HEARTBEAT:
            self._groups.on_heartbeat_expired(out, key.group_id, key.member_id, now_ms)
        elif key.kind is TimerKind.JOIN:
            self._groups.on_join_timer(out, key.group_id, payload, now_ms)
        elif key.kind is TimerKind.SYNC:
            self._groups.on_sync_timer(out, key.group_id, payload, now_ms)
        else:
            out.after_append(self._offsets.expire(out, now_ms))
            self._schedule_expiration(out, now_ms)
        return out.result(None)

    def on_partitions_deleted(self, partitions: Sequence[tuple[str, int]], now_ms: int) -> Result[None]:
        """Topic partitions were deleted: their committed offsets go, in every group of this shard."""
        self._tick(now_ms)
        out = Outcome()
        self._offsets.on_partitions_deleted(out, partitions)
        return out.result(None)

    def expire_member(self, group_id: str, member_id: str, now_ms: int) -> Result[bool]:
        """Expire a member's session now, as its session timer would (even with a request parked); the
        reply is False when the group has no such member."""
        now_ms = self._tick(now_ms)
        out = Outcome()
        if self._consumer_groups.group(group_id) is not None:
            found = self._consumer_groups.fence_member(out, group_id, member_id, now_ms)
        else:
            found = self._groups.expire_member(out, group_id, member_id, now_ms)
        return out.result(found)

    def force_rebalance(self, group_id: str, reason: str, now_ms: int) -> Result[bool]:
        """Rebalance a group with a :class:`~regroup.group.history.RebalanceForced` cause; the reply is False
        when the group is missing, Empty or Dead."""
        now_ms = self._tick(now_ms)
        out = Outcome()
        started = self._groups.force_rebalance(out, group_id, reason, now_ms)
        return out.result(started)

    def expire_rebalance_timeout(self, group_id: str, member_id: str, now_ms: int) -> Result[str]:
        now_ms = self._tick(now_ms)
        out = Outcome()
        refused = self._consumer_groups.expire_rebalance_timeout(out, group_id, member_id, now_ms)
        return out.result(refused or "")

    def _schedule_expiration(self, out: Outcome, now_ms: int) -> None:
        self._timers.schedule(out, EXPIRATION_KEY, now_ms + self.config.offsets_retention_check_interval_ms)

    # ------------------------------------------------------------------------------------------ reads

    def offset_fetch(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]] | None,
        require_stable: bool,
        api_version: int,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponseGroup:
        # Offsets are stored only once durable and no transactional offsets exist, so a require-stable
        # fetch needs nothing more than a plain one.
        return self._offsets.offset_fetch(group_id, topics, member_id, member_epoch)

    def describe_group(self, group_id: str, api_version: int) -> DescribedGroup:
        if self._consumer_groups.group(group_id) is not None:
            return undescribed_group(group_id, api_version, f"Group {group_id} is not a classic group.")
        return self._groups.describe_group(group_id, api_version)

    def consumer_group_describe(
        self, group_id: str, api_version: int, topics: TopicsImage
    ) -> ConsumerGroupDescribedGroup:
        if group_id and self._groups.group(group_id) is not None:
            # Kafka's consumerGroup(): a classic group is not found, with its own message.
            return ConsumerGroupDescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.GROUP_ID_NOT_FOUND.value,
                error_message=f"Group {group_id} is not a consumer group.",
            )
        return self._consumer_groups.describe(group_id, topics)

    def list_groups(
        self, states_filter: Sequence[str] = (), types_filter: Sequence[str] = ()
    ) -> list[ListedGroup]:
        return self._groups.list_groups(states_filter, types_filter) + self._consumer_groups.list_groups(
            states_filter, types_filter
        )

    # ------------------------------------------------------------------------------------------ load

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record of the partition's log (load path). Raises ``RecordError`` on an unreadable
        record; records of share groups are ignored."""
        offset_commit = self._offset_commits.decode(record.key, record.value)
        if offset_commit is not None:
            group_id, topic, partition, offset, _ = offset_commit
            self._offsets.replay(group_id, topic, partition, offset)
            if self._consumer_groups.group(group_id) is not None:
                self._drop_simple_group(group_id)
            return
        decoded = decode_record(record)
        if isinstance(decoded, DecodedGroupMetadata):
            self._groups.replay(decoded.group_id, decoded.value)
        elif isinstance(decoded, DecodedConsumerGroupRecord):
            self._consumer_groups.replay(decoded, self._drop_simple_group)

    def _drop_simple_group(self, group_id: str) -> None:
        """A record-less classic group (created for offsets) gives way to the consumer group of its id."""
        group = self._groups.group(group_id)
        if group is not None and not group.members:
            self._groups.remove_group(Outcome(), group_id)

    def on_loaded(self, now_ms: int) -> Result[None]:
        now_ms = self._tick(now_ms)
        out = Outcome()
        self._groups.on_loaded(out, now_ms)
        self._consumer_groups.on_loaded(out, now_ms)
        self._schedule_expiration(out, now_ms)
        return out.result(None)

    def on_unloaded(self) -> Result[None]:
        out = Outcome()
        self._groups.on_unloaded(out, self._now_ms)
        self._timers.cancel_all(out)
        return out.result(None)

    # ------------------------------------------------------------------------------------------ observability

    def groups(self) -> list[GroupSnapshot]:
        return [group.snapshot() for group in self._groups.groups()]

    def group(self, group_id: str) -> GroupSnapshot | None:
        group = self._groups.group(group_id)
        return None if group is None else group.snapshot()

    def consumer_groups(self) -> list[ConsumerGroup]:
        return [group.copy() for group in self._consumer_groups.groups()]

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        group = self._consumer_groups.group(group_id)
        return None if group is None else group.copy()

    def consumer_group_assignor(self, group_id: str) -> str | None:
        group = self._consumer_groups.group(group_id)
        return None if group is None else self._consumer_groups.preferred_assignor(group)

    def group_history(self, group_id: str) -> tuple[GenerationRecord, ...]:
        return self._history.records(group_id)

    def rebalance_progress(self, group_id: str) -> RebalanceStarted | None:
        """The rebalance in progress (PreparingRebalance): awaited members and their eviction deadlines."""
        return self._groups.rebalance_progress(group_id)

    def offsets(self, group_id: str) -> dict[tuple[str, int], StoredOffset]:
        return self._offsets.offsets(group_id)

    def armed_timers(self) -> dict[TimerKey, int]:
        return self._timers.snapshot()

    def check_invariants(self) -> None:
        """Raise AssertionError when a group's bookkeeping is inconsistent (a test aid)."""
        for group in self._groups.groups():
            group.check_invariants()
        for consumer_group in self._consumer_groups.groups():
            consumer_group.check_invariants()
            assert self._groups.group(consumer_group.group_id) is None, consumer_group.group_id
