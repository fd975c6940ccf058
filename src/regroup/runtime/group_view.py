"""One read-only view of a group for everything that shows groups: the admin port (web view, JSON,
metrics) and ``regroup.testing``.

A :class:`GroupView` is built from a shard's snapshot of the group — a classic group
(:class:`~regroup.group.classic_group.GroupSnapshot`) or a KIP-848 consumer group
(:class:`~regroup.group.consumer_group.ConsumerGroup`) — its committed offsets and rebalance history, and the
partition logs: lag is ``log end offset − committed offset`` where the log end offset is the high watermark,
the offset ListOffsets(latest) returns and ``kafka-consumer-groups.sh`` shows as LOG-END-OFFSET. Members of
classic groups using the consumer embedded protocol have their subscription and assignment decoded; members
of consumer groups carry them as the coordinator holds them (topic ids named from the topics image), with
their member epoch and reconciliation state. Either way a Stable group's assignment is judged
(:func:`~regroup.protocol.assignment_health.check_assignment`).

For a consumer group the view follows ConsumerGroupDescribe: ``state`` is Empty, Assigning, Reconciling or
Stable, ``generation_id`` is the group epoch, ``protocol_name`` the server assignor; members speaking the
classic protocol inside it (§9 of docs/design/consumer-group-semantics.md) have ``member_type`` "classic".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from regroup.group.classic_group import GroupSnapshot, MemberSnapshot
from regroup.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    TopicPartition,
)
from regroup.group.history import GenerationRecord
from regroup.group.shard import CoordinatorShard
from regroup.group.state import GroupState
from regroup.group.topics_image import TopicsImage
from regroup.log import LogManager
from regroup.protocol.assignment_health import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentHealth,
    MemberAssignment,
    TopicPartitionKey,
    check_assignment,
    decode_member,
)

__all__ = ["CLASSIC", "CONSUMER", "GroupView", "MemberView", "PartitionLag", "build_group_view"]

CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member of a group, as the coordinator sees it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    raw_assignment: bytes
    decoded: MemberAssignment | None
    """Subscription and assignment; None unless the group uses the consumer protocol (for a consumer group:
    the topics it subscribes to, regex resolutions included, and the partitions assigned to it)."""
    member_type: str = CLASSIC
    """The protocol the member speaks: "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848)."""
    # Consumer groups only (None / empty for members of classic groups).
    rack_id: str | None = None
    member_epoch: int | None = None
    member_state: str | None = None
    """Reconciliation: "stable", "unrevoked_partitions" or "unreleased_partitions"."""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    pending_revocation: tuple[TopicPartitionKey, ...] = ()
    """Partitions the member still holds but must give up (it has not acknowledged their revocation)."""
    target: tuple[TopicPartitionKey, ...] | None = None
    """The member's target assignment (None for members of classic groups)."""

    @property
    def assignment(self) -> dict[str, tuple[int, ...]]:
        """The assignment decoded as consumer-protocol data, topic -> partitions (empty when there is none
        or it is not decodable); for a consumer group, the partitions assigned to the member."""
        decoded = self.decoded
        if decoded is None:
            decoded = decode_member(self.member_id, b"", self.raw_assignment)
        return _by_topic(decoded.partitions)

    @property
    def revoking(self) -> dict[str, tuple[int, ...]]:
        """Partitions pending revocation, topic -> partitions."""
        return _by_topic(self.pending_revocation)

    @property
    def target_assignment(self) -> dict[str, tuple[int, ...]]:
        """The target assignment, topic -> partitions (empty for members of classic groups)."""
        return _by_topic(self.target or ())

    @property
    def held(self) -> tuple[TopicPartitionKey, ...]:
        """Every partition the member owns: assigned, then pending revocation."""
        assigned = () if self.decoded is None else self.decoded.partitions
        return (*assigned, *self.pending_revocation)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    current_offset: int
    log_end_offset: int | None  # None: the partition does not exist (any more)
    owner: str | None  # the member assigned the partition, when the assignment says so

    @property
    def lag(self) -> int | None:
        return None if self.log_end_offset is None else self.log_end_offset - self.current_offset


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group's state: Kafka's state name, generation, leader, members with their assignments, committed
    offsets with lag, the assignment's health and the completed generations with their causes."""

    group_id: str
    state: str
    """Kafka's state name: classic groups "Empty", "PreparingRebalance", "CompletingRebalance", "Stable" or
    "Dead"; consumer groups "Empty", "Assigning", "Reconciling" or "Stable"."""
    generation_id: int  # a consumer group's group epoch
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    coordinator_partition: int
    members: tuple[MemberView, ...]
    offsets: tuple[PartitionLag, ...]
    health: AssignmentHealth | None  # judged only for Stable consumer-protocol groups
    history: tuple[GenerationRecord, ...]
    """Completed generations, oldest first, each with its ``cause`` (see ``regroup.group.history``); classic
    groups only (a consumer group's epoch bumps are on the ``__group_events`` timeline)."""
    group_type: str = CLASSIC  # "classic" or "consumer" (KIP-848)
    # Consumer groups only (None for classic groups).
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    """The epoch of the target assignment; below ``group_epoch`` while the group is Assigning."""
    assignor: str | None = None

    @property
    def is_stable(self) -> bool:
        """Stable; for a consumer group also every member at the group epoch with nothing pending (what
        Kafka's Stable state means: the target assignment is computed and every member reconciled to it)."""
        if self.state != GroupState.STABLE.value:
            return False
        if self.group_type != CONSUMER:
            return True
        return all(
            m.member_epoch == self.group_epoch and not m.pending_revocation and m.member_state == "stable"
            for m in self.members
        )

    @property
    def member_ids(self) -> tuple[str, ...]:
        return tuple(m.member_id for m in self.members)

    @property
    def assignment(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """member id -> topic -> partitions."""
        return {m.member_id: m.assignment for m in self.members}

    @property
    def committed(self) -> dict[tuple[str, int], int]:
        """Committed offsets: (topic, partition) -> offset."""
        return {(p.topic, p.partition): p.current_offset for p in self.offsets}

    def member(self, member_id: str) -> MemberView:
        for m in self.members:
            if m.member_id == member_id:
                return m
        raise KeyError(member_id)

    def owner_of(self, topic: str, partition: int) -> str | None:
        """The member assigned ``topic``-``partition``, if any."""
        for m in self.members:
            if partition in m.assignment.get(topic, ()):
                return m.member_id
        return None

    def lag_sum(self) -> int:
        return sum(p.lag for p in self.offsets if p.lag is not None)

    def to_json(self, *, detail: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "group": self.group_id,
            "state": self.state,
            "type": self.group_type,
            "protocol_type": self.protocol_type or "",
            "protocol": self.protocol_name or "",
            "generation": self.generation_id,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "assignor": self.assignor,
            "reconciling": sum(1 for m in self.members if m.member_state not in (None, "stable")),
            "members": len(self.members),
            "lag": self.lag_sum(),
            "health": None if self.health is None else self.health.summary(),
            "coordinator_partition": self.coordinator_partition,
        }
        if not detail:
            return out
        out["leader"] = self.leader_id
        out["members"] = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "subscription": None if m.decoded is None else list(m.decoded.topics),
                "assignment": None if m.decoded is None else _partitions_json(m.decoded.partitions),
                "member_type": m.member_type,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "state": m.member_state,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "pending_revocation": _partitions_json(m.pending_revocation),
                "target": None if m.target is None else _partitions_json(m.target),
            }
            for m in self.members
        ]
        out["offsets"] = [
            {
                "topic": p.topic,
                "partition": p.partition,
                "current_offset": p.current_offset,
                "log_end_offset": p.log_end_offset,
                "lag": p.lag,
                "owner": p.owner,
            }
            for p in self.offsets
        ]
        health = self.health
        out["health_detail"] = (
            None
            if health is None
            else {
                "ok": health.ok,
                "summary": health.summary(),
                "description": health.describe(),
                "unowned": [{"topic": t, "partition": p} for t, p in health.unowned],
                "duplicated": [
                    {"topic": t, "partition": p, "members": list(ms)} for t, p, ms in health.duplicated
                ],
                "undecodable": list(health.undecodable),
            }
        )
        return out


def build_group_view(
    partition: int,
    shard: CoordinatorShard,
    snapshot: GroupSnapshot | ConsumerGroup,
    logs: LogManager,
    topics: TopicsImage | None = None,
    session_timeout_ms: int = 0,
) -> GroupView:
    """The view of ``snapshot``'s group, coordinated by ``shard`` on ``__consumer_offsets-partition``. For a
    consumer group ``topics`` names its topic ids and ``session_timeout_ms`` is the members' session timeout
    (``group.consumer.session.timeout.ms``; classic members inside it keep their own)."""
    if isinstance(snapshot, ConsumerGroup):
        image = topics if topics is not None else TopicsImage()
        group_epoch = snapshot.group_epoch
        assignor = shard.consumer_group_assignor(snapshot.group_id)
        return _view(
            partition,
            shard,
            logs,
            snapshot.group_id,
            state=snapshot.state.value,
            generation_id=group_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=assignor,
            leader_id=None,
            members=tuple(
                _consumer_member_view(snapshot, m, image, session_timeout_ms)
                for m in snapshot.members.values()
            ),
            judged=snapshot.state is ConsumerGroupState.STABLE,
            group_type=CONSUMER,
            group_epoch=group_epoch,
            assignment_epoch=snapshot.assignment_epoch,
            assignor=assignor,
        )
    return _view(
        partition,
        shard,
        logs,
        snapshot.group_id,
        state=snapshot.state.value,
        generation_id=snapshot.generation_id,
        protocol_type=snapshot.protocol_type,
        protocol_name=snapshot.protocol_name,
        leader_id=snapshot.leader_id,
        members=tuple(_member_view(snapshot, m) for m in snapshot.members),
        judged=snapshot.state is GroupState.STABLE and snapshot.protocol_type == CONSUMER_PROTOCOL_TYPE,
        group_type=CLASSIC,
    )


def _view(
    partition: int,
    shard: CoordinatorShard,
    logs: LogManager,
    group_id: str,
    *,
    members: tuple[MemberView, ...],
    judged: bool,
    **fields: Any,
) -> GroupView:
    """What classic and consumer groups share: lag per committed partition with its owner, and the health
    of a Stable group's assignment."""
    owners: dict[tuple[str, int], str] = {}
    for m in members:
        for key in m.held:
            owners.setdefault(key, m.member_id)
    offsets = tuple(
        PartitionLag(t, p, o.offset, _log_end_offset(logs, t, p), owners.get((t, p)))
        for (t, p), o in sorted(shard.offsets(group_id).items())
    )
    health = None
    if judged:
        health = check_assignment(
            (m.decoded for m in members if m.decoded is not None),
            lambda topic: _partition_count(logs, topic),
        )
    return GroupView(
        group_id=group_id,
        coordinator_partition=partition,
        members=members,
        offsets=offsets,
        health=health,
        history=shard.group_history(group_id),
        **fields,
    )


def _consumer_member_view(
    group: ConsumerGroup, member: ConsumerGroupMember, topics: TopicsImage, session_timeout_ms: int
) -> MemberView:
    sub = member.subscription
    classic = sub.classic

    def named(partitions: Iterable[TopicPartition]) -> tuple[TopicPartitionKey, ...]:
        out = []
        for topic_id, p in partitions:
            topic = topics.by_id(topic_id)
            out.append((str(topic_id) if topic is None else topic.name, p))
        return tuple(sorted(out))

    target = group.targets.get(member.member_id)
    return MemberView(
        member_id=member.member_id,
        group_instance_id=member.instance_id,
        client_id=sub.client_id,
        client_host=sub.client_host,
        session_timeout_ms=session_timeout_ms if classic is None else classic.session_timeout_ms,
        rebalance_timeout_ms=sub.rebalance_timeout_ms,
        raw_assignment=b"",
        decoded=MemberAssignment(
            member.member_id,
            tuple(sorted(group.member_topic_names(member))),
            named(member.assigned),
        ),
        member_type=CLASSIC if classic is not None else CONSUMER,
        rack_id=sub.rack_id,
        member_epoch=member.member_epoch,
        member_state=member.state.name.lower(),
        subscribed_topic_names=sub.subscribed_topic_names,
        subscribed_topic_regex=sub.subscribed_topic_regex,
        pending_revocation=named(member.pending_revocation),
        target=named(target or ()),
    )


def _member_view(snapshot: GroupSnapshot, member: MemberSnapshot) -> MemberView:
    decoded = None
    if snapshot.protocol_type == CONSUMER_PROTOCOL_TYPE:
        metadata = next((m for name, m in member.protocols if name == snapshot.protocol_name), b"")
        decoded = decode_member(member.member_id, metadata, member.assignment)
    return MemberView(
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        session_timeout_ms=member.session_timeout_ms,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        raw_assignment=member.assignment,
        decoded=decoded,
    )


def _by_topic(partitions: Iterable[TopicPartitionKey]) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for topic, partition in partitions:
        out[topic] = tuple(sorted((*out.get(topic, ()), partition)))
    return out


def _partitions_json(partitions: Iterable[TopicPartitionKey]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in partitions]


def _log_end_offset(logs: LogManager, topic: str, partition: int) -> int | None:
    plog = logs.partition(topic, partition)
    return None if plog is None or plog.closed else plog.high_watermark


def _partition_count(logs: LogManager, topic: str) -> int | None:
    info = logs.topic(topic)
    return None if info is None else info.partitions
