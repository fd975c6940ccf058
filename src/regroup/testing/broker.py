"""``regroup.testing.TestBroker``: a real regroup broker for consumer-application tests.

The broker runs in-process on a background event-loop thread, listens on a free loopback port and keeps its
data in a temporary directory. Any Kafka client connects to :attr:`TestBroker.bootstrap_servers`. Test code
controls it synchronously: every call is marshalled onto the broker's loop and waits for its effect. Groups
— classic and KIP-848 consumer groups — are observed as :class:`~regroup.runtime.group_view.GroupView`, the
view the admin port shows too.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from regroup.broker.config import BrokerConfig
from regroup.broker.topics import create_topic
from regroup.group.history import GenerationRecord
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.runtime.clock import ManualClock
from regroup.runtime.coordinator import GroupCoordinator, PartitionState
from regroup.runtime.group_view import CONSUMER, GroupView, MemberView
from regroup.testing._runner import BrokerRunner
from regroup.testing.clock import VirtualClock
from regroup.testing.faults import Fault, Faults, api_key, error_code

__all__ = ["BrokerError", "GroupView", "MemberView", "TestBroker"]

T = TypeVar("T")

# Settings that make a broker quick to start and convenient for tests; a ``config`` entry overrides them.
TEST_DEFAULTS: Mapping[str, str] = {
    "admin.listener": "",  # no admin HTTP port: parallel test brokers would fight over it
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
    "num.partitions": "1",
    # Consumer (KIP-848) groups: the target assignment follows every epoch bump at once (Kafka 4.3 waits up
    # to 1 s of coordinator time, which a virtual clock would never let pass), and members heartbeat every
    # 500 ms of real time instead of 5 s, so that they learn of revocations and released partitions quickly.
    "group.consumer.assignment.interval.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


class BrokerError(RuntimeError):
    """A control call could not do what it was asked (unknown member, group not rebalanceable, ...)."""


class TestBroker:
    """A regroup broker for tests; use as ``with regroup.testing.TestBroker() as b: ...``.

    ``virtual_clock`` (default True) puts the group coordinator on a :class:`VirtualClock` (``b.clock``)
    that moves only when advanced. ``config`` takes broker settings by their Kafka names and overrides the
    test defaults (one ``__consumer_offsets`` partition, no initial rebalance delay, session timeouts from
    100 ms). ``data_dir`` keeps the data somewhere given (default: a temporary directory removed at stop).
    """

    __test__ = False  # a fixture, not a test class, for pytest modules that import it

    def __init__(
        self,
        *,
        config: Mapping[str, object] | None = None,
        data_dir: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        virtual_clock: bool = True,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="regroup-test-") if data_dir is None else data_dir)
        settings = dict(TEST_DEFAULTS)
        settings.update({k: _render(v) for k, v in (config or {}).items()})
        settings["listeners"] = f"PLAINTEXT://{host}:{port}"
        settings["log.dirs"] = str(self.data_dir)
        self._settings = settings
        self._manual = ManualClock() if virtual_clock else None
        self.clock = VirtualClock(lambda: self.runner, self._manual)
        self.faults = Faults()
        self._runner: BrokerRunner | None = None
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> TestBroker:
        if self._runner is not None:
            raise BrokerError("the broker is already running")
        started = time.perf_counter()
        config = BrokerConfig.load([], {}, list(self._settings.items()))
        runner = BrokerRunner(config, coordinator_clock=self._manual)
        try:
            runner.start()
        except BaseException:
            self._cleanup_dir()
            raise
        self._runner = runner
        self._install()
        self.startup_seconds = time.perf_counter() - started
        return self

    def stop(self) -> None:
        """Stop the broker (a clean shutdown) and remove its temporary data directory."""
        runner, self._runner = self._runner, None
        try:
            if runner is not None:
                runner.stop()
        finally:
            self._cleanup_dir()

    def restart(self) -> None:
        """Stop the broker cleanly and start a new one on the same port with the same data (and, with a
        virtual clock, the same coordinator time); injected faults stay installed."""
        runner = self.runner
        host, port = runner.address
        self._settings["listeners"] = f"PLAINTEXT://{host}:{port}"
        runner.restart(BrokerConfig.load([], {}, list(self._settings.items())))
        self._install()

    def __enter__(self) -> TestBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _install(self) -> None:
        runner = self.runner

        def install() -> None:
            runner.broker.server.interceptor = self.faults

        runner.call(install)
        runner.run(self.coordinator.wait_loaded())

    def _cleanup_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    # ------------------------------------------------------------------------------------ access

    @property
    def runner(self) -> BrokerRunner:
        if self._runner is None:
            raise BrokerError("the broker is not running")
        return self._runner

    @property
    def coordinator(self) -> GroupCoordinator:
        coord = self.runner.broker.group_coordinator
        if not coord.running:
            raise BrokerError("the group coordinator is not running")
        return coord

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for the client's ``bootstrap.servers``."""
        return self.runner.bootstrap

    @property
    def host(self) -> str:
        return self.runner.address[0]

    @property
    def port(self) -> int:
        return self.runner.address[1]

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, object] | None = None
    ) -> None:
        """Create a topic (as CreateTopics would); raises :class:`BrokerError` when it cannot."""
        configs = {k: _render(v) for k, v in (config or {}).items()}

        def create() -> tuple[ErrorCode, str | None]:
            outcome = create_topic(self.runner.broker, name, partitions, -1, configs)
            return outcome.error, outcome.message

        error, message = self.runner.call(create)
        if error is not ErrorCode.NONE:
            raise BrokerError(f"cannot create topic {name!r}: {error.name} {message or ''}".strip())

    # ------------------------------------------------------------------------------------ observations

    def coordinator_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition whose shard coordinates ``group_id``."""
        return self.coordinator.partition_for(group_id)

    def coordinator_state(self, group_id: str) -> str:
        """``"active"``, ``"loading"``, ``"unloading"``, ``"unloaded"`` or ``"failed"``."""
        coord = self.coordinator
        state: PartitionState = self.runner.call(coord.state, coord.partition_for(group_id))
        return state.value

    def group(self, group_id: str) -> GroupView | None:
        """The group's current state, or None when the group does not exist (or its coordinator partition
        is not loaded)."""
        return self.runner.run(self.coordinator.read_group_view(group_id))

    def history(self, group_id: str) -> tuple[GenerationRecord, ...]:
        """The group's completed generations, oldest first, with their causes."""
        view = self.group(group_id)
        return () if view is None else view.history

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets: (topic, partition) -> offset."""
        view = self.group(group_id)
        return {} if view is None else view.committed

    def wait_for_stable(
        self,
        group_id: str,
        members: int | None = None,
        timeout: float = 10.0,
        *,
        generation_after: int | None = None,
    ) -> GroupView:
        """Wait until the group is Stable (with ``members`` members, and a generation — a consumer group's
        group epoch — above ``generation_after`` when given) and return it; raises TimeoutError with the last
        state seen. A consumer group is Stable once its target assignment is at the group epoch and every
        member has reconciled to it (nothing pending revocation, nothing unreleased)."""

        def ready(view: GroupView | None) -> bool:
            return (
                view is not None
                and view.is_stable
                and (members is None or len(view.members) == members)
                and (generation_after is None or view.generation_id > generation_after)
            )

        view = self.wait_for(group_id, ready, timeout, what=f"Stable with {members} members")
        assert view is not None
        return view

    def wait_for(
        self,
        group_id: str,
        predicate: Callable[[GroupView | None], bool],
        timeout: float = 10.0,
        *,
        what: str = "the condition",
    ) -> GroupView | None:
        """Wait until ``predicate(b.group(group_id))`` holds; returns that view."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.group(group_id)
            if predicate(view):
                return view
            if time.monotonic() >= deadline:
                seen = "no such group" if view is None else _describe(view)
                raise TimeoutError(f"group {group_id!r} not {what} within {timeout} s (last seen: {seen})")
            time.sleep(0.01)

    # ------------------------------------------------------------------------------------ forcing

    def expire_member(self, group_id: str, member_id: str) -> None:
        """End a member's session now, as a session timeout would (the group rebalances without it, its
        parked requests and later heartbeats/commits get UNKNOWN_MEMBER_ID). The client is not told until
        it next talks to the coordinator. In a consumer group the member is fenced: removed, the group
        epoch bumped and its partitions reassigned (see :meth:`fence_member`)."""
        self._require_active(group_id)
        if not self.runner.run(self.coordinator.expire_member(group_id, member_id)):
            raise BrokerError(f"group {group_id!r} has no member {member_id!r}")

    def fence_member(self, group_id: str, member_id: str) -> None:
        """Fence a member now, as Kafka does when its session expires: a consumer group removes it, bumps
        the group epoch and gives its partitions to the others; its next ConsumerGroupHeartbeat gets
        UNKNOWN_MEMBER_ID, as Kafka answers a member id it no longer knows, upon which the client drops
        its partitions as lost and rejoins with epoch 0. The same path as :meth:`expire_member`, for classic
        groups too; the ``__group_events`` timeline records the cause as a forced session timeout."""
        self.expire_member(group_id, member_id)

    def expire_rebalance_timeout(self, group_id: str, member_id: str) -> None:
        """Make a consumer-group member's rebalance timeout (``max.poll.interval.ms``, sent as
        RebalanceTimeoutMs) pass now: a member that has been asked to revoke partitions and has not
        acknowledged it yet (state ``unrevoked_partitions``) is fenced by its revocation timer, as Kafka
        fences it — removed, group epoch bumped, its partitions reassigned. Returns once the timer fired and
        its effects are applied. ``BrokerError`` when the member does not exist or has no revocation
        pending (Kafka arms the timer only then)."""
        self._require_active(group_id)
        refused = self.runner.run(self.coordinator.expire_rebalance_timeout(group_id, member_id))
        if refused is not None:
            raise BrokerError(refused)

    def force_rebalance(self, group_id: str, reason: str = "forced by test") -> None:
        """Start a rebalance of a Stable (or CompletingRebalance) group now; its history records
        ``RebalanceForced(reason)`` as the cause. Members learn it from their next heartbeat
        (REBALANCE_IN_PROGRESS) and rejoin."""
        self._require_active(group_id)
        if not self.runner.run(self.coordinator.force_rebalance(group_id, reason)):
            view = self.group(group_id)
            state = "does not exist" if view is None else f"is {view.state}"
            raise BrokerError(f"cannot rebalance group {group_id!r}: it {state}")

    def unload_coordinator(self, group_id: str) -> int:
        """Resign the group's ``__consumer_offsets`` partition: parked requests and every later request for
        its groups get NOT_COORDINATOR until :meth:`load_coordinator`. Returns the partition."""
        partition = self.coordinator_partition(group_id)
        self.runner.run(self.coordinator.unload(partition))
        return partition

    def load_coordinator(self, group_id: str) -> None:
        """Load the group's partition again (replaying its log, re-arming member sessions)."""
        partition = self.coordinator_partition(group_id)
        self.runner.run(self.coordinator.load(partition))

    def move_coordinator(self, group_id: str, *, unavailable_s: float = 0.2, loading_s: float = 0.2) -> None:
        """Move the group's coordinator away and back, as a leadership change on a cluster does: the
        partition is unloaded (NOT_COORDINATOR) for ``unavailable_s``, then coordinator requests for it are
        answered COORDINATOR_LOAD_IN_PROGRESS (heartbeats NONE, as Kafka does) for ``loading_s`` while it
        loads. Blocks until the partition is active again (real time: clients retry meanwhile)."""
        partition = self.unload_coordinator(group_id)
        time.sleep(unavailable_s)
        loading = [
            self.add_fault(
                Fault(
                    api,
                    "fail",
                    None,
                    None,
                    error=ErrorCode.NONE
                    if api is ApiKey.HEARTBEAT
                    else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    matches=lambda g: self.coordinator.partition_for(g) == partition,
                )
            )
            for api in _COORDINATOR_APIS
        ]
        try:
            self.runner.run(self.coordinator.load(partition))
            time.sleep(loading_s)
        finally:
            for fault in loading:
                self.remove_fault(fault)

    def _require_active(self, group_id: str) -> None:
        state = self.coordinator_state(group_id)
        if state != "active":
            raise BrokerError(f"the coordinator partition of group {group_id!r} is {state}")

    # ------------------------------------------------------------------------------------ faults

    def fail_next(
        self,
        api: ApiKey | int | str,
        error: ErrorCode | int | str,
        count: int = 1,
        *,
        group: str | None = None,
    ) -> Fault:
        """Answer the next ``count`` requests of ``api`` (for ``group`` only, when given) with ``error``,
        without handling them: e.g. ``fail_next("OffsetCommit", "REBALANCE_IN_PROGRESS")``. The returned
        :class:`Fault`'s ``fired`` counts the requests it failed."""
        if count < 1:
            raise ValueError("count must be at least 1")
        return self.add_fault(Fault(api_key(api), "fail", group, count, error=error_code(error)))

    def delay(
        self,
        api: ApiKey | int | str,
        seconds: float,
        count: int | None = None,
        *,
        group: str | None = None,
    ) -> Fault:
        """Hold the responses of ``api`` (the next ``count`` requests, or all until removed) for
        ``seconds`` of real time; the requests themselves are handled at once. Responses behind a delayed
        one on the same connection wait too (Kafka answers in request order)."""
        return self.add_fault(Fault(api_key(api), "delay", group, count, seconds=seconds))

    def drop_next(self, api: ApiKey | int | str, count: int = 1, *, group: str | None = None) -> Fault:
        """Close the connection instead of answering the next ``count`` requests of ``api``."""
        return self.add_fault(Fault(api_key(api), "drop", group, count))

    def drop_connections(self, client_id: str | None = None) -> int:
        """Abort the client connections of ``client_id`` (``client.id`` as the client sends it), or all;
        returns how many were dropped. Clients see a disconnect and reconnect."""
        return self.runner.call(self.faults.drop_connections, self.runner.broker.server, client_id)

    def add_fault(self, fault: Fault) -> Fault:
        return self.runner.call(self.faults.add, fault)

    def remove_fault(self, fault: Fault) -> None:
        self.runner.call(self.faults.remove, fault)

    def clear_faults(self) -> None:
        self.runner.call(self.faults.clear)


# Kafka answers a heartbeat to a loading coordinator partition with NONE.
_LOADING_ERRORS = {ApiKey.HEARTBEAT: ErrorCode.NONE}
_COORDINATOR_APIS = (
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
)


def _describe(view: GroupView) -> str:
    members = f"{len(view.members)} members"
    if view.group_type != CONSUMER:
        return f"{view.state}, generation {view.generation_id}, {members}"
    epochs = ", ".join(f"{m.member_id} at {m.member_epoch} {m.member_state}" for m in view.members)
    return (
        f"{view.state}, group epoch {view.group_epoch}, assignment epoch {view.assignment_epoch}, {members}"
        + (f" ({epochs})" if epochs else "")
    )


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
