"""GroupMember's asyncio driver against an in-memory fake cluster with a scripted one-member coordinator."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from regroup.client import (
    GroupMember,
    GroupMemberConfig,
    KafkaConnectionError,
    MemberState,
    RequestTimedOutError,
    TopicPartition,
    UnsupportedApiVersionError,
)
from regroup.client.connection import Transport
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.message import Message
from regroup.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse
from regroup.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse

from .helpers import wait_for

R = TypeVar("R", bound=Message)

TOPIC = "t"
PARTITIONS = frozenset(TopicPartition(TOPIC, p) for p in range(3))


@dataclass
class FakeCluster:
    """Brokers 1 and 2; one of them coordinates a group that admits members one at a time."""

    coordinator: int = 1
    down: set[int] = field(default_factory=set)
    hang_heartbeats: bool = False
    generation: int = 0
    member_id: str | None = None
    assignment: bytes = b""
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    log: list[tuple[int, Message, int | None]] = field(default_factory=list)
    versions: dict[ApiKey, int] = field(default_factory=dict)
    transports: list[FakeTransport] = field(default_factory=list)

    async def connect(self, host: str, port: int) -> Transport:
        node = port
        if node in self.down:
            raise KafkaConnectionError(f"connection to node {node} refused")
        transport = FakeTransport(self, node)
        self.transports.append(transport)
        return transport

    def requests(self, kind: type[Message], node: int | None = None) -> list[Message]:
        return [m for n, m, _ in self.log if isinstance(m, kind) and (node is None or n == node)]

    def version(self, api_key: ApiKey) -> int:
        return self.versions.get(api_key, API_INFO[api_key].max_version)

    def move_coordinator(self, node: int) -> None:
        self.coordinator = node

    def fail_node(self, node: int) -> None:
        self.down.add(node)
        for t in self.transports:
            if t.node == node:
                t.broken = True

    async def handle(self, node: int, message: Message) -> Message:
        match message:
            case FindCoordinatorRequest():
                if self.version(ApiKey.FIND_COORDINATOR) < 4:
                    return FindCoordinatorResponse(
                        node_id=self.coordinator, host="fake", port=self.coordinator
                    )
                return FindCoordinatorResponse(
                    coordinators=[
                        Coordinator(key="g", node_id=self.coordinator, host="fake", port=self.coordinator)
                    ]
                )
            case MetadataRequest():
                partitions = [
                    MetadataResponsePartition(partition_index=p, leader_id=1) for p in range(len(PARTITIONS))
                ]
                brokers = [MetadataResponseBroker(node_id=n, host="fake", port=n) for n in (1, 2)]
                return MetadataResponse(
                    brokers=brokers, topics=[MetadataResponseTopic(name=TOPIC, partitions=partitions)]
                )
        if node != self.coordinator:
            return _error_response(message, ErrorCode.NOT_COORDINATOR)
        match message:
            case JoinGroupRequest(member_id="") if self.version(ApiKey.JOIN_GROUP) >= 4:
                return JoinGroupResponse(
                    error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=f"m-{next(self.ids)}"
                )
            case JoinGroupRequest(member_id=mid):
                mid = mid or f"m-{next(self.ids)}"
                self.generation += 1
                self.member_id = mid
                member = JoinGroupResponseMember(member_id=mid, metadata=message.protocols[0].metadata)
                return JoinGroupResponse(
                    generation_id=self.generation,
                    protocol_type="consumer",
                    protocol_name=message.protocols[0].name,
                    leader=mid,
                    member_id=mid,
                    members=[member],
                )
            case SyncGroupRequest():
                if message.generation_id != self.generation or message.member_id != self.member_id:
                    return SyncGroupResponse(error_code=ErrorCode.ILLEGAL_GENERATION)
                self.assignment = next(
                    a.assignment for a in message.assignments if a.member_id == self.member_id
                )
                return SyncGroupResponse(
                    protocol_type="consumer", protocol_name=message.protocol_name, assignment=self.assignment
                )
            case HeartbeatRequest():
                if self.hang_heartbeats:
                    await asyncio.sleep(3600)
                if message.member_id != self.member_id:
                    return HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
                if message.generation_id != self.generation:
                    return HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION)
                return HeartbeatResponse()
            case LeaveGroupRequest():
                self.member_id = None
                return LeaveGroupResponse(
                    members=[MemberResponse(member_id=m.member_id) for m in message.members]
                )
            case OffsetFetchRequest():
                return OffsetFetchResponse(
                    topics=[
                        OffsetFetchResponseTopic(
                            name=t.name,
                            partitions=[
                                OffsetFetchResponsePartition(partition_index=p, committed_offset=-1)
                                for p in t.partition_indexes
                            ],
                        )
                        for t in message.topics or []
                    ]
                )
            case OffsetCommitRequest():
                return OffsetCommitResponse(
                    topics=[
                        OffsetCommitResponseTopic(
                            name=t.name,
                            partitions=[
                                OffsetCommitResponsePartition(partition_index=p.partition_index)
                                for p in t.partitions
                            ],
                        )
                        for t in message.topics
                    ]
                )
        raise AssertionError(f"unexpected {message}")


def _error_response(message: Message, error: ErrorCode) -> Message:
    match message:
        case JoinGroupRequest():
            return JoinGroupResponse(error_code=error)
        case SyncGroupRequest():
            return SyncGroupResponse(error_code=error)
        case HeartbeatRequest():
            return HeartbeatResponse(error_code=error)
        case LeaveGroupRequest():
            return LeaveGroupResponse(error_code=error)
    raise AssertionError(f"no error response for {message}")


class FakeTransport:
    def __init__(self, cluster: FakeCluster, node: int) -> None:
        self.cluster = cluster
        self.node = node
        self.broken = False
        self._closed = False
        self.sent: list[Message] = []

    @property
    def closed(self) -> bool:
        return self._closed or self.broken

    def version(self, api_key: ApiKey) -> int:
        return self.cluster.version(api_key)

    async def request(self, message: Message, response_type: type[R], *, timeout_ms: int | None = None) -> R:
        if self.closed:
            raise KafkaConnectionError("closed")
        # What the broker would see: the message encoded at the negotiated version.
        version = self.version(ApiKey(message.API_KEY))
        message = type(message).decode(message.encode(version), version)
        self.cluster.log.append((self.node, message, timeout_ms))
        self.sent.append(message)
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                response = await self.cluster.handle(self.node, message)
        except TimeoutError:
            self._closed = True
            raise RequestTimedOutError("timed out") from None
        if self.broken:
            raise KafkaConnectionError("connection lost")
        assert isinstance(response, response_type)
        return response_type.decode(response.encode(version), version)

    async def close(self) -> None:
        self._closed = True


def _member(
    cluster: FakeCluster, **overrides: Any
) -> tuple[GroupMember, list[tuple[str, frozenset[TopicPartition]]]]:
    settings: dict[str, Any] = {
        "bootstrap_servers": "fake:1",
        "group_id": "g",
        "topics": [TOPIC],
        "session_timeout_ms": 1000,
        "heartbeat_interval_ms": 50,
        "retry_backoff_ms": 20,
        "max_poll_interval_ms": 60000,
        "request_timeout_ms": 2000,
    }
    settings.update(overrides)
    events: list[tuple[str, frozenset[TopicPartition]]] = []
    member = GroupMember(
        GroupMemberConfig(**settings),
        on_partitions_assigned=lambda p: events.append(("assigned", p)),
        on_partitions_revoked=lambda p: events.append(("revoked", p)),
        on_partitions_lost=lambda p: events.append(("lost", p)),
        connector=cluster.connect,
    )
    return member, events


async def _until(member: GroupMember, condition: Any, timeout: float = 5.0) -> None:
    async def step() -> None:
        await member.poll(50)
        await asyncio.sleep(0.01)

    await wait_for(condition, timeout, step=step)


def test_two_step_join_then_heartbeats(run: asyncio.Runner) -> None:
    cluster = FakeCluster()

    async def scenario() -> None:
        member, events = _member(cluster, rebalance_timeout_ms=7000)
        assignment = await member.poll()
        assert assignment == PARTITIONS
        assert member.member_id == "m-1"
        assert member.generation_id == 1
        assert member.is_leader
        assert events == [("assigned", PARTITIONS)]
        joins = [(m, t) for _, m, t in cluster.log if isinstance(m, JoinGroupRequest)]
        assert [m.member_id for m, _ in joins] == ["", "m-1"]
        assert {t for _, t in joins} == {7000 + 5000}  # rebalance timeout + 5 s
        await asyncio.sleep(0.3)
        assert len(cluster.requests(HeartbeatRequest)) >= 3
        # Heartbeats have a connection of their own: a parked JoinGroup/SyncGroup never delays them.
        kinds = [{type(m).__name__ for m in t.sent} for t in cluster.transports]
        assert {"HeartbeatRequest"} in kinds
        assert {"JoinGroupRequest", "SyncGroupRequest"} in kinds
        await member.close()
        assert events[-1] == ("revoked", PARTITIONS)
        assert cluster.requests(LeaveGroupRequest)[0].members[0].reason == "the consumer is being closed"  # type: ignore[attr-defined]

    run.run(scenario())


@pytest.mark.parametrize("how", ["not-coordinator", "broker-down"])
def test_coordinator_failover_keeps_the_generation(run: asyncio.Runner, how: str) -> None:
    cluster = FakeCluster()

    async def scenario() -> None:
        member, events = _member(cluster)
        await member.poll()
        assert member.coordinator is not None
        assert member.coordinator.node_id == 1
        cluster.move_coordinator(2)
        if how == "broker-down":
            cluster.fail_node(1)
        await _until(member, lambda: len(cluster.requests(HeartbeatRequest, node=2)) >= 3)
        assert member.coordinator is not None
        assert member.coordinator.node_id == 2
        assert member.generation_id == 1
        assert member.state is MemberState.STABLE
        assert events == [("assigned", PARTITIONS)]
        await member.commit({TopicPartition(TOPIC, 0): 5})
        assert cluster.requests(OffsetCommitRequest, node=2)
        await member.close()

    run.run(scenario())


def test_session_timeout_rediscovers_the_coordinator(run: asyncio.Runner) -> None:
    cluster = FakeCluster()

    async def scenario() -> None:
        member, _ = _member(cluster)
        await member.poll()
        lookups = len(cluster.requests(FindCoordinatorRequest))
        cluster.hang_heartbeats = True
        started = asyncio.get_running_loop().time()
        await _until(member, lambda: len(cluster.requests(FindCoordinatorRequest)) > lookups)
        # Presumed dead only once session.timeout.ms passed without a successful heartbeat.
        assert asyncio.get_running_loop().time() - started >= 0.9
        cluster.hang_heartbeats = False
        beats = len(cluster.requests(HeartbeatRequest))
        await _until(member, lambda: len(cluster.requests(HeartbeatRequest)) > beats + 2)
        assert member.state is MemberState.STABLE
        await member.close()

    run.run(scenario())


def test_max_poll_interval_leaves_then_rejoins_on_next_poll(run: asyncio.Runner) -> None:
    cluster = FakeCluster()

    async def scenario() -> None:
        member, events = _member(cluster, max_poll_interval_ms=400)
        await member.poll()
        # The application stops polling.
        await wait_for(lambda: bool(cluster.requests(LeaveGroupRequest)), 3.0)
        leave = cluster.requests(LeaveGroupRequest)[0]
        assert leave.members[0].member_id == "m-1"  # type: ignore[attr-defined]
        assert leave.members[0].reason == "consumer poll timeout has expired."  # type: ignore[attr-defined]
        assert member.state is MemberState.UNJOINED
        assert member.assignment == PARTITIONS  # nothing is called back until the next poll
        assignment = await member.poll()
        assert assignment == PARTITIONS
        assert member.member_id == "m-2"
        assert events == [("assigned", PARTITIONS), ("lost", PARTITIONS), ("assigned", PARTITIONS)]
        await member.close()

    run.run(scenario())


def test_touch_keeps_a_busy_member_in_the_group(run: asyncio.Runner) -> None:
    cluster = FakeCluster()

    async def scenario() -> None:
        member, _ = _member(cluster, max_poll_interval_ms=300)
        await member.poll()
        for _ in range(10):
            await asyncio.sleep(0.1)
            member.touch()
        assert not cluster.requests(LeaveGroupRequest)
        assert member.state is MemberState.STABLE
        await member.close()

    run.run(scenario())


def test_poll_timeout_returns_while_the_rebalance_continues(run: asyncio.Runner) -> None:
    cluster = FakeCluster()
    cluster.down.add(1)  # the bootstrap broker is unreachable for now

    async def scenario() -> None:
        member, _ = _member(cluster)
        assert await member.poll(100) == frozenset()
        cluster.down.clear()
        await _until(member, lambda: member.assignment == PARTITIONS)
        await member.close()

    run.run(scenario())


def test_async_callbacks_and_callback_errors(run: asyncio.Runner) -> None:
    cluster = FakeCluster()

    async def scenario() -> None:
        seen: list[frozenset[TopicPartition]] = []

        async def assigned(partitions: frozenset[TopicPartition]) -> None:
            await asyncio.sleep(0.01)
            seen.append(partitions)
            raise RuntimeError("boom")

        member = GroupMember(
            GroupMemberConfig(
                bootstrap_servers="fake:1",
                group_id="g",
                topics=[TOPIC],
                session_timeout_ms=1000,
                heartbeat_interval_ms=50,
            ),
            on_partitions_assigned=assigned,
            connector=cluster.connect,
        )
        with pytest.raises(RuntimeError, match="boom"):
            await member.poll()
        # The assignment was adopted before the error surfaced; the next poll carries on.
        assert seen == [PARTITIONS]
        assert await member.poll() == PARTITIONS
        await member.close()

    run.run(scenario())


OLD_BROKER = {
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.OFFSET_COMMIT: 6,
    ApiKey.OFFSET_FETCH: 5,
    ApiKey.METADATA: 3,
}


def test_older_broker_versions(run: asyncio.Runner) -> None:
    """Every request is built for the negotiated version: no MEMBER_ID_REQUIRED before JoinGroup v4,
    single-member LeaveGroup before v3, unbatched FindCoordinator and OffsetFetch."""
    cluster = FakeCluster(versions=OLD_BROKER)

    async def scenario() -> None:
        member, _ = _member(cluster)
        assert await member.poll() == PARTITIONS
        assert [m.member_id for m in cluster.requests(JoinGroupRequest)] == [""]  # type: ignore[attr-defined]
        await member.commit({TopicPartition(TOPIC, 1): 3})
        assert await member.committed([TopicPartition(TOPIC, 1)]) == {TopicPartition(TOPIC, 1): None}
        await member.close()
        leave = cluster.requests(LeaveGroupRequest)[0]
        assert leave.member_id == "m-1"  # type: ignore[attr-defined]

    run.run(scenario())


def test_static_membership_needs_join_group_v5(run: asyncio.Runner) -> None:
    cluster = FakeCluster(versions=OLD_BROKER)

    async def scenario() -> None:
        member, _ = _member(cluster, group_instance_id="static-1")
        with pytest.raises(UnsupportedApiVersionError, match="static membership"):
            await member.poll()
        await member.close()

    run.run(scenario())
