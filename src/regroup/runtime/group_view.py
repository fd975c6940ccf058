"""One read-only view of a group for everything that shows groups: the admin port (web view, JSON,
metrics) and ``regroup.testing``.

A :class:`GroupView` is built from a shard's snapshot of the group, its committed offsets and rebalance
history, and the partition logs: lag is ``log end offset − committed offset`` where the log end offset is the
high watermark, the offset ListOffsets(latest) returns and ``kafka-consumer-groups.sh`` shows as
LOG-END-OFFSET. Members of consumer-protocol groups have their subscription and assignment decoded, and a
Stable consumer-protocol group's assignment is judged (:func:`~regroup.protocol.assignment_health.
check_assignment`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from regroup.group.classic_group import GroupSnapshot, MemberSnapshot
from regroup.group.history import GenerationRecord
from regroup.group.shard import CoordinatorShard
from regroup.group.state import GroupState
from regroup.log import LogManager
from regroup.protocol.assignment_health import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentHealth,
    MemberAssignment,
    check_assignment,
    decode_member,
)

__all__ = ["GroupView", "MemberView", "PartitionLag", "build_group_view"]


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
    """Subscription and assignment; None unless the group uses the consumer protocol."""

    @property
    def assignment(self) -> dict[str, tuple[int, ...]]:
        """The assignment decoded as consumer-protocol data, topic -> partitions (empty when there is none
        or it is not decodable)."""
        decoded = self.decoded
        if decoded is None:
            decoded = decode_member(self.member_id, b"", self.raw_assignment)
        out: dict[str, tuple[int, ...]] = {}
        for topic, partition in decoded.partitions:
            out[topic] = tuple(sorted((*out.get(topic, ()), partition)))
        return out


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
    state: str  # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable" or "Dead"
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    coordinator_partition: int
    members: tuple[MemberView, ...]
    offsets: tuple[PartitionLag, ...]
    health: AssignmentHealth | None  # judged only for Stable consumer-protocol groups
    history: tuple[GenerationRecord, ...]
    """Completed generations, oldest first, each with its ``cause`` (see ``regroup.group.history``)."""

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
            "protocol_type": self.protocol_type or "",
            "protocol": self.protocol_name or "",
            "generation": self.generation_id,
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
                "assignment": None
                if m.decoded is None
                else [{"topic": t, "partition": p} for t, p in m.decoded.partitions],
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
    partition: int, shard: CoordinatorShard, snapshot: GroupSnapshot, logs: LogManager
) -> GroupView:
    """The view of ``snapshot``'s group, coordinated by ``shard`` on ``__consumer_offsets-partition``."""
    members = tuple(_member_view(snapshot, m) for m in snapshot.members)
    owners: dict[tuple[str, int], str] = {}
    for m in members:
        if m.decoded is not None:
            for key in m.decoded.partitions:
                owners.setdefault(key, m.member_id)
    offsets = tuple(
        PartitionLag(t, p, o.offset, _log_end_offset(logs, t, p), owners.get((t, p)))
        for (t, p), o in sorted(shard.offsets(snapshot.group_id).items())
    )
    health = None
    if snapshot.state is GroupState.STABLE and snapshot.protocol_type == CONSUMER_PROTOCOL_TYPE:
        health = check_assignment(
            (m.decoded for m in members if m.decoded is not None),
            lambda topic: _partition_count(logs, topic),
        )
    return GroupView(
        group_id=snapshot.group_id,
        state=snapshot.state.value,
        generation_id=snapshot.generation_id,
        protocol_type=snapshot.protocol_type,
        protocol_name=snapshot.protocol_name,
        leader_id=snapshot.leader_id,
        coordinator_partition=partition,
        members=members,
        offsets=offsets,
        health=health,
        history=shard.group_history(snapshot.group_id),
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


def _log_end_offset(logs: LogManager, topic: str, partition: int) -> int | None:
    plog = logs.partition(topic, partition)
    return None if plog is None or plog.closed else plog.high_watermark


def _partition_count(logs: LogManager, topic: str) -> int | None:
    info = logs.topic(topic)
    return None if info is None else info.partitions
