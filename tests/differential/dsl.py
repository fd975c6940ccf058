"""A small scripting language for differential scenarios.

A scenario is a name and a list of steps; each step is one request written with regroup's codecs, sent
by an *actor* (a named group member with its own connection) or by the admin connection::

    Scenario("heartbeat-completing-rebalance", [
        *form_group("a", "b"),
        join("a", park=True),              # leader re-joins: PreparingRebalance
        join("b", park=True),              # everybody joined: CompletingRebalance
        wait("a"), wait("b"),
        heartbeat("a", expect=E.NONE),     # NONE, by docs/design/group-semantics.md §14.1
    ])

Actors remember their member id (from JoinGroup answers carrying one), generation, selected protocol,
instance id and session/rebalance timeouts, so steps default to "what a well-behaved client would send";
keyword arguments override any field (``member="bogus"``, ``gen=7``, ``member=Ref("b")`` for another
actor's id). ``park=True`` sends without waiting (a JoinGroup/SyncGroup the coordinator holds) and waits a
moment so the broker has seen it before the next step; ``wait(actor)`` collects the answer.
``sleep(seconds)`` lets real timers run. ``expect=`` states what the reference broker answers (checked
against Kafka only: it guards the scenario itself; regroup is judged by the field-by-field comparison).

:func:`run` executes a scenario against one broker and returns its observations: one per answered
request, as plain data (see ``support.normalize``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode as E
from regroup.protocol.message import Message, Struct
from regroup.protocol.messages.api_versions import ApiVersionsRequest
from regroup.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.delete_groups import DeleteGroupsRequest
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest
from regroup.protocol.messages.heartbeat import HeartbeatRequest
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from regroup.protocol.messages.leave_group import LeaveGroupRequest, MemberIdentity
from regroup.protocol.messages.list_groups import ListGroupsRequest
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from regroup.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupRequestAssignment
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
)
from support.kafka_wire import Address
from support.normalize import plain

__all__ = [
    "AUTO",
    "SETTLE",
    "TOPICS",
    "Context",
    "E",
    "Observation",
    "Ref",
    "Scenario",
    "Step",
    "api_versions",
    "assignment",
    "cgh",
    "commit",
    "consumer_coordinator_sees",
    "consumer_describe",
    "delete_groups",
    "describe",
    "fetch_offsets",
    "find_coordinator",
    "form_group",
    "heartbeat",
    "join",
    "leave",
    "list_groups",
    "offset_delete",
    "run",
    "sleep",
    "subscription",
    "sync",
    "txn_commit",
    "wait",
]

# Seconds to let a broker process a request sent with park=True before the next step runs.
SETTLE: Final = 0.3
# Topics every scenario may use (logical name → partitions), created on both brokers once per session.
TOPICS: Final[dict[str, int]] = {"t": 3, "u": 2}
TOPIC_PREFIX: Final = "diff-"
MISSING_TOPIC: Final = "missing"  # never created


class _Auto:
    def __repr__(self) -> str:
        return "AUTO"


AUTO: Final = _Auto()


@dataclass(frozen=True)
class Ref:
    """The current member id (or, with ``instance=True``, instance id) of another actor."""

    actor: str
    instance: bool = False


def topic_name(logical: str) -> str:
    return TOPIC_PREFIX + logical


def subscription(*topics: str, user_data: bytes | None = None, version: int = 0) -> bytes:
    """ConsumerProtocolSubscription bytes for logical topics (a real consumer's JoinGroup metadata)."""
    return ConsumerProtocolSubscription(
        topics=sorted(topic_name(t) for t in topics), user_data=user_data
    ).encode_versioned(version)


def assignment(parts: Mapping[str, Sequence[int]]) -> bytes:
    """ConsumerProtocolAssignment v0 bytes for ``{logical topic: partitions}``."""
    return ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(topic_name(t), list(p)) for t, p in sorted(parts.items())
        ]
    ).encode_versioned(0)


DEFAULT_PROTOCOLS: Final = (("range", subscription("t")),)


# --------------------------------------------------------------------------------------------- running


@dataclass
class Actor:
    name: str
    conn: BlockingConnection
    member_id: str = ""
    generation: int = -1
    instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    session: int = 6000
    rebalance: int = 6000
    parked: list[tuple[str, int, Message]] = field(default_factory=list)
    # KIP-848: the member epoch and the partitions (topic id, partitions) of the last assignment received
    member_epoch: int = 0
    owned: list[tuple[Any, list[int]]] = field(default_factory=list)


Check = Callable[[Any], str | None]


@dataclass
class Observation:
    """One answered (or unanswered) request: what the broker said, as plain data."""

    index: int
    label: str
    api: str
    version: int
    response: Any
    expect: E | None = None
    check: Check | None = None


def fit(message: Any, version: int) -> Any:
    """Reset every field that ``version`` does not have to its default, recursively, so one builder
    serves all versions (a real client of that version simply lacks those fields)."""
    if not isinstance(message, Struct):
        return message
    defaults = {f.name: f for f in dataclasses.fields(message)}  # type: ignore[arg-type]
    for spec in type(message).FIELDS:
        value = getattr(message, spec.name)
        if not spec.present_in(version):
            d = defaults[spec.name]
            if d.default is not dataclasses.MISSING:
                setattr(message, spec.name, d.default)
            elif d.default_factory is not dataclasses.MISSING:
                setattr(message, spec.name, d.default_factory())
        elif isinstance(value, list):
            for item in value:
                fit(item, version)
        else:
            fit(value, version)
    return message


class Context:
    """Per-broker state while one scenario runs."""

    def __init__(self, address: Address, group: str) -> None:
        self.address = address
        self.group = group
        self.actors: dict[str, Actor] = {}
        self.observations: list[Observation] = []
        self._admin: BlockingConnection | None = None
        self.started = time.monotonic()

    def actor(self, name: str) -> Actor:
        if name not in self.actors:
            # The client id is the actor name: member ids are "<actor>-<uuid>" on both brokers.
            self.actors[name] = Actor(name, BlockingConnection(self.address, client_id=name))
        return self.actors[name]

    @property
    def admin(self) -> BlockingConnection:
        if self._admin is None:
            self._admin = BlockingConnection(self.address, client_id="admin")
        return self._admin

    def group_id(self, group: str | None) -> str:
        """``None`` → the scenario's group; ``""`` → the empty group id; else a sibling group."""
        if group is None:
            return self.group
        if group == "":
            return ""
        return f"{self.group}.{group}"

    def member(self, value: object, actor: Actor | None) -> str:
        if value is AUTO:
            return actor.member_id if actor is not None else ""
        if isinstance(value, Ref):
            other = self.actor(value.actor)
            return (other.instance_id or "") if value.instance else other.member_id
        assert isinstance(value, str), value
        return value

    def instance(self, value: object, actor: Actor | None) -> str | None:
        if value is AUTO:
            return actor.instance_id if actor is not None else None
        if isinstance(value, Ref):
            return self.actor(value.actor).instance_id
        assert value is None or isinstance(value, str), value
        return value

    def observe(self, label: str, version: int, message: Message | str, api: str) -> Observation:
        response = plain(message, version) if isinstance(message, Message) else {"<no response>": message}
        obs = Observation(len(self.observations), label, api, version, response)
        self.observations.append(obs)
        return obs

    def close(self) -> None:
        for a in self.actors.values():
            a.conn.close()
        if self._admin is not None:
            self._admin.close()


@dataclass
class Step:
    """One request (or pause) of a scenario."""

    label: str
    api: str
    version: int
    actor: str | None
    build: Callable[[Context, Actor | None], Message] | None
    park: bool = False
    expect: E | None = None
    check: Check | None = None
    after: Callable[[Context, Actor | None, Message], None] | None = None
    pause: float = 0.0
    wait: Callable[[Context], None] | None = None

    def execute(self, ctx: Context) -> None:
        if self.build is None:
            if self.wait is not None:
                self.wait(ctx)
            else:
                time.sleep(self.pause)
            return
        actor = ctx.actor(self.actor) if self.actor is not None else None
        conn = actor.conn if actor is not None else ctx.admin
        request = fit(self.build(ctx, actor), self.version)
        if self.park:
            assert actor is not None, "only actors can park requests"
            conn.send(request, self.version)
            actor.parked.append((self.label, self.version, request))
            time.sleep(SETTLE)
            return
        conn.send(request, self.version)
        self._answer(ctx, actor, conn, self.label, request)

    def _answer(
        self,
        ctx: Context,
        actor: Actor | None,
        conn: BlockingConnection,
        label: str,
        request: Message,
        timeout: float = 20.0,
    ) -> None:
        try:
            response: Message | str = conn.receive(timeout)
        except TimeoutError:
            response = "timeout"
        except (ConnectionError, OSError) as exc:
            response = f"connection closed ({type(exc).__name__})"
        obs = ctx.observe(label, self.version, response, self.api)
        obs.expect, obs.check = self.expect, self.check
        if isinstance(response, Message) and self.after is not None:
            self.after(ctx, actor, response)


@dataclass
class _Wait(Step):
    timeout: float = 20.0

    def execute(self, ctx: Context) -> None:
        assert self.actor is not None
        actor = ctx.actor(self.actor)
        if not actor.parked:
            raise AssertionError(f"wait({self.actor}): nothing parked")
        label, _version, request = actor.parked.pop(0)
        step = _PARKED.pop(id(request))
        step._answer(ctx, actor, actor.conn, f"{label} → answer", request, self.timeout)


# The step that built each parked request, to interpret its answer at wait() time.
_PARKED: dict[int, Step] = {}


def run(scenario: Scenario, address: Address, group: str) -> list[Observation]:
    ctx = Context(address, group)
    try:
        for step in scenario.steps:
            step.execute(ctx)
    finally:
        ctx.close()
    return ctx.observations


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: Sequence[Step]
    covers: tuple[str, ...] = ()  # sections of docs/design/group-semantics.md it exercises, e.g. "8.2"
    alt: bool = False  # runs on the alternative broker pair (initial delay, group.max.size, retention)
    bug: str | None = None  # a regroup coordinator bug this scenario demonstrates (strict xfail)

    def __str__(self) -> str:
        return self.name


# ------------------------------------------------------------------------------------------- step helpers


def _label(api: str, actor: str | None, version: int, extra: str = "") -> str:
    who = actor or "admin"
    return f"{who}: {api} v{version}{' ' + extra if extra else ''}"


def _register(step: Step) -> Step:
    """Remember the step of a parked request (looked up by wait())."""
    if step.park and step.build is not None:
        build = step.build

        def tracking_build(ctx: Context, actor: Actor | None) -> Message:
            request = build(ctx, actor)
            _PARKED[id(request)] = step
            return request

        step.build = tracking_build
    return step


def _on_join(ctx: Context, actor: Actor | None, response: Message) -> None:
    assert actor is not None
    error = response.error_code  # type: ignore[attr-defined]
    if error in (E.NONE, E.MEMBER_ID_REQUIRED) and response.member_id:  # type: ignore[attr-defined]
        actor.member_id = response.member_id  # type: ignore[attr-defined]
    if error == E.NONE:
        actor.generation = response.generation_id  # type: ignore[attr-defined]
        actor.protocol_name = response.protocol_name  # type: ignore[attr-defined]
        actor.protocol_type = getattr(response, "protocol_type", None) or "consumer"


def join(
    actor: str,
    v: int = 9,
    *,
    member: object = AUTO,
    instance: object = AUTO,
    protocols: Iterable[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
    protocol_type: str = "consumer",
    session: int | None = None,
    rebalance: int | None = None,
    group: str | None = None,
    reason: str | None = None,
    park: bool = False,
    expect: E | None = None,
    check: Check | None = None,
) -> Step:
    """JoinGroup. An actor keeps the session/rebalance timeouts it last joined with (6000 ms at first),
    like a client with fixed configuration."""
    protos = tuple(protocols)

    def build(ctx: Context, a: Actor | None) -> Message:
        assert a is not None
        if instance is not AUTO:
            a.instance_id = ctx.instance(instance, a)
        if session is not None:
            a.session = session
        if rebalance is not None:
            a.rebalance = rebalance
        return JoinGroupRequest(
            group_id=ctx.group_id(group),
            session_timeout_ms=a.session,
            rebalance_timeout_ms=a.rebalance,
            member_id=ctx.member(member, a),
            group_instance_id=a.instance_id,
            protocol_type=protocol_type,
            protocols=[JoinGroupRequestProtocol(n, m) for n, m in protos],
            reason=reason,
        )

    extra = "static " if instance not in (AUTO, None) else ""
    return _register(
        Step(
            _label("JoinGroup", actor, v, extra + ("(park)" if park else "")),
            "JoinGroup",
            v,
            actor,
            build,
            park,
            expect,
            check,
            _on_join,
        )
    )


def _on_cgh(ctx: Context, actor: Actor | None, response: Message) -> None:
    assert actor is not None
    if response.error_code != E.NONE:  # type: ignore[attr-defined]
        return
    actor.member_epoch = response.member_epoch  # type: ignore[attr-defined]
    assigned = response.assignment  # type: ignore[attr-defined]
    if actor.member_epoch < 0:
        actor.owned = []
    elif assigned is not None:
        actor.owned = [(tp.topic_id, list(tp.partitions)) for tp in assigned.topic_partitions]


def cgh(
    actor: str,
    v: int = 1,
    *,
    epoch: object = AUTO,
    names: Sequence[str] | None = None,
    rebalance: int | None = None,
    group: str | None = None,
    expect: E | None = None,
) -> Step:
    """ConsumerGroupHeartbeat (KIP-848) with the client-generated member id ``<actor>-member``. Epoch 0 joins
    with ``names`` (logical topic names) and a 30 s rebalance timeout; later heartbeats send the actor's
    epoch and, as owned partitions, the last assignment it received (a client that revoked and acquired
    what it was told); −1 leaves."""

    def build(ctx: Context, a: Actor | None) -> Message:
        assert a is not None
        member_epoch = a.member_epoch if epoch is AUTO else epoch
        assert isinstance(member_epoch, int)
        joining = member_epoch == 0
        owned = [] if joining else a.owned
        return ConsumerGroupHeartbeatRequest(
            group_id=ctx.group_id(group),
            member_id=f"{a.name}-member",
            member_epoch=member_epoch,
            rebalance_timeout_ms=rebalance if rebalance is not None else 30_000 if joining else -1,
            subscribed_topic_names=None if names is None else [topic_name(t) for t in names],
            topic_partitions=None
            if member_epoch < 0
            else [ConsumerGroupHeartbeatRequestTopicPartitions(t, ps) for t, ps in owned],
        )

    return Step(
        _label("ConsumerGroupHeartbeat", actor, v, f"epoch {epoch}" if epoch is not AUTO else ""),
        "ConsumerGroupHeartbeat",
        v,
        actor,
        build,
        expect=expect,
        after=_on_cgh,
    )


def consumer_describe(v: int = 0, *, groups: Sequence[str | None] = (None,)) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return ConsumerGroupDescribeRequest(group_ids=[ctx.group_id(g) for g in groups])

    return Step(_label("ConsumerGroupDescribe", None, v), "ConsumerGroupDescribe", v, None, build)


def wait(actor: str, timeout: float = 20.0) -> Step:
    return _Wait(f"{actor}: wait", "wait", 0, actor, None, timeout=timeout)


def sync(
    actor: str,
    v: int = 5,
    *,
    assign: Mapping[str, Mapping[str, Sequence[int]]] | None = None,
    raw_assign: Sequence[tuple[object, bytes]] = (),
    gen: object = AUTO,
    member: object = AUTO,
    instance: object = AUTO,
    protocol_type: object = AUTO,
    protocol_name: object = AUTO,
    group: str | None = None,
    park: bool = False,
    expect: E | None = None,
) -> Step:
    """SyncGroup; ``assign`` maps actor names to ``{logical topic: partitions}`` (leader only)."""

    def build(ctx: Context, a: Actor | None) -> Message:
        assert a is not None
        assignments = [
            SyncGroupRequestAssignment(ctx.actor(name).member_id, assignment(parts))
            for name, parts in (assign or {}).items()
        ]
        assignments += [SyncGroupRequestAssignment(ctx.member(m, a), b) for m, b in raw_assign]
        return SyncGroupRequest(
            group_id=ctx.group_id(group),
            generation_id=a.generation if gen is AUTO else gen,  # type: ignore[arg-type]
            member_id=ctx.member(member, a),
            group_instance_id=ctx.instance(instance, a),
            protocol_type=(a.protocol_type or "consumer") if protocol_type is AUTO else protocol_type,  # type: ignore[arg-type]
            protocol_name=a.protocol_name if protocol_name is AUTO else protocol_name,  # type: ignore[arg-type]
            assignments=assignments,
        )

    return _register(
        Step(
            _label("SyncGroup", actor, v, "(park)" if park else ""),
            "SyncGroup",
            v,
            actor,
            build,
            park,
            expect,
        )
    )


def heartbeat(
    actor: str,
    v: int = 4,
    *,
    gen: object = AUTO,
    member: object = AUTO,
    instance: object = AUTO,
    group: str | None = None,
    expect: E | None = None,
) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        assert a is not None
        return HeartbeatRequest(
            group_id=ctx.group_id(group),
            generation_id=a.generation if gen is AUTO else gen,  # type: ignore[arg-type]
            member_id=ctx.member(member, a),
            group_instance_id=ctx.instance(instance, a),
        )

    return Step(_label("Heartbeat", actor, v), "Heartbeat", v, actor, build, expect=expect)


def leave(
    actor: str,
    v: int = 5,
    *,
    members: Sequence[tuple[object, object]] | None = None,
    group: str | None = None,
    reason: str | None = None,
    expect: E | None = None,
    check: Check | None = None,
) -> Step:
    """LeaveGroup from ``actor``'s connection; ``members`` (v3+) lists (member id, instance id) pairs,
    each ``AUTO``/``Ref``/literal; by default the actor itself."""

    def build(ctx: Context, a: Actor | None) -> Message:
        assert a is not None
        if v < 3:
            return LeaveGroupRequest(
                group_id=ctx.group_id(group),
                member_id=ctx.member(AUTO if members is None else members[0][0], a),
            )
        who = members if members is not None else [(AUTO, AUTO)]
        return LeaveGroupRequest(
            group_id=ctx.group_id(group),
            members=[MemberIdentity(ctx.member(m, a), ctx.instance(i, a), reason) for m, i in who],
        )

    return Step(_label("LeaveGroup", actor, v), "LeaveGroup", v, actor, build, expect=expect, check=check)


Offsets = Mapping[tuple[str, int], int | tuple[int, str | None] | tuple[int, str | None, int]]


def _commit_topics(offsets: Offsets) -> dict[str, list[tuple[int, int, str | None, int]]]:
    topics: dict[str, list[tuple[int, int, str | None, int]]] = {}
    for (t, p), given in offsets.items():
        value = (given, "") if isinstance(given, int) else given
        offset, meta, *epoch = value
        topics.setdefault(t, []).append((p, offset, meta, epoch[0] if epoch else -1))
    return topics


def commit(
    actor: str | None = None,
    v: int = 8,
    *,
    offsets: Offsets,
    gen: object = AUTO,
    member: object = AUTO,
    instance: object = AUTO,
    retention: int = -1,
    group: str | None = None,
    expect: E | None = None,
) -> Step:
    """OffsetCommit; ``offsets`` maps (logical topic, partition) → offset or (offset, metadata[, epoch]).
    Without an actor it is the admin form (generation −1, member id "")."""

    def build(ctx: Context, a: Actor | None) -> Message:
        generation = (a.generation if a is not None else -1) if gen is AUTO else gen
        return OffsetCommitRequest(
            group_id=ctx.group_id(group),
            generation_id_or_member_epoch=generation,  # type: ignore[arg-type]
            member_id=ctx.member(member, a),
            group_instance_id=ctx.instance(instance, a),
            retention_time_ms=retention,
            topics=[
                OffsetCommitRequestTopic(
                    topic_name(t), [OffsetCommitRequestPartition(p, o, e, -1, m) for p, o, m, e in parts]
                )
                for t, parts in _commit_topics(offsets).items()
            ],
        )

    return Step(_label("OffsetCommit", actor, v), "OffsetCommit", v, actor, build, expect=expect)


def txn_commit(
    v: int = 3,
    *,
    offsets: Offsets,
    transactional_id: str = "diff-txn",
    producer_id: int = 1000,
    producer_epoch: int = 0,
    gen: int = -1,
    member: str = "",
    group: str | None = None,
    expect: E | None = None,
) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return TxnOffsetCommitRequest(
            transactional_id=transactional_id,
            group_id=ctx.group_id(group),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation_id=gen,
            member_id=member,
            topics=[
                TxnOffsetCommitRequestTopic(
                    topic_name(t), [TxnOffsetCommitRequestPartition(p, o, e, m) for p, o, m, e in parts]
                )
                for t, parts in _commit_topics(offsets).items()
            ],
        )

    return Step(_label("TxnOffsetCommit", None, v), "TxnOffsetCommit", v, None, build, expect=expect)


def fetch_offsets(
    v: int = 8,
    *,
    topics: Mapping[str, Sequence[int]] | None = None,
    groups: Sequence[str | None] = (None,),
    require_stable: bool = False,
    expect: E | None = None,
) -> Step:
    """OffsetFetch; ``topics`` None means "all topics" (v2+). v8+ batches ``groups``."""

    def build(ctx: Context, a: Actor | None) -> Message:
        if v >= 8:
            return OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(
                        group_id=ctx.group_id(g),
                        topics=None
                        if topics is None
                        else [OffsetFetchRequestTopics(topic_name(t), list(p)) for t, p in topics.items()],
                    )
                    for g in groups
                ],
                require_stable=require_stable,
            )
        return OffsetFetchRequest(
            group_id=ctx.group_id(groups[0]),
            topics=None
            if topics is None
            else [OffsetFetchRequestTopic(topic_name(t), list(p)) for t, p in topics.items()],
            require_stable=require_stable,
        )

    return Step(_label("OffsetFetch", None, v), "OffsetFetch", v, None, build, expect=expect)


def describe(
    v: int = 5, *, groups: Sequence[str | None] = (None,), state: str | None = None, include_ops: bool = False
) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return DescribeGroupsRequest(
            groups=[ctx.group_id(g) for g in groups], include_authorized_operations=include_ops
        )

    def check(response: Any) -> str | None:
        got = response["groups"][0]["group_state"]
        return None if state is None or got == state else f"state {got!r}, scenario expects {state!r}"

    return Step(_label("DescribeGroups", None, v, state or ""), "DescribeGroups", v, None, build, check=check)


def list_groups(v: int = 5, *, states: Sequence[str] = (), types: Sequence[str] = ()) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return ListGroupsRequest(states_filter=list(states), types_filter=list(types))

    return Step(_label("ListGroups", None, v), "ListGroups", v, None, build)


def delete_groups(v: int = 2, *, groups: Sequence[str | None] = (None,)) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return DeleteGroupsRequest(groups_names=[ctx.group_id(g) for g in groups])

    return Step(_label("DeleteGroups", None, v), "DeleteGroups", v, None, build)


def offset_delete(
    *, topics: Mapping[str, Sequence[int]], group: str | None = None, expect: E | None = None
) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return OffsetDeleteRequest(
            group_id=ctx.group_id(group),
            topics=[
                OffsetDeleteRequestTopic(topic_name(t), [OffsetDeleteRequestPartition(p) for p in parts])
                for t, parts in topics.items()
            ],
        )

    return Step(_label("OffsetDelete", None, 0), "OffsetDelete", 0, None, build, expect=expect)


def find_coordinator(
    v: int = 4, *, keys: Sequence[str | None] = (None,), key_type: int = 0, expect: E | None = None
) -> Step:
    """FindCoordinator for group keys (``None`` = the scenario's group; other strings are sibling groups,
    ``"="``-prefixed strings are used literally)."""

    def resolve(ctx: Context, k: str | None) -> str:
        return k[1:] if k is not None and k.startswith("=") else ctx.group_id(k)

    def build(ctx: Context, a: Actor | None) -> Message:
        if v >= 4:
            return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[resolve(ctx, k) for k in keys])
        return FindCoordinatorRequest(key=resolve(ctx, keys[0]), key_type=key_type)

    return Step(_label("FindCoordinator", None, v), "FindCoordinator", v, None, build, expect=expect)


def api_versions(v: int = 3) -> Step:
    def build(ctx: Context, a: Actor | None) -> Message:
        return ApiVersionsRequest(client_software_name="regroup-differential", client_software_version="1")

    return Step(_label("ApiVersions", None, v), "ApiVersions", v, None, build)


def sleep(seconds: float) -> Step:
    return Step(f"sleep {seconds:g}s", "sleep", 0, None, None, pause=seconds)


def described_as(state: str, *, group: str | None = None, timeout: float = 30.0) -> Step:
    """Wait (answers not compared) until DescribeGroups shows the group (the scenario's own unless
    ``group`` names another) in ``state``. Kafka's
    coordinator answers reads from the state as of the partition's last committed offset, so a group that
    a write created without records (a JoinGroup answered MEMBER_ID_REQUIRED) may be invisible to a read
    sent right after it."""

    def wait(ctx: Context) -> None:
        deadline = time.monotonic() + timeout
        while True:
            response = ctx.admin.request(
                DescribeGroupsRequest(groups=[ctx.group_id(group)]),
                DescribeGroupsResponse,
                version=5,
                timeout=20,
            )
            got = response.groups[0].group_state if response.groups else None
            if got == state:
                return
            assert time.monotonic() < deadline, f"the group is {got!r}, not {state!r}, after {timeout:g}s"
            time.sleep(0.05)

    return Step(f"wait until the group is {state}", "wait", 0, None, None, wait=wait)


def consumer_coordinator_sees(*names: str, timeout: float = 60.0) -> Step:
    """Wait (answers not compared) until the group coordinator assigns the partitions of ``names`` to a
    consumer-protocol member: Kafka's coordinator learns of topics created a moment ago only once its
    metadata image has them, and a member joining before that gets an empty assignment. A probe member
    of a sibling group joins until it is given partitions, then leaves."""

    def wait(ctx: Context) -> None:
        group_id = ctx.group_id("probe")
        topics = [topic_name(t) for t in names]
        deadline = time.monotonic() + timeout
        while True:
            response = ctx.admin.request(
                ConsumerGroupHeartbeatRequest(
                    group_id=group_id,
                    member_id="probe-member",
                    member_epoch=0,
                    rebalance_timeout_ms=30_000,
                    subscribed_topic_names=topics,
                    topic_partitions=[],
                ),
                ConsumerGroupHeartbeatResponse,
                version=1,
                timeout=20,
            )
            assigned = response.assignment is not None and any(
                t.partitions for t in response.assignment.topic_partitions
            )
            if response.error_code == 0 and assigned:
                leave = ConsumerGroupHeartbeatRequest(
                    group_id=group_id, member_id="probe-member", member_epoch=-1
                )
                ctx.admin.request(leave, ConsumerGroupHeartbeatResponse, version=1, timeout=20)
                return
            assert time.monotonic() < deadline, f"no partitions of {topics} assigned within {timeout:g}s"
            time.sleep(0.1)

    return Step(f"wait until the coordinator assigns {', '.join(names)}", "wait", 0, None, None, wait=wait)


def form_group(
    *actors: str,
    v: int = 9,
    sync_v: int = 5,
    protocols: Iterable[tuple[str, bytes]] = DEFAULT_PROTOCOLS,
    session: int | Mapping[str, int] | None = None,
    rebalance: int | Mapping[str, int] | None = None,
    static: bool = False,
    assign: Mapping[str, Mapping[str, Sequence[int]]] | None = None,
    founder_v: int | None = None,
) -> list[Step]:
    """Steps that bring ``actors`` into a Stable group (first actor leader), one join phase per newcomer
    as real consumers would. ``session``/``rebalance`` may be per actor. The final assignment is
    ``assign`` or round-robin over topic t. ``founder_v`` is the JoinGroup version of the first actor's
    first join (default ``v``)."""
    protos = tuple(protocols)
    steps: list[Step] = []
    joined: list[str] = []

    def timeouts(name: str) -> tuple[int | None, int | None]:
        s = session if session is None or isinstance(session, int) else session.get(name)
        r = rebalance if rebalance is None or isinstance(rebalance, int) else rebalance.get(name)
        return s, r

    def rejoin(name: str, version: int = v, **kw: Any) -> Step:
        s, r = timeouts(name)
        return join(name, version, protocols=protos, session=s, rebalance=r, **kw)

    def member_join(name: str, park: bool) -> list[Step]:
        inst: object = name if static else AUTO
        version = founder_v if founder_v is not None and not joined else v
        out = []
        if version >= 4 and not static and name not in joined:
            out.append(rejoin(name, version, member="", expect=E.MEMBER_ID_REQUIRED))
        out.append(rejoin(name, version, instance=inst, park=park))
        return out

    for name in actors:
        if not joined:
            steps += member_join(name, park=False)
        else:
            steps += member_join(name, park=True)
            steps += [rejoin(old, park=True) for old in joined]
            steps += [wait(x) for x in [name, *joined]]
        group = [*joined, name]
        final: Mapping[str, Mapping[str, Sequence[int]]] = {
            a: {"t": [p for p in range(TOPICS["t"]) if p % len(group) == i]} for i, a in enumerate(group)
        }
        if assign is not None and name == actors[-1]:
            final = assign
        leader, followers = group[0], group[1:]
        steps += [sync(f, sync_v, park=True) for f in followers]
        steps.append(sync(leader, sync_v, assign=final))
        steps += [wait(f) for f in followers]
        joined.append(name)
    return steps


def primary_error(api: str, response: Any) -> int | None:
    """The error code a step's ``expect`` refers to."""
    if not isinstance(response, dict) or "<no response>" in response:
        return None
    code = _primary_error(api, response)
    return None if code is None else int(code)


def _primary_error(api: str, response: dict[str, Any]) -> Any:
    if api == "FindCoordinator":
        return (
            response["coordinators"][0]["error_code"]
            if response.get("coordinators")
            else response["error_code"]
        )
    if api in ("OffsetCommit", "TxnOffsetCommit"):
        codes = {p["error_code"] for t in response["topics"] for p in t["partitions"]}
        return codes.pop() if len(codes) == 1 else None
    if api == "OffsetFetch":
        if response.get("groups"):
            return response["groups"][0]["error_code"]
        return response.get("error_code", 0)
    if api == "LeaveGroup":
        if response["error_code"] or not response.get("members"):
            return response["error_code"]
        codes = {m["error_code"] for m in response["members"]}
        return codes.pop() if len(codes) == 1 else None
    return response.get("error_code")
