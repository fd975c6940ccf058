"""A fake runtime around one :class:`GroupShard`: a manual clock, a counter member-id factory, keyed timers
fired in deadline order, parked tickets and their replies, and an in-memory ``__consumer_offsets`` log
whose next append can be made to fail.

Every reply is encoded at the request's api version, so a response field that version cannot carry fails
the test that produced it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from regroup.group.config import GroupConfig
from regroup.group.effects import Cancel, CoordinatorRecord, Effect, Notify, Reply, Result, Schedule, TimerKey
from regroup.group.records import record_type
from regroup.group.shard import CoordinatorShard, GroupRequestContext, GroupShard
from regroup.group.topics_image import TopicImage, TopicsImage
from regroup.protocol.errors import ErrorCode
from regroup.protocol.message import Message
from regroup.protocol.messages.consumer_group_describe import DescribedGroup as ConsumerGroupDescribedGroup
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.delete_groups import DeletableGroupResult
from regroup.protocol.messages.describe_groups import DescribedGroup
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from regroup.protocol.messages.offset_fetch import OffsetFetchResponseGroup
from regroup.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
)

T = TypeVar("T")

HOST = "/127.0.0.1"


def subscription(*topics: str, version: int = 0) -> bytes:
    return ConsumerProtocolSubscription(topics=sorted(topics)).encode_versioned(version)


def assignment(parts: Mapping[str, Iterable[int]]) -> bytes:
    return ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=sorted(ps))
            for t, ps in sorted(parts.items())
        ]
    ).encode_versioned(0)


def assigned_partitions(data: bytes) -> set[tuple[str, int]]:
    if not data:
        return set()
    decoded, _ = ConsumerProtocolAssignment.decode_versioned(data, lenient=True)
    return {(tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions}


DEFAULT_PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),)


def topic_id(name: str) -> uuid.UUID:
    """A stable id per topic name (tests of consumer groups)."""
    return uuid.uuid5(uuid.NAMESPACE_OID, name)


def image(topics: Mapping[str, int]) -> TopicsImage:
    """A TopicsImage of name → partition count, ids from :func:`topic_id`."""
    return TopicsImage(TopicImage(topic_id(name), name, n) for name, n in topics.items())


def consumer_hard_state(shard: CoordinatorShard) -> dict[str, tuple[object, ...]]:
    """What the records of a shard's consumer groups determine, short of the metadata hash, assignment
    timestamp, assignment epochs and regex resolutions (``test_consumer_group_replay.persisted_state``
    adds those)."""
    return {
        g.group_id: (
            g.group_epoch,
            g.assignment_epoch,
            g.state,
            dict(g.members),
            dict(g.targets),
            dict(g.static_members),
        )
        for g in shard.consumer_groups()
    }


def response_partitions(response: ConsumerGroupHeartbeatResponse) -> dict[uuid.UUID, list[int]] | None:
    """The assignment of a ConsumerGroupHeartbeat response by topic id (None when not sent)."""
    if response.assignment is None:
        return None
    return {tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions}


@dataclass
class Call(Generic[T]):
    """A request sent through the harness; its response may arrive later (parked requests)."""

    harness: Harness
    ticket: int
    api: str
    version: int

    @property
    def done(self) -> bool:
        return self.ticket in self.harness.replies

    @property
    def response(self) -> T:
        assert self.done, f"{self.api} (ticket {self.ticket}) has not been answered"
        response: T = self.harness.replies[self.ticket]
        return response

    @property
    def error(self) -> ErrorCode:
        return ErrorCode(self.response.error_code)  # type: ignore[attr-defined]


@dataclass
class Harness:
    config: GroupConfig = field(default_factory=GroupConfig)
    partition: int = 0
    now: int = 0
    topics: TopicsImage = field(default_factory=TopicsImage)
    """The topic metadata passed with every ConsumerGroupHeartbeat."""

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self._tickets = itertools.count(1)
        self._seq = itertools.count()
        self.shard: CoordinatorShard = GroupShard(self.partition, self.config, self.member_id_factory)
        self.timers: dict[TimerKey, tuple[int, int]] = {}
        self.log: list[CoordinatorRecord] = []
        self.failed_appends: list[tuple[tuple[CoordinatorRecord, ...], ErrorCode]] = []
        self.replies: dict[int, Any] = {}
        self.parked: dict[int, tuple[str, int]] = {}
        self.notifications: list[object] = []
        self.reply_log: list[tuple[int, Any]] = []
        self._fail_next: list[ErrorCode] = []
        self._pending_version: dict[int, tuple[str, int]] = {}

    # ------------------------------------------------------------------ runtime

    def member_id_factory(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def fail_next_append(self, error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> None:
        self._fail_next.append(error)

    def apply(self, result: Result[Any], ticket: int | None = None, api: str = "", version: int = 0) -> Any:
        replies: list[Reply] = []
        if ticket is not None:
            self._pending_version[ticket] = (api, version)
        self._effects(result.effects, replies)
        reply = result.reply
        current = result
        while True:
            error: ErrorCode | None = None
            if current.records:
                if self._fail_next:
                    error = self._fail_next.pop(0)
                    self.failed_appends.append((current.records, error))
                else:
                    self.log.extend(current.records)
            if current.on_append is None:
                break
            nxt = current.on_append(error)
            self._effects(nxt.effects, replies)
            reply = nxt.reply
            current = nxt
        if ticket is not None:
            if reply is None:
                self.parked[ticket] = (api, version)
            else:
                self._deliver(ticket, reply)
        for r in replies:
            assert r.ticket in self.parked, f"reply to a ticket that is not parked: {r}"
            self._deliver(r.ticket, r.response)
        return reply

    def _deliver(self, ticket: int, response: Any) -> None:
        _api, version = self._pending_version[ticket]
        assert ticket not in self.replies, f"ticket {ticket} answered twice"
        if isinstance(response, Message):
            response.encode(version)  # the response must be representable in the request's version
        self.parked.pop(ticket, None)
        self.replies[ticket] = response
        self.reply_log.append((ticket, response))

    def _effects(self, effects: Sequence[Effect], replies: list[Reply]) -> None:
        for effect in effects:
            if isinstance(effect, Schedule):
                self.timers[effect.key] = (effect.deadline_ms, next(self._seq))
            elif isinstance(effect, Cancel):
                self.timers.pop(effect.key, None)
            elif isinstance(effect, Notify):
                self.notifications.append(effect.event)
            else:
                replies.append(effect)

    def advance(self, ms: int) -> None:
        self.advance_to(self.now + ms)

    def advance_to(self, target: int) -> None:
        while True:
            due = [(d, s, k) for k, (d, s) in self.timers.items() if d <= target]
            if not due:
                break
            deadline, _, key = min(due, key=lambda x: (x[0], x[1]))
            self.now = max(self.now, deadline)
            del self.timers[key]
            self.apply(self.shard.on_timer(key, self.now))
        self.now = max(self.now, target)

    def deadline(self, key: TimerKey) -> int | None:
        armed = self.timers.get(key)
        return None if armed is None else armed[0]

    def replayed_shard(self, records: Iterable[CoordinatorRecord] | None = None) -> CoordinatorShard:
        shard = GroupShard(self.partition, self.config, self.member_id_factory)
        for record in self.log if records is None else records:
            shard.replay(record)
        return shard

    def reload(self, config: GroupConfig | None = None) -> Any:
        """Unload the shard (parked requests answered) and load a fresh one from the log."""
        self.apply(self.shard.on_unloaded())
        self.timers.clear()
        if config is not None:
            self.config = config
        self.shard = self.replayed_shard()
        return self.apply(self.shard.on_loaded(self.now))

    def _ctx(self, version: int, client_id: str) -> GroupRequestContext:
        return GroupRequestContext(
            client_id=client_id, client_host=HOST, api_version=version, ticket=next(self._tickets)
        )

    def _call(self, api: str, version: int, client_id: str, handler: Any, req: Any) -> Call[Any]:
        ctx = self._ctx(version, client_id)
        req.encode(version)  # requests too must fit their version
        self.apply(handler(ctx, req, self.now), ctx.ticket, api, version)
        return Call(self, ctx.ticket, api, version)

    # ------------------------------------------------------------------ client calls

    def join(
        self,
        group_id: str,
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
        protocol_type: str = "consumer",
        version: int = 9,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        client_id: str = "client",
        reason: str | None = None,
    ) -> Call[JoinGroupResponse]:
        req = JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms if version >= 1 else -1,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=[JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
            reason=reason if version >= 8 else None,
        )
        return self._call("join", version, client_id, self.shard.join_group, req)

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        version: int = 5,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
    ) -> Call[SyncGroupResponse]:
        req = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id if version >= 3 else None,
            protocol_type=protocol_type if version >= 5 else None,
            protocol_name=protocol_name if version >= 5 else None,
            assignments=[
                SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()
            ],
        )
        return self._call("sync", version, "client", self.shard.sync_group, req)

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        instance_id: str | None = None,
        version: int = 4,
    ) -> Call[HeartbeatResponse]:
        req = HeartbeatRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id if version >= 3 else None,
        )
        return self._call("heartbeat", version, "client", self.shard.heartbeat, req)

    def leave(
        self,
        group_id: str,
        *members: str | tuple[str, str | None],
        version: int = 5,
        reason: str | None = None,
    ) -> Call[LeaveGroupResponse]:
        identities = [(m, None) if isinstance(m, str) else m for m in members]
        if version >= 3:
            req = LeaveGroupRequest(
                group_id=group_id,
                members=[
                    MemberIdentity(member_id=m, group_instance_id=i, reason=reason if version >= 5 else None)
                    for m, i in identities
                ],
            )
        else:
            assert len(identities) == 1
            req = LeaveGroupRequest(group_id=group_id, member_id=identities[0][0])
        return self._call("leave", version, "client", self.shard.leave_group, req)

    def commit(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        generation_id: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
        version: int = 9,
        metadata: str | Mapping[tuple[str, int], str | None] | None = "",
        retention_time_ms: int = -1,
        leader_epoch: int = -1,
        commit_timestamp: int = -1,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> Call[OffsetCommitResponse]:
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=leader_epoch if version >= 6 else -1,
                    commit_timestamp=commit_timestamp if version == 1 else -1,
                    committed_metadata=metadata.get((topic, partition), "")
                    if isinstance(metadata, Mapping)
                    else metadata,
                )
            )
        req = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=generation_id if version >= 1 else -1,
            member_id=member_id if version >= 1 else "",
            group_instance_id=instance_id if version >= 7 else None,
            retention_time_ms=retention_time_ms if 2 <= version <= 4 else -1,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        return self._call(
            "commit",
            version,
            "client",
            lambda ctx, r, now: self.shard.offset_commit(ctx, r, topic_ids or {}, now),
            req,
        )

    def txn_commit(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], *, version: int = 4
    ) -> Call[TxnOffsetCommitResponse]:
        topics: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                TxnOffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
            )
        req = TxnOffsetCommitRequest(
            transactional_id="txn",
            group_id=group_id,
            producer_id=1000,
            producer_epoch=0,
            topics=[TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        return self._call("txn_commit", version, "client", self.shard.txn_offset_commit, req)

    def offset_delete(self, group_id: str, parts: Mapping[str, Iterable[int]]) -> Call[OffsetDeleteResponse]:
        req = OffsetDeleteRequest(
            group_id=group_id,
            topics=[
                OffsetDeleteRequestTopic(
                    name=t, partitions=[OffsetDeleteRequestPartition(partition_index=p) for p in ps]
                )
                for t, ps in parts.items()
            ],
        )
        return self._call("offset_delete", 0, "client", self.shard.offset_delete, req)

    def delete_groups(self, *group_ids: str) -> list[DeletableGroupResult]:
        result: list[DeletableGroupResult] = self.apply(self.shard.delete_groups(list(group_ids), self.now))
        return result

    def fetch(
        self,
        group_id: str,
        topics: Mapping[str, Sequence[int]] | None = None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponseGroup:
        wanted = None if topics is None else list(topics.items())
        return self.shard.offset_fetch(group_id, wanted, require_stable, 9, member_id, member_epoch)

    def fetched(self, group_id: str, topic: str, partition: int) -> tuple[int, int, str | None]:
        result = self.fetch(group_id, {topic: [partition]})
        p = result.topics[0].partitions[0]
        assert p.error_code == 0
        return p.committed_offset, p.committed_leader_epoch, p.metadata

    def describe(self, group_id: str, version: int = 5) -> DescribedGroup:
        return self.shard.describe_group(group_id, version)

    def record_types(self, since: int = 0) -> list[int]:
        """The record types appended to the log from index ``since`` on (tombstones as negative types)."""
        return [record_type(r) if r.value is not None else -record_type(r) for r in self.log[since:]]

    def cgh(
        self,
        group_id: str,
        member_id: str = "",
        member_epoch: int = 0,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int | None = None,
        names: Sequence[str] | None = None,
        regex: str | None = None,
        assignor: str | None = None,
        owned: Mapping[uuid.UUID, Iterable[int]] | None = None,
        version: int = 1,
        client_id: str = "client",
    ) -> Call[ConsumerGroupHeartbeatResponse]:
        """A ConsumerGroupHeartbeat; joining (epoch 0) defaults to a rebalance timeout of 30 s and no owned
        partitions, as clients send."""
        if rebalance_timeout_ms is None:
            rebalance_timeout_ms = 30_000 if member_epoch == 0 else -1
        if owned is None and member_epoch == 0:
            owned = {}
        req = ConsumerGroupHeartbeatRequest(
            group_id=group_id,
            member_id=member_id,
            member_epoch=member_epoch,
            instance_id=instance_id,
            rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=None if names is None else list(names),
            subscribed_topic_regex=regex if version >= 1 else None,
            server_assignor=assignor,
            topic_partitions=None
            if owned is None
            else [
                ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in owned.items()
            ],
        )
        return self._call(
            "consumer_group_heartbeat",
            version,
            client_id,
            lambda ctx, r, now: self.shard.consumer_group_heartbeat(ctx, r, self.topics, now),
            req,
        )

    def consumer_describe(self, group_id: str) -> ConsumerGroupDescribedGroup:
        return self.shard.consumer_group_describe(group_id, 0, self.topics)

    # ------------------------------------------------------------------ scenarios

    def form_group(
        self,
        group_id: str,
        n: int,
        *,
        static: bool = False,
        protocols: Sequence[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        version: int = 9,
    ) -> tuple[list[str], int]:
        """n members join (initial delay waited out) and sync to Stable; returns (member ids, generation).
        The first member is the leader and assigns partition i of "t" to member i."""
        calls = []
        for i in range(n):
            if static:
                calls.append(
                    self.join(
                        group_id,
                        instance_id=f"i{i}",
                        protocols=protocols,
                        session_timeout_ms=session_timeout_ms,
                        rebalance_timeout_ms=rebalance_timeout_ms,
                        version=version,
                    )
                )
            else:
                first = self.join(
                    group_id,
                    protocols=protocols,
                    session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms,
                    version=version,
                )
                if first.done and first.error is ErrorCode.MEMBER_ID_REQUIRED:
                    first = self.join(
                        group_id,
                        first.response.member_id,
                        protocols=protocols,
                        session_timeout_ms=session_timeout_ms,
                        rebalance_timeout_ms=rebalance_timeout_ms,
                        version=version,
                    )
                calls.append(first)
        for _ in range(100):
            if all(c.done for c in calls):
                break
            self.advance(max(self.config.group_initial_rebalance_delay_ms, 1))
        assert all(c.done and c.error is ErrorCode.NONE for c in calls), [c.response for c in calls if c.done]
        ids = [c.response.member_id for c in calls]
        generation = calls[0].response.generation_id
        leader = calls[0].response.leader
        assignments = {m: assignment({"t": [i]}) for i, m in enumerate(ids)}
        protocol_name = calls[0].response.protocol_name
        syncs = [
            self.sync(
                group_id,
                m,
                generation,
                assignments if m == leader else None,
                instance_id=f"i{i}" if static else None,
                protocol_name=protocol_name,
            )
            for i, m in enumerate(ids)
            if m != leader
        ]
        syncs.append(
            self.sync(
                group_id,
                leader,
                generation,
                assignments,
                protocol_name=protocol_name,
                instance_id=(f"i{ids.index(leader)}" if static else None),
            )
        )
        assert all(s.done and s.error is ErrorCode.NONE for s in syncs)
        return ids, generation
