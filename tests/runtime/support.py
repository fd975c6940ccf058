"""A coordinator runtime on a real LogManager in a tmp dir with a manual clock, plus request builders."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from regroup.group.config import GroupConfig
from regroup.log import LogDefaults, LogManager, PartitionLog, ReadResult
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from regroup.protocol.records.consumer_protocol import ConsumerProtocolSubscription
from regroup.runtime.clock import ManualClock
from regroup.runtime.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator
from regroup.runtime.durability import PartitionGate, WriteGate
from regroup.runtime.shard_runner import WriteBehind

HOST = "/127.0.0.1"


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(topics=sorted(topics)).encode_versioned(0)


class FaultyLog:
    """Delegates to a PartitionLog; the next appends can be made to fail."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.fail_next: list[BaseException] = []
        self.appended = 0

    @property
    def config(self) -> Any:
        return self.plog.config

    @property
    def log_start_offset(self) -> int:
        return self.plog.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.plog.log_end_offset

    def append(self, data: bytes, *, now_ms: int, validate: bool = True) -> object:
        if self.fail_next:
            raise self.fail_next.pop(0)
        self.appended += 1
        return self.plog.append(data, now_ms=now_ms, validate=validate)

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        return self.plog.read(offset, max_bytes)

    def needs_flush(self, now_ms: int) -> bool:
        return self.plog.needs_flush(now_ms)


class SlowFlush:
    """A flush target that blocks (in its worker thread) until released, then fsyncs for real."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = 0
        self.fail: BaseException | None = None

    def flush(self, now_ms: int | None = None) -> None:
        self.calls += 1
        self.started.set()
        assert self.release.wait(30), "the test never released the flush"
        if self.fail is not None:
            raise self.fail
        self.plog.flush(now_ms)


@dataclass
class Env:
    tmp: Path
    clock: ManualClock
    logs: LogManager
    coord: GroupCoordinator
    faulty: dict[int, FaultyLog] = field(default_factory=dict)
    slow: dict[int, SlowFlush] = field(default_factory=dict)

    def plog(self, partition: int = 0) -> PartitionLog:
        plog = self.logs.partition(OFFSETS_TOPIC, partition)
        assert plog is not None
        return plog

    async def settle(self) -> None:
        """Let every lane run until it is idle (timers that came due included)."""
        for _ in range(3):
            await self.coord.idle()
            await asyncio.sleep(0)

    async def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        await self.settle()


def group_config(**overrides: Any) -> GroupConfig:
    settings: dict[str, Any] = {
        "group_initial_rebalance_delay_ms": 0,
        "group_min_session_timeout_ms": 1000,
        "offsets_topic_num_partitions": 1,
    }
    settings.update(overrides)
    return GroupConfig(**settings)


@contextlib.asynccontextmanager
async def coordinator_env(
    tmp: Path,
    *,
    clock: ManualClock | None = None,
    flush_messages: int | None = None,
    slow_flush: bool = False,
    faulty: bool = False,
    load: bool = True,
    config: CoordinatorConfig | None = None,
    write_behind: WriteBehind | None = None,
    **group_overrides: Any,
) -> AsyncIterator[Env]:
    """A started coordinator over ``tmp``/data (re-usable across restarts: same ``tmp``, new env)."""
    clock = clock or ManualClock(1_700_000_000_000)
    props = {} if flush_messages is None else {"log.flush.interval.messages": str(flush_messages)}
    logs = LogManager(tmp / "data", LogDefaults.from_properties(props))
    logs.load(clock.now_ms())
    env = Env(tmp, clock, logs, coord=None)  # type: ignore[arg-type]

    gates: list[PartitionGate] = []

    def gate_for(plog: PartitionLog) -> WriteGate:
        if not slow_flush or not plog.name.startswith(OFFSETS_TOPIC):
            gate = PartitionGate(plog, clock.now_ms)
        else:
            slow = SlowFlush(plog)
            env.slow[int(plog.name.rsplit("-", 1)[1])] = slow
            gate = PartitionGate(slow, clock.now_ms)
        gates.append(gate)
        return gate

    def wrap(partition: int, plog: PartitionLog) -> FaultyLog:
        env.faulty[partition] = wrapper = env.faulty.get(partition) or FaultyLog(plog)
        wrapper.plog = plog
        return wrapper

    cfg = config or CoordinatorConfig()
    cfg = replace(cfg, group=group_config(**group_overrides))
    env.coord = GroupCoordinator(
        logs,
        cfg,
        clock=clock,
        gate_for=gate_for,
        member_id_factory=_counter_ids(),
        wrap_log=wrap if faulty else None,
        write_behind=write_behind,
    )
    await env.coord.start()
    if load:
        await env.coord.wait_loaded()
        await env.settle()
    try:
        yield env
    finally:
        for slow in env.slow.values():
            slow.release.set()
        await env.coord.stop()
        # These gates belong to the caller (as a broker's do): let their thread flushes finish before the
        # logs are flushed and closed here.
        deadline = asyncio.get_running_loop().time() + 30
        while any(gate.busy for gate in gates) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        logs.flush_all()
        logs.close()


def _counter_ids() -> Callable[[str], str]:
    count = 0

    def factory(prefix: str) -> str:
        nonlocal count
        count += 1
        return f"{prefix}-{count}"

    return factory


# ---------------------------------------------------------------------------------------------- requests


def join_request(
    group_id: str,
    member_id: str = "",
    *,
    instance_id: str | None = None,
    protocols: Sequence[tuple[str, bytes]] = (("range", subscription("t")),),
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 20_000,
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
    )


def commit_request(
    group_id: str,
    offsets: Mapping[tuple[str, int], int],
    *,
    generation_id: int = -1,
    member_id: str = "",
    metadata: str = "",
) -> OffsetCommitRequest:
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=metadata
            )
        )
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


@dataclass
class Member:
    member_id: str
    generation_id: int
    leader: str


async def join(coord: GroupCoordinator, req: JoinGroupRequest, version: int = 9) -> JoinGroupResponse:
    return await coord.join_group("client", HOST, version, req)


async def form_group(
    env: Env, group_id: str, count: int = 1, *, instance_ids: Sequence[str | None] | None = None, **kw: Any
) -> list[Member]:
    """Join ``count`` members (dynamic unless instance ids are given), sync, and return them (Stable)."""
    coord = env.coord
    ids = list(instance_ids) if instance_ids is not None else [None] * count
    member_ids: list[str] = []
    for instance in ids:
        if instance is None:
            first = await join(coord, join_request(group_id, **kw))
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
            member_ids.append(first.member_id)
        else:
            member_ids.append("")
    tasks = [
        asyncio.ensure_future(join(coord, join_request(group_id, m, instance_id=i, **kw)))
        for m, i in zip(member_ids, ids, strict=True)
    ]
    await env.settle()
    responses = await asyncio.gather(*tasks)
    assert all(r.error_code == ErrorCode.NONE for r in responses), responses
    members = [Member(r.member_id, r.generation_id, r.leader) for r in responses]
    leader = next(m for m in members if m.member_id == m.leader)
    syncs = [
        asyncio.ensure_future(
            coord.sync_group(
                "client",
                HOST,
                5,
                SyncGroupRequest(
                    group_id=group_id,
                    generation_id=m.generation_id,
                    member_id=m.member_id,
                    group_instance_id=i,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[
                        SyncGroupRequestAssignment(member_id=x.member_id, assignment=x.member_id.encode())
                        for x in members
                    ]
                    if m is leader
                    else [],
                ),
            )
        )
        for m, i in zip(members, ids, strict=True)
    ]
    await env.settle()
    for sync in await asyncio.gather(*syncs):
        assert isinstance(sync, SyncGroupResponse)
        assert sync.error_code == ErrorCode.NONE, sync
    return members


async def heartbeat(
    coord: GroupCoordinator, group_id: str, member: Member, instance_id: str | None = None
) -> HeartbeatResponse:
    return await coord.heartbeat(
        "client",
        HOST,
        4,
        HeartbeatRequest(
            group_id=group_id,
            generation_id=member.generation_id,
            member_id=member.member_id,
            group_instance_id=instance_id,
        ),
    )


async def leave(coord: GroupCoordinator, group_id: str, member_id: str) -> LeaveGroupResponse:
    return await coord.leave_group(
        "client", HOST, 5, LeaveGroupRequest(group_id=group_id, members=[MemberIdentity(member_id=member_id)])
    )


async def commit(coord: GroupCoordinator, req: OffsetCommitRequest, version: int = 9) -> OffsetCommitResponse:
    return await coord.offset_commit("client", HOST, version, req)


def partition_errors(response: OffsetCommitResponse) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


def storage_error() -> KafkaError:
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "injected")
