"""A small blocking Kafka client over a plain socket, built on regroup's generated codecs.

It speaks just what the pipeline needs from a cluster — ApiVersions (version negotiation), Metadata
(partition counts and leaders), ListOffsets (log end offsets), FindCoordinator and OffsetCommit in its
admin form (generation −1, empty member id, no instance id) — to any Kafka-compatible broker. The codecs
are the ones the broker itself uses, so the pipeline needs no third-party Kafka client and commits exactly
the request an admin tool would send.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Final, Self, TypeVar

from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import decode_response, encode_request
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
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

__all__ = ["KafkaClientError", "SimpleKafkaClient", "parse_bootstrap"]

_SIZE: Final = struct.Struct(">i")
_MAX_FRAME: Final = 100 * 1024 * 1024
_GROUP_KEY_TYPE: Final = 0
_RETRIABLE_COORDINATOR_ERRORS: Final = frozenset(
    {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)

M = TypeVar("M", bound=Message)


class KafkaClientError(RuntimeError):
    """A request failed: the broker answered an error code, or the connection broke."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


def parse_bootstrap(bootstrap_servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port…]`` (IPv6 as ``[addr]:port``) → [(host, port)]."""
    out: list[tuple[str, int]] = []
    for raw in bootstrap_servers.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            raise ValueError(f"bootstrap server {item!r} needs host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class _Connection:
    def __init__(self, host: str, port: int, timeout: float, client_id: str) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._client_id = client_id
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}

    def request(self, message: Message, version: int, response_type: type[M]) -> M:
        self._correlation += 1
        cid = self._correlation
        self._sock.sendall(encode_request(message, version, cid, self._client_id))
        (size,) = _SIZE.unpack(self._recv(4))
        if not 0 <= size <= _MAX_FRAME:
            raise KafkaClientError(f"response frame of {size} bytes")
        got, response = decode_response(self._recv(size), message.API_KEY, version)
        if got != cid:
            raise KafkaClientError(f"correlation id {got} answers request {cid}")
        if not isinstance(response, response_type):
            raise KafkaClientError(f"unexpected response {type(response).__name__}")
        return response

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise KafkaClientError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self._sock.close()


class SimpleKafkaClient:
    """Blocking requests to a Kafka-compatible cluster; not thread-safe (use one per thread)."""

    def __init__(
        self, bootstrap_servers: str, *, timeout: float = 10.0, client_id: str = "regroup-pipeline"
    ) -> None:
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._timeout = timeout
        self._client_id = client_id
        self._connections: dict[tuple[str, int], _Connection] = {}

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

    def _connect(self, address: tuple[str, int]) -> _Connection:
        conn = self._connections.get(address)
        if conn is not None:
            return conn
        conn = _Connection(address[0], address[1], self._timeout, self._client_id)
        try:
            # v0 is answered by every broker; its response header is v0 for every version.
            reply = conn.request(ApiVersionsRequest(), 0, ApiVersionsResponse)
        except BaseException:
            conn.close()
            raise
        if reply.error_code:
            conn.close()
            raise KafkaClientError(f"ApiVersions failed with error {reply.error_code}", reply.error_code)
        conn.versions = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
        self._connections[address] = conn
        return conn

    def _any(self) -> _Connection:
        last: Exception | None = None
        for address in self._bootstrap:
            try:
                return self._connect(address)
            except (OSError, KafkaClientError) as exc:
                last = exc
        raise KafkaClientError(f"no bootstrap server reachable: {last}")

    @staticmethod
    def _version(conn: _Connection, message: type[Message]) -> int:
        broker = conn.versions.get(message.API_KEY)
        if broker is None:
            raise KafkaClientError(f"the broker does not support API key {message.API_KEY}")
        version = min(broker[1], message.MAX_VERSION)
        if version < max(broker[0], message.MIN_VERSION):
            raise KafkaClientError(f"no common version of {message.NAME} (broker {broker[0]}-{broker[1]})")
        return version

    # ------------------------------------------------------------------------------------- APIs

    def _metadata(self, topics: list[str] | None) -> MetadataResponse:
        conn = self._any()
        version = self._version(conn, MetadataRequest)
        if version == 0 and topics is None:
            wanted: list[MetadataRequestTopic] | None = []  # v0: an empty list means all topics
        else:
            wanted = None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
        request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False)
        return conn.request(request, version, MetadataResponse)

    def partition_counts(self, topics: list[str] | None = None) -> dict[str, int]:
        """Partition count of each topic (all topics when ``topics`` is None), from Metadata."""
        reply = self._metadata(topics)
        return {t.name: len(t.partitions) for t in reply.topics if t.name is not None and t.error_code == 0}

    def log_end_offsets(self, topics: list[str] | None = None) -> dict[tuple[str, int], int]:
        """ListOffsets(latest) of every partition of ``topics`` (all topics when None), asked of each
        partition's leader: the offset a consumer reaching the end would commit."""
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
                        partitions=[ListOffsetsPartition(partition_index=p, timestamp=-1) for p in ps],
                    )
                    for name, ps in sorted(wanted.items())
                ],
            )
            answer = conn.request(request, max(version, 1), ListOffsetsResponse)
            for tr in answer.topics:
                for pr in tr.partitions:
                    if pr.error_code:
                        name = ErrorCode(pr.error_code).name
                        raise KafkaClientError(
                            f"ListOffsets {tr.name}-{pr.partition_index} failed: {name}", pr.error_code
                        )
                    out[(tr.name, pr.partition_index)] = pr.offset
        return out

    def find_group_coordinator(self, group_id: str) -> tuple[str, int]:
        conn = self._any()
        version = self._version(conn, FindCoordinatorRequest)
        if version >= 4:
            request = FindCoordinatorRequest(key_type=_GROUP_KEY_TYPE, coordinator_keys=[group_id])
        else:
            request = FindCoordinatorRequest(key=group_id, key_type=_GROUP_KEY_TYPE)
        reply = conn.request(request, version, FindCoordinatorResponse)
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
                reply = conn.request(request, self._version(conn, OffsetCommitRequest), OffsetCommitResponse)
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
