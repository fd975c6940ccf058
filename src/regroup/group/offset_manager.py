"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, and retention/expiry.

Offsets become visible only once their records are durable (they are stored from the append
continuation), never before. Mirrors Kafka 4.3's ``OffsetMetadataManager``: classic groups are validated
by generation (``ClassicGroup.validateOffsetCommit``), KIP-848 consumer groups by member epoch
(``ConsumerGroup.validateOffsetCommit`` / ``validateOffsetFetch``, docs/design/consumer-group-semantics.md
§7), including KIP-1251's per-partition assignment epochs: a member may commit with an older epoch the
partitions it has held since then. Offsets of topics a consumer group subscribes to never expire; an Empty
consumer group whose offsets are all gone is deleted by the expiration pass, as an Empty classic group is.

TxnOffsetCommit: regroup has no transaction coordinator, so no producer can hold a transaction. A Kafka
4.x broker (``transaction.partition.verification.enable=true``, the default) first verifies the producer
with the transaction coordinator, which answers INVALID_PRODUCER_ID_MAPPING for a transactional id it has
no state for; the coordinator never sees the commit. regroup answers every partition that way (after the
INVALID_GROUP_ID check Kafka's service does first), writes nothing and creates no group. Hence there are
never pending transactional offsets: RequireStable fetches never see UNSTABLE_OFFSET_COMMIT and nothing
blocks expiration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from regroup.group.classic_group import ClassicGroup
from regroup.group.config import GroupConfig
from regroup.group.consumer_group import ConsumerGroup, TopicPartition
from regroup.group.consumer_group_manager import ConsumerGroupManager
from regroup.group.context import GroupRequestContext
from regroup.group.effects import Result
from regroup.group.group_manager import GroupManager
from regroup.group.outcome import Outcome
from regroup.group.records import (
    OffsetCommitRecords,
    StoredOffset,
    group_metadata_tombstone,
    offset_commit_tombstone,
)
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from regroup.protocol.primitives import ZERO_UUID, Uuid

__all__ = ["TXN_OFFSET_COMMIT_ERROR", "OffsetManager", "OffsetStore", "OffsetsExpired", "metadata_length"]

TXN_OFFSET_COMMIT_ERROR = ErrorCode.INVALID_PRODUCER_ID_MAPPING


@dataclass(slots=True, unsafe_hash=True)
class OffsetsExpired:
    """Notify event: one expiration pass removed ``count`` committed offsets (Kafka's offset-expiration
    metric); emitted only when the tombstones are durable and ``count`` is positive."""

    count: int


_NO_RETENTION = -1
_METADATA_TOO_LARGE = ErrorCode.OFFSET_METADATA_TOO_LARGE.value
_NO_TIMESTAMP = -1


def metadata_length(metadata: str | None) -> int:
    """Length as Java's ``String.length()`` counts it (UTF-16 code units); null counts as empty."""
    if not metadata:
        return 0
    return len(metadata.encode("utf-16-le", "surrogatepass")) // 2


class OffsetStore:
    """group id → topic → partition → committed offset; empty maps are dropped."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[str, dict[int, StoredOffset]]] = {}

    def get(self, group_id: str, topic: str, partition: int) -> StoredOffset | None:
        return self._by_group.get(group_id, {}).get(topic, {}).get(partition)

    def put(self, group_id: str, topic: str, partition: int, offset: StoredOffset) -> None:
        self._by_group.setdefault(group_id, {}).setdefault(topic, {})[partition] = offset

    def put_all(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[tuple[int, StoredOffset]]]]
    ) -> None:
        """Store one commit's offsets: (topic, [(partition, offset), …]) each, no topic left empty."""
        if not topics:
            return
        by_topic = self._by_group.get(group_id)
        if by_topic is None:
            by_topic = self._by_group[group_id] = {}
        for topic, offsets in topics:
            partitions = by_topic.get(topic)
            if partitions is None:
                by_topic[topic] = dict(offsets)
            else:
                partitions.update(offsets)

    def remove(self, group_id: str, topic: str, partition: int) -> None:
        topics = self._by_group.get(group_id)
        if topics is None:
            return
        partitions = topics.get(topic)
        if partitions is None:
            return
        partitions.pop(partition, None)
        if not partitions:
            del topics[topic]
        if not topics:
            del self._by_group[group_id]

    def group_ids(self) -> list[str]:
        return list(self._by_group)

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._by_group

    def group_offsets(self, group_id: str) -> Iterator[tuple[str, int, StoredOffset]]:
        for topic, partitions in self._by_group.get(group_id, {}).items():
            for partition, offset in partitions.items():
                yield topic, partition, offset

    def topics(self, group_id: str) -> dict[str, dict[int, StoredOffset]]:
        return self._by_group.get(group_id, {})


class OffsetManager:
    def __init__(
        self, config: GroupConfig, groups: GroupManager, consumer_groups: ConsumerGroupManager
    ) -> None:
        self.config = config
        self._store = OffsetStore()
        self._records = OffsetCommitRecords(config.offsets_commit_value_version)
        self._groups = groups
        self._consumer_groups = consumer_groups

    # ------------------------------------------------------------------------------------------ commit

    def offset_commit(
        self,
        ctx: GroupRequestContext,
        req: OffsetCommitRequest,
        topic_ids: Mapping[str, Uuid],
        now_ms: int,
    ) -> Result[OffsetCommitResponse]:
        """``topic_ids`` resolves committed topic names to ids: Kafka 4.3 stores the id with the offset."""
        version = ctx.api_version
        generation_id = req.generation_id_or_member_epoch if version >= 1 else -1
        member_id = req.member_id if version >= 1 else ""
        instance_id = req.group_instance_id if version >= 7 else None
        group_id = req.group_id
        out = Outcome()

        created: ClassicGroup | None = None
        consumer_group = self._consumer_groups.group(group_id)
        if consumer_group is not None:
            committed = [
                (topic_ids.get(topic.name), p.partition_index)
                for topic in req.topics
                for p in topic.partitions
            ]
            invalid = _validate_consumer_commit(consumer_group, member_id, generation_id, version, committed)
            if invalid is not None:
                return Result(reply=_commit_error_response(req, invalid))
        else:
            group = self._groups.group(group_id)
            if group is None:
                if generation_id < 0:
                    # An admin client or a consumer without group management: a "simple" group is created.
                    group = created = self._groups.create_simple_group(group_id, now_ms)
                else:
                    # v9 says so plainly; older versions keep their historical answer.
                    unknown = ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.ILLEGAL_GENERATION
                    return Result(reply=_commit_error_response(req, unknown))
            invalid = _validate_offset_commit(
                group, member_id, instance_id, generation_id, transactional=False
            )
            if invalid is not None:
                return Result(reply=_commit_error_response(req, invalid))
            if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                # A commit keeps the member's session alive in these states.
                self._groups.reschedule_session(out, group, member_id, now_ms)

        expire_ms = (
            now_ms + req.retention_time_ms
            if 2 <= version <= 4 and req.retention_time_ms != _NO_RETENTION
            else None
        )
        response = OffsetCommitResponse()
        response_topics = response.topics
        accepted: list[tuple[str, list[tuple[int, StoredOffset]]]] = []
        records = self._records
        if records.version != self.config.offsets_commit_value_version:
            records = self._records = OffsetCommitRecords(self.config.offsets_commit_value_version)
        out_records = out.records
        max_metadata = self.config.offset_metadata_max_bytes
        explicit_timestamps = version == 1
        with_epoch = version >= 6
        for topic in req.topics:
            name = topic.name
            partitions: list[OffsetCommitResponsePartition] = []
            response_topics.append(OffsetCommitResponseTopic(name=name, partitions=partitions))
            topic_id = topic_ids.get(name, ZERO_UUID)
            kept: list[tuple[int, StoredOffset]] = []
            for partition in topic.partitions:
                index = partition.partition_index
                metadata = partition.committed_metadata
                # Java counts UTF-16 units; only a string that long in characters can be too long.
                if metadata and len(metadata) * 2 > max_metadata and metadata_length(metadata) > max_metadata:
                    partitions.append(
                        OffsetCommitResponsePartition(partition_index=index, error_code=_METADATA_TOO_LARGE)
                    )
                    continue
                commit_timestamp = (
                    partition.commit_timestamp
                    if explicit_timestamps and partition.commit_timestamp != _NO_TIMESTAMP
                    else now_ms
                )
                epoch = partition.committed_leader_epoch if with_epoch else -1
                offset = StoredOffset(
                    partition.committed_offset,
                    None if epoch == -1 else epoch,
                    metadata or "",
                    commit_timestamp,
                    expire_ms,
                    topic_id,
                )
                kept.append((index, offset))
                partitions.append(OffsetCommitResponsePartition(index))
            if kept:
                records.extend(out_records, group_id, name, kept)
                accepted.append((name, kept))

        # Continuations as partials, not nested functions: compiled, a nested function and the frame it
        # closes over reference each other, and every commit would leave a cycle for the collector.
        out.after_append(partial(self._commit_appended, group_id, accepted, created))
        return out.result(response, partial(_commit_error_response, req))

    def _commit_appended(
        self,
        group_id: str,
        accepted: list[tuple[str, list[tuple[int, StoredOffset]]]],
        created: ClassicGroup | None,
        error: ErrorCode | None,
        after: Outcome,
    ) -> None:
        if error is None:
            self._store.put_all(group_id, accepted)
        elif created is not None and not self._store.has_offsets(group_id):
            self._groups.forget_created_group(after, created)

    def txn_offset_commit(
        self, ctx: GroupRequestContext, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Result[TxnOffsetCommitResponse]:
        error = ErrorCode.INVALID_GROUP_ID if not req.group_id else TXN_OFFSET_COMMIT_ERROR
        return Result(
            reply=TxnOffsetCommitResponse(
                topics=[
                    TxnOffsetCommitResponseTopic(
                        name=topic.name,
                        partitions=[
                            TxnOffsetCommitResponsePartition(
                                partition_index=p.partition_index, error_code=error.value
                            )
                            for p in topic.partitions
                        ],
                    )
                    for topic in req.topics
                ]
            )
        )

    # ------------------------------------------------------------------------------------------ fetch

    def offset_fetch(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponseGroup:
        """``member_id`` / ``member_epoch``: OffsetFetch v9+'s, checked against a consumer group's members
        (a classic group does not check them, as Kafka's ``ClassicGroup.validateOffsetFetch``)."""
        result = OffsetFetchResponseGroup(group_id=group_id)
        consumer_group = self._consumer_groups.group(group_id)
        if consumer_group is not None:
            invalid = _validate_consumer_fetch(consumer_group, member_id, member_epoch)
            if invalid is not None:
                result.error_code = invalid.value
                return result
            known = True
        else:
            group = self._groups.group(group_id)
            # Unknown and Dead groups are not errors for classic groups: every partition is "no offset".
            known = group is not None and not group.is_in(GroupState.DEAD)
        if topics is None:
            if known:
                for topic, partitions in self._store.topics(group_id).items():
                    result.topics.append(
                        OffsetFetchResponseTopics(
                            name=topic, partitions=[_fetched(p, o) for p, o in partitions.items()]
                        )
                    )
            return result
        for topic, partition_ids in topics:
            result.topics.append(
                OffsetFetchResponseTopics(
                    name=topic,
                    partitions=[
                        _fetched(p, self._store.get(group_id, topic, p) if known else None)
                        for p in partition_ids
                    ],
                )
            )
        return result

    # ------------------------------------------------------------------------------------------ delete

    def offset_delete(self, req: OffsetDeleteRequest) -> Result[OffsetDeleteResponse]:
        group_id = req.group_id
        if not group_id:
            return Result(reply=OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID.value))
        is_subscribed: Callable[[str], bool]
        consumer_group = self._consumer_groups.group(group_id)
        if consumer_group is not None:
            # Allowed in any state; only the partitions of subscribed topics are refused (OMM deleteOffsets).
            is_subscribed = consumer_group.subscribed_topic_names().__contains__
        else:
            group = self._groups.group(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                return Result(reply=OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND.value))
            if not group.is_in(GroupState.EMPTY) and not group.uses_consumer_protocol:
                return Result(reply=OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP.value))
            is_subscribed = group.is_subscribed_to_topic
        out = Outcome()
        response = OffsetDeleteResponse()
        deleted: list[tuple[str, int]] = []
        for topic in req.topics:
            subscribed = is_subscribed(topic.name)
            partitions = []
            for p in topic.partitions:
                if subscribed:
                    partitions.append(
                        OffsetDeleteResponsePartition(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC.value,
                        )
                    )
                    continue
                partitions.append(OffsetDeleteResponsePartition(partition_index=p.partition_index))
                if self._store.get(group_id, topic.name, p.partition_index) is not None:
                    out.records.append(offset_commit_tombstone(group_id, topic.name, p.partition_index))
                    deleted.append((topic.name, p.partition_index))
            response.topics.append(OffsetDeleteResponseTopic(name=topic.name, partitions=partitions))

        def applied(error: ErrorCode | None, _after: Outcome) -> None:
            if error is None:
                for topic_name, partition_index in deleted:
                    self._store.remove(group_id, topic_name, partition_index)

        out.after_append(applied)

        def failure(error: ErrorCode) -> OffsetDeleteResponse:
            return OffsetDeleteResponse(error_code=error.value)

        return out.result(response, failure)

    def delete_all_offsets(self, out: Outcome, group_id: str) -> None:
        """Tombstones for every committed offset of the group, dropped from the store once durable."""
        doomed = [(topic, partition) for topic, partition, _ in self._store.group_offsets(group_id)]
        for topic, partition in doomed:
            out.records.append(offset_commit_tombstone(group_id, topic, partition))

        def applied(error: ErrorCode | None, _after: Outcome) -> None:
            if error is None:
                for topic, partition in doomed:
                    self._store.remove(group_id, topic, partition)

        out.after_append(applied)

    def offsets(self, group_id: str) -> dict[tuple[str, int], StoredOffset]:
        return {(t, p): o for t, p, o in self._store.group_offsets(group_id)}

    def on_partitions_deleted(self, out: Outcome, partitions: Sequence[tuple[str, int]]) -> None:
        """Tombstone every group's offsets of deleted topic partitions (Kafka's ``onPartitionsDeleted``)."""
        wanted: dict[str, set[int]] = {}
        for topic, partition in partitions:
            wanted.setdefault(topic, set()).add(partition)
        doomed: list[tuple[str, str, int]] = []
        for group_id in self._store.group_ids():
            for topic, by_partition in self._store.topics(group_id).items():
                for partition in sorted(wanted.get(topic, set()) & by_partition.keys()):
                    out.records.append(offset_commit_tombstone(group_id, topic, partition))
                    doomed.append((group_id, topic, partition))

        def applied(error: ErrorCode | None, _after: Outcome) -> None:
            if error is None:
                for group_id, topic, partition in doomed:
                    self._store.remove(group_id, topic, partition)

        out.after_append(applied)

    # ------------------------------------------------------------------------------------------ expiry

    def expire(self, out: Outcome, now_ms: int) -> Callable[[ErrorCode | None, Outcome], None]:
        """One pass of the offset/group expiration job; returns the continuation applying it."""
        expired_offsets: list[tuple[str, str, int]] = []
        expired_groups: list[str] = []
        expired_consumer_groups: list[str] = []
        for group in self._groups.groups():
            group_id = group.group_id
            all_expired = self._expire_group_offsets(
                out, group_id, _expiration_base(group), group.is_subscribed_to_topic, now_ms, expired_offsets
            )
            if all_expired and group.is_in(GroupState.EMPTY):
                # No offsets left (or never any): the Empty group goes too.
                out.records.append(group_metadata_tombstone(group_id))
                expired_groups.append(group_id)
        for consumer_group in self._consumer_groups.groups():
            group_id = consumer_group.group_id
            # ConsumerGroup.offsetExpirationCondition: retention counts from the commit; subscribed topics'
            # offsets never expire.
            all_expired = self._expire_group_offsets(
                out,
                group_id,
                _commit_time,
                consumer_group.subscribed_topic_names().__contains__,
                now_ms,
                expired_offsets,
            )
            if all_expired and not consumer_group.members:
                # GroupCoordinatorShard.cleanupGroupMetadata: an Empty group with no offsets left is deleted.
                out.records.extend(self._consumer_groups.tombstones(group_id))
                expired_consumer_groups.append(group_id)

        def applied(error: ErrorCode | None, after: Outcome) -> None:
            if error is not None:
                return  # retried at the next pass
            for group_id, topic, partition in expired_offsets:
                self._store.remove(group_id, topic, partition)
            if expired_offsets:
                after.notify(OffsetsExpired(len(expired_offsets)))
            for group_id in expired_groups:
                self._groups.remove_group(after, group_id)
            for group_id in expired_consumer_groups:
                self._consumer_groups.remove_group(after, group_id)

        return applied

    def _expire_group_offsets(
        self,
        out: Outcome,
        group_id: str,
        base: Callable[[StoredOffset], int] | None,
        is_subscribed: Callable[[str], bool],
        now_ms: int,
        expired: list[tuple[str, str, int]],
    ) -> bool:
        """Tombstone the group's expired offsets (retention counted from ``base``, None: nothing expires;
        subscribed topics never do); True when the group has no offsets left afterwards."""
        if not self._store.has_offsets(group_id):
            return True
        if base is None:
            return False
        retention_ms = self.config.offsets_retention_ms
        all_expired = True
        for topic, partitions in self._store.topics(group_id).items():
            if is_subscribed(topic):
                all_expired = False
                continue
            for partition, offset in partitions.items():
                if offset.expire_timestamp_ms is not None:
                    # Explicit expire timestamp (OffsetCommit v2-v4 retention): old semantics.
                    is_expired = now_ms >= offset.expire_timestamp_ms
                else:
                    is_expired = now_ms - base(offset) >= retention_ms
                if is_expired:
                    out.records.append(offset_commit_tombstone(group_id, topic, partition))
                    expired.append((group_id, topic, partition))
                else:
                    all_expired = False
        return all_expired

    # ------------------------------------------------------------------------------------------ load

    def replay(self, group_id: str, topic: str, partition: int, offset: StoredOffset | None) -> None:
        if offset is None:
            self._store.remove(group_id, topic, partition)
            return
        if self._groups.group(group_id) is None and self._consumer_groups.group(group_id) is None:
            # Offsets without group metadata: a simple group (its creation time is not in the log).
            self._groups.create_simple_group(group_id, None)
        self._store.put(group_id, topic, partition, offset)


def _commit_time(offset: StoredOffset) -> int:
    return offset.commit_timestamp_ms


def _validate_consumer_commit(
    group: ConsumerGroup,
    member_id: str,
    member_epoch: int,
    api_version: int,
    committed: Sequence[tuple[Uuid | None, int]],
) -> ErrorCode | None:
    """Kafka 4.3's ``ConsumerGroup.validateOffsetCommit`` for an OffsetCommit (``member_epoch`` is
    GenerationIdOrMemberEpoch; ``committed`` the (topic id, partition) of every committed partition, None
    for a topic without an id). The error applies to the whole request."""
    if member_epoch < 0 and not group.members:
        return None  # an admin client or a consumer without group management, committing to an Empty group
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if api_version < 9:
        # Consumer-protocol members must send their member epoch (OffsetCommit v9+).
        return ErrorCode.UNSUPPORTED_VERSION
    if member_epoch == member.member_epoch:
        return None
    if member_epoch > member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    # KIP-1251: an older epoch may commit the partitions the member has held since that epoch (assigned or
    # pending revocation); one partition failing fails the request.
    assignment = member.assignment
    epochs = assignment.assignment_epochs
    default_epoch = max(member.member_epoch, 0)  # a loaded record without AssignmentEpochs
    for topic_id, partition in committed:
        if topic_id is None:
            return ErrorCode.STALE_MEMBER_EPOCH
        tp: TopicPartition = (topic_id, partition)
        if tp not in assignment.held or member_epoch < epochs.get(tp, default_epoch):
            return ErrorCode.STALE_MEMBER_EPOCH
    return None


def _validate_consumer_fetch(
    group: ConsumerGroup, member_id: str | None, member_epoch: int
) -> ErrorCode | None:
    """``ConsumerGroup.validateOffsetFetch``: a fetch naming a member must come from that member at its
    current epoch (no member id and a negative epoch: an admin fetch, not checked)."""
    if member_id is None and member_epoch < 0:
        return None
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return None


def _expiration_base(group: ClassicGroup) -> Callable[[StoredOffset], int] | None:
    """The timestamp retention counts from, per offset, or None when the group's offsets do not expire
    (Kafka's ``ClassicGroup.offsetExpirationCondition``)."""
    if group.protocol_type is None:
        return lambda offset: offset.commit_timestamp_ms  # simple group
    if group.is_in(GroupState.EMPTY):
        # Retention runs from when the group became Empty (unknown for old records: commit time).
        became_empty = group.current_state_timestamp_ms
        if became_empty is None:
            return lambda offset: offset.commit_timestamp_ms
        return lambda offset: became_empty
    if (
        group.uses_consumer_protocol
        and group.subscribed_topics is not None
        and group.is_in(GroupState.STABLE)
    ):
        return lambda offset: offset.commit_timestamp_ms  # only unsubscribed topics are considered
    return None


def _validate_offset_commit(
    group: ClassicGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    *,
    transactional: bool,
) -> ErrorCode | None:
    """Kafka's ``ClassicGroup.validateOffsetCommit``."""
    if group.is_in(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and group.is_in(GroupState.EMPTY):
        return None  # admin client / manual assignment committing to an empty group
    if generation_id >= 0 or member_id or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    elif not transactional and not group.is_in(GroupState.EMPTY):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
        # The member knows the new generation but has no assignment yet.
        return ErrorCode.REBALANCE_IN_PROGRESS
    return None


def _commit_error_response(req: OffsetCommitRequest, error: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error.value)
                    for p in topic.partitions
                ],
            )
            for topic in req.topics
        ]
    )


def _fetched(partition: int, offset: StoredOffset | None) -> OffsetFetchResponsePartitions:
    if offset is None:
        return OffsetFetchResponsePartitions(
            partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata=""
        )
    return OffsetFetchResponsePartitions(
        partition_index=partition,
        committed_offset=offset.offset,
        committed_leader_epoch=-1 if offset.leader_epoch is None else offset.leader_epoch,
        metadata=offset.metadata,
    )
