"""An asyncio admin client for consumer groups: the requests Kafka's ``Admin`` sends, and no more.

Each call finds the broker that can answer (the group coordinator, the partition leader, every broker
for ListGroups), batches per broker where the protocol allows, and retries while the coordinator moves
or loads, until the call's deadline. Broker-reported failures come back as :class:`AdminError` values
(per group / per partition); a broker that cannot be reached raises :class:`BrokerUnreachableError`.

It runs on the asyncio :class:`~regroup.client.connection.Connection` rather than the blocking one the
pipeline and the tests use, because one call talks to many brokers at once (ListGroups asks every broker,
offsets go to each partition's leader) and a blocking socket would serialize those round trips.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from regroup.admin.javacompat import exception_string, hashmap_order
from regroup.client.connection import Connection, open_connection, parse_bootstrap_servers
from regroup.client.errors import KafkaConnectionError, RequestTimedOutError, UnsupportedApiVersionError
from regroup.client.types import TopicPartition
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.javahash import java_string_hash
from regroup.protocol.message import Message
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from regroup.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from regroup.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from regroup.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from regroup.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from regroup.protocol.primitives import DecodeError
from regroup.protocol.records.consumer_protocol import ConsumerProtocolAssignment

__all__ = [
    "EARLIEST",
    "LATEST",
    "AdminClient",
    "AdminError",
    "BrokerUnreachableError",
    "CommittedOffset",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "Node",
    "PartitionMetadata",
    "canonical_state",
]

R = TypeVar("R", bound=Message)
T = TypeVar("T")

EARLIEST = -2
LATEST = -1

# org.apache.kafka.common.GroupState names; parsing is case-insensitive, anything else is "Unknown".
GROUP_STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
    "NotReady",
)
_STATE_BY_UPPER = {s.upper(): s for s in GROUP_STATES}

CONSUMER_PROTOCOL_TYPE = "consumer"
_COORDINATOR_RETRIABLE = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
)
_LEADER_RETRIABLE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)
_BACKOFF_S = 0.1


def canonical_state(name: str) -> str:
    """``GroupState.parse(name).toString()``: the canonical spelling, or ``Unknown``."""
    return _STATE_BY_UPPER.get(name.upper(), "Unknown")


class AdminError(Exception):
    """A failure the broker reported (or a deadline that passed), as Kafka's Admin would raise it."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = code
        self.message = code.message if message is None else message
        super().__init__(self.message)

    @property
    def java(self) -> str:
        """``Throwable.toString()`` of the Java exception: ``org.apache...XxxException: message``."""
        return exception_string(self.code, self.message)


class BrokerUnreachableError(Exception):
    """No connection to a broker (refused, timed out, or lost); the message names the address."""

    def __init__(self, message: str, *, address: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None
    type: str | None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]
    target_assignment: tuple[TopicPartition, ...] | None = None
    member_epoch: int | None = None
    # Classic groups: the raw consumer-protocol subscription and assignment (for --describe --state --health).
    metadata: bytes = b""
    raw_assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    assignor: str
    members: tuple[MemberDescription, ...]
    coordinator: Node
    type: str = "classic"
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int | None = None
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int


@dataclass(slots=True)
class _Deadline:
    at: float
    timeout_ms: int

    def remaining_ms(self) -> int:
        return max(1, int((self.at - time.monotonic()) * 1000))

    def expired(self) -> bool:
        return time.monotonic() >= self.at


def decode_consumer_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a consumer-protocol assignment; empty bytes (or garbage) mean none."""
    if not data:
        return ()
    try:
        assignment, _ = ConsumerProtocolAssignment.decode_versioned(data, lenient=True)
    except (DecodeError, ValueError):
        return ()
    return tuple(TopicPartition(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions)


class AdminClient:
    """Consumer-group administration against any Kafka-compatible cluster (PLAINTEXT listeners)."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout_ms: int = 30000,
        client_id: str = "regroup-admin",
        request_timeout_ms: int | None = None,
        retry_backoff_ms: int = 100,
    ) -> None:
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.timeout_ms = timeout_ms
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms or timeout_ms
        self._backoff_s = retry_backoff_ms / 1000
        self._connections: dict[tuple[str, int], Connection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Task[Connection]] = {}
        self._bootstrap_address: tuple[str, int] | None = None
        self._nodes: dict[int, Node] = {}
        self._coordinators: dict[str, Node] = {}

    # ------------------------------------------------------------------------------ connections

    def _deadline(self) -> _Deadline:
        return _Deadline(time.monotonic() + self.timeout_ms / 1000, self.timeout_ms)

    async def _connect(self, host: str, port: int) -> Connection:
        key = (host, port)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        task = self._connecting.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                open_connection(
                    host,
                    port,
                    client_id=self._client_id,
                    request_timeout_ms=self._request_timeout_ms,
                    connect_timeout_ms=min(self.timeout_ms, 30000),
                )
            )
            self._connecting[key] = task
        try:
            conn = await task
        except (KafkaConnectionError, UnsupportedApiVersionError, TimeoutError) as exc:
            reason = _reason(exc)
            raise BrokerUnreachableError(
                f"cannot connect to the broker at {host}:{port} ({reason})",
                address=f"{host}:{port}",
                reason=reason,
            ) from exc
        finally:
            if self._connecting.get(key) is task:
                del self._connecting[key]
        self._connections[key] = conn
        return conn

    async def bootstrap(self) -> Connection:
        """A connection to the first reachable bootstrap server (and the broker list it reports)."""
        if self._bootstrap_address is not None:
            return await self._connect(*self._bootstrap_address)
        failures: list[str] = []
        for host, port in self._bootstrap:
            try:
                conn = await self._connect(host, port)
            except BrokerUnreachableError as exc:
                if len(self._bootstrap) == 1:
                    raise
                failures.append(f"{exc.address} ({exc.reason})")
                continue
            self._bootstrap_address = (host, port)
            await self._refresh_metadata([])
            return conn
        raise BrokerUnreachableError(f"cannot connect to any bootstrap server: {', '.join(failures)}")

    async def _node_connection(self, node: Node) -> Connection:
        return await self._connect(node.host, node.port)

    async def _send(
        self, conn: Connection, message: Message, response_type: type[R], deadline: _Deadline
    ) -> R:
        try:
            return await conn.request(
                message, response_type, timeout_ms=min(self._request_timeout_ms, deadline.remaining_ms())
            )
        except KafkaConnectionError as exc:
            raise BrokerUnreachableError(
                f"lost the connection to the broker at {conn.host}:{conn.port} ({_reason(exc)})"
            ) from exc
        except UnsupportedApiVersionError as exc:
            raise AdminError(ErrorCode.UNSUPPORTED_VERSION, str(exc)) from exc
        except DecodeError as exc:
            raise BrokerUnreachableError(
                f"cannot decode the answer of the broker at {conn.host}:{conn.port}: {exc}"
            ) from exc

    @staticmethod
    def _version(conn: Connection, api: ApiKey, minimum: int = 0) -> int:
        try:
            version = conn.version(api)
        except UnsupportedApiVersionError as exc:
            raise AdminError(ErrorCode.UNSUPPORTED_VERSION, str(exc)) from exc
        if version < minimum:
            raise AdminError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"the broker at {conn.host}:{conn.port} supports {API_INFO[api].name} only up to "
                f"v{version}; this tool needs v{minimum} or newer",
            )
        return version

    async def close(self) -> None:
        for task in self._connecting.values():
            task.cancel()
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            await conn.close()

    async def _retry(self, deadline: _Deadline, what: str, attempt: Callable[[], Awaitable[T | None]]) -> T:
        """Run ``attempt`` until it returns a value (None means: retriable, try again) or time runs out."""
        while True:
            result = await attempt()
            if result is not None:
                return result
            if deadline.expired():
                raise AdminError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"Timed out waiting for {what} after {deadline.timeout_ms} ms",
                )
            await asyncio.sleep(min(self._backoff_s, deadline.remaining_ms() / 1000))

    # ------------------------------------------------------------------------------ metadata

    async def _refresh_metadata(self, topics: Sequence[str] | None) -> MetadataResponse:
        conn = await self.bootstrap()
        deadline = self._deadline()
        version = self._version(conn, ApiKey.METADATA, 1)
        response = await self._send(conn, metadata_request(topics, version), MetadataResponse, deadline)
        if response.brokers:
            self._nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in response.brokers}
        return response

    async def brokers(self) -> list[Node]:
        await self.bootstrap()
        if not self._nodes:
            await self._refresh_metadata([])
        return [self._nodes[i] for i in sorted(self._nodes)]

    async def describe_topics(self, topics: Iterable[str]) -> dict[str, list[PartitionMetadata] | AdminError]:
        """Partitions (with leaders) of each topic, or the error the broker reported for it."""
        wanted = list(dict.fromkeys(topics))
        if not wanted:
            return {}
        deadline = self._deadline()
        out: dict[str, list[PartitionMetadata] | AdminError] = {}

        async def attempt() -> bool | None:
            response = await self._refresh_metadata([t for t in wanted if t not in out])
            for topic in response.topics:
                if topic.name is None or topic.name not in wanted:
                    continue
                code = ErrorCode.from_code(topic.error_code)
                if code is ErrorCode.NONE:
                    out[topic.name] = sorted(
                        (PartitionMetadata(p.partition_index, p.leader_id) for p in topic.partitions),
                        key=lambda p: p.partition,
                    )
                elif code is ErrorCode.LEADER_NOT_AVAILABLE and not deadline.expired():
                    continue  # the topic is being created
                else:
                    out[topic.name] = AdminError(code)
            missing = [t for t in wanted if t not in out]
            if not missing:
                return True
            if deadline.expired():
                for t in missing:
                    out[t] = AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                return True
            return None

        await self._retry(deadline, "topic metadata", attempt)
        return {t: out[t] for t in wanted}

    # ------------------------------------------------------------------------------ coordinators

    async def find_coordinators(self, groups: Iterable[str]) -> dict[str, Node | AdminError]:
        """The coordinator of each group: one batched FindCoordinator (v4+) or one request per group."""
        pending = list(dict.fromkeys(groups))
        out: dict[str, Node | AdminError] = {
            g: self._coordinators[g] for g in pending if g in self._coordinators
        }
        pending = [g for g in pending if g not in out]
        if not pending:
            return out
        conn = await self.bootstrap()
        deadline = self._deadline()
        version = self._version(conn, ApiKey.FIND_COORDINATOR)

        def record(group: str, code: ErrorCode, node: Node, message: str | None) -> None:
            if code is ErrorCode.NONE:
                self._coordinators[group] = node
                out[group] = node
            elif code not in _COORDINATOR_RETRIABLE:
                out[group] = AdminError(code, message or None)

        async def attempt() -> bool | None:
            todo = [g for g in pending if g not in out]
            if version >= 4:
                response = await self._send(
                    conn,
                    FindCoordinatorRequest(key_type=0, coordinator_keys=todo),
                    FindCoordinatorResponse,
                    deadline,
                )
                for c in response.coordinators:
                    if c.key in todo:
                        record(
                            c.key,
                            ErrorCode.from_code(c.error_code),
                            Node(c.node_id, c.host, c.port),
                            c.error_message,
                        )
            else:
                responses = await asyncio.gather(
                    *(
                        self._send(
                            conn, FindCoordinatorRequest(key=g, key_type=0), FindCoordinatorResponse, deadline
                        )
                        for g in todo
                    )
                )
                for g, r in zip(todo, responses, strict=True):
                    record(
                        g, ErrorCode.from_code(r.error_code), Node(r.node_id, r.host, r.port), r.error_message
                    )
            return True if all(g in out for g in pending) else None

        try:
            await self._retry(deadline, "the group coordinator", attempt)
        except AdminError as exc:
            for g in pending:
                out.setdefault(g, exc)
        return out

    async def _per_coordinator(
        self,
        groups: Sequence[str],
        call: Callable[
            [Connection, list[str], _Deadline], Awaitable[Mapping[str, T | ErrorCode | AdminError]]
        ],
        what: str,
    ) -> dict[str, T | AdminError]:
        """Send ``call`` to each group's coordinator with its groups, re-finding coordinators and retrying
        groups whose answer is a coordinator error (moved, loading, not available); an ``AdminError``
        answer (an error with the broker's message) is final."""
        deadline = self._deadline()
        out: dict[str, T | AdminError] = {}
        wanted = list(dict.fromkeys(groups))

        async def attempt() -> bool | None:
            todo = [g for g in wanted if g not in out]
            coordinators = await self.find_coordinators(todo)
            by_node: dict[Node, list[str]] = {}
            for g in todo:
                c = coordinators[g]
                if isinstance(c, AdminError):
                    out[g] = c
                else:
                    by_node.setdefault(c, []).append(g)

            async def one(node: Node, names: list[str]) -> None:
                conn = await self._node_connection(node)
                for g, result in (await call(conn, names, deadline)).items():
                    if isinstance(result, ErrorCode):
                        if result in _COORDINATOR_RETRIABLE:
                            self._coordinators.pop(g, None)
                            continue
                        out[g] = AdminError(result)
                    else:
                        out[g] = result

            await asyncio.gather(*(one(n, names) for n, names in by_node.items()))
            return True if all(g in out for g in wanted) else None

        try:
            await self._retry(deadline, what, attempt)
        except AdminError as exc:
            for g in wanted:
                out.setdefault(g, exc)
        return {g: out[g] for g in wanted}

    # ------------------------------------------------------------------------------ groups

    async def list_groups(
        self,
        states: Sequence[str] = (),
        types: Sequence[str] = (),
        protocol_types: Sequence[str] | None = None,
    ) -> list[GroupListing]:
        """ListGroups on every broker, filtering by state (v4+) and type (v5+) on the broker when it can.

        Brokers too old for a filter get the request without it: the type filter is then applied here
        (such brokers only have classic groups) and the state filter through DescribeGroups.
        """
        deadline = self._deadline()
        brokers = await self.brokers()
        wanted_states = {s.upper() for s in states}
        wanted_types = {t.lower() for t in types}

        async def on(node: Node) -> list[GroupListing]:
            conn = await self._node_connection(node)
            version = self._version(conn, ApiKey.LIST_GROUPS)
            if wanted_types and version < 5 and "classic" not in wanted_types:
                return []

            async def attempt() -> ListGroupsResponse | None:
                request = ListGroupsRequest(
                    states_filter=list(states) if version >= 4 else [],
                    types_filter=list(types) if version >= 5 else [],
                )
                response = await self._send(conn, request, ListGroupsResponse, deadline)
                code = ErrorCode.from_code(response.error_code)
                if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    return None
                if code is not ErrorCode.NONE:
                    raise AdminError(code)
                return response

            response = await self._retry(deadline, f"ListGroups from {node.address}", attempt)
            listings = [
                GroupListing(
                    g.group_id,
                    g.protocol_type,
                    canonical_state(g.group_state) if version >= 4 and g.group_state else None,
                    g.group_type if version >= 5 and g.group_type else None,
                )
                for g in response.groups
            ]
            if wanted_states and version < 4:
                described = await self.describe_groups([g.group_id for g in listings], consumer_only=False)
                listings = [
                    GroupListing(g.group_id, g.protocol_type, d.state, g.type)
                    for g in listings
                    if isinstance(d := described[g.group_id], GroupDescription)
                ]
            return listings

        results = await asyncio.gather(*(on(n) for n in brokers))
        # The Admin collects listings in a HashMap keyed by group id and returns its values.
        by_id: dict[str, GroupListing] = {}
        for listings in results:
            for g in listings:
                if protocol_types is not None and g.protocol_type not in protocol_types:
                    continue
                if wanted_states and (g.state or "").upper() not in wanted_states:
                    continue
                if wanted_types and g.type is not None and g.type.lower() not in wanted_types:
                    continue
                by_id[g.group_id] = g
        return [by_id[g] for g in hashmap_order(by_id, java_string_hash)]

    async def describe_groups(
        self, groups: Sequence[str], *, consumer_only: bool = True
    ) -> dict[str, GroupDescription | AdminError]:
        """Describe groups as the 4.x Admin does: ConsumerGroupDescribe where the broker has it, and
        DescribeGroups for classic groups (and brokers without it). An unknown group is a GROUP_ID_NOT_FOUND
        error from DescribeGroups v6 (KIP-1043; with ConsumerGroupDescribe's message when that said
        GROUP_ID_NOT_FOUND first, as the Admin prefers it), and comes back with state ``Dead`` from older
        versions. With ``consumer_only`` a classic group of another protocol type is an error."""
        wanted = list(dict.fromkeys(groups))
        # ConsumerGroupDescribe's GROUP_ID_NOT_FOUND messages (Kafka's groupIdNotFoundErrorMessages).
        not_found: dict[str, str | None] = {}

        async def consumer_describe(
            conn: Connection, names: list[str], deadline: _Deadline
        ) -> dict[str, GroupDescription | ErrorCode | None]:
            if not conn.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
                return dict.fromkeys(names)
            response = await self._send(
                conn, ConsumerGroupDescribeRequest(group_ids=names), ConsumerGroupDescribeResponse, deadline
            )
            out: dict[str, GroupDescription | ErrorCode | None] = dict.fromkeys(names)
            for g in response.groups:
                code = ErrorCode.from_code(g.error_code)
                node = self._coordinators.get(g.group_id)
                if g.group_id not in out:
                    continue
                if code is ErrorCode.NONE and node is not None:
                    out[g.group_id] = GroupDescription(
                        group_id=g.group_id,
                        state=canonical_state(g.group_state),
                        protocol_type=CONSUMER_PROTOCOL_TYPE,
                        assignor=g.assignor_name,
                        members=tuple(
                            MemberDescription(
                                member_id=m.member_id,
                                group_instance_id=m.instance_id,
                                client_id=m.client_id,
                                host=m.client_host,
                                assignment=_partitions(m.assignment.topic_partitions),
                                target_assignment=_partitions(m.target_assignment.topic_partitions),
                                member_epoch=m.member_epoch,
                            )
                            for m in g.members
                        ),
                        coordinator=node,
                        type="consumer",
                        group_epoch=g.group_epoch,
                        target_assignment_epoch=g.assignment_epoch,
                    )
                elif code in _COORDINATOR_RETRIABLE:
                    out[g.group_id] = code
                elif code is ErrorCode.GROUP_ID_NOT_FOUND:
                    not_found[g.group_id] = g.error_message
                # GROUP_ID_NOT_FOUND (a classic or unknown group) and anything else: ask DescribeGroups.
            return out

        async def call(
            conn: Connection, names: list[str], deadline: _Deadline
        ) -> dict[str, GroupDescription | ErrorCode | AdminError]:
            first = await consumer_describe(conn, names, deadline)
            out: dict[str, GroupDescription | ErrorCode | AdminError] = {
                g: r for g, r in first.items() if r is not None
            }
            classic = [g for g, r in first.items() if r is None]
            if not classic:
                return out
            response = await self._send(
                conn, DescribeGroupsRequest(groups=classic), DescribeGroupsResponse, deadline
            )
            for g in response.groups:
                if g.group_id not in classic:
                    continue
                code = ErrorCode.from_code(g.error_code)
                node = self._coordinators.get(g.group_id)
                if code is ErrorCode.GROUP_ID_NOT_FOUND:  # v6+: the group does not exist
                    message = not_found.get(g.group_id, g.error_message)  # the stored one even if None
                    out[g.group_id] = AdminError(code, message)
                    continue
                if code is not ErrorCode.NONE or node is None:
                    out[g.group_id] = code if code is not ErrorCode.NONE else ErrorCode.NOT_COORDINATOR
                    continue
                if consumer_only and g.protocol_type not in ("", CONSUMER_PROTOCOL_TYPE):
                    out[g.group_id] = GroupDescription(
                        g.group_id, canonical_state(g.group_state), g.protocol_type, "", (), node
                    )
                    continue
                out[g.group_id] = GroupDescription(
                    group_id=g.group_id,
                    state=canonical_state(g.group_state),
                    protocol_type=g.protocol_type,
                    assignor=g.protocol_data,
                    members=tuple(
                        MemberDescription(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            host=m.client_host,
                            assignment=decode_consumer_assignment(m.member_assignment),
                            metadata=m.member_metadata,
                            raw_assignment=m.member_assignment,
                        )
                        for m in g.members
                    ),
                    coordinator=node,
                )
            return out

        return await self._per_coordinator(wanted, call, "the group description")

    async def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset | None]:
        """All committed offsets of a group (OffsetFetch for all topics); ``None`` where the broker
        listed a partition without an offset."""
        result = await self.committed_offsets_of([group])
        value = result[group]
        if isinstance(value, AdminError):
            raise value
        return value

    async def committed_offsets_of(
        self, groups: Sequence[str]
    ) -> dict[str, dict[TopicPartition, CommittedOffset | None] | AdminError]:
        async def call(
            conn: Connection, names: list[str], deadline: _Deadline
        ) -> dict[str, dict[TopicPartition, CommittedOffset | None] | ErrorCode]:
            version = self._version(conn, ApiKey.OFFSET_FETCH, 2)
            out: dict[str, dict[TopicPartition, CommittedOffset | None] | ErrorCode] = {}
            if version >= 8:
                request = OffsetFetchRequest(
                    groups=[OffsetFetchRequestGroup(group_id=g, topics=None) for g in names]
                )
                response = await self._send(conn, request, OffsetFetchResponse, deadline)
                for rg in response.groups:
                    code = ErrorCode.from_code(rg.error_code)
                    if code is not ErrorCode.NONE:
                        out[rg.group_id] = code
                        continue
                    out[rg.group_id] = {
                        TopicPartition(t.name, p.partition_index): _committed(
                            p.committed_offset, p.committed_leader_epoch, p.metadata
                        )
                        for t in rg.topics
                        for p in t.partitions
                        if p.error_code == ErrorCode.NONE
                    }
                return out
            for g in names:
                response = await self._send(
                    conn, OffsetFetchRequest(group_id=g, topics=None), OffsetFetchResponse, deadline
                )
                code = ErrorCode.from_code(response.error_code)
                if code is not ErrorCode.NONE:
                    out[g] = code
                    continue
                out[g] = {
                    TopicPartition(t.name, p.partition_index): _committed(
                        p.committed_offset, p.committed_leader_epoch, p.metadata
                    )
                    for t in response.topics
                    for p in t.partitions
                    if p.error_code == ErrorCode.NONE
                }
            return out

        return await self._per_coordinator(groups, call, "committed offsets")

    async def commit_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ErrorCode]:
        """The Admin's offset commit: generation -1, empty member id; brokers accept it only while the
        group has no members. Returns each partition's error code."""
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=offset, committed_metadata=""
                )
            )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )

        async def call(
            conn: Connection, names: list[str], deadline: _Deadline
        ) -> dict[str, dict[TopicPartition, ErrorCode] | ErrorCode]:
            self._version(conn, ApiKey.OFFSET_COMMIT, 2)
            response = await self._send(conn, request, OffsetCommitResponse, deadline)
            errors = {
                TopicPartition(t.name, p.partition_index): ErrorCode.from_code(p.error_code)
                for t in response.topics
                for p in t.partitions
            }
            coordinator_error = next((e for e in errors.values() if e in _COORDINATOR_RETRIABLE), None)
            return {group: coordinator_error if coordinator_error is not None else errors}

        result = (await self._per_coordinator([group], call, "the offset commit"))[group]
        if isinstance(result, AdminError):
            raise result
        return result

    async def delete_groups(self, groups: Sequence[str]) -> dict[str, ErrorCode | AdminError]:
        """DeleteGroups at each coordinator; ``ErrorCode.NONE`` for deleted groups."""

        async def call(conn: Connection, names: list[str], deadline: _Deadline) -> dict[str, ErrorCode]:
            response = await self._send(
                conn, DeleteGroupsRequest(groups_names=names), DeleteGroupsResponse, deadline
            )
            return {
                r.group_id: ErrorCode.from_code(r.error_code) for r in response.results if r.group_id in names
            }

        # NONE is a success here, not a retriable error: wrap it so _per_coordinator keeps it.
        async def wrapped(
            conn: Connection, names: list[str], deadline: _Deadline
        ) -> dict[str, _Code | ErrorCode]:
            return {
                g: code if code in _COORDINATOR_RETRIABLE else _Code(code)
                for g, code in (await call(conn, names, deadline)).items()
            }

        out = await self._per_coordinator(groups, wrapped, "group deletion")
        return {g: r.code if isinstance(r, _Code) else r for g, r in out.items()}

    async def delete_offsets(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: the top-level error and each partition's error."""
        by_topic: dict[str, list[OffsetDeleteRequestPartition]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(
                OffsetDeleteRequestPartition(partition_index=tp.partition)
            )
        request = OffsetDeleteRequest(
            group_id=group,
            topics=[OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )

        async def call(
            conn: Connection, names: list[str], deadline: _Deadline
        ) -> dict[str, tuple[ErrorCode, dict[TopicPartition, ErrorCode]] | ErrorCode]:
            response = await self._send(conn, request, OffsetDeleteResponse, deadline)
            top = ErrorCode.from_code(response.error_code)
            if top in _COORDINATOR_RETRIABLE:
                return {group: top}
            return {
                group: (
                    top,
                    {
                        TopicPartition(t.name, p.partition_index): ErrorCode.from_code(p.error_code)
                        for t in response.topics
                        for p in t.partitions
                    },
                )
            }

        result = (await self._per_coordinator([group], call, "the offset deletion"))[group]
        if isinstance(result, AdminError):
            return result.code, {}
        return result

    # ------------------------------------------------------------------------------ log offsets

    async def list_log_offsets(
        self, partitions: Iterable[TopicPartition], spec: int
    ) -> dict[TopicPartition, int | AdminError]:
        """ListOffsets at each partition's leader: ``EARLIEST``, ``LATEST`` or a timestamp (ms).

        For a timestamp the offset is -1 when no record is that recent (Kafka's ``UNKNOWN_OFFSET``).
        """
        wanted = list(dict.fromkeys(partitions))
        out: dict[TopicPartition, int | AdminError] = {}
        if not wanted:
            return out
        deadline = self._deadline()

        async def attempt() -> bool | None:
            todo = [tp for tp in wanted if tp not in out]
            topics = await self.describe_topics({tp.topic for tp in todo})
            by_leader: dict[int, list[TopicPartition]] = {}
            retry = False
            for tp in todo:
                meta = topics[tp.topic]
                if isinstance(meta, AdminError):
                    out[tp] = meta
                    continue
                leader = next((p.leader for p in meta if p.partition == tp.partition), None)
                if leader is None:
                    out[tp] = AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif leader < 0 or leader not in self._nodes:
                    retry = True
                else:
                    by_leader.setdefault(leader, []).append(tp)

            async def one(leader: int, tps: list[TopicPartition]) -> None:
                nonlocal retry
                conn = await self._node_connection(self._nodes[leader])
                version = self._version(conn, ApiKey.LIST_OFFSETS, 1)
                request = list_offsets_request(tps, spec, deadline.remaining_ms(), version)
                response = await self._send(conn, request, ListOffsetsResponse, deadline)
                for t in response.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        code = ErrorCode.from_code(p.error_code)
                        if code is ErrorCode.NONE:
                            out[tp] = p.offset
                        elif code in _LEADER_RETRIABLE:
                            retry = True
                        else:
                            out[tp] = AdminError(code)

            await asyncio.gather(*(one(leader, tps) for leader, tps in by_leader.items()))
            if all(tp in out for tp in wanted):
                return True
            if retry:
                return None
            for tp in wanted:
                out.setdefault(tp, AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            return True

        try:
            await self._retry(deadline, "partition offsets", attempt)
        except AdminError as exc:
            for tp in wanted:
                out.setdefault(tp, exc)
        return {tp: out[tp] for tp in wanted}

    async def fetch_log(self, tp: TopicPartition, start: int, end: int, max_bytes: int = 1 << 20) -> bytes:
        """The record batches of ``tp`` from offset ``start`` up to ``end`` (exclusive), read with Fetch
        (read-uncommitted) at the partition's leader, concatenated as the broker sent them."""
        meta = await self._refresh_metadata([tp.topic])
        topic = next((t for t in meta.topics if t.name == tp.topic), None)
        if topic is None:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if topic.error_code:
            raise AdminError(ErrorCode.from_code(topic.error_code))
        leader = next((p.leader_id for p in topic.partitions if p.partition_index == tp.partition), None)
        if leader is None or leader not in self._nodes:
            raise AdminError(ErrorCode.LEADER_NOT_AVAILABLE)
        conn = await self._node_connection(self._nodes[leader])
        self._version(conn, ApiKey.FETCH, 4)  # record batches (magic 2) need Fetch v4+
        deadline = self._deadline()
        chunks: list[bytes] = []
        offset = start
        while offset < end:
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=max_bytes,
                topics=[
                    FetchTopic(
                        topic=tp.topic,
                        topic_id=topic.topic_id,
                        partitions=[
                            FetchPartition(
                                partition=tp.partition, fetch_offset=offset, partition_max_bytes=max_bytes
                            )
                        ],
                    )
                ],
            )
            response = await self._send(conn, request, FetchResponse, deadline)
            if response.error_code:
                raise AdminError(ErrorCode.from_code(response.error_code))
            data = next((p for r in response.responses for p in r.partitions), None)
            if data is None:
                raise AdminError(ErrorCode.UNKNOWN_SERVER_ERROR, "the Fetch response has no partition")
            if data.error_code:
                raise AdminError(ErrorCode.from_code(data.error_code))
            records = data.records or b""
            next_offset = _next_offset(records)
            if next_offset is None or next_offset <= offset:
                break
            chunks.append(records)
            offset = next_offset
            if deadline.expired():
                raise AdminError(ErrorCode.REQUEST_TIMED_OUT, f"Timed out reading {tp.topic}-{tp.partition}")
        return b"".join(chunks)


def _next_offset(records: bytes) -> int | None:
    """The offset after the last complete record batch of ``records`` (None when there is none)."""
    pos, last = 0, None
    while pos + 12 <= len(records):
        base = int.from_bytes(records[pos : pos + 8], "big", signed=True)
        length = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True)
        if length <= 0 or pos + 12 + length > len(records) or length < 49:
            break
        last_offset_delta = int.from_bytes(records[pos + 23 : pos + 27], "big", signed=True)
        last = base + last_offset_delta + 1
        pos += 12 + length
    return last


def metadata_request(topics: Sequence[str] | None, version: int) -> MetadataRequest:
    """Metadata for ``topics`` (None: all; empty: brokers only, which needs v1+), never creating topics."""
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
    )
    if version >= 4:
        request.allow_auto_topic_creation = False
    return request


def list_offsets_request(
    partitions: Iterable[TopicPartition], spec: int, timeout_ms: int, version: int
) -> ListOffsetsRequest:
    """ListOffsets as a consumer (replica -1, read-uncommitted) for ``spec`` on every partition."""
    grouped: dict[str, list[ListOffsetsPartition]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(
            ListOffsetsPartition(partition_index=tp.partition, timestamp=spec)
        )
    request = ListOffsetsRequest(
        replica_id=-1, topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in grouped.items()]
    )
    if version >= 10:
        request.timeout_ms = timeout_ms
    return request


@dataclass(frozen=True, slots=True)
class _Code:
    code: ErrorCode


def _partitions(topic_partitions: Iterable[object]) -> tuple[TopicPartition, ...]:
    out: list[TopicPartition] = []
    for t in topic_partitions:
        name = getattr(t, "topic_name", "")
        out.extend(TopicPartition(name, p) for p in getattr(t, "partitions", ()))
    return tuple(out)


def _committed(offset: int, leader_epoch: int, metadata: str | None) -> CommittedOffset | None:
    # A negative offset means "nothing committed" (ListConsumerGroupOffsetsHandler maps it to null).
    if offset < 0:
        return None
    return CommittedOffset(offset, leader_epoch if leader_epoch >= 0 else None, metadata or "")


def _reason(exc: BaseException) -> str:
    """The interesting part of a connection error: 'connection refused', 'timed out', ..."""
    if isinstance(exc, UnsupportedApiVersionError):
        return f"it rejected every ApiVersions version: {exc}"
    if isinstance(exc, RequestTimedOutError):
        m = re.search(r"no response within (\S+)", str(exc))
        return f"connected, but got no response within {m.group(1) if m else 'the timeout'}"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, TimeoutError) or isinstance(exc, TimeoutError):
        return "timed out connecting"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror[0].lower() + cause.strerror[1:]
    text = re.sub(r"^(?:cannot connect to|connection to|write to) \S+(?: failed)?: ", "", str(exc))
    return text or type(exc).__name__
