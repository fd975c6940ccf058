"""The group coordinator service: ``__consumer_offsets`` partitions, their shards and their lanes.

``GroupCoordinator`` creates ``__consumer_offsets`` when it is missing (compacted, internal,
``offsets.topic.num.partitions`` partitions), maps a group to its partition (Kafka's ``partitionFor``), and
runs one :class:`~regroup.runtime.shard_runner.ShardRunner` per partition. Every partition is loaded at
:meth:`GroupCoordinator.start` by replaying its records; :meth:`unload` / :meth:`load` resign and re-elect a
partition on demand (the admin hook Kafka exercises through leadership changes). The rebalance timeline
goes to ``__group_events`` (:mod:`regroup.runtime.events`); :meth:`GroupCoordinator.history_view` serves it.

The request methods answer coordinator-level errors the way Kafka's ``GroupCoordinatorService`` does:
COORDINATOR_NOT_AVAILABLE when the service is not running, COORDINATOR_LOAD_IN_PROGRESS while the
partition loads (a heartbeat gets NONE then, as in Kafka), NOT_COORDINATOR once it is unloaded. Everything
else comes from the shard. Multi-group requests are split by partition and merged in request order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final, TypeVar

from regroup.group.classic_group import GroupSnapshot
from regroup.group.config import GroupConfig
from regroup.group.consumer_group import ConsumerGroup
from regroup.group.consumer_group_manager import rebalance_timeout_key
from regroup.group.context import GroupRequestContext, MemberIdFactory
from regroup.group.history import GenerationRecord
from regroup.group.shard import CoordinatorShard, GroupShard
from regroup.group.topics_image import TopicsImage
from regroup.log import LogManager, PartitionLog
from regroup.protocol.errors import ErrorCode
from regroup.protocol.group_events import assemble_timeline, in_progress_view
from regroup.protocol.messages.consumer_group_describe import DescribedGroup as ConsumerDescribedGroup
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
from regroup.runtime.clock import Clock, SystemClock
from regroup.runtime.durability import PartitionGate, ReplicatedGate, WriteGate
from regroup.runtime.events import GroupEventLog, GroupEventsConfig, started_event
from regroup.runtime.group_view import GroupView, build_group_view
from regroup.runtime.responses import (
    consumer_described_group_error,
    consumer_group_heartbeat_error,
    deletable_group_error,
    described_group_error,
    heartbeat_error,
    join_group_error,
    leave_group_error,
    offset_commit_error,
    offset_delete_error,
    offset_fetch_group_error,
    sync_group_error,
    txn_offset_commit_error,
)
from regroup.runtime.shard_runner import LoadSummary, OffsetsLog, RunnerState, ShardRunner, WriteBehind
from regroup.runtime.topics_image import local_topics_image

__all__ = [
    "OFFSETS_TOPIC",
    "CoordinatorConfig",
    "GroupCoordinator",
    "PartitionState",
    "uuid_member_id",
]

log = logging.getLogger("regroup.coordinator")

OFFSETS_TOPIC: Final = "__consumer_offsets"
T = TypeVar("T")

PartitionState = RunnerState
"""LOADING, ACTIVE, UNLOADING, UNLOADED or FAILED (a partition never loaded reads as UNLOADED)."""

Observer = Callable[[int, object], None]


def uuid_member_id(prefix: str) -> str:
    """Kafka's member ids: ``<client.id or group.instance.id>-<random UUID>``."""
    return sys.intern(f"{prefix}-{uuid.uuid4()}")  # the ids its JoinGroups send back are interned too


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Settings of the coordinator runtime (Kafka's ``group.*`` / ``offsets.*``)."""

    group: GroupConfig = field(default_factory=GroupConfig)
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_topic_compression_codec: int = 0  # 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
    offsets_load_buffer_size: int = 5_242_880
    max_flush_batch: int = 256
    """At most this many events share one fsync when requests keep arriving."""
    offsets_commit_timeout_ms: int | None = 5000
    """A reply still waiting for its fsync after this long gets COORDINATOR_NOT_AVAILABLE."""
    group_events: GroupEventsConfig = field(default_factory=GroupEventsConfig)
    """The ``__group_events`` rebalance timeline (regroup-only)."""

    def topic_configs(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.offsets_topic_segment_bytes),
        }


class GroupCoordinator:
    """Classic and consumer groups and committed offsets, one shard per ``__consumer_offsets`` partition."""

    def __init__(
        self,
        logs: LogManager,
        config: CoordinatorConfig | None = None,
        *,
        clock: Clock | None = None,
        gate_for: Callable[[PartitionLog], WriteGate] | None = None,
        member_id_factory: MemberIdFactory = uuid_member_id,
        wrap_log: Callable[[int, PartitionLog], OffsetsLog] | None = None,
        write_behind: WriteBehind | None = None,
        write_behind_for: Callable[[int], bool] | None = None,
    ) -> None:
        """``write_behind``: lets the writes of a loop step's connection reads share one append per
        partition (the server calls ``begin``/``end`` around each read and holds the replies of a read
        that left a batch open); only where an append needs no replication: on one node, or,
        as ``write_behind_for`` tells per partition, in a cluster where a partition has no other replica
        (its high watermark moves with the leader's append)."""
        self.config = config or CoordinatorConfig()
        self.write_behind = write_behind
        self._write_behind_for = write_behind_for
        self.clock: Clock = clock or SystemClock()
        self._logs = logs
        self._gate_for = gate_for
        self._gates: dict[int, WriteGate] = {}
        self._own_gates: list[PartitionGate] = []  # gates created here (no broker): drained at stop
        self._member_id_factory = member_id_factory
        self._wrap_log = wrap_log
        self._group_config = self.config.group
        self._runners: dict[int, ShardRunner] = {}
        self._epochs: dict[int, int] = {}  # cluster: the leader epoch of each partition's last election
        self.topics_image: Callable[[], TopicsImage] = local_topics_image(logs)
        """The cluster's topics now, for consumer groups (KIP-848); a cluster node's broker replaces it with
        one answered from the metadata image. Cached: rebuilt only when the topics change."""
        self.events_leader: Callable[[int], bool] | None = None
        """In a cluster: whether this node leads a ``__group_events`` partition (set by the broker)."""
        self._observers: list[Observer] = []
        self.group_events: GroupEventLog | None = None
        self._tickets = 0
        self._running = False
        self._stopping: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------------------------ lifecycle

    @property
    def num_partitions(self) -> int:
        return self._group_config.offsets_topic_num_partitions

    @property
    def running(self) -> bool:
        return self._running

    def partition_for(self, group_id: str) -> int:
        return self._group_config.partition_for(group_id)

    async def start(self, *, load_all: bool = True) -> None:
        """Create ``__consumer_offsets`` if needed and start loading every partition (in the background:
        requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile; :meth:`wait_loaded` waits for it).

        ``load_all=False`` (a cluster node): nothing is created or loaded here; partitions are loaded and
        unloaded as this node gains and loses their leadership (:meth:`on_election`,
        :meth:`on_resignation`)."""
        if not load_all:
            if self.config.group_events.enabled and self.group_events is None:
                self.group_events = GroupEventLog(
                    self._logs,
                    self.config.group_events,
                    self.clock,
                    self._new_gate,
                    may_append=self._leads_events_partition,
                )
                self.group_events.start_replicated()
            self._running = True
            return
        info = self._logs.topic(OFFSETS_TOPIC)
        if info is None:
            info = self._logs.create_topic(
                OFFSETS_TOPIC,
                self._group_config.offsets_topic_num_partitions,
                self.config.topic_configs(),
                internal=True,
                now_ms=self.clock.now_ms(),
            )
            log.info("Created %s with %d partitions", OFFSETS_TOPIC, info.partitions)
        elif info.partitions != self._group_config.offsets_topic_num_partitions:
            # As Kafka: the topic's actual partition count decides where groups live.
            log.warning(
                "%s has %d partitions but offsets.topic.num.partitions is %d; using %d",
                OFFSETS_TOPIC,
                info.partitions,
                self._group_config.offsets_topic_num_partitions,
                info.partitions,
            )
            self._group_config = _with_partitions(self._group_config, info.partitions)
        if self.config.group_events.enabled and self.group_events is None:
            self.group_events = GroupEventLog(
                self._logs, self.config.group_events, self.clock, self._new_gate
            )
            self.group_events.start(self.num_partitions)
        self._running = True
        for partition in range(self.num_partitions):
            self._start_runner(partition)
        self._spawn(self._log_loaded())

    async def _log_loaded(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        stats = await self.wait_loaded()
        log.info(
            "Loaded %d/%d partitions of %s (%d records, %d skipped) in %.3f s",
            len(stats),
            self.num_partitions,
            OFFSETS_TOPIC,
            sum(s.records for s in stats),
            sum(s.skipped for s in stats),
            loop.time() - started,
        )

    async def wait_loaded(self) -> list[LoadSummary]:
        """Wait for every partition being loaded; returns the stats of those that loaded."""
        stats: list[LoadSummary] = []
        for partition, runner in list(self._runners.items()):
            try:
                result = await asyncio.shield(runner.start())
            except Exception:
                log.error("Loading %s-%d failed; it answers NOT_COORDINATOR", OFFSETS_TOPIC, partition)
                continue
            if result is not None:
                stats.append(result)
        return stats

    async def load(self, partition: int) -> LoadSummary | None:
        """Become the coordinator of ``partition`` again: replay its log into a fresh shard."""
        self._check_partition(partition)
        if not self._running:
            raise RuntimeError("the coordinator is not running")
        runner = self._runners.get(partition)
        if runner is not None and runner.state in (RunnerState.UNLOADING, RunnerState.FAILED):
            await runner.unload()
        if runner is None or runner.state not in (RunnerState.LOADING, RunnerState.ACTIVE):
            runner = self._start_runner(partition)
        stats = await asyncio.shield(runner.start())
        if stats is not None:
            log.info(
                "Loaded %s-%d: %d records in %.3f s", OFFSETS_TOPIC, partition, stats.records, stats.seconds
            )
        return stats

    async def unload(self, partition: int) -> None:
        """Resign ``partition``: its groups become Dead, parked requests get NOT_COORDINATOR, and every
        later request for its groups gets NOT_COORDINATOR until :meth:`load`."""
        self._check_partition(partition)
        runner = self._runners.get(partition)
        if runner is not None:
            await runner.unload()
            log.info("Unloaded %s-%d", OFFSETS_TOPIC, partition)

    def on_election(
        self,
        partition: int,
        leader_epoch: int,
        *,
        ready: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        """This node became the leader of ``__consumer_offsets-partition`` at ``leader_epoch``: load it
        (once what ``ready()`` returns, called as the load starts, completes), unless a load for this or a
        newer epoch is under way or done (Kafka's ``CoordinatorRuntime.scheduleLoadOperation``)."""
        if not self._running:
            return
        info = self._logs.topic(OFFSETS_TOPIC)
        if info is not None and info.partitions != self.num_partitions:
            self._group_config = _with_partitions(self._group_config, info.partitions)
        if leader_epoch <= self._epochs.get(partition, -1):
            runner = self._runners.get(partition)
            if runner is not None and runner.state in (RunnerState.LOADING, RunnerState.ACTIVE):
                log.info(
                    "Ignoring the election of %s-%d at epoch %d: already loaded",
                    OFFSETS_TOPIC,
                    partition,
                    leader_epoch,
                )
                return
        self._epochs[partition] = leader_epoch
        self._spawn(self._elect(partition, leader_epoch, ready))

    async def _elect(
        self, partition: int, leader_epoch: int, ready: Callable[[], Awaitable[object]] | None
    ) -> None:
        runner = self._runners.get(partition)
        if runner is not None and runner.state is not RunnerState.UNLOADED:
            await runner.unload()
        if self._epochs.get(partition) != leader_epoch or not self._running:
            return  # resigned or re-elected meanwhile
        if self.group_events is not None:
            await self.group_events.replay_partition(partition)
        log.info("Loading %s-%d (leader epoch %d)", OFFSETS_TOPIC, partition, leader_epoch)
        self._start_runner(partition, None if ready is None else ready())

    def _leads_events_partition(self, partition: int) -> bool:
        """In a cluster the timeline is appended where ``__group_events-partition`` is led, which the
        broker tells through ``events_leader``; by default (no such hook) everywhere."""
        return self.events_leader is None or self.events_leader(partition)

    def on_resignation(self, partition: int, leader_epoch: int | None) -> None:
        """This node no longer leads ``__consumer_offsets-partition``: unload it unless it was elected again
        at a newer epoch (``leader_epoch`` None: the topic is gone; Kafka's ``scheduleUnloadOperation``).
        Writes still waiting for replication are answered NOT_COORDINATOR (their outcome is unknown)."""
        current = self._epochs.get(partition)
        if current is not None and leader_epoch is not None and leader_epoch < current:
            return
        self._epochs[partition] = leader_epoch if leader_epoch is not None else current or -1
        gate = self._gates.get(partition)
        if isinstance(gate, ReplicatedGate):
            gate.fail_pending(f"{OFFSETS_TOPIC}-{partition} is now led by another node")
        runner = self._runners.get(partition)
        if runner is not None and runner.state is not RunnerState.UNLOADED:
            log.info("Unloading %s-%d (resigned)", OFFSETS_TOPIC, partition)
            self._spawn(runner.unload())

    def state(self, partition: int) -> PartitionState:
        runner = self._runners.get(partition)
        return RunnerState.UNLOADED if runner is None else runner.state

    def runner(self, partition: int) -> ShardRunner | None:
        return self._runners.get(partition)

    def begin_shutdown(self) -> asyncio.Task[None]:
        """Start resigning every partition (parked requests are answered NOT_COORDINATOR at once)."""
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._stop(), name="regroup coordinator shutdown")
        return self._stopping

    async def stop(self) -> None:
        """Drain every lane (queued requests are handled, parked ones answered NOT_COORDINATOR), wait for
        their replies to be released, cancel timers and background jobs."""
        await self.begin_shutdown()

    async def _stop(self) -> None:
        self._running = False
        runners = list(self._runners.values())
        results = await asyncio.gather(*(r.unload() for r in runners), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.error("Error unloading a coordinator partition", exc_info=result)
        for runner in runners:
            runner.cancel()
        if self.group_events is not None:
            await self.group_events.stop()
        # Gates this coordinator created itself (no broker around): let running fsyncs finish, so the
        # caller may flush and close the logs.
        deadline = asyncio.get_running_loop().time() + 30
        for gate in self._own_gates:
            while gate.busy and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def idle(self) -> None:
        """Wait until every lane is idle with all replies released (a test aid)."""
        for runner in list(self._runners.values()):
            await runner.idle()

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.num_partitions:
            raise ValueError(f"{OFFSETS_TOPIC} has no partition {partition}")

    def _start_runner(self, partition: int, ready: Awaitable[object] | None = None) -> ShardRunner:
        plog = self._logs.partition(OFFSETS_TOPIC, partition)
        if plog is None:
            raise RuntimeError(f"{OFFSETS_TOPIC}-{partition} does not exist")
        gate = self._gates.get(partition)
        if gate is None:
            gate = self._gates[partition] = self._new_gate(plog)
        offsets_log: OffsetsLog = plog if self._wrap_log is None else self._wrap_log(partition, plog)
        runner = ShardRunner(
            partition,
            GroupShard(partition, self._group_config, self._member_id_factory),
            offsets_log,
            gate,
            self.clock,
            compression=self.config.offsets_topic_compression_codec,
            load_buffer_size=self.config.offsets_load_buffer_size,
            max_flush_batch=self.config.max_flush_batch,
            commit_timeout_ms=self.config.offsets_commit_timeout_ms,
            on_notify=self._notify,
            on_failure=self._failed,
            write_behind=(
                self.write_behind
                if self._write_behind_for is None or self._write_behind_for(partition)
                else None
            ),
        )
        self._runners[partition] = runner
        loaded = runner.start(ready)
        loaded.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        return runner

    def _new_gate(self, plog: PartitionLog) -> WriteGate:
        if self._gate_for is not None:
            return self._gate_for(plog)
        own = PartitionGate(plog, self.clock.now_ms)
        self._own_gates.append(own)
        return own

    def _failed(self, partition: int) -> None:
        log.error("%s-%d failed; unloading it (NOT_COORDINATOR until reloaded)", OFFSETS_TOPIC, partition)
        runner = self._runners.get(partition)
        if runner is not None:
            self._spawn(runner.unload())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------------------ observability

    def add_observer(self, observer: Observer) -> None:
        """Call ``observer(partition, event)`` for every Notify event (generation completed/stable, ...)."""
        self._observers.append(observer)

    def _notify(self, partition: int, event: object) -> None:
        if self.group_events is not None:
            self.group_events.observe(event)
        for observer in self._observers:
            observer(partition, event)

    def shard(self, group_id: str) -> CoordinatorShard | None:
        runner = self._runners.get(self.partition_for(group_id))
        return None if runner is None or runner.state is not RunnerState.ACTIVE else runner.shard

    def group_view(self, group_id: str) -> GroupView | None:
        """The group as its shard holds it after the last event the lane handled (None when the group does
        not exist or its partition is not active here)."""
        partition = self.partition_for(group_id)
        runner = self._runners.get(partition)
        if runner is None or runner.state is not RunnerState.ACTIVE:
            return None
        return self._view(partition, runner.shard, group_id)

    def group_views(self) -> list[GroupView]:
        """Every group (classic and consumer) of every active partition, sorted by group id."""
        return sorted(self._iter_views(), key=_view_group_id)

    async def group_views_async(self, *, slice_s: float = 0.005) -> list[GroupView]:
        """:meth:`group_views`, built a few groups at a time, the event loop free every ``slice_s`` in
        between: a view holds a lag entry per committed offset, and a broker holding a million offsets
        would otherwise stop answering for seconds per scrape. Groups are read at slightly different
        moments."""
        loop = asyncio.get_running_loop()
        views: list[GroupView] = []
        deadline = loop.time() + slice_s
        for view in self._iter_views():
            views.append(view)
            if loop.time() >= deadline:
                await asyncio.sleep(0)
                deadline = loop.time() + slice_s
        views.sort(key=_view_group_id)
        return views

    def _iter_views(self) -> Iterator[GroupView]:
        for partition, runner in sorted(self._runners.items()):
            if runner.state is RunnerState.ACTIVE:
                shard = runner.shard
                for group in shard.groups():
                    yield self._build_view(partition, shard, group)
                for consumer_group in shard.consumer_groups():
                    yield self._build_view(partition, shard, consumer_group)

    def _view(self, partition: int, shard: CoordinatorShard, group_id: str) -> GroupView | None:
        snapshot: GroupSnapshot | ConsumerGroup | None = shard.group(group_id)
        if snapshot is None:
            snapshot = shard.consumer_group(group_id)
        return None if snapshot is None else self._build_view(partition, shard, snapshot)

    def _build_view(
        self, partition: int, shard: CoordinatorShard, snapshot: GroupSnapshot | ConsumerGroup
    ) -> GroupView:
        return build_group_view(
            partition,
            shard,
            snapshot,
            self._logs,
            self.topics_image(),
            self._group_config.consumer_session_timeout_ms,
        )

    def consumer_group_states(self) -> list[str]:
        """The state (``Empty``, ``Assigning``, ``Reconciling``, ``Stable``) of every KIP-848 consumer group
        of every active partition."""
        return [
            group.state.value
            for runner in self._runners.values()
            if runner.state is RunnerState.ACTIVE
            for group in runner.shard.consumer_groups()
        ]

    async def read_group_view(self, group_id: str) -> GroupView | None:
        """:meth:`group_view`, read in the lane's turn: after every event queued before it, with their
        replies released."""
        partition = self.partition_for(group_id)
        runner = self._runners.get(partition) if self._running else None
        if runner is None:
            return None

        def view(shard: CoordinatorShard) -> GroupView | None:
            return self._view(partition, shard, group_id)

        return await runner.read(_none, view, scope=(group_id,))

    def group(self, group_id: str) -> GroupSnapshot | None:
        shard = self.shard(group_id)
        return None if shard is None else shard.group(group_id)

    def group_history(self, group_id: str) -> tuple[GenerationRecord, ...]:
        shard = self.shard(group_id)
        return () if shard is None else shard.group_history(group_id)

    def history_view(
        self, group_id: str, now_ms: int | None = None, *, limit: int | None = None
    ) -> dict[str, Any]:
        """``group_id``'s rebalance timeline as a JSON-able dict (the shape of
        :func:`regroup.protocol.group_events.assemble_timeline`, generations oldest first, the last
        ``limit``), including what ``__group_events`` held at start. When this coordinator leads the group
        ``in_progress`` is the live rebalance (awaited members with the time left before each is
        evicted), ``state`` the group's state and ``live`` true; otherwise ``in_progress`` is the last
        persisted unfinished rebalance and ``live`` false."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        events = [] if self.group_events is None else self.group_events.events(group_id)
        view = assemble_timeline(group_id, events, now, limit=limit)
        shard = self.shard(group_id)
        view["live"] = shard is not None
        view["state"] = None
        if shard is not None:
            snapshot = shard.group(group_id) or shard.consumer_group(group_id)
            view["state"] = None if snapshot is None else snapshot.state.value
            started = shard.rebalance_progress(group_id)
            view["in_progress"] = None if started is None else in_progress_view(started_event(started), now)
        return view

    # ------------------------------------------------------------------------------------ forcing (tests)

    async def expire_member(self, group_id: str, member_id: str) -> bool:
        """Expire a member's session now, through the shard's session-expiry path; False when the group has
        no such member or its partition is not active here."""
        runner = self._route(group_id)
        if isinstance(runner, ErrorCode):
            return False
        return await runner.call(_false, runner.shard.expire_member, group_id, member_id, scope=(group_id,))

    async def expire_rebalance_timeout(self, group_id: str, member_id: str) -> str | None:
        """Fire a revoking consumer-group member's rebalance timer now, through the timer path (the member
        is fenced as when it does not revoke in time); returns once it has fired and its effects are
        applied, or why it cannot."""
        runner = self._route(group_id)
        if isinstance(runner, ErrorCode):
            return f"the coordinator of group {group_id!r} is not available ({runner.name})"
        refused = await runner.call(
            _refused, runner.shard.expire_rebalance_timeout, group_id, member_id, scope=(group_id,)
        )
        if not refused:
            key = rebalance_timeout_key(group_id, member_id)
            # Due now: a manual clock hands it to the lane at once, a real one at the next loop iteration.
            # Bounded: a fence whose write fails re-arms the timer after a backoff (Kafka's timer retry).
            loop = asyncio.get_running_loop()
            give_up = loop.time() + 5.0
            while key in runner.shard.armed_timers() and runner.state is RunnerState.ACTIVE:
                if loop.time() > give_up:
                    break
                await asyncio.sleep(0.001)
            await runner.idle()
        return refused or None

    async def force_rebalance(self, group_id: str, reason: str) -> bool:
        """Rebalance a group now with a ``RebalanceForced(reason)`` cause; False when the group is missing,
        Empty or Dead, or its partition is not active here."""
        runner = self._route(group_id)
        if isinstance(runner, ErrorCode):
            return False
        return await runner.call(_false, runner.shard.force_rebalance, group_id, reason, scope=(group_id,))

    # ------------------------------------------------------------------------------------ routing

    def _route(self, group_id: str) -> ShardRunner | ErrorCode:
        """The lane of ``group_id``'s partition, or the coordinator-level error to answer instead."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        runner = self._runners.get(self.partition_for(group_id))
        return ErrorCode.NOT_COORDINATOR if runner is None else runner

    def _read(
        self,
        partition: int,
        reader: Callable[[CoordinatorShard], T],
        error_reply: Callable[[ErrorCode], T],
        scope: tuple[str, ...],
    ) -> asyncio.Future[T]:
        runner = self._runners.get(partition) if self._running else None
        if runner is None:
            fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if not self._running else ErrorCode.NOT_COORDINATOR
            fut.set_result(error_reply(code))
            return fut
        return runner.read(error_reply, reader, scope=scope)

    def _ctx(
        self, client_id: str | None, client_host: str, api_version: int, parkable: bool
    ) -> GroupRequestContext:
        ticket = 0
        if parkable:
            self._tickets += 1
            ticket = self._tickets
        return GroupRequestContext(client_id or "", client_host, api_version, ticket)

    def _by_partition(self, group_ids: Sequence[str]) -> dict[int, list[int]]:
        """Indexes of ``group_ids`` grouped by partition, in request order."""
        out: dict[int, list[int]] = {}
        for i, group_id in enumerate(group_ids):
            out.setdefault(self.partition_for(group_id), []).append(i)
        return out

    # ------------------------------------------------------------------------------------ group APIs
    # Each routes the request to the lane of its group's partition, where the shard method named in the
    # ``runner.call`` handles it (``runner.shard`` is a :class:`~regroup.group.shard.CoordinatorShard`).
    # They return the lane's future, already done when the lane answered at once (see ShardRunner.call),
    # so a handler can write the response in the same loop step.

    def join_group(
        self, client_id: str | None, client_host: str, api_version: int, req: JoinGroupRequest
    ) -> asyncio.Future[JoinGroupResponse]:
        error = partial(join_group_error, req, api_version)
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(error(runner))
        ctx = self._ctx(client_id, client_host, api_version, True)
        # The topics: a classic member of a consumer group subscribes by name (§9 online migration).
        join = partial(runner.shard.join_group, topics=self.topics_image())
        return runner.call(error, join, ctx, req, ticket=ctx.ticket, scope=(req.group_id,))

    def sync_group(
        self, client_id: str | None, client_host: str, api_version: int, req: SyncGroupRequest
    ) -> asyncio.Future[SyncGroupResponse]:
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(sync_group_error(runner))
        ctx = self._ctx(client_id, client_host, api_version, True)
        sync = partial(runner.shard.sync_group, topics=self.topics_image())
        return runner.call(sync_group_error, sync, ctx, req, ticket=ctx.ticket, scope=(req.group_id,))

    def heartbeat(
        self, client_id: str | None, client_host: str, api_version: int, req: HeartbeatRequest
    ) -> asyncio.Future[HeartbeatResponse]:
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(heartbeat_error(runner))
        ctx = self._ctx(client_id, client_host, api_version, False)
        return runner.call(_heartbeat_error, runner.shard.heartbeat, ctx, req, scope=(req.group_id,))

    def leave_group(
        self, client_id: str | None, client_host: str, api_version: int, req: LeaveGroupRequest
    ) -> asyncio.Future[LeaveGroupResponse]:
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(leave_group_error(runner))
        ctx = self._ctx(client_id, client_host, api_version, False)
        leave = partial(runner.shard.leave_group, topics=self.topics_image())
        return runner.call(leave_group_error, leave, ctx, req, scope=(req.group_id,))

    def consumer_group_heartbeat(
        self,
        client_id: str | None,
        client_host: str,
        api_version: int,
        req: ConsumerGroupHeartbeatRequest,
    ) -> asyncio.Future[ConsumerGroupHeartbeatResponse]:
        """KIP-848 join / heartbeat / leave, with the current topic metadata."""
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(consumer_group_heartbeat_error(runner))
        ctx = self._ctx(client_id, client_host, api_version, False)
        return runner.call(
            consumer_group_heartbeat_error,
            runner.shard.consumer_group_heartbeat,
            ctx,
            req,
            self.topics_image(),
            scope=(req.group_id,),
        )

    def offset_commit(
        self,
        client_id: str | None,
        client_host: str,
        api_version: int,
        req: OffsetCommitRequest,
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> asyncio.Future[OffsetCommitResponse]:
        """``req`` holds only the partitions that passed the broker's checks; ``topic_ids`` maps their topic
        names to ids (stored with the offsets, as Kafka 4.3 does)."""
        error = partial(offset_commit_error, req)
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(error(runner))
        ctx = self._ctx(client_id, client_host, api_version, False)
        return runner.call(
            error, runner.shard.offset_commit, ctx, req, topic_ids or {}, scope=(req.group_id,)
        )

    def txn_offset_commit(
        self, client_id: str | None, client_host: str, api_version: int, req: TxnOffsetCommitRequest
    ) -> asyncio.Future[TxnOffsetCommitResponse]:
        error = partial(txn_offset_commit_error, req, api_version)
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(error(runner))
        ctx = self._ctx(client_id, client_host, api_version, False)
        return runner.call(error, runner.shard.txn_offset_commit, ctx, req, scope=(req.group_id,))

    def offset_delete(
        self, api_version: int, req: OffsetDeleteRequest
    ) -> asyncio.Future[OffsetDeleteResponse]:
        runner = self._route(req.group_id)
        if isinstance(runner, ErrorCode):
            return _answered(offset_delete_error(runner))
        ctx = self._ctx(None, "", api_version, False)
        return runner.call(offset_delete_error, runner.shard.offset_delete, ctx, req, scope=(req.group_id,))

    async def offset_fetch(
        self,
        groups: Sequence[tuple[str, Sequence[tuple[str, Sequence[int]]] | None]],
        require_stable: bool,
        api_version: int,
        members: Sequence[tuple[str | None, int]] | None = None,
    ) -> list[OffsetFetchResponseGroup]:
        """One v8+ group struct per requested group, in request order (``None`` topics: all committed).
        ``members``: per group, v9's member id and epoch (checked against consumer groups' members)."""
        ids = [g for g, _ in groups]
        who = list(members) if members is not None else [(None, -1)] * len(groups)
        out: list[OffsetFetchResponseGroup | None] = [None] * len(groups)
        waits: list[tuple[list[int], asyncio.Future[list[OffsetFetchResponseGroup]]]] = []
        for partition, indexes in self._by_partition(ids).items():
            wanted = [groups[i] for i in indexes]
            wanted_members = [who[i] for i in indexes]

            def fetch(
                shard: CoordinatorShard,
                wanted: list[tuple[str, Sequence[tuple[str, Sequence[int]]] | None]] = wanted,
                wanted_members: list[tuple[str | None, int]] = wanted_members,
            ) -> list[OffsetFetchResponseGroup]:
                return [
                    shard.offset_fetch(g, t, require_stable, api_version, member_id, member_epoch)
                    for (g, t), (member_id, member_epoch) in zip(wanted, wanted_members, strict=True)
                ]

            def error(
                code: ErrorCode, wanted: list[tuple[str, Sequence[tuple[str, Sequence[int]]] | None]] = wanted
            ) -> list[OffsetFetchResponseGroup]:
                return [offset_fetch_group_error(g, code) for g, _ in wanted]

            waits.append((indexes, self._read(partition, fetch, error, tuple(g for g, _ in wanted))))
        for indexes, fut in waits:
            for i, group in zip(indexes, await fut, strict=True):
                out[i] = group
        return [g for g in out if g is not None]

    async def consumer_group_describe(
        self, group_ids: Sequence[str], api_version: int
    ) -> list[ConsumerDescribedGroup]:
        """One ConsumerGroupDescribe entry per group id, in request order."""
        out: list[ConsumerDescribedGroup | None] = [None] * len(group_ids)
        waits: list[tuple[list[int], asyncio.Future[list[ConsumerDescribedGroup]]]] = []
        topics = self.topics_image()
        for partition, indexes in self._by_partition(group_ids).items():
            wanted = [group_ids[i] for i in indexes]

            def describe(shard: CoordinatorShard, wanted: list[str] = wanted) -> list[ConsumerDescribedGroup]:
                return [shard.consumer_group_describe(g, api_version, topics) for g in wanted]

            def error(code: ErrorCode, wanted: list[str] = wanted) -> list[ConsumerDescribedGroup]:
                return [consumer_described_group_error(g, code) for g in wanted]

            waits.append((indexes, self._read(partition, describe, error, tuple(wanted))))
        for indexes, fut in waits:
            for i, group in zip(indexes, await fut, strict=True):
                out[i] = group
        return [g for g in out if g is not None]

    async def describe_groups(self, group_ids: Sequence[str], api_version: int) -> list[DescribedGroup]:
        out: list[DescribedGroup | None] = [None] * len(group_ids)
        waits: list[tuple[list[int], asyncio.Future[list[DescribedGroup]]]] = []
        for partition, indexes in self._by_partition(group_ids).items():
            wanted = [group_ids[i] for i in indexes]

            def describe(shard: CoordinatorShard, wanted: list[str] = wanted) -> list[DescribedGroup]:
                return [shard.describe_group(g, api_version) for g in wanted]

            def error(code: ErrorCode, wanted: list[str] = wanted) -> list[DescribedGroup]:
                return [described_group_error(g, code) for g in wanted]

            waits.append((indexes, self._read(partition, describe, error, tuple(wanted))))
        for indexes, fut in waits:
            for i, group in zip(indexes, await fut, strict=True):
                out[i] = group
        return [g for g in out if g is not None]

    async def list_groups(
        self, states_filter: Sequence[str] = (), types_filter: Sequence[str] = ()
    ) -> tuple[ErrorCode, list[ListedGroup]]:
        """Every group of every partition this coordinator leads; COORDINATOR_LOAD_IN_PROGRESS (and no
        groups) while any partition loads, as Kafka fails the whole request then."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        runners = [self._runners[p] for p in sorted(self._runners)]
        if any(r.state is RunnerState.LOADING for r in runners):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []

        def list_shard(shard: CoordinatorShard) -> tuple[ErrorCode, list[ListedGroup]]:
            return ErrorCode.NONE, shard.list_groups(states_filter, types_filter)

        def not_listed(code: ErrorCode) -> tuple[ErrorCode, list[ListedGroup]]:
            return code, []

        waits = [r.read(not_listed, list_shard) for r in runners if r.state is RunnerState.ACTIVE]
        groups: list[ListedGroup] = []
        for fut in waits:
            code, listed = await fut
            if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return code, []
            groups.extend(listed)  # NOT_COORDINATOR: resigned meanwhile, skipped as Kafka does
        return ErrorCode.NONE, groups

    async def on_partitions_deleted(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Deleted topic partitions lose their committed offsets in every group, tombstones written (Kafka's
        ``GroupCoordinator.onPartitionsDeleted``, run when a topic deletion reaches the metadata image)."""
        calls = [
            runner.call(_none, runner.shard.on_partitions_deleted, partitions)
            for runner in list(self._runners.values())
            if runner.state is RunnerState.ACTIVE
        ]
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.warning("dropping offsets of deleted partitions failed: %s", outcome)

    async def delete_groups(self, group_ids: Sequence[str]) -> list[DeletableGroupResult]:
        """``group_ids`` deduplicated by the caller; results in request order."""
        out: list[DeletableGroupResult | None] = [None] * len(group_ids)
        waits: list[tuple[list[int], asyncio.Future[list[DeletableGroupResult]]]] = []
        for indexes in self._by_partition(group_ids).values():
            wanted = [group_ids[i] for i in indexes]

            def error(code: ErrorCode, wanted: list[str] = wanted) -> list[DeletableGroupResult]:
                return [deletable_group_error(g, code) for g in wanted]

            runner = self._route(wanted[0])
            if isinstance(runner, ErrorCode):
                fut: asyncio.Future[list[DeletableGroupResult]] = asyncio.get_running_loop().create_future()
                fut.set_result(error(runner))
            else:
                fut = runner.call(error, runner.shard.delete_groups, wanted, scope=tuple(wanted))
            waits.append((indexes, fut))
        for indexes, fut in waits:
            for i, result in zip(indexes, await fut, strict=True):
                out[i] = result
        return [r for r in out if r is not None]


def _answered(response: T) -> asyncio.Future[T]:
    """A future already holding ``response`` (a coordinator-level error answered without the lane)."""
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    fut.set_result(response)
    return fut


def _heartbeat_error(code: ErrorCode) -> HeartbeatResponse:
    # Kafka's GroupCoordinatorService answers a heartbeat to a loading partition with NONE.
    if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        code = ErrorCode.NONE
    return heartbeat_error(code)


def _false(_code: ErrorCode) -> bool:
    return False


def _refused(code: ErrorCode) -> str:
    return f"the coordinator is not available ({code.name})"


def _none(_code: ErrorCode) -> None:
    return None


def _with_partitions(config: GroupConfig, partitions: int) -> GroupConfig:
    return replace(config, offsets_topic_num_partitions=partitions)


def _view_group_id(view: GroupView) -> str:
    return view.group_id
