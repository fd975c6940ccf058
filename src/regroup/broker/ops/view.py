"""Read-only views of the broker's groups for the admin port: state, members, assignments, lag and health.

Everything is read synchronously on the broker's event loop from the coordinator shards' snapshots, so a
view is the state after the last event each shard handled (a write whose append is still in flight
included). Lag is ``log end offset − committed offset`` where the log end offset is the high watermark, the
offset ListOffsets(latest) returns and ``kafka-consumer-groups.sh`` shows as LOG-END-OFFSET; it is computed
for every group with committed offsets, Empty groups included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from regroup.broker.handlers._groups import SERVICE
from regroup.group.classic_group import GroupSnapshot, MemberSnapshot
from regroup.group.state import GroupState
from regroup.log import LogManager
from regroup.protocol.assignment_health import (
    CONSUMER_PROTOCOL_TYPE,
    AssignmentHealth,
    MemberAssignment,
    check_assignment,
    decode_member,
)
from regroup.runtime.coordinator import GroupCoordinator
from regroup.runtime.shard_runner import RunnerState

if TYPE_CHECKING:
    from regroup.broker.state import Broker
    from regroup.group.shard import GroupShard

__all__ = [
    "GroupView",
    "MemberView",
    "PartitionLag",
    "coordinator",
    "group_view",
    "group_views",
    "history_json",
    "log_end_offset",
]


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    decoded: MemberAssignment | None  # None unless the group uses the consumer protocol


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
    snapshot: GroupSnapshot
    coordinator_partition: int
    members: tuple[MemberView, ...]
    offsets: tuple[PartitionLag, ...]
    health: AssignmentHealth | None  # judged only for Stable consumer-protocol groups

    @property
    def group_id(self) -> str:
        return self.snapshot.group_id

    @property
    def state(self) -> str:
        return self.snapshot.state.value

    def lag_sum(self) -> int:
        return sum(p.lag for p in self.offsets if p.lag is not None)

    def to_json(self, *, detail: bool) -> dict[str, Any]:
        snap = self.snapshot
        out: dict[str, Any] = {
            "group": snap.group_id,
            "state": self.state,
            "protocol_type": snap.protocol_type or "",
            "protocol": snap.protocol_name or "",
            "generation": snap.generation_id,
            "members": len(snap.members),
            "lag": self.lag_sum(),
            "health": None if self.health is None else self.health.summary(),
            "coordinator_partition": self.coordinator_partition,
        }
        if not detail:
            return out
        out["leader"] = snap.leader_id
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


def coordinator(broker: Broker) -> GroupCoordinator | None:
    coord = broker.services.get(SERVICE)
    return coord if isinstance(coord, GroupCoordinator) and coord.running else None


def _shards(coord: GroupCoordinator) -> Iterator[tuple[int, GroupShard]]:
    for partition in range(coord.num_partitions):
        runner = coord.runner(partition)
        if runner is not None and runner.state is RunnerState.ACTIVE:
            yield partition, runner.shard


def _logs(broker: Broker) -> LogManager | None:
    try:
        return broker.logs
    except RuntimeError:  # stopped: nothing to show
        return None


def log_end_offset(broker: Broker, topic: str, partition: int) -> int | None:
    logs = _logs(broker)
    plog = None if logs is None else logs.partition(topic, partition)
    return None if plog is None or plog.closed else plog.high_watermark


def partition_count(broker: Broker, topic: str) -> int | None:
    logs = _logs(broker)
    info = None if logs is None else logs.topic(topic)
    return None if info is None else info.partitions


def _member_view(snap: GroupSnapshot, member: MemberSnapshot) -> MemberView:
    decoded = None
    if snap.protocol_type == CONSUMER_PROTOCOL_TYPE:
        metadata = next((m for name, m in member.protocols if name == snap.protocol_name), b"")
        decoded = decode_member(member.member_id, metadata, member.assignment)
    return MemberView(
        member.member_id,
        member.group_instance_id,
        member.client_id,
        member.client_host,
        member.session_timeout_ms,
        member.rebalance_timeout_ms,
        decoded,
    )


def _view(broker: Broker, partition: int, shard: GroupShard, snap: GroupSnapshot) -> GroupView:
    members = tuple(_member_view(snap, m) for m in snap.members)
    owners: dict[tuple[str, int], str] = {}
    for m in members:
        if m.decoded is not None:
            for key in m.decoded.partitions:
                owners.setdefault(key, m.member_id)
    offsets = tuple(
        PartitionLag(t, p, o.offset, log_end_offset(broker, t, p), owners.get((t, p)))
        for (t, p), o in sorted(shard.offsets(snap.group_id).items())
    )
    health = None
    if snap.state is GroupState.STABLE and snap.protocol_type == CONSUMER_PROTOCOL_TYPE:
        health = check_assignment(
            (m.decoded for m in members if m.decoded is not None),
            lambda topic: partition_count(broker, topic),
        )
    return GroupView(snap, partition, members, offsets, health)


def group_views(broker: Broker) -> list[GroupView]:
    """Every group of every loaded coordinator partition, sorted by group id."""
    coord = coordinator(broker)
    if coord is None:
        return []
    views = [_view(broker, p, shard, snap) for p, shard in _shards(coord) for snap in shard.groups()]
    views.sort(key=lambda v: v.group_id)
    return views


def group_view(broker: Broker, group_id: str) -> GroupView | None:
    coord = coordinator(broker)
    shard = None if coord is None else coord.shard(group_id)
    snap = None if shard is None else shard.group(group_id)
    if coord is None or shard is None or snap is None:
        return None
    return _view(broker, coord.partition_for(group_id), shard, snap)


def history_json(broker: Broker, group_id: str) -> dict[str, Any] | None:
    """The group's rebalance timeline as the coordinator serves it (:meth:`GroupCoordinator.history_view`:
    generations oldest first from ``__group_events``, and the live rebalance in progress with the members
    it waits for and the time left before each is evicted); None for a group with neither state nor
    history."""
    coord = coordinator(broker)
    if coord is None:
        return None
    view = coord.history_view(group_id)
    if view.get("state") is None and not view.get("generations") and view.get("in_progress") is None:
        return None
    return view
