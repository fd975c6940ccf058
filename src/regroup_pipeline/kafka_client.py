"""A small blocking Kafka client over a plain socket, built on regroup's generated codecs.

It speaks just what the pipeline needs from a cluster — ApiVersions (version negotiation), Metadata
(partition counts and leaders), ListOffsets (log start and end offsets), DescribeConfigs (topics'
retention settings), FindCoordinator and OffsetCommit in its admin form (generation −1, empty member id,
no instance id) — to any Kafka-compatible broker. The codecs are the ones the broker itself uses, so the
pipeline needs no third-party Kafka client and commits exactly the request an admin tool would send.
Connections are regroup's :class:`BlockingConnection` (the pipeline's driver calls from Spark listener
threads, where no event loop runs); their failures surface as :class:`KafkaClientError`.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Final, Self, TypeVar

from regroup.client.blocking import BlockingConnection, connect
from regroup.client.connection import parse_bootstrap_servers
from regroup.client.errors import KafkaConnectionError, UnsupportedApiVersionError
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.message import Message
from regroup.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
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

__all__ = ["KafkaClientError", "SimpleKafkaClient"]

_GROUP_KEY_TYPE: Final = 0
_TOPIC_RESOURCE: Final = 2
_LATEST: Final = -1
_EARLIEST: Final = -2
_RETRIABLE_COORDINATOR_ERRORS: Final = frozenset(
    {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)

M = TypeVar("M", bound=Message)


class KafkaClientError(RuntimeError):
    """A request failed: the broker answered an error code, or the connection broke."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class SimpleKafkaClient:
    """Blocking requests to a Kafka-compatible cluster; not thread-safe (use one per thread)."""

    def __init__(
        self, bootstrap_servers: str, *, timeout: float = 10.0, client_id: str = "regroup-pipeline"
    ) -> None:
        self._bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self._timeout = timeout
        self._client_id = client_id
        self._connections: dict[tuple[str, int], BlockingConnection] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    # ------------------------------------------------------------------------------------- plumbing

    def _connect(self, address: tuple[str, int]) -> BlockingConnection:
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = connect(address, client_id=self._client_id, timeout=self._timeout)
        except KafkaError as exc:
            raise KafkaClientError(f"ApiVersions failed: {exc}", int(exc.code)) from exc
        except (KafkaConnectionError, UnsupportedApiVersionError) as exc:
            raise KafkaClientError(str(exc)) from exc
        self._connections[address] = conn
        return conn

    @staticmethod
    def _request(conn: BlockingConnection, message: Message, response_type: type[M], version: int) -> M:
        try:
            return conn.request(message, response_type, version=version)
        except KafkaConnectionError as exc:
            raise KafkaClientError(str(exc)) from exc

    def _any(self) -> BlockingConnection:
        last: Exception | None = None
        for address in self._bootstrap:
            try:
                return self._connect(address)
            except (OSError, KafkaClientError) as exc:
                last = exc
        raise KafkaClientError(f"no bootstrap server reachable: {last}")

    @staticmethod
    def _version(conn: BlockingConnection, message: type[Message]) -> int:
        try:
            return conn.version(ApiKey(message.API_KEY))
        except UnsupportedApiVersionError as exc:
            raise KafkaClientError(str(exc)) from exc

    # ------------------------------------------------------------------------------------- APIs

    def _metadata(self, topics: list[str] | None) -> MetadataResponse:
        conn = self._any()
        version = self._version(conn, MetadataRequest)
        if version == 0 and topics is None:
            wanted: list[MetadataRequestTopic] | None = []  # v0: an empty list means all topics
        else:
            wanted = None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
        request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False)
        return self._request(conn, request, MetadataResponse, version)

    def partition_counts(self, topics: list[str] | None = None) -> dict[str, int]:
        """Partition count of each topic (all topics when ``topics`` is None), from Metadata."""
        reply = self._metadata(topics)
        return {t.name: len(t.partitions) for t in reply.topics if t.name is not None and t.error_code == 0}

    def topic_ids(self, topics: list[str] | None = None) -> dict[str, str]:
        """Topic name → topic id in Kafka's string form, from Metadata (v10+; none from older brokers)."""
        reply = self._metadata(topics)
        return {
            t.name: base64.urlsafe_b64encode(t.topic_id.bytes).rstrip(b"=").decode()
            for t in reply.topics
            if t.name is not None and t.error_code == 0 and t.topic_id.int != 0
        }

    def log_end_offsets(self, topics: list[str] | None = None) -> dict[tuple[str, int], int]:
        """ListOffsets(latest) of every partition of ``topics`` (all topics when None), asked of each
        partition's leader: the offset a consumer reaching the end would commit."""
        return self._list_offsets(topics, _LATEST)

    def log_start_offsets(self, topics: list[str] | None = None) -> dict[tuple[str, int], int]:
        """ListOffsets(earliest) of every partition of ``topics`` (all topics when None): the first offset
        retention (or DeleteRecords) has left."""
        return self._list_offsets(topics, _EARLIEST)

    def _list_offsets(self, topics: list[str] | None, timestamp: int) -> dict[tuple[str, int], int]:
        reply = self._metadata(topics)
        brokers = {b.node_id: (b.host, b.port) for b in reply.brokers}
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in reply.topics:
            if t.name is None or t.error_code:
                continue
            for p in t.partitions:
                by_leader.setdefault(p.leader_id, {}).setdefault(t.name, []).append(p.partition_index)
        out: dict[tuple[str, int], int] = {}
        for leader, wanted in by_leader.items():
            if leader not in brokers:
                raise KafkaClientError(f"partition leader {leader} is not a known broker")
            conn = self._connect(brokers[leader])
            version = self._version(conn, ListOffsetsRequest)
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    ListOffsetsTopic(
                        name=name,
                        partitions=[ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps],
                    )
                    for name, ps in sorted(wanted.items())
                ],
            )
            answer = self._request(conn, request, ListOffsetsResponse, max(version, 1))
            for tr in answer.topics:
                for pr in tr.partitions:
                    if pr.error_code:
                        name = ErrorCode(pr.error_code).name
                        raise KafkaClientError(
                            f"ListOffsets {tr.name}-{pr.partition_index} failed: {name}", pr.error_code
                        )
                    out[(tr.name, pr.partition_index)] = pr.offset
        return out

    def topic_configs(self, topics: list[str], names: list[str]) -> dict[str, dict[str, str]]:
        """The effective value of the configs ``names`` of each topic (DescribeConfigs). Topics the
        broker cannot describe (deleted meanwhile, not authorised) are left out; so are null values."""
        if not topics:
            return {}
        conn = self._any()
        version = self._version(conn, DescribeConfigsRequest)
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsResource(
                    resource_type=_TOPIC_RESOURCE, resource_name=t, configuration_keys=list(names)
                )
                for t in sorted(topics)
            ]
        )
        reply = self._request(conn, request, DescribeConfigsResponse, version)
        return {
            r.resource_name: {c.name: c.value for c in r.configs if c.value is not None}
            for r in reply.results
            if not r.error_code
        }

    def find_group_coordinator(self, group_id: str) -> tuple[str, int]:
        conn = self._any()
        version = self._version(conn, FindCoordinatorRequest)
        if version >= 4:
            request = FindCoordinatorRequest(key_type=_GROUP_KEY_TYPE, coordinator_keys=[group_id])
        else:
            request = FindCoordinatorRequest(key=group_id, key_type=_GROUP_KEY_TYPE)
        reply = self._request(conn, request, FindCoordinatorResponse, version)
        if version >= 4:
            if not reply.coordinators:
                raise KafkaClientError("FindCoordinator returned no coordinator")
            c = reply.coordinators[0]
            error, host, port = c.error_code, c.host, c.port
        else:
            error, host, port = reply.error_code, reply.host, reply.port
        if error:
            raise KafkaClientError(f"FindCoordinator({group_id}) failed: {ErrorCode(error).name}", error)
        return host, port

    def commit_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], *, metadata: str = "", retries: int = 5
    ) -> None:
        """Commit ``{(topic, partition): offset}`` for ``group_id`` in the admin form: generation −1,
        empty member id. Coordinators accept it only while the group has no members (Empty or unknown),
        so use a group id that no consumer joins. Raises :class:`KafkaClientError` on any error."""
        if not offsets:
            return
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata=metadata
                )
            )
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        for attempt in range(retries + 1):
            try:
                conn = self._connect(self.find_group_coordinator(group_id))
                version = self._version(conn, OffsetCommitRequest)
                reply = self._request(conn, request, OffsetCommitResponse, version)
                errors = {p.error_code for t in reply.topics for p in t.partitions if p.error_code}
                if errors:
                    names = ", ".join(sorted(ErrorCode(e).name for e in errors))
                    raise KafkaClientError(
                        f"OffsetCommit for group {group_id!r} failed: {names}", min(errors)
                    )
                return
            except KafkaClientError as exc:
                if exc.error_code not in _RETRIABLE_COORDINATOR_ERRORS or attempt == retries:
                    raise
            # The coordinator moved, is loading or does not exist yet: look it up again.
            self.close()
            time.sleep(0.1 * (attempt + 1))
