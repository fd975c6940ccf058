"""An in-memory stand-in for :class:`regroup.admin.client.AdminClient`: topics with log ranges and
timestamps, groups with members and committed offsets, and a record of what was committed/deleted."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from regroup.admin.cli import execute
from regroup.admin.client import (
    EARLIEST,
    LATEST,
    AdminClient,
    AdminError,
    BrokerUnreachableError,
    CommittedOffset,
    GroupDescription,
    GroupListing,
    MemberDescription,
    Node,
    PartitionMetadata,
)
from regroup.admin.options import parse_options
from regroup.client.types import TopicPartition
from regroup.protocol.errors import ErrorCode

COORDINATOR = Node(1, "127.0.0.1", 9092)


@dataclass
class Log:
    start: int
    end: int
    # Timestamp of each offset in [start, end).
    timestamps: list[int] = field(default_factory=list)


@dataclass
class FakeGroup:
    state: str = "Empty"
    members: list[MemberDescription] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    assignor: str = ""
    type: str = "classic"
    protocol_type: str = "consumer"
    # KIP-848 consumer groups (type "consumer")
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


class FakeAdmin:
    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}  # topic -> leader per partition
        self.logs: dict[TopicPartition, Log] = {}
        self.groups: dict[str, FakeGroup] = {}
        self.commits: list[tuple[str, dict[TopicPartition, int]]] = []
        self.commit_error = ErrorCode.NONE
        self.unreachable = False
        # A DescribeGroups v6 broker (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND, not Dead.
        self.missing_not_found = False

    # ------------------------------------------------------------------ setup

    def topic(self, name: str, *ranges: tuple[int, int], leader: int = 1, base_ts: int = 1_000_000) -> None:
        self.topics[name] = [leader] * len(ranges)
        for p, (start, end) in enumerate(ranges):
            self.logs[TopicPartition(name, p)] = Log(
                start, end, [base_ts + o * 1000 for o in range(start, end)]
            )

    def group(self, name: str, **kwargs: Any) -> FakeGroup:
        g = FakeGroup(**kwargs)
        self.groups[name] = g
        return g

    def as_admin(self) -> AdminClient:
        return cast(AdminClient, self)

    # ------------------------------------------------------------------ AdminClient API

    def _check(self) -> None:
        if self.unreachable:
            raise BrokerUnreachableError(
                "cannot connect to the broker at 127.0.0.1:9092 (connection refused)"
            )

    async def list_groups(
        self,
        states: Sequence[str] = (),
        types: Sequence[str] = (),
        protocol_types: Sequence[str] | None = None,
    ) -> list[GroupListing]:
        self._check()
        out = []
        for gid, g in self.groups.items():
            if protocol_types is not None and g.protocol_type not in protocol_types:
                continue
            if states and g.state.upper() not in {s.upper() for s in states}:
                continue
            if types and g.type not in {t.lower() for t in types}:
                continue
            out.append(GroupListing(gid, g.protocol_type, g.state, g.type))
        return out

    async def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription | AdminError]:
        self._check()
        out: dict[str, GroupDescription | AdminError] = {}
        for gid in dict.fromkeys(groups):
            g = self.groups.get(gid)
            if g is None and self.missing_not_found:
                out[gid] = AdminError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
            elif g is None:
                out[gid] = GroupDescription(gid, "Dead", "", "", (), COORDINATOR)
            else:
                out[gid] = GroupDescription(
                    gid,
                    g.state,
                    g.protocol_type,
                    g.assignor,
                    tuple(g.members),
                    COORDINATOR,
                    type=g.type,
                    group_epoch=g.group_epoch,
                    target_assignment_epoch=g.target_assignment_epoch,
                )
        return out

    async def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset | None]:
        g = self.groups.get(group)
        return {} if g is None else {tp: CommittedOffset(o) for tp, o in g.offsets.items()}

    async def committed_offsets_of(
        self, groups: Sequence[str]
    ) -> dict[str, dict[TopicPartition, CommittedOffset | None] | AdminError]:
        return {g: await self.committed_offsets(g) for g in groups}

    async def describe_topics(self, topics: Iterable[str]) -> dict[str, list[PartitionMetadata] | AdminError]:
        out: dict[str, list[PartitionMetadata] | AdminError] = {}
        for t in dict.fromkeys(topics):
            leaders = self.topics.get(t)
            if leaders is None:
                out[t] = AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                out[t] = [PartitionMetadata(p, leader) for p, leader in enumerate(leaders)]
        return out

    async def list_log_offsets(
        self, partitions: Iterable[TopicPartition], spec: int
    ) -> dict[TopicPartition, int | AdminError]:
        out: dict[TopicPartition, int | AdminError] = {}
        for tp in partitions:
            log = self.logs.get(tp)
            if log is None:
                out[tp] = AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif spec == EARLIEST:
                out[tp] = log.start
            elif spec == LATEST:
                out[tp] = log.end
            else:
                out[tp] = next((log.start + i for i, ts in enumerate(log.timestamps) if ts >= spec), -1)
        return out

    async def commit_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ErrorCode]:
        if self.commit_error is not ErrorCode.NONE:
            return dict.fromkeys(offsets, self.commit_error)
        self.commits.append((group, dict(offsets)))
        self.groups.setdefault(group, FakeGroup()).offsets.update(offsets)
        return dict.fromkeys(offsets, ErrorCode.NONE)

    async def delete_groups(self, groups: Sequence[str]) -> dict[str, ErrorCode | AdminError]:
        out: dict[str, ErrorCode | AdminError] = {}
        for gid in groups:
            g = self.groups.get(gid)
            if g is None:
                out[gid] = ErrorCode.GROUP_ID_NOT_FOUND
            elif g.state != "Empty":
                out[gid] = ErrorCode.NON_EMPTY_GROUP
            else:
                del self.groups[gid]
                out[gid] = ErrorCode.NONE
        return out

    async def delete_offsets(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        g = self.groups.get(group)
        if g is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed = {tp.topic for m in g.members for tp in m.assignment}
        out = {}
        for tp in partitions:
            if tp not in self.logs:
                out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif tp.topic in subscribed:
                out[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                g.offsets.pop(tp, None)
                out[tp] = ErrorCode.NONE
        return ErrorCode.NONE, out


@dataclass
class Result:
    code: int
    out: str
    err: str


def run(admin: FakeAdmin, *args: str) -> Result:
    """``regroup groups --bootstrap-server ... ARGS`` against ``admin``."""
    out, err = io.StringIO(), io.StringIO()
    opts = parse_options(["--bootstrap-server", "127.0.0.1:9092", *args], err)
    code = asyncio.run(execute(opts, admin.as_admin(), out, err))
    return Result(code, out.getvalue(), err.getvalue())


def member(member_id: str, *partitions: tuple[str, int], instance: str | None = None) -> MemberDescription:
    return MemberDescription(
        member_id,
        instance,
        member_id.split("-", 1)[0],
        "/10.0.0.1",
        tuple(TopicPartition(t, p) for t, p in partitions),
    )


def consumer_member(
    member_id: str,
    epoch: int,
    owned: Sequence[tuple[str, int]],
    target: Sequence[tuple[str, int]],
    instance: str | None = None,
) -> MemberDescription:
    """A member of a KIP-848 consumer group (ConsumerGroupDescribe): its epoch, what it owns, and its
    target assignment."""
    return MemberDescription(
        member_id,
        instance,
        member_id.split("-", 1)[0],
        "/10.0.0.1",
        tuple(TopicPartition(t, p) for t, p in owned),
        target_assignment=tuple(TopicPartition(t, p) for t, p in target),
        member_epoch=epoch,
    )
