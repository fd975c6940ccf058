"""Simulated consumer-group members: many :class:`~regroup.client.membership.Membership` state machines
driven from one event loop.

Each :class:`SimMember` behaves like a Java consumer that polls continuously: it (re)joins whenever its
state machine asks for it (JoinGroup, the leader's range assignment, SyncGroup on a join lane) and
heartbeats at ``heartbeat.interval.ms`` on a shared pipelined connection, with event-loop timers instead of
a thread or task per member. The :class:`Fleet` holds the connections, the clock and the counters;
the :class:`RebalanceTracker` turns join and sync responses into completed rebalances.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from regroup.bench.groups.wire import JoinLanes, Versions, Wire, connect
from regroup.client.assignors import RangeAssignor
from regroup.client.connection import parse_bootstrap_servers
from regroup.client.errors import FencedInstanceIdError
from regroup.client.membership import (
    Membership,
    MembershipConfig,
    MemberState,
    RebalanceAbortedError,
)
from regroup.client.requests import (
    CoordinatorAnswer,
    find_coordinator_request,
    leave_group_request,
    offset_fetch_request,
    read_find_coordinator,
    read_leave_group,
    read_offset_fetch,
)
from regroup.client.types import TopicPartition
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.message import Message
from regroup.protocol.messages.find_coordinator import FindCoordinatorResponse
from regroup.protocol.messages.heartbeat import HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchResponse
from regroup.protocol.messages.sync_group import SyncGroupResponse

__all__ = [
    "TOPIC",
    "Fleet",
    "FleetMember",
    "ObservedGeneration",
    "RebalanceTracker",
    "Route",
    "SimMember",
    "open_fleet",
]

TOPIC = "bench-topic"  # what members subscribe to unless a scenario creates a topic of its own
_RETRY_COORDINATOR = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
)


@dataclass(slots=True)
class ObservedGeneration:
    """What the members saw of one generation of one group (times on ``time.perf_counter``)."""

    group_id: str
    generation_id: int
    first_join_sent: float
    expected: frozenset[str] | None = None
    # When the leader got its JoinGroup response: the end of the join phase.
    leader_joined_at: float | None = None
    synced: dict[str, float] = field(default_factory=dict)
    completed_at: float | None = None

    @property
    def size(self) -> int:
        return len(self.expected) if self.expected is not None else 0

    @property
    def duration(self) -> float | None:
        """First JoinGroup answered with this generation → last SyncGroup response of it."""
        return None if self.completed_at is None else self.completed_at - self.first_join_sent


class RebalanceTracker:
    """Generations per group; one is complete when every member the leader was given has synced it."""

    def __init__(self) -> None:
        self.generations: dict[tuple[str, int], ObservedGeneration] = {}
        self.listeners: list[Callable[[ObservedGeneration], None]] = []

    def _record(self, group_id: str, generation_id: int, sent: float) -> ObservedGeneration:
        key = (group_id, generation_id)
        rec = self.generations.get(key)
        if rec is None:
            rec = self.generations[key] = ObservedGeneration(group_id, generation_id, sent)
        elif sent < rec.first_join_sent:
            rec.first_join_sent = sent
        return rec

    def on_join(self, group_id: str, generation_id: int, sent: float, members: Sequence[str] | None) -> None:
        rec = self._record(group_id, generation_id, sent)
        if members is not None and rec.expected is None:
            rec.expected = frozenset(members)
            rec.leader_joined_at = time.perf_counter()
            self._check(rec)

    def on_sync(self, group_id: str, generation_id: int, member_id: str, sent: float) -> None:
        rec = self._record(group_id, generation_id, sent)
        rec.synced[member_id] = time.perf_counter()
        self._check(rec)

    def _check(self, rec: ObservedGeneration) -> None:
        if rec.completed_at is not None or rec.expected is None:
            return
        if rec.expected.issubset(rec.synced):
            rec.completed_at = max(rec.synced[m] for m in rec.expected)
            for listener in self.listeners:
                listener(rec)


class FleetMember(Protocol):
    """What the fleet needs of a member, classic (:class:`SimMember`) or consumer-protocol
    (:class:`regroup.bench.groups.consumer.ConsumerMember`): where to send, and how to stop."""

    index: int
    wire: Wire
    lanes: JoinLanes

    @property
    def group_id(self) -> str: ...

    def on_coordinator(self, answer: CoordinatorAnswer, now_ms: int) -> None:
        """FindCoordinator named the group's coordinator (the member's wire is already routed)."""

    def stop(self) -> None: ...


@dataclass(slots=True)
class Route:
    """The connections to one broker: shared pipelined ones and join lanes."""

    fast: list[Wire]
    lanes: JoinLanes

    def wire_for(self, index: int) -> Wire:
        return self.fast[index % len(self.fast)]


class Fleet:
    """Connections and bookkeeping shared by the simulated members.

    Each member talks to its group's coordinator: the bootstrap broker's connections serve until
    FindCoordinator names another broker, whose connections (as many shared ones as the bootstrap's, and
    a join lane per member it coordinates) are opened then, before anything is timed.
    """

    def __init__(self, host: str, port: int, versions: Versions, fast: list[Wire], lanes: JoinLanes) -> None:
        self.host = host
        self.port = port
        self.versions = versions
        self.fast = fast
        self.lanes = lanes
        self.tracker = RebalanceTracker()
        self.errors: collections.Counter[str] = collections.Counter()
        # Per group: consumer-protocol member state changes (epoch, assignment, acknowledgement).
        self.changes: collections.Counter[str] = collections.Counter()
        self.first_join_sent: float | None = None
        # At most this many join lanes per broker (None: one per member routed there); a scenario that sets
        # it forms its groups a few at a time.
        self.lane_limit: int | None = None
        self.members: list[FleetMember] = []
        self.by_group: dict[str, list[FleetMember]] = {}
        self.bootstrap_route = Route(fast, lanes)
        self._routes: dict[tuple[str, int], Route] = {(host, port): self.bootstrap_route}
        self._routed: dict[tuple[str, int], set[int]] = {}
        self._loop = asyncio.get_running_loop()

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    @property
    def join_lanes(self) -> int:
        """Join lanes open to all brokers."""
        return sum(route.lanes.size for route in self._routes.values())

    @property
    def routes(self) -> int:
        """How many brokers the members talk to."""
        return len(self._routed) or 1

    async def _route(self, host: str, port: int) -> Route:
        route = self._routes.get((host, port))
        if route is None:
            fast = [
                await connect(host, port, self.versions, client_id=f"bench-{port}-{i}")
                for i in range(len(self.fast))
            ]
            route = self._routes[(host, port)] = Route(fast, JoinLanes(host, port, self.versions))
        return route

    async def route_group(self, group_id: str, host: str, port: int) -> None:
        """Send ``group_id``'s members' requests to ``host:port``, its coordinator."""
        members = self.by_group.get(group_id, ())
        if not members:
            return
        route = await self._route(host, port)
        routed = self._routed.setdefault((host, port), set())
        routed.update(m.index for m in members)
        wanted = len(routed) if self.lane_limit is None else min(len(routed), self.lane_limit)
        await route.lanes.grow(max(route.lanes.size, wanted))
        for m in members:
            m.wire = route.wire_for(m.index)
            m.lanes = route.lanes

    def count_error(self, exc: BaseException | ErrorCode) -> None:
        if isinstance(exc, ErrorCode):
            self.errors[exc.name] += 1
        elif isinstance(exc, KafkaError):
            self.errors[exc.code.name] += 1
        else:
            self.errors[type(exc).__name__] += 1

    async def coordinators(
        self, group_ids: Iterable[str], timeout: float = 120.0
    ) -> dict[str, CoordinatorAnswer]:
        """FindCoordinator for every group until each has one (Kafka creates ``__consumer_offsets`` on
        the first lookup, which takes a while)."""
        found: dict[str, CoordinatorAnswer] = {}
        pending = sorted(set(group_ids))
        version = self.versions[ApiKey.FIND_COORDINATOR]
        deadline = time.monotonic() + timeout
        while pending:
            wire = self.fast[0]
            answers = await asyncio.gather(
                *(wire.call(find_coordinator_request(version, g), FindCoordinatorResponse) for g in pending)
            )
            retry = []
            for group_id, resp in zip(pending, answers, strict=True):
                answer = read_find_coordinator(version, resp)
                if answer.error in _RETRY_COORDINATOR:
                    retry.append(group_id)
                elif answer.error is not ErrorCode.NONE:
                    raise KafkaError(answer.error, f"FindCoordinator for {group_id}")
                else:
                    found[group_id] = answer
            pending = retry
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no coordinator for {len(pending)} groups within {timeout:g}s")
                await asyncio.sleep(0.1)
        return found

    async def find_coordinators(self, group_ids: Iterable[str], timeout: float = 120.0) -> None:
        """Route every group's members to its coordinator (:meth:`coordinators`), once it has loaded."""
        deadline = time.monotonic() + timeout
        found = await self.coordinators(group_ids, timeout)
        for group_id, answer in found.items():
            await self.route_group(group_id, answer.host, answer.port)
            for m in self.by_group.get(group_id, ()):
                m.on_coordinator(answer, self.now_ms())
        await self._await_loaded(found, deadline)

    async def _await_loaded(self, group_ids: Iterable[str], deadline: float) -> None:
        """Kafka names the coordinator as soon as the ``__consumer_offsets`` partition has a leader, and
        answers COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR until it has loaded it: wait for that, so
        that no scenario times the load."""
        pending = sorted(set(group_ids))
        version = self.versions[ApiKey.OFFSET_FETCH]
        probe = [TopicPartition(TOPIC, 0)]
        while pending:
            answers = await asyncio.gather(
                *(
                    self._group_wire(g).call(
                        offset_fetch_request(version, g, probe, False), OffsetFetchResponse
                    )
                    for g in pending
                )
            )
            retry = []
            for group_id, resp in zip(pending, answers, strict=True):
                error, _ = read_offset_fetch(version, resp, group_id)
                if error in _RETRY_COORDINATOR:
                    retry.append(group_id)
            pending = retry
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the coordinator of {len(pending)} groups did not load in time")
                await asyncio.sleep(0.1)

    def _group_wire(self, group_id: str) -> Wire:
        """A connection to ``group_id``'s coordinator (as routed), else to the bootstrap broker."""
        members = self.by_group.get(group_id)
        return members[0].wire if members else self.fast[0]

    def close(self) -> None:
        for m in self.members:
            m.stop()
        for route in self._routes.values():
            for wire in route.fast:
                wire.close()
            route.lanes.close()


async def open_fleet(bootstrap: str, connections: int, join_lanes: int) -> Fleet:
    """Connect ``connections`` shared pipelined connections and ``join_lanes`` join lanes."""
    host, port = parse_bootstrap_servers(bootstrap)[0]
    first = await connect(host, port, client_id="bench-0")
    fast = [first]
    for i in range(1, max(1, connections)):
        fast.append(await connect(host, port, first.versions, client_id=f"bench-{i}"))
    lanes = JoinLanes(host, port, first.versions)
    await lanes.grow(join_lanes)
    return Fleet(host, port, first.versions, fast, lanes)


class SimMember:
    """One consumer-group member; see the module docstring."""

    def __init__(
        self,
        fleet: Fleet,
        index: int,
        config: MembershipConfig,
        partitions: int,
    ) -> None:
        self.fleet = fleet
        self.index = index
        self.membership = Membership(config, [RangeAssignor()], fleet.now_ms())
        self.wire = fleet.bootstrap_route.wire_for(index)
        self.lanes = fleet.lanes
        self.topic = min(config.topics)
        self.partition_count = partitions
        self.partitions = {self.topic: partitions}
        self.heartbeats = True
        self.stopped = False
        self.fatal: BaseException | None = None
        # Set whenever a SyncGroup completes a (re)join.
        self.synced = asyncio.Event()
        self._join_task: asyncio.Task[None] | None = None
        self._hb_timer: asyncio.TimerHandle | None = None
        self._hb_in_flight = False
        self._last_join_sent = 0.0
        fleet.members.append(self)
        fleet.by_group.setdefault(config.group_id, []).append(self)

    @property
    def group_id(self) -> str:
        return self.membership.group_id

    @property
    def member_id(self) -> str:
        return self.membership.generation.member_id

    @property
    def generation_id(self) -> int:
        return self.membership.generation.generation_id

    @property
    def stable(self) -> bool:
        m = self.membership
        return m.state is MemberState.STABLE and not m.rejoin_needed

    # ------------------------------------------------------------------------------------- joining

    def start(self) -> None:
        """Join (or rejoin) if the state machine asks for it and no join is under way."""
        if self.stopped or self.fatal is not None:
            return
        if self._join_task is None and self.membership.rejoin_needed_or_pending():
            self._join_task = asyncio.get_running_loop().create_task(self._join_loop())

    async def _join_loop(self) -> None:
        m = self.membership
        fleet = self.fleet
        try:
            while not self.stopped and m.rejoin_needed_or_pending():
                if m.coordinator is None:
                    await fleet.find_coordinators([self.group_id])
                if m.needs_join_prepare:
                    m.finish_join_prepare(m.begin_join_prepare())
                request, sent = m.join_request()
                self._last_join_sent = time.perf_counter()
                if fleet.first_join_sent is None:
                    fleet.first_join_sent = self._last_join_sent
                try:
                    resp = await self.lanes.call(request, JoinGroupResponse)
                    outcome = m.on_join_response(resp, sent, fleet.now_ms())
                    members = [x.member_id for x in outcome.members] if outcome.is_leader else None
                    fleet.tracker.on_join(
                        self.group_id, outcome.generation.generation_id, self._last_join_sent, members
                    )
                    self._schedule_heartbeat()
                    assignments: dict[str, bytes] = {}
                    if outcome.is_leader:
                        subscriptions = m.leader_subscriptions(outcome.members)
                        assignments = m.perform_assignment(outcome, subscriptions, self.partitions)
                    sync, sent = m.sync_request(assignments)
                    sync_resp = await self.lanes.call(sync, SyncGroupResponse)
                    assignment = m.on_sync_response(sync_resp, sent)
                except (KafkaError, RebalanceAbortedError, ConnectionError) as exc:
                    if not (isinstance(exc, KafkaError) and exc.code is ErrorCode.MEMBER_ID_REQUIRED):
                        fleet.count_error(exc)
                    action = m.failure_action(exc)
                    if action == "raise":
                        self.fatal = exc
                        return
                    if action == "backoff":
                        await asyncio.sleep(m.rebalance_backoff_ms() / 1000)
                    continue
                if m.generation.is_reset or m.state is not MemberState.STABLE:
                    m.reset_state_and_rejoin("the generation changed before the assignment arrived", True)
                    continue
                m.finish_join_complete(m.begin_join_complete(assignment))
                self.synced.set()
                fleet.tracker.on_sync(
                    self.group_id, m.generation.generation_id, self.member_id, self._last_join_sent
                )
                self._schedule_heartbeat()
        finally:
            self._join_task = None

    def on_coordinator(self, answer: CoordinatorAnswer, now_ms: int) -> None:
        self.membership.on_find_coordinator(answer, now_ms)

    def know_coordinator(self, other: SimMember) -> None:
        """Take the coordinator ``other`` found (the same group on a single node)."""
        node = other.membership.coordinator
        if node is not None:
            answer = CoordinatorAnswer(ErrorCode.NONE, node.node_id, node.host, node.port, None)
            self.membership.on_find_coordinator(answer, self.fleet.now_ms())

    # ------------------------------------------------------------------------------------ heartbeats

    def _schedule_heartbeat(self) -> None:
        if not self.heartbeats or self.stopped or self._hb_timer is not None or self._hb_in_flight:
            return
        m = self.membership
        if not m.heartbeat_enabled():
            return
        delay = m.time_to_next_heartbeat(self.fleet.now_ms()) / 1000
        self._hb_timer = asyncio.get_running_loop().call_later(delay, self._heartbeat_due)

    def _heartbeat_due(self) -> None:
        self._hb_timer = None
        m = self.membership
        if self.stopped or not self.heartbeats or not m.heartbeat_enabled():
            return
        now = self.fleet.now_ms()
        if not m.should_heartbeat(now):
            self._schedule_heartbeat()
            return
        request, sent = m.heartbeat_request(now)
        self._hb_in_flight = True

        def done(result: Message | BaseException, _rtt: float) -> None:
            self._hb_in_flight = False
            if self.stopped:
                return
            now = self.fleet.now_ms()
            if isinstance(result, BaseException) or not isinstance(result, HeartbeatResponse):
                self.fleet.count_error(result if isinstance(result, BaseException) else TypeError())
                m.heartbeat_failed(now)
            else:
                try:
                    error = m.on_heartbeat_response(result, sent, now)
                except FencedInstanceIdError as exc:
                    self.fleet.count_error(exc)
                    self.fatal = exc
                    return
                if error is not ErrorCode.NONE:
                    self.fleet.count_error(error)
            if m.rejoin_needed:
                self.start()
            self._schedule_heartbeat()

        self.wire.send(request, done)

    def set_heartbeats(self, enabled: bool) -> None:
        """Start or stop the member's own heartbeats (benchmarks that send heartbeats themselves stop
        them)."""
        self.heartbeats = enabled
        if enabled:
            self._schedule_heartbeat()
        elif self._hb_timer is not None:
            self._hb_timer.cancel()
            self._hb_timer = None

    # --------------------------------------------------------------------------------------- leaving

    def stop(self) -> None:
        """Vanish without a word, as a crashed or restarting process does."""
        self.stopped = True
        if self._hb_timer is not None:
            self._hb_timer.cancel()
            self._hb_timer = None
        if self._join_task is not None:
            self._join_task.cancel()
            self._join_task = None

    async def leave(self) -> ErrorCode | None:
        """Java's ``close()``: LeaveGroup for a dynamic member that joined, then stop."""
        sent = self.membership.leave_group()
        self.stop()
        if sent is None:
            return None
        version = self.fleet.versions[ApiKey.LEAVE_GROUP]
        request = leave_group_request(version, self.group_id, sent.member_id, None, "bench churn")
        with contextlib.suppress(ConnectionError):
            return read_leave_group(await self.wire.call(request, LeaveGroupResponse))
        return None
