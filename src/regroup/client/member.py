"""``GroupMember``: an asyncio consumer-group member, behaving as Java's ``ConsumerCoordinator``.

The membership logic lives in :class:`regroup.client.membership.Membership` (sans-I/O); this module
owns the sockets, the tasks and the clock:

- ``poll()`` runs the rebalance — coordinator discovery, the two-step JoinGroup (MEMBER_ID_REQUIRED),
  the leader's assignment (Metadata + assignor), SyncGroup and the rebalance callbacks — in a task that
  survives a ``poll`` timeout, the way Java keeps its join future across polls;
- a heartbeat task, on its own connection to the coordinator, heartbeats every
  ``heartbeat_interval_ms`` once JoinGroup completed, presumes the coordinator dead after
  ``session_timeout_ms`` without a successful heartbeat, and leaves the group when the application has
  not called ``poll()``/``touch()`` for ``max_poll_interval_ms``;
- ``commit()``/``committed()`` use the coordinator connection with the current generation.

Callbacks (``on_partitions_assigned`` / ``revoked`` / ``lost``; plain or async callables taking a
``frozenset[TopicPartition]``) run inside the rebalance, eager members revoking everything before
rejoining and cooperative members revoking only the partitions that move. ``poll`` must not be called
from several tasks at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from regroup.client.assignors import PartitionAssignor, RebalanceProtocol, create_assignor
from regroup.client.connection import Connector, Transport, open_connection, parse_bootstrap_servers
from regroup.client.consumer_membership import (
    ConsumerMembership,
    ConsumerMembershipConfig,
    ConsumerMemberState,
    Reconciliation,
    StaleMemberEpochError,
)
from regroup.client.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    KafkaConnectionError,
    NoBrokersAvailableError,
    RebalanceInProgressError,
    UnsupportedApiVersionError,
)
from regroup.client.membership import (
    Callback,
    CallbackKind,
    CoordinatorNode,
    CoordinatorTracker,
    Generation,
    Membership,
    MembershipConfig,
    MemberState,
    RebalanceAbortedError,
)
from regroup.client.requests import (
    find_coordinator_request,
    leave_group_request,
    metadata_request,
    offset_commit_request,
    offset_fetch_request,
    read_find_coordinator,
    read_leave_group,
    read_metadata,
    read_metadata_topic_ids,
    read_offset_commit,
    read_offset_fetch,
)
from regroup.client.types import OffsetAndMetadata, TopicPartition
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.message import Message
from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatResponse
from regroup.protocol.messages.find_coordinator import FindCoordinatorResponse
from regroup.protocol.messages.heartbeat import HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupResponse
from regroup.protocol.messages.metadata import MetadataResponse
from regroup.protocol.messages.offset_commit import OffsetCommitResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchResponse
from regroup.protocol.messages.sync_group import SyncGroupResponse

__all__ = ["GroupMember", "GroupMemberConfig", "RebalanceListener"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)

RebalanceListener = Callable[[frozenset[TopicPartition]], Awaitable[None] | None]
OffsetsToCommit = Mapping[TopicPartition, "int | OffsetAndMetadata"]
CommitOnRevoke = Callable[[frozenset[TopicPartition]], Awaitable[OffsetsToCommit] | OffsetsToCommit]
GroupProtocol = Literal["classic", "consumer"]

# Java's AbstractCoordinator.JOIN_GROUP_TIMEOUT_LAPSE: JoinGroup may be parked for a whole rebalance.
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000


@dataclass(frozen=True, slots=True)
class GroupMemberConfig:
    """Settings of a :class:`GroupMember`; names and defaults follow the Java consumer's configs.

    ``rebalance_timeout_ms`` defaults to ``max_poll_interval_ms`` (the Java consumer uses
    max.poll.interval.ms as its rebalance timeout). ``group_protocol`` is Java's ``group.protocol``:
    ``classic`` (JoinGroup/SyncGroup, client-side ``assignors``) or ``consumer`` (KIP-848's
    ConsumerGroupHeartbeat; the broker assigns, with ``group_remote_assignor`` if set, and may subscribe
    by ``topic_regex``; ``session_timeout_ms``, ``heartbeat_interval_ms`` and ``assignors`` are then
    the broker's business and ignored). ``assignors`` are names of built-ins (``range``,
    ``roundrobin``, ``sticky``, ``cooperative-sticky``) or assignor instances, in preference order; the
    rebalance protocol is the most advanced one all of them support (the default, ``range`` +
    ``cooperative-sticky``, is therefore eager, as in Java).
    """

    bootstrap_servers: str | Sequence[str]
    group_id: str
    topics: Collection[str] = ()
    client_id: str = "regroup"
    group_instance_id: str | None = None
    session_timeout_ms: int = 45000
    max_poll_interval_ms: int = 300000
    rebalance_timeout_ms: int | None = None
    heartbeat_interval_ms: int = 3000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30000
    default_api_timeout_ms: int = 60000
    metadata_max_age_ms: int = 300000
    assignors: Sequence[str | PartitionAssignor] = ("range", "cooperative-sticky")
    client_rack: str | None = None
    allow_auto_create_topics: bool = True
    leave_group_on_close: bool = True
    group_protocol: GroupProtocol = "classic"
    group_remote_assignor: str | None = None
    topic_regex: str | None = None

    def __post_init__(self) -> None:
        if self.group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol must be 'classic' or 'consumer', not {self.group_protocol!r}")
        if self.group_protocol == "classic" and (
            self.group_remote_assignor is not None or self.topic_regex is not None
        ):
            # Java's ConsumerConfig rejects group.remote.assignor with group.protocol=classic.
            raise ValueError("group_remote_assignor and topic_regex need group_protocol='consumer'")

    def consumer_membership_config(self, member_id: str) -> ConsumerMembershipConfig:
        return ConsumerMembershipConfig(
            group_id=self.group_id,
            member_id=member_id,
            topics=frozenset(self.topics),
            topic_regex=self.topic_regex,
            group_instance_id=self.group_instance_id,
            server_assignor=self.group_remote_assignor,
            rack_id=self.client_rack,
            rebalance_timeout_ms=(
                self.max_poll_interval_ms if self.rebalance_timeout_ms is None else self.rebalance_timeout_ms
            ),
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
        )

    def membership_config(self) -> MembershipConfig:
        return MembershipConfig(
            group_id=self.group_id,
            topics=frozenset(self.topics),
            group_instance_id=self.group_instance_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=(
                self.max_poll_interval_ms if self.rebalance_timeout_ms is None else self.rebalance_timeout_ms
            ),
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            rack_id=self.client_rack,
        )


@dataclass(slots=True)
class _CoordinatorLink:
    """A connection to the coordinator node it was opened for."""

    node: CoordinatorNode | None = None
    conn: Transport | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class GroupMember:
    """A member of a classic consumer group (see the module docstring).

    Use as ``async with GroupMember(config) as member: ... await member.poll()``. All public coroutines
    raise :class:`regroup.protocol.errors.KafkaError` for protocol errors (subclasses
    :class:`~regroup.client.errors.FencedInstanceIdError`, :class:`~regroup.client.errors.CommitFailedError`,
    :class:`~regroup.client.errors.RebalanceInProgressError`) and
    :class:`~regroup.client.errors.KafkaConnectionError` when brokers cannot be reached.
    """

    def __init__(
        self,
        config: GroupMemberConfig,
        *,
        on_partitions_assigned: RebalanceListener | None = None,
        on_partitions_revoked: RebalanceListener | None = None,
        on_partitions_lost: RebalanceListener | None = None,
        commit_on_revoke: CommitOnRevoke | None = None,
        connector: Connector | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        assignors = [create_assignor(a) if isinstance(a, str) else a for a in config.assignors]
        self._bootstrap = parse_bootstrap_servers(config.bootstrap_servers)
        self._known_brokers: list[tuple[str, int]] = list(self._bootstrap)
        self._clock = clock
        self._core = Membership(config.membership_config(), assignors, self._now())
        self._consumer: ConsumerMembership | None = None
        if config.group_protocol == "consumer":
            self._consumer = ConsumerMembership(
                config.consumer_membership_config(_new_member_id()), self._now()
            )
        # The protocol in use, for what both share: coordinator discovery, offsets, fatal errors.
        self._group: CoordinatorTracker = self._consumer or self._core
        self._connector: Connector = connector or functools.partial(
            open_connection, client_id=config.client_id, request_timeout_ms=config.request_timeout_ms
        )
        self._on_assigned = on_partitions_assigned
        self._on_revoked = on_partitions_revoked
        # Java's ConsumerRebalanceListener.onPartitionsLost defaults to onPartitionsRevoked.
        self._on_lost = on_partitions_lost or on_partitions_revoked
        self._commit_on_revoke = commit_on_revoke
        self._broker: Transport | None = None
        self._broker_lock = asyncio.Lock()
        self._coord = _CoordinatorLink()
        self._hb = _CoordinatorLink()
        self._lookup_task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_failure: BaseException | None = None
        self._reconcile_task: asyncio.Task[None] | None = None
        self._callback_error: BaseException | None = None
        self._wakeup = asyncio.Event()
        self._changed = asyncio.Event()
        self._heartbeats = 0
        self._next_metadata_refresh = 0
        self._closed = False

    # ---------------------------------------------------------------------------------- properties

    @property
    def group_id(self) -> str:
        return self.config.group_id

    @property
    def group_instance_id(self) -> str | None:
        return self.config.group_instance_id

    @property
    def group_protocol(self) -> GroupProtocol:
        return self.config.group_protocol

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member currently owns."""
        if self._consumer is not None:
            return self._consumer.assigned
        return self._core.assigned

    @property
    def generation(self) -> Generation:
        """Generation id, member id and protocol (assignor) name of the current generation (with the
        consumer protocol: the member epoch and member id)."""
        if self._consumer is not None:
            return self._consumer.generation()
        return self._core.generation

    @property
    def generation_id(self) -> int:
        return self.generation.generation_id

    @property
    def member_epoch(self) -> int:
        """The consumer protocol's member epoch (the generation id with the classic protocol)."""
        return self.generation.generation_id

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def state(self) -> MemberState:
        if self._consumer is not None:
            return _CLASSIC_STATES.get(self._consumer.state, MemberState.UNJOINED)
        return self._core.state

    @property
    def consumer_state(self) -> ConsumerMemberState | None:
        """The consumer protocol's member state (None with the classic protocol)."""
        return None if self._consumer is None else self._consumer.state

    @property
    def is_leader(self) -> bool:
        return self._core.is_leader

    @property
    def coordinator(self) -> CoordinatorNode | None:
        return self._group.coordinator

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        return self._core.protocol

    @property
    def subscription(self) -> frozenset[str]:
        if self._consumer is not None:
            return self._consumer.subscription
        return self._core.subscription

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def membership(self) -> Membership:
        """The underlying classic state machine (for inspection; do not mutate)."""
        return self._core

    @property
    def consumer_membership(self) -> ConsumerMembership | None:
        """The consumer-protocol state machine (None with the classic protocol; do not mutate)."""
        return self._consumer

    def _now(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------------------- public API

    async def __aenter__(self) -> GroupMember:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def subscribe(self, topics: Collection[str]) -> None:
        """Change the subscription; the member rejoins on its next ``poll()`` (with the consumer
        protocol the next heartbeat carries it; an empty subscription leaves the group)."""
        if self._consumer is not None:
            self._consumer.set_subscription(frozenset(topics))
            self._wakeup.set()
            return
        self._core.set_subscription(frozenset(topics))

    def touch(self) -> None:
        """Tell the member the application is alive (resets the max.poll.interval.ms clock)."""
        if self._consumer is not None:
            self._consumer.poll(self._now())
        self._core.poll(self._now())

    async def poll(self, timeout_ms: int | None = None) -> frozenset[TopicPartition]:
        """Keep the membership alive and (re)join when needed; returns the current assignment.

        Blocks until the member is in a stable generation, or at most ``timeout_ms`` (the rebalance then
        continues in the background and a later ``poll`` picks it up). Raises fatal errors, e.g.
        :class:`FencedInstanceIdError`, and errors of the rebalance callbacks.
        """
        if self._consumer is not None:
            return await self._poll_consumer(self._consumer, timeout_ms)
        self._check_usable()
        self.touch()
        if self._core.coordinator is not None and not self._core.rejoin_needed_or_pending():
            await self._maybe_refresh_metadata()
        if (
            self._rebalance_task is None
            and self._core.coordinator is not None
            and not self._core.rejoin_needed_or_pending()
        ):
            return self.assignment
        if self._rebalance_task is None:
            self._rebalance_task = asyncio.create_task(
                self._ensure_active_group(), name=f"rebalance-{self.group_id}"
            )
        task = self._rebalance_task
        await asyncio.wait({task}, timeout=None if timeout_ms is None else timeout_ms / 1000)
        if task.done():
            self._rebalance_task = None
            self.touch()
            task.result()
        self._check_usable()
        return self.assignment

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit ``offsets`` (next offsets to consume) with the current generation, retrying retriable
        errors until ``timeout_ms`` (default ``default_api_timeout_ms``), as Java's ``commitSync``.

        Raises :class:`CommitFailedError` when the member was kicked out of the generation (it then
        rejoins on the next ``poll``) and :class:`RebalanceInProgressError` during a rebalance.
        """
        self._check_usable()
        await self._commit(offsets, timeout_ms)

    async def _commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], timeout_ms: int | None
    ) -> None:
        normalized = {
            tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o) for tp, o in offsets.items()
        }
        if any(o.offset < 0 for o in normalized.values()):
            raise ValueError("offsets must be non-negative")
        if not normalized:
            return
        deadline = self._deadline(timeout_ms)
        attempts = 0
        while True:
            generation = (self._consumer or self._core).commit_generation()
            try:
                conn = await self._coordinator_connection(deadline)
                version = conn.version(ApiKey.OFFSET_COMMIT)
                request = offset_commit_request(
                    version,
                    self.group_id,
                    generation.generation_id,
                    generation.member_id,
                    self.group_instance_id,
                    normalized,
                )
                resp = await self._coordinator_request(self._coord, conn, request, OffsetCommitResponse)
                (self._consumer or self._core).on_commit_response(read_offset_commit(resp), generation)
                return
            except StaleMemberEpochError:
                # Java's CommitRequestManager retries a synchronous commit with the epoch the next
                # heartbeat brings.
                if self._now() >= deadline:
                    raise
                log.info("group %s: offset commit had a stale member epoch, retrying", self.group_id)
                await self._next_heartbeat(deadline)
                continue
            except (CommitFailedError, RebalanceInProgressError, FencedInstanceIdError):
                raise
            except (KafkaError, KafkaConnectionError) as exc:
                if not _retriable(exc) or self._now() >= deadline:
                    raise
                log.info("group %s: offset commit failed (%s), retrying", self.group_id, exc)
            attempts += 1
            await self._sleep_until_or(deadline, self._backoff_ms(attempts))

    async def committed(
        self, partitions: Collection[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets for ``partitions`` (None where nothing is committed); retries
        retriable errors until ``timeout_ms`` (default ``default_api_timeout_ms``)."""
        self._check_usable()
        if not partitions:
            return {}
        deadline = self._deadline(timeout_ms)
        attempts = 0
        while True:
            try:
                conn = await self._coordinator_connection(deadline)
                version = conn.version(ApiKey.OFFSET_FETCH)
                request = offset_fetch_request(version, self.group_id, partitions, require_stable=True)
                resp = await self._coordinator_request(self._coord, conn, request, OffsetFetchResponse)
                group_error, results = read_offset_fetch(version, resp, self.group_id)
                fetched = self._group.on_fetch_response(group_error, results)
                return {tp: fetched.get(tp) for tp in partitions}
            except (KafkaError, KafkaConnectionError) as exc:
                if not _retriable(exc) or self._now() >= deadline:
                    raise
                log.info("group %s: offset fetch failed (%s), retrying", self.group_id, exc)
            attempts += 1
            await self._sleep_until_or(deadline, self._backoff_ms(attempts))

    async def close(self, *, timeout_ms: int | None = None) -> None:
        """Leave the group and release every connection.

        Owned partitions are revoked first (reported lost if the generation is gone or a rebalance is
        under way). Dynamic members send LeaveGroup; static members do not, so that a restart within
        ``session_timeout_ms`` keeps their assignment, as in Java. Re-raises a callback's error after
        cleaning up.
        """
        if self._closed:
            return
        self._closed = True
        await self._stop_tasks()
        callback_error: BaseException | None = None
        try:
            if self._consumer is not None:
                if self.config.leave_group_on_close:
                    callback_error = await self._leave_consumer_group(self._consumer, timeout_ms)
            elif self.config.leave_group_on_close:
                callback = self._core.begin_leave()
                callback_error = await self._invoke(callback)
                self._core.finish_leave_prepare()
                await self._send_leave_group("the consumer is being closed", timeout_ms)
        finally:
            await self._close_connections()
        if callback_error is not None:
            raise callback_error

    async def abort(self) -> None:
        """Stop at once, as if the process died: no callbacks, no LeaveGroup; connections are dropped
        and the coordinator expires the member after its session timeout."""
        self._closed = True
        await self._stop_tasks()
        await self._close_connections()

    # --------------------------------------------------------------------------------- plumbing

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the group member is closed")
        if self._heartbeat_failure is not None:
            raise self._heartbeat_failure
        if self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error
        if self._group.fatal_error is not None:
            raise self._group.fatal_error

    def _deadline(self, timeout_ms: int | None) -> int:
        return self._now() + (self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms)

    def _backoff_ms(self, attempts: int) -> int:
        base, cap = self.config.retry_backoff_ms, self.config.retry_backoff_max_ms
        return int(min(base * 2 ** min(attempts - 1, 32), max(base, cap)))

    async def _sleep_until_or(self, deadline: int, delay_ms: int) -> None:
        await asyncio.sleep(max(0, min(delay_ms, deadline - self._now())) / 1000)

    async def _invoke(self, callback: Callback | None) -> BaseException | None:
        """Run one rebalance callback; its exception is returned (Java finishes the rebalance step
        before rethrowing the listener's error)."""
        if callback is None:
            return None
        listener = {
            CallbackKind.ASSIGNED: self._on_assigned,
            CallbackKind.REVOKED: self._on_revoked,
            CallbackKind.LOST: self._on_lost,
        }[callback.kind]
        log.info(
            "group %s member %s: partitions %s: %s",
            self.group_id,
            self.member_id,
            callback.kind.value,
            ", ".join(map(str, callback.partitions)) or "none",
        )
        if callback.kind is CallbackKind.REVOKED and callback.partitions:
            await self._commit_before_revocation(callback.partitions)
        if listener is None:
            return None
        try:
            result = listener(frozenset(callback.partitions))
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.exception("group %s: on_partitions_%s callback failed", self.group_id, callback.kind.value)
            return exc
        return None

    async def _stop_tasks(self) -> None:
        tasks = [
            t
            for t in (self._heartbeat_task, self._rebalance_task, self._reconcile_task, self._lookup_task)
            if t is not None
        ]
        self._heartbeat_task = self._rebalance_task = self._reconcile_task = self._lookup_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _close_connections(self) -> None:
        conns = [self._broker, self._coord.conn, self._hb.conn]
        self._broker = None
        self._coord.conn = self._hb.conn = None
        self._coord.node = self._hb.node = None
        for conn in conns:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    # ------------------------------------------------------------------------------ connections

    async def _broker_connection(self) -> Transport:
        """A connection to any broker (bootstrap servers first), for FindCoordinator and Metadata."""
        async with self._broker_lock:
            if self._broker is not None and not self._broker.closed:
                return self._broker
            errors: list[str] = []
            for host, port in list(self._known_brokers):
                try:
                    self._broker = await self._connector(host, port)
                except KafkaConnectionError as exc:
                    errors.append(str(exc))
                    continue
                return self._broker
            raise NoBrokersAvailableError("no broker reachable: " + "; ".join(errors))

    async def _link_connection(self, link: _CoordinatorLink) -> Transport:
        node = self._group.coordinator
        if node is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not known")
        async with link.lock:
            if link.conn is not None and (link.node != node or link.conn.closed):
                old, link.conn = link.conn, None
                await old.close()
            if link.conn is None:
                try:
                    link.conn = await self._connector(node.host, node.port)
                except KafkaConnectionError:
                    # Java's checkAndGetCoordinator: an unreachable coordinator is an unknown one.
                    if self._group.coordinator == node:
                        self._group.mark_coordinator_unknown()
                    raise
                link.node = node
            return link.conn

    async def _coordinator_connection(self, deadline: int | None = None) -> Transport:
        await self._ensure_coordinator(deadline)
        return await self._link_connection(self._coord)

    async def _coordinator_request(
        self,
        link: _CoordinatorLink,
        conn: Transport,
        request: Message,
        response_type: type[R],
        timeout_ms: int | None = None,
    ) -> R:
        try:
            return await conn.request(request, response_type, timeout_ms=timeout_ms)
        except KafkaConnectionError:
            # Java's CoordinatorResponseHandler.onFailure: a disconnect makes the coordinator unknown.
            if link.node == self._group.coordinator:
                self._group.mark_coordinator_unknown()
            raise

    # ------------------------------------------------------------------------------ coordinator

    async def _ensure_coordinator(self, deadline: int | None = None) -> None:
        """Java's ``ensureCoordinatorReady``: look the coordinator up (one lookup shared by all waiters)
        until found, backing off after retriable failures; fatal errors are raised."""
        attempts = 0
        while self._group.coordinator is None:
            if self._closed:
                raise RuntimeError("the group member is closed")
            task = self._lookup_task
            if task is None or task.done():
                task = self._lookup_task = asyncio.create_task(
                    self._lookup_coordinator(), name=f"find-coordinator-{self.group_id}"
                )
                task.add_done_callback(_retrieve_exception)
            try:
                await asyncio.shield(task)
            except (KafkaError, KafkaConnectionError, UnsupportedApiVersionError) as exc:
                if not _retriable(exc) or (deadline is not None and self._now() >= deadline):
                    raise
                attempts += 1
                log.debug("group %s: coordinator lookup failed (%s)", self.group_id, exc)
                delay = self._backoff_ms(attempts)
                await asyncio.sleep(
                    delay / 1000 if deadline is None else max(0, min(delay, deadline - self._now())) / 1000
                )

    async def _lookup_coordinator(self) -> None:
        conn = await self._broker_connection()
        version = conn.version(ApiKey.FIND_COORDINATOR)
        try:
            resp = await conn.request(
                find_coordinator_request(version, self.group_id), FindCoordinatorResponse
            )
        except KafkaConnectionError:
            self._broker = None
            raise
        node = self._group.on_find_coordinator(read_find_coordinator(version, resp), self._now())
        log.info(
            "group %s: discovered coordinator %s:%s (node %s)",
            self.group_id,
            node.host,
            node.port,
            node.node_id,
        )

    async def _mark_coordinator_dead(self, reason: str) -> None:
        log.info("group %s: marking the coordinator unknown: %s", self.group_id, reason)
        self._group.mark_coordinator_unknown()
        for link in (self._coord, self._hb):
            conn, link.conn, link.node = link.conn, None, None
            if conn is not None:
                await conn.close()

    # -------------------------------------------------------------------------------- rebalance

    async def _ensure_active_group(self) -> None:
        await self._ensure_coordinator()
        self._start_heartbeat()
        await self._join_group_if_needed()

    def _start_heartbeat(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.create_task(
                self._heartbeat_loop(), name=f"heartbeat-{self.group_id}"
            )

    async def _join_group_if_needed(self) -> None:
        """Java's ``joinGroupIfNeeded``."""
        core = self._core
        while core.rejoin_needed_or_pending():
            await self._ensure_coordinator()
            if core.needs_join_prepare:
                callback = core.begin_join_prepare()
                error = await self._invoke(callback)
                core.finish_join_prepare(callback)
                if error is not None:
                    raise error
            try:
                assignment = await self._join_and_sync()
            except (KafkaError, KafkaConnectionError, RebalanceAbortedError, TimeoutError) as exc:
                action = core.failure_action(exc)
                if action == "raise":
                    raise
                log.info("group %s: rebalance attempt failed (%s); %s", self.group_id, exc, action)
                if action == "backoff":
                    await asyncio.sleep(core.rebalance_backoff_ms() / 1000)
                continue
            if core.generation.is_reset or core.state is not MemberState.STABLE:
                core.reset_state_and_rejoin(
                    "rebalance failed since the generation/state was modified before the rebalance "
                    "callback triggered",
                    True,
                )
                continue
            completion = core.begin_join_complete(assignment)
            first_error: BaseException | None = None
            if completion.revoked:
                first_error = await self._invoke(Callback(CallbackKind.REVOKED, completion.revoked))
            assigned = core.finish_join_complete(completion)
            error = await self._invoke(assigned)
            first_error = first_error or error
            if first_error is not None:
                raise first_error

    async def _join_and_sync(self) -> bytes:
        core = self._core
        conn = await self._link_connection(self._coord)
        version = conn.version(ApiKey.JOIN_GROUP)
        if self.group_instance_id is not None and version < 5:
            raise UnsupportedApiVersionError(
                f"the broker supports JoinGroup up to v{version}; static membership needs v5+"
            )
        request, sent = core.join_request()
        log.info(
            "group %s: (re-)joining (member %r, reason: %s)", self.group_id, sent.member_id, request.reason
        )
        timeout = max(
            self.config.request_timeout_ms, core.config.rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS
        )
        resp = await self._coordinator_request(self._coord, conn, request, JoinGroupResponse, timeout)
        outcome = core.on_join_response(resp, sent, self._now())
        log.info(
            "group %s: joined generation %s as %s (leader %s, protocol %s)",
            self.group_id,
            outcome.generation.generation_id,
            outcome.generation.member_id,
            outcome.leader_id,
            outcome.generation.protocol_name,
        )
        assignments: dict[str, bytes] = {}
        if outcome.skip_assignment:
            log.info("group %s: returning static leader, skipping the assignment", self.group_id)
        if outcome.is_leader:
            subscriptions = core.leader_subscriptions(outcome.members)
            topics = {t for s in subscriptions.values() for t in s.topics}
            partitions = await self._fetch_metadata(topics)
            assignments = core.perform_assignment(outcome, subscriptions, partitions)
            self._next_metadata_refresh = self._now() + self.config.metadata_max_age_ms
        sync, sent = core.sync_request(assignments)
        sync_resp = await self._coordinator_request(self._coord, conn, sync, SyncGroupResponse)
        return core.on_sync_response(sync_resp, sent)

    async def _fetch_metadata(self, topics: Collection[str]) -> dict[str, int]:
        if not topics:
            return {}
        conn = await self._broker_connection()
        version = conn.version(ApiKey.METADATA)
        request = metadata_request(version, topics, self.config.allow_auto_create_topics)
        try:
            resp = await conn.request(request, MetadataResponse)
        except KafkaConnectionError:
            self._broker = None
            raise
        for broker in resp.brokers:
            if (broker.host, broker.port) not in self._known_brokers:
                self._known_brokers.append((broker.host, broker.port))
        return read_metadata(resp)

    async def _maybe_refresh_metadata(self) -> None:
        """The leader watches the partition counts it assigned from (Java's metadata snapshot)."""
        snapshot = self._core.assignment_snapshot
        if not self._core.is_leader or not snapshot or self._now() < self._next_metadata_refresh:
            return
        self._next_metadata_refresh = self._now() + self.config.metadata_max_age_ms
        try:
            self._core.on_metadata(await self._fetch_metadata(snapshot))
        except (KafkaError, KafkaConnectionError, UnsupportedApiVersionError) as exc:
            log.info("group %s: metadata refresh failed: %s", self.group_id, exc)

    # ------------------------------------------------------------------------ consumer protocol

    async def _poll_consumer(
        self, core: ConsumerMembership, timeout_ms: int | None
    ) -> frozenset[TopicPartition]:
        """``poll`` with ``group.protocol=consumer``: (re)join when needed, keep the heartbeat task
        running and wait until the member is stable (or ``timeout_ms``); reconciliation goes on in the
        background between polls."""
        self._check_usable()
        self.touch()
        if core.state is ConsumerMemberState.STALE:
            # Java's maybeRejoinStaleMember: the poll timer expired and the member left; what it
            # owned is lost, and it rejoins now that the application polls again.
            callback = core.begin_lost()
            error = await self._invoke(callback)
            core.finish_lost()
            core.state = ConsumerMemberState.UNSUBSCRIBED
            if error is not None:
                raise error
        if core.join_needed():
            core.join(self._now())
            self._wake()
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.create_task(
                self._consumer_heartbeat_loop(core), name=f"heartbeat-{self.group_id}"
            )
        deadline = None if timeout_ms is None else self._now() + timeout_ms
        await self._wait_until(
            lambda: (
                (
                    core.state in (ConsumerMemberState.STABLE, ConsumerMemberState.FATAL)
                    and not core.reconciliation_in_progress
                )
                or not core.has_subscription
                or self._heartbeat_failure is not None
                or self._callback_error is not None
            ),
            deadline,
        )
        self.touch()
        self._check_usable()
        return self.assignment

    def _wake(self) -> None:
        self._wakeup.set()

    def _notify(self) -> None:
        """Wake whoever waits for a change of the consumer-protocol state."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _wait_until(self, condition: Callable[[], bool], deadline: int | None) -> None:
        while not condition():
            if self._closed:
                return
            changed = self._changed
            left = None if deadline is None else deadline - self._now()
            if left is not None and left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), None if left is None else left / 1000)

    async def _next_heartbeat(self, deadline: int) -> None:
        seen = self._heartbeats
        self._wake()
        await self._wait_until(lambda: self._heartbeats != seen, deadline)

    async def _sleep_or_wake(self, delay_ms: int) -> None:
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), max(delay_ms, 1) / 1000)

    async def _consumer_heartbeat_loop(self, core: ConsumerMembership) -> None:
        """Java's ``ConsumerHeartbeatRequestManager`` + the membership manager's background work: one
        heartbeat in flight, every interval the broker gave (at once to join, acknowledge or leave),
        reconciliation started as targets arrive, fencing and fatal errors handled."""
        backoff = self.config.retry_backoff_ms
        try:
            while not self._closed:
                now = self._now()
                if core.state is ConsumerMemberState.FATAL:
                    await self._await_reconciliation()
                    callback = core.begin_lost()
                    error = await self._invoke(callback)
                    core.finish_lost()
                    self._callback_error = self._callback_error or error
                    self._notify()
                    return
                if core.state is ConsumerMemberState.FENCED:
                    await self._on_fenced(core)
                    continue
                if core.poll_timeout_expired(now) and core.state is not ConsumerMemberState.LEAVING:
                    log.warning(
                        "group %s: poll() not called within max.poll.interval.ms (%s ms); leaving the group",
                        self.group_id,
                        core.config.rebalance_timeout_ms,
                    )
                    await self._await_reconciliation()
                    core.leave_on_poll_timeout()
                if (
                    core.in_group
                    and not core.has_subscription
                    and core.state is not (ConsumerMemberState.LEAVING)
                ):
                    self._callback_error = self._callback_error or await self._leave_consumer_group(
                        core, None
                    )
                    self._notify()
                    continue
                self._maybe_reconcile(core)
                if not core.heartbeat_enabled():
                    await self._sleep_or_wake(backoff if core.reconciliation_in_progress else 1000)
                elif core.coordinator is None:
                    try:
                        await self._ensure_coordinator(self._now())
                    except (KafkaError, KafkaConnectionError, UnsupportedApiVersionError) as exc:
                        log.debug("group %s: coordinator lookup failed: %s", self.group_id, exc)
                        await self._sleep_or_wake(backoff)
                elif core.should_heartbeat(now):
                    await self._consumer_heartbeat_once(core)
                else:
                    await self._sleep_or_wake(
                        min(core.time_to_next_heartbeat(now), core.time_to_poll_timeout(now))
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("group %s: heartbeat task failed", self.group_id)
            self._heartbeat_failure = exc
            self._notify()

    async def _consumer_heartbeat_once(self, core: ConsumerMembership) -> None:
        try:
            conn = await self._link_connection(self._hb)
            version = conn.version(ApiKey.CONSUMER_GROUP_HEARTBEAT)
        except UnsupportedApiVersionError as exc:
            core.transition_to_fatal(
                KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"the broker does not support the consumer group protocol: {exc}",
                )
            )
            return
        except (KafkaError, KafkaConnectionError) as exc:
            log.debug("group %s: no heartbeat connection: %s", self.group_id, exc)
            core.heartbeat_failed(self._now())
            return
        if core.topic_regex is not None and version < 1:
            core.transition_to_fatal(
                KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    "subscribing by regex needs ConsumerGroupHeartbeat v1, which the broker lacks",
                )
            )
            return
        request = core.heartbeat_request(self._now())
        try:
            resp = await self._coordinator_request(
                self._hb, conn, request, ConsumerGroupHeartbeatResponse, self.config.request_timeout_ms
            )
        except (KafkaConnectionError, KafkaError, UnsupportedApiVersionError) as exc:
            log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
            core.heartbeat_failed(self._now())
            self._notify()
            return
        error = core.on_heartbeat_response(resp, self._now())
        if error is not ErrorCode.NONE:
            log.info("group %s: heartbeat answered %s", self.group_id, error.name)
        self._heartbeats += 1
        self._notify()

    async def _on_fenced(self, core: ConsumerMembership) -> None:
        """Java's ``transitionToFenced``: report the partitions lost, then rejoin with epoch 0."""
        log.info("group %s: member %s was fenced; rejoining", self.group_id, core.member_id)
        await self._await_reconciliation()
        callback = core.begin_fenced()
        error = await self._invoke(callback)
        core.finish_fenced(self._now())
        self._callback_error = self._callback_error or error
        self._notify()

    def _maybe_reconcile(self, core: ConsumerMembership) -> None:
        if core.state is not ConsumerMemberState.RECONCILING or core.reconciliation_in_progress:
            return
        if self._reconcile_task is not None and not self._reconcile_task.done():
            return
        self._reconcile_task = asyncio.create_task(self._reconcile(core), name=f"reconcile-{self.group_id}")

    async def _await_reconciliation(self) -> None:
        task = self._reconcile_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def _reconcile(self, core: ConsumerMembership) -> None:
        """One reconciliation step (Java's ``maybeReconcile``): revoke, or assign, then acknowledge."""
        try:
            await self._reconcile_step(core)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("group %s: reconciliation failed", self.group_id)
            self._heartbeat_failure = exc
            self._notify()

    async def _reconcile_step(self, core: ConsumerMembership) -> None:
        if core.unresolved_topic_ids():
            try:
                core.on_topic_names(await self._fetch_topic_names())
            except (KafkaError, KafkaConnectionError, UnsupportedApiVersionError) as exc:
                log.info("group %s: cannot resolve assigned topic ids: %s", self.group_id, exc)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                self._wake()
                return
        # Topics still unknown after a Metadata lookup were deleted meanwhile: reconcile the rest.
        step = core.begin_reconciliation(ignore_unresolved=True)
        if step is None:
            return
        try:
            error = await self._run_reconciliation_callbacks(core, step)
        except asyncio.CancelledError:
            core.reconciliation_in_progress = False
            raise
        if core.finish_reconciliation(step):
            log.info(
                "group %s member %s: reconciled epoch %s, owning %s",
                self.group_id,
                core.member_id,
                step.target_epoch,
                ", ".join(map(str, sorted(core.assigned, key=TopicPartition.sort_key))) or "nothing",
            )
        self._callback_error = self._callback_error or error
        self._wake()
        self._notify()

    async def _run_reconciliation_callbacks(
        self, core: ConsumerMembership, step: Reconciliation
    ) -> BaseException | None:
        if step.is_revocation:
            return await self._invoke(core.revocation_callback(step))
        return await self._invoke(core.assignment_callback(step))

    async def _fetch_topic_names(self) -> dict[uuid.UUID, str]:
        conn = await self._broker_connection()
        version = conn.version(ApiKey.METADATA)
        if version < 10:
            raise UnsupportedApiVersionError(
                f"the broker serves Metadata up to v{version}; topic ids need v10+"
            )
        try:
            resp = await conn.request(metadata_request(version, None, False), MetadataResponse)
        except KafkaConnectionError:
            self._broker = None
            raise
        return read_metadata_topic_ids(resp)

    async def _leave_consumer_group(
        self, core: ConsumerMembership, timeout_ms: int | None
    ) -> BaseException | None:
        """Java's ``leaveGroup``: revoke what is owned, then a heartbeat with epoch -1 (-2 for a static
        member, whose assignment the coordinator keeps for its session timeout)."""
        await self._await_reconciliation()
        callback = core.begin_leave()
        error = await self._invoke(callback)
        if core.finish_leave_prepare():
            log.info("group %s: member %s leaving the group", self.group_id, core.member_id)
            timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
            try:
                await asyncio.wait_for(self._consumer_heartbeat_once(core), timeout / 1000)
            except TimeoutError:
                core.heartbeat_failed(self._now())
        return error

    async def _commit_before_revocation(self, partitions: Collection[TopicPartition]) -> None:
        """Java's auto-commit before revocation: commit what ``commit_on_revoke`` returns; a failure is
        logged and the revocation goes on, as in Java."""
        if self._commit_on_revoke is None:
            return
        try:
            offsets = self._commit_on_revoke(frozenset(partitions))
            if inspect.isawaitable(offsets):
                offsets = await offsets
            if offsets:
                # Not the public commit(): this also runs while closing.
                await self._commit(offsets, None)
        except Exception as exc:
            log.warning("group %s: commit before revoking %s failed: %s", self.group_id, partitions, exc)

    # -------------------------------------------------------------------------------- heartbeat

    async def _heartbeat_loop(self) -> None:
        """Java's ``HeartbeatThread``, on a dedicated connection so that a JoinGroup or SyncGroup parked
        on the main coordinator connection never delays heartbeats."""
        core = self._core
        backoff = self.config.retry_backoff_ms / 1000
        try:
            while not self._closed:
                now = self._now()
                if not core.heartbeat_enabled():
                    await asyncio.sleep(backoff)
                elif core.coordinator is None:
                    with contextlib.suppress(KafkaError, KafkaConnectionError, UnsupportedApiVersionError):
                        await self._ensure_coordinator(self._now())
                    await asyncio.sleep(backoff)
                elif core.session_timeout_expired(now):
                    await self._mark_coordinator_dead(
                        "session timed out without receiving a heartbeat response"
                    )
                elif core.poll_timeout_expired(now):
                    log.warning(
                        "group %s: poll() not called within max.poll.interval.ms (%s ms); leaving the group",
                        self.group_id,
                        core.config.rebalance_timeout_ms,
                    )
                    await self._send_leave_group("consumer poll timeout has expired.", None)
                elif not core.should_heartbeat(now):
                    wait = min(
                        core.time_to_next_heartbeat(now),
                        core.time_to_poll_timeout(now),
                        core.session_time_left(now),
                    )
                    await asyncio.sleep(max(wait, 1) / 1000)
                else:
                    await self._heartbeat_once(now)
        except FencedInstanceIdError as exc:
            self._heartbeat_failure = exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("group %s: heartbeat task failed", self.group_id)
            self._heartbeat_failure = exc

    async def _heartbeat_once(self, now: int) -> None:
        core = self._core
        request, sent = core.heartbeat_request(now)
        try:
            conn = await self._link_connection(self._hb)
            timeout = min(self.config.request_timeout_ms, max(core.session_time_left(now), 1))
            resp = await self._coordinator_request(self._hb, conn, request, HeartbeatResponse, timeout)
        except (KafkaConnectionError, KafkaError, UnsupportedApiVersionError) as exc:
            log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
            core.heartbeat_failed(self._now())
            return
        error = core.on_heartbeat_response(resp, sent, self._now())
        if error is not ErrorCode.NONE:
            log.info("group %s: heartbeat answered %s", self.group_id, error.name)

    async def _send_leave_group(self, reason: str, timeout_ms: int | None) -> None:
        """Java's ``maybeLeaveGroup``: LeaveGroup for a dynamic member that has joined, then reset."""
        sent = self._core.leave_group()
        if sent is None:
            return
        log.info("group %s: member %s leaving the group: %s", self.group_id, sent.member_id, reason)
        # Sent on the heartbeat connection: the main one may hold a parked JoinGroup/SyncGroup, and a
        # broker answers the requests of one connection in order.
        try:
            conn = await self._link_connection(self._hb)
            version = conn.version(ApiKey.LEAVE_GROUP)
            request = leave_group_request(version, self.group_id, sent.member_id, None, reason)
            timeout = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
            resp = await self._coordinator_request(self._hb, conn, request, LeaveGroupResponse, timeout)
        except (KafkaError, KafkaConnectionError, UnsupportedApiVersionError) as exc:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)
            return
        error = read_leave_group(resp)
        if error is not ErrorCode.NONE:
            log.info("group %s: LeaveGroup answered %s", self.group_id, error.name)


_CLASSIC_STATES = {
    ConsumerMemberState.JOINING: MemberState.PREPARING_REBALANCE,
    ConsumerMemberState.RECONCILING: MemberState.COMPLETING_REBALANCE,
    ConsumerMemberState.ACKNOWLEDGING: MemberState.COMPLETING_REBALANCE,
    ConsumerMemberState.STABLE: MemberState.STABLE,
}


def _new_member_id() -> str:
    """A client-generated member id (KIP-1082), formatted as Java's ``Uuid.toString``."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, KafkaConnectionError):
        return True
    if isinstance(exc, KafkaError):
        return exc.code.retriable or exc.code in (
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ErrorCode.NOT_COORDINATOR,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        )
    return False


def _retrieve_exception(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
