"""The member side of the classic group protocol as a sans-I/O state machine.

:class:`Membership` holds everything Java's ``AbstractCoordinator`` + ``ConsumerCoordinator`` +
``Heartbeat`` keep — member state, generation, coordinator, rejoin flags, owned partitions, heartbeat /
session / poll timers — and turns it into requests and back. It does no I/O and reads no clock: callers
pass ``now_ms``, send the requests it builds, feed it the responses, and invoke the rebalance callbacks
it plans (the two-phase ``begin_*`` / ``finish_*`` methods let the state change only after a revocation
callback ran, as in Java). :class:`regroup.client.member.GroupMember` is the asyncio driver.

Response handlers take the generation the request was sent with (``sent``): as in Java, an error about
a generation the member has already left behind does not reset the current one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from regroup.client.assignors import (
    PartitionAssignor,
    RebalanceProtocol,
    common_rebalance_protocol,
)
from regroup.client.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from regroup.client.errors import CommitFailedError, FencedInstanceIdError, RebalanceInProgressError
from regroup.client.requests import CoordinatorAnswer, FetchedOffset, truncate_reason
from regroup.client.types import OffsetAndMetadata, TopicPartition, sorted_partitions
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from regroup.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from regroup.protocol.primitives import DecodeError

__all__ = [
    "NO_GENERATION",
    "Callback",
    "CallbackKind",
    "CoordinatorNode",
    "CoordinatorTracker",
    "FailureAction",
    "Generation",
    "JoinCompletion",
    "JoinOutcome",
    "MemberState",
    "Membership",
    "MembershipConfig",
    "RebalanceAbortedError",
]


class MemberState(enum.Enum):
    """Java's ``AbstractCoordinator.MemberState``."""

    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing-rebalance"
    COMPLETING_REBALANCE = "completing-rebalance"
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = -1
    member_id: str = ""
    protocol_name: str | None = None

    @property
    def has_member_id(self) -> bool:
        return self.member_id != ""

    @property
    def is_reset(self) -> bool:
        """Java's ``hasGenerationReset``: generation -1 with no protocol (the member id may survive)."""
        return self.generation_id == -1 and self.protocol_name is None


NO_GENERATION = Generation()


@dataclass(frozen=True, slots=True)
class CoordinatorNode:
    node_id: int
    host: str
    port: int


class CallbackKind(enum.Enum):
    REVOKED = "revoked"
    ASSIGNED = "assigned"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Callback:
    """A rebalance listener invocation the driver must perform."""

    kind: CallbackKind
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class JoinOutcome:
    """A successful JoinGroup: the member is now completing the rebalance."""

    generation: Generation
    leader_id: str
    is_leader: bool
    members: tuple[JoinGroupResponseMember, ...]
    skip_assignment: bool


@dataclass(frozen=True, slots=True)
class JoinCompletion:
    """What a SyncGroup assignment means for this member (Java's ``onJoinComplete``)."""

    generation: Generation
    assignment: Assignment
    assigned: frozenset[TopicPartition]
    added: tuple[TopicPartition, ...]
    revoked: tuple[TopicPartition, ...]
    matches_subscription: bool


class RebalanceAbortedError(Exception):
    """The rebalance in flight was invalidated locally (generation reset by a heartbeat, or the member
    stopped preparing); it is retried after a backoff, like Java's ``UnjoinedGroupException``."""


FailureAction = Literal["rejoin", "backoff", "raise"]


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """The group-protocol settings of one member (names follow the Java consumer configs)."""

    group_id: str
    topics: frozenset[str] = frozenset()
    group_instance_id: str | None = None
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = 300000
    heartbeat_interval_ms: int = 3000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    rack_id: str | None = None

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be a non-empty string")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        if self.group_instance_id is not None and not self.group_instance_id:
            raise ValueError("group_instance_id must be None or non-empty")


def _backoff(base_ms: int, max_ms: int, attempts: int) -> int:
    # Java's ExponentialBackoff without the ±20% jitter (the core has no randomness source).
    if base_ms >= max_ms:
        return max_ms
    return int(min(base_ms * 2 ** min(attempts, 32), max_ms))


@dataclass(slots=True)
class _Timers:
    """Java's ``Heartbeat``: deadlines in ms on the caller's clock."""

    heartbeat_deadline: int = 0
    session_deadline: int = 0
    poll_deadline: int = 0
    attempts: int = 0


class CoordinatorTracker:
    """What members of both group protocols keep about their coordinator, and the handling of the
    responses whose logic the protocols share (FindCoordinator, OffsetCommit errors, OffsetFetch)."""

    def __init__(self) -> None:
        self.coordinator: CoordinatorNode | None = None
        self.fatal_error: KafkaError | None = None

    def on_find_coordinator(self, answer: CoordinatorAnswer, now_ms: int) -> CoordinatorNode:
        if answer.error is not ErrorCode.NONE:
            raise KafkaError(answer.error, answer.message or None)
        self.coordinator = CoordinatorNode(answer.node_id, answer.host, answer.port)
        self._coordinator_found(now_ms)
        return self.coordinator

    def _coordinator_found(self, now_ms: int) -> None:
        """Hook: a coordinator was discovered at ``now_ms``."""

    def mark_coordinator_unknown(self) -> bool:
        """Forget the coordinator (rediscovered on next use); True if one was known."""
        known = self.coordinator is not None
        self.coordinator = None
        return known

    def _coordinator_error(self, error: ErrorCode) -> bool:
        if error in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            self.mark_coordinator_unknown()
            return True
        return False

    def check_commit_error(self, tp: TopicPartition, error: ErrorCode) -> None:
        """Raise for an OffsetCommit partition error both protocols treat alike (Java's
        ``OffsetCommitResponseHandler`` / ``CommitRequestManager``): coordinator errors and timeouts
        forget the coordinator and are retriable; anything else fails the commit."""
        if self._coordinator_error(error) or error is ErrorCode.REQUEST_TIMED_OUT:
            self.mark_coordinator_unknown()
            raise KafkaError(error)
        raise KafkaError(error, f"offset commit failed on {tp}: {error.message}")

    def on_fetch_response(
        self, group_error: ErrorCode, results: Mapping[TopicPartition, FetchedOffset]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Apply an OffsetFetch response (Java's ``OffsetFetchResponseHandler``); raises on failure."""
        if group_error is not ErrorCode.NONE:
            self._coordinator_error(group_error)
            raise KafkaError(group_error)
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for tp, fetched in results.items():
            if fetched.error is ErrorCode.UNSTABLE_OFFSET_COMMIT:
                # A transactional commit is pending: retriable, the caller retries.
                raise KafkaError(fetched.error, f"offset of {tp} has a pending transactional commit")
            if fetched.error is not ErrorCode.NONE:
                raise KafkaError(fetched.error, f"offset fetch failed on {tp}: {fetched.error.message}")
            out[tp] = fetched.offset
        return out


class Membership(CoordinatorTracker):
    """One member's view of its group; see the module docstring."""

    def __init__(
        self, config: MembershipConfig, assignors: Sequence[PartitionAssignor], now_ms: int = 0
    ) -> None:
        if not assignors:
            raise ValueError("at least one assignor is required")
        names = [a.name for a in assignors]
        if len(set(names)) != len(names):
            raise ValueError(f"assignor names must be unique: {names}")
        super().__init__()
        self.config = config
        self.assignors: tuple[PartitionAssignor, ...] = tuple(assignors)
        self.protocol: RebalanceProtocol = common_rebalance_protocol(list(assignors))
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.needs_join_prepare = True
        self.is_leader = False
        self.subscription: frozenset[str] = config.topics
        self.joined_subscription: frozenset[str] | None = None
        self.assigned: frozenset[TopicPartition] = frozenset()
        # Partition counts the leader assigned from, and the latest ones it has seen (Java's
        # assignmentSnapshot / metadataSnapshot): a difference triggers a rebalance.
        self.assignment_snapshot: dict[str, int] | None = None
        self.metadata_snapshot: dict[str, int] | None = None
        self._timers = _Timers()
        self._reset_timeouts(now_ms)

    # ---------------------------------------------------------------------------------- properties

    @property
    def group_id(self) -> str:
        return self.config.group_id

    @property
    def is_dynamic(self) -> bool:
        return self.config.group_instance_id is None

    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    def generation_if_stable(self) -> Generation | None:
        return self.generation if self.state is MemberState.STABLE else None

    def assignor(self, name: str | None) -> PartitionAssignor:
        for a in self.assignors:
            if a.name == name:
                return a
        raise KafkaError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            f"coordinator selected unknown assignment protocol {name!r}",
        )

    # ------------------------------------------------------------------------------- rejoin flags

    def request_rejoin(self, reason: str) -> None:
        self.rejoin_reason = reason
        self.rejoin_needed = True

    def request_rejoin_if_necessary(self, reason: str) -> None:
        if not self.rejoin_needed:
            self.request_rejoin(reason)

    def reset_state_and_generation(self, reset_member_id: bool) -> None:
        self.state = MemberState.UNJOINED
        if reset_member_id:
            self.generation = NO_GENERATION
        else:
            self.generation = Generation(-1, self.generation.member_id, None)

    def reset_state_and_rejoin(self, reason: str, reset_member_id: bool) -> None:
        self.reset_state_and_generation(reset_member_id)
        self.request_rejoin(reason)
        self.needs_join_prepare = True

    def set_subscription(self, topics: frozenset[str]) -> None:
        self.subscription = frozenset(topics)

    def rejoin_needed_or_pending(self) -> bool:
        """Java's ``ConsumerCoordinator.rejoinNeededOrPending`` (minus the in-flight join, which the
        driver tracks): metadata or subscription changes since the last join request a rebalance."""
        if (
            self.assignment_snapshot is not None
            and self.metadata_snapshot is not None
            and self.assignment_snapshot != self.metadata_snapshot
        ):
            self.request_rejoin_if_necessary("cached metadata has changed")
            return True
        if self.joined_subscription is not None and self.joined_subscription != self.subscription:
            self.request_rejoin_if_necessary("subscription has changed")
            return True
        return self.rejoin_needed

    def on_metadata(self, partitions_per_topic: Mapping[str, int]) -> None:
        """Latest partition counts of the group's topics (the leader refreshes them periodically)."""
        if self.assignment_snapshot is not None:
            self.metadata_snapshot = {t: partitions_per_topic.get(t, 0) for t in self.assignment_snapshot}

    # -------------------------------------------------------------------------------- coordinator

    def _coordinator_found(self, now_ms: int) -> None:
        self._timers.session_deadline = now_ms + self.config.session_timeout_ms

    # ------------------------------------------------------------------------------- join prepare

    def begin_join_prepare(self) -> Callback | None:
        """The callback Java's ``onJoinPrepare`` runs before (re)joining; then :meth:`finish_join_prepare`."""
        self.needs_join_prepare = False
        owned = tuple(sorted_partitions(self.assigned))
        if self.generation.generation_id == -1 or not self.generation.has_member_id:
            # The generation was reset (error, poll timeout, session loss): whatever we owned is lost.
            return Callback(CallbackKind.LOST, owned) if owned else None
        if self.protocol is RebalanceProtocol.EAGER:
            return Callback(CallbackKind.REVOKED, owned)
        # Cooperative: only the partitions of topics no longer subscribed to.
        gone = tuple(tp for tp in owned if tp.topic not in self.subscription)
        return Callback(CallbackKind.REVOKED, gone) if gone else None

    def finish_join_prepare(self, callback: Callback | None) -> None:
        if callback is not None:
            self.assigned = self.assigned.difference(callback.partitions)
        self.is_leader = False

    # ---------------------------------------------------------------------------------------- join

    def join_request(self) -> tuple[JoinGroupRequest, Generation]:
        """The JoinGroup to send now, and the generation it is sent with."""
        self.state = MemberState.PREPARING_REBALANCE
        topics = self.subscription
        self.joined_subscription = topics
        protocols = [
            JoinGroupRequestProtocol(name=a.name, metadata=self.subscription_metadata(a, topics))
            for a in self.assignors
        ]
        request = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.rebalance_timeout_ms,
            member_id=self.generation.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=protocols,
            reason=truncate_reason(self.rejoin_reason),
        )
        return request, self.generation

    def subscription_metadata(self, assignor: PartitionAssignor, topics: frozenset[str]) -> bytes:
        return encode_subscription(
            Subscription(
                topics=tuple(topics),
                user_data=assignor.subscription_user_data(topics),
                owned_partitions=tuple(self.assigned),
                generation_id=self.generation.generation_id,
                rack_id=self.config.rack_id,
            )
        )

    def on_join_response(self, resp: JoinGroupResponse, sent: Generation, now_ms: int) -> JoinOutcome:
        """Apply a JoinGroup response (Java's ``JoinGroupResponseHandler``); raises on errors."""
        error = ErrorCode.from_code(resp.error_code)
        if error is ErrorCode.NONE:
            if resp.protocol_type is not None and resp.protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"JoinGroup returned protocol type {resp.protocol_type!r}, expected 'consumer'",
                )
            if self.state is not MemberState.PREPARING_REBALANCE:
                raise RebalanceAbortedError("the member left the join phase before JoinGroup completed")
            self.state = MemberState.COMPLETING_REBALANCE
            self._reset_timeouts(now_ms)
            self.generation = Generation(resp.generation_id, resp.member_id, resp.protocol_name)
            is_leader = resp.leader == resp.member_id
            return JoinOutcome(
                self.generation, resp.leader, is_leader, tuple(resp.members), bool(resp.skip_assignment)
            )
        if error is ErrorCode.UNKNOWN_MEMBER_ID:
            if self.generation == sent:
                self.reset_state_and_rejoin(f"encountered {error.name} from JoinGroup response", True)
        elif error is ErrorCode.MEMBER_ID_REQUIRED:
            # The two-step join of JoinGroup v4+: rejoin at once with the id the coordinator handed out.
            self.generation = Generation(-1, resp.member_id, None)
            self.request_rejoin(f"need to re-join with the given member-id: {resp.member_id}")
        elif error is ErrorCode.FENCED_INSTANCE_ID:
            self.fatal_error = FencedInstanceIdError(
                f"JoinGroup: instance {self.config.group_instance_id!r} was fenced by another member"
            )
            raise self.fatal_error
        else:
            self._coordinator_error(error)
        raise KafkaError(error)

    def leader_subscriptions(self, members: Sequence[JoinGroupResponseMember]) -> dict[str, Subscription]:
        """Decode every member's metadata for the selected protocol (leader only)."""
        return {m.member_id: decode_subscription(m.metadata, m.group_instance_id) for m in members}

    def perform_assignment(
        self,
        outcome: JoinOutcome,
        subscriptions: Mapping[str, Subscription],
        partitions_per_topic: Mapping[str, int],
    ) -> dict[str, bytes]:
        """Java's ``onLeaderElected``: run the selected assignor (unless the coordinator told a returning
        static leader to skip it) and encode the assignments for SyncGroup."""
        assignor = self.assignor(outcome.generation.protocol_name)
        topics = {t for s in subscriptions.values() for t in s.topics}
        self.is_leader = True
        self.metadata_snapshot = {t: partitions_per_topic.get(t, 0) for t in topics}
        self.assignment_snapshot = dict(self.metadata_snapshot)
        if outcome.skip_assignment:
            # KIP-814: the static leader rejoined without a rebalance; the coordinator keeps the
            # current assignment and running the assignor could only diverge from it.
            return {}
        assignments = assignor.assign(partitions_per_topic, subscriptions)
        missing = set(subscriptions) - set(assignments)
        if missing:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"assignor {assignor.name} skipped {missing}")
        if self.protocol is RebalanceProtocol.COOPERATIVE and assignor.name != "cooperative-sticky":
            _validate_cooperative(subscriptions, assignments)
        return {member: encode_assignment(a) for member, a in assignments.items()}

    # ---------------------------------------------------------------------------------------- sync

    def sync_request(self, assignments: Mapping[str, bytes]) -> tuple[SyncGroupRequest, Generation]:
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation.generation_id,
            member_id=self.generation.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=self.generation.protocol_name,
            assignments=[
                SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()
            ],
        )
        return request, self.generation

    def on_sync_response(self, resp: SyncGroupResponse, sent: Generation) -> bytes:
        """Apply a SyncGroup response (Java's ``SyncGroupResponseHandler``); the assignment bytes."""
        error = ErrorCode.from_code(resp.error_code)
        if error is ErrorCode.NONE:
            if resp.protocol_type is not None and resp.protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "SyncGroup returned another protocol type"
                )
            if self.generation.is_reset or self.state is not MemberState.COMPLETING_REBALANCE:
                # A heartbeat error reset us while SyncGroup was in flight.
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION, "generation reset before SyncGroup completed")
            if resp.protocol_name is not None and resp.protocol_name != self.generation.protocol_name:
                raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "SyncGroup returned another protocol")
            self.state = MemberState.STABLE
            self.rejoin_reason = ""
            self.rejoin_needed = False
            return resp.assignment
        if error is ErrorCode.FENCED_INSTANCE_ID:
            self.fatal_error = FencedInstanceIdError(
                f"SyncGroup: instance {self.config.group_instance_id!r} was fenced by another member"
            )
            raise self.fatal_error
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if self.generation == sent:
                self.reset_state_and_rejoin(
                    f"encountered {error.name} from SyncGroup response",
                    error is not ErrorCode.ILLEGAL_GENERATION,
                )
        else:
            self._coordinator_error(error)
        raise KafkaError(error)

    def begin_join_complete(self, assignment_bytes: bytes) -> JoinCompletion:
        """Java's ``onJoinComplete`` up to the revocation callback; then :meth:`finish_join_complete`."""
        if not self.is_leader:
            self.assignment_snapshot = None
            self.metadata_snapshot = None
        generation = self.generation
        self.assignor(generation.protocol_name)
        try:
            assignment = decode_assignment(assignment_bytes)
        except DecodeError as exc:
            raise KafkaError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"cannot read the SyncGroup assignment: {exc}"
            ) from exc
        assigned = frozenset(assignment.partitions)
        if not all(tp.topic in self.subscription for tp in assigned):
            self.request_rejoin("received assignment does not match the current subscription")
            self.needs_join_prepare = True
            return JoinCompletion(generation, assignment, assigned, (), (), False)
        added = tuple(sorted_partitions(assigned - self.assigned))
        revoked: tuple[TopicPartition, ...] = ()
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            revoked = tuple(sorted_partitions(self.assigned - assigned))
        return JoinCompletion(generation, assignment, assigned, added, revoked, True)

    def finish_join_complete(self, completion: JoinCompletion) -> Callback | None:
        """Adopt the assignment; returns the ``assigned`` callback, invoked even when nothing was added
        (None when the assignment did not match the subscription and the member rejoins instead)."""
        self.needs_join_prepare = True
        if not completion.matches_subscription:
            return None
        if completion.revoked:
            # Cooperative: give the revoked partitions up and rejoin so they can be reassigned.
            self.request_rejoin("need to revoke partitions and re-join")
        self.assignor(completion.generation.protocol_name).on_assignment(
            completion.assignment, completion.generation.generation_id
        )
        self.assigned = completion.assigned
        return Callback(CallbackKind.ASSIGNED, completion.added)

    def failure_action(self, exc: BaseException) -> FailureAction:
        """What the join loop does after a failed JoinGroup/SyncGroup round (Java's
        ``joinGroupIfNeeded``): rejoin at once, back off and retry, or give up."""
        if isinstance(exc, KafkaError):
            if exc.code is not ErrorCode.MEMBER_ID_REQUIRED:
                self.request_rejoin(f"rebalance failed due to {exc.code.name}")
            if exc.code in (
                ErrorCode.UNKNOWN_MEMBER_ID,
                ErrorCode.ILLEGAL_GENERATION,
                ErrorCode.REBALANCE_IN_PROGRESS,
                ErrorCode.MEMBER_ID_REQUIRED,
            ):
                return "rejoin"
            if exc.code.retriable or exc.code in (
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ):
                return "backoff"
            return "raise"
        self.request_rejoin(f"rebalance failed due to {type(exc).__name__}")
        if isinstance(exc, (RebalanceAbortedError, ConnectionError, TimeoutError)):
            return "backoff"
        return "raise"

    def rebalance_backoff_ms(self) -> int:
        return self.config.retry_backoff_ms

    # ----------------------------------------------------------------------------------- heartbeat

    def _reset_timeouts(self, now_ms: int) -> None:
        t = self._timers
        t.session_deadline = now_ms + self.config.session_timeout_ms
        t.poll_deadline = now_ms + self.config.rebalance_timeout_ms
        t.heartbeat_deadline = now_ms + self.config.heartbeat_interval_ms

    def poll(self, now_ms: int) -> None:
        """The application polled: restart the max.poll.interval.ms clock."""
        self._timers.poll_deadline = now_ms + self.config.rebalance_timeout_ms

    def heartbeat_enabled(self) -> bool:
        """Java's heartbeat thread only runs once JoinGroup has completed."""
        return (
            self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE) and self.fatal_error is None
        )

    def should_heartbeat(self, now_ms: int) -> bool:
        return now_ms >= self._timers.heartbeat_deadline

    def time_to_next_heartbeat(self, now_ms: int) -> int:
        return max(0, self._timers.heartbeat_deadline - now_ms)

    def session_timeout_expired(self, now_ms: int) -> bool:
        return now_ms >= self._timers.session_deadline

    def session_time_left(self, now_ms: int) -> int:
        return max(0, self._timers.session_deadline - now_ms)

    def poll_timeout_expired(self, now_ms: int) -> bool:
        return now_ms >= self._timers.poll_deadline

    def time_to_poll_timeout(self, now_ms: int) -> int:
        return max(0, self._timers.poll_deadline - now_ms)

    def heartbeat_request(self, now_ms: int) -> tuple[HeartbeatRequest, Generation]:
        t = self._timers
        t.heartbeat_deadline = now_ms + self.config.heartbeat_interval_ms
        request = HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.generation.generation_id,
            member_id=self.generation.member_id,
            group_instance_id=self.config.group_instance_id,
        )
        return request, self.generation

    def _receive_heartbeat(self, now_ms: int) -> None:
        t = self._timers
        t.attempts = 0
        t.session_deadline = now_ms + self.config.session_timeout_ms

    def heartbeat_failed(self, now_ms: int) -> None:
        """No usable answer (connection lost, timeout, unexpected error): retry after a backoff."""
        t = self._timers
        t.heartbeat_deadline = now_ms + _backoff(
            self.config.retry_backoff_ms, self.config.retry_backoff_max_ms, t.attempts
        )
        t.attempts += 1

    def on_heartbeat_response(self, resp: HeartbeatResponse, sent: Generation, now_ms: int) -> ErrorCode:
        """Apply a Heartbeat response (Java's ``HeartbeatResponseHandler`` and the heartbeat thread's
        listener); returns the error handled. Raises :class:`FencedInstanceIdError`, which is fatal."""
        error = ErrorCode.from_code(resp.error_code)
        if error is ErrorCode.NONE:
            self._receive_heartbeat(now_ms)
        elif error is ErrorCode.REBALANCE_IN_PROGRESS:
            # The session is alive either way; rejoin if we thought we were stable.
            if self.state is MemberState.STABLE:
                self.request_rejoin("group is already rebalancing")
            self._receive_heartbeat(now_ms)
        elif error in (
            ErrorCode.ILLEGAL_GENERATION,
            ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.FENCED_INSTANCE_ID,
        ):
            if self.generation != sent:
                # About a generation we already left: ignore.
                self._receive_heartbeat(now_ms)
                return ErrorCode.NONE
            self.reset_state_and_rejoin(
                f"encountered {error.name} from Heartbeat response", error is not ErrorCode.ILLEGAL_GENERATION
            )
            if error is ErrorCode.FENCED_INSTANCE_ID:
                self.fatal_error = FencedInstanceIdError(
                    f"Heartbeat: instance {self.config.group_instance_id!r} was fenced by another member"
                )
                raise self.fatal_error
            self.heartbeat_failed(now_ms)
        else:
            self._coordinator_error(error)
            self.heartbeat_failed(now_ms)
        return error

    # --------------------------------------------------------------------------------------- leave

    def begin_leave(self) -> Callback | None:
        """Java's ``onLeavePrepare`` (on close): revoke what we own — or report it lost if the
        generation is gone or a rebalance is under way. Then :meth:`finish_leave_prepare`."""
        owned = tuple(sorted_partitions(self.assigned))
        if not owned:
            return None
        gone = self.generation.generation_id == -1 or not self.generation.has_member_id
        kind = CallbackKind.LOST if gone or self.rebalance_in_progress() else CallbackKind.REVOKED
        return Callback(kind, owned)

    def finish_leave_prepare(self) -> None:
        self.assigned = frozenset()

    def leave_group(self) -> Generation | None:
        """Java's ``maybeLeaveGroup``: returns the generation to send LeaveGroup for (dynamic members
        that joined and know their coordinator only — static members stay until their session expires),
        and resets the member so the next poll rejoins from scratch."""
        send = (
            self.is_dynamic
            and self.coordinator is not None
            and self.state is not MemberState.UNJOINED
            and self.generation.has_member_id
        )
        sent = self.generation if send else None
        self.reset_state_and_rejoin("consumer pro-actively leaving the group", True)
        return sent

    # ------------------------------------------------------------------------------------ offsets

    def commit_generation(self) -> Generation:
        """The generation an OffsetCommit must carry; raises when the member is not stable."""
        generation = self.generation_if_stable()
        if generation is not None:
            return generation
        if self.rebalance_in_progress():
            raise RebalanceInProgressError(
                "Offset commit cannot be completed since the consumer is undergoing a rebalance; complete "
                "it with poll() and retry"
            )
        raise CommitFailedError(
            ErrorCode.UNKNOWN_MEMBER_ID,
            "Offset commit cannot be completed since the consumer is not part of an active group; it is "
            "likely that the consumer was kicked out of the group",
        )

    def on_commit_response(self, errors: Mapping[TopicPartition, ErrorCode], sent: Generation) -> None:
        """Apply an OffsetCommit response (Java's ``OffsetCommitResponseHandler``); raises on failure.

        Retriable failures raise a retriable :class:`KafkaError` (the driver retries those)."""
        unauthorized: set[str] = set()
        for tp in sorted_partitions(errors):
            error = errors[tp]
            if error is ErrorCode.NONE:
                continue
            if error is ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                unauthorized.add(tp.topic)
                continue
            if error is ErrorCode.FENCED_INSTANCE_ID:
                if self.generation == sent:
                    self.fatal_error = FencedInstanceIdError("OffsetCommit: group.instance.id was fenced")
                    raise self.fatal_error
                if self.state is MemberState.PREPARING_REBALANCE:
                    raise RebalanceInProgressError(
                        "the member's old generation was fenced by its instance id"
                    )
                raise CommitFailedError(error)
            if error is ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("offset commit failed since group is already rebalancing")
                raise RebalanceInProgressError(
                    "Offset commit cannot be completed since the group is rebalancing; complete the "
                    "rebalance with poll() and retry"
                )
            if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                if self.generation != sent and self.state is MemberState.PREPARING_REBALANCE:
                    raise RebalanceInProgressError(
                        "the member's generation is already stale; poll() and retry"
                    )
                # ILLEGAL_GENERATION keeps the member id: the member may still be valid.
                self.reset_state_and_rejoin(
                    f"encountered {error.name} from OffsetCommit response",
                    error is not ErrorCode.ILLEGAL_GENERATION,
                )
                raise CommitFailedError(error)
            self.check_commit_error(tp, error)
        if unauthorized:
            raise KafkaError(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"not authorized to commit to topics {sorted(unauthorized)}",
            )


def _validate_cooperative(
    subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment]
) -> None:
    """Java's ``validateCooperativeAssignment``: a custom cooperative assignor must not hand a partition
    to a new owner in the rebalance in which another member still owns it."""
    added: set[TopicPartition] = set()
    revoked: set[TopicPartition] = set()
    for member, assignment in assignments.items():
        owned = set(subscriptions[member].owned_partitions) if member in subscriptions else set()
        mine = set(assignment.partitions)
        added |= mine - owned
        revoked |= owned - mine
    overlap = added & revoked
    if overlap:
        raise KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            "assignor supporting the COOPERATIVE protocol reassigned partitions still owned by others: "
            + ", ".join(str(tp) for tp in sorted_partitions(overlap)),
        )
