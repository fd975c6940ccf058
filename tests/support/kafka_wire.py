"""A small blocking Kafka client built on regroup's codecs.

One :class:`WireConnection` is one TCP connection. Requests may be pipelined: :meth:`WireConnection.send`
returns at once and :meth:`WireConnection.receive` collects the responses in order, which is how a test
parks a JoinGroup/SyncGroup on one connection while other connections keep talking to the broker.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import decode_response, encode_request
from regroup.protocol.message import Message
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from regroup.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from regroup.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from regroup.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from regroup.protocol.record_batch import Record, RecordBatch, build_batch, decode_batches

M = TypeVar("M", bound=Message)

__all__ = [
    "Address",
    "Pending",
    "WireConnection",
    "committed_offsets",
    "create_topics",
    "end_offsets",
    "fetch_partition",
    "java_string_hash",
    "partition_for",
    "produce",
    "retry",
    "topic_partitions",
    "wait_for",
]

Address = tuple[str, int]

# Answers meaning "ask again shortly": the coordinator (or a partition leader) is not ready yet.
RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


@dataclass(frozen=True, slots=True)
class Pending:
    """A request that was sent and whose response has not been read yet."""

    correlation_id: int
    api_key: int
    version: int


class WireConnection:
    """A blocking, pipelining Kafka connection. Responses are read strictly in request order."""

    def __init__(self, address: Address, client_id: str | None = "regroup-tests", timeout: float = 30.0):
        self.address = address
        self.client_id = client_id
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._timeout = timeout
        self._correlation = 0
        self._buf = bytearray()
        self._in_flight: deque[Pending] = deque()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def send(self, message: Message, version: int) -> Pending:
        self._correlation += 1
        pending = Pending(self._correlation, message.API_KEY, version)
        self.sock.sendall(encode_request(message, version, self._correlation, self.client_id))
        self._in_flight.append(pending)
        return pending

    def receive(self, timeout: float | None = None) -> Message:
        """The response to the oldest request in flight."""
        if not self._in_flight:
            raise RuntimeError("no request in flight")
        pending = self._in_flight[0]
        frame = self._read_frame(self._timeout if timeout is None else timeout)
        self._in_flight.popleft()
        correlation, message = decode_response(frame, pending.api_key, pending.version)
        if correlation != pending.correlation_id:
            raise AssertionError(f"correlation id {correlation} != expected {pending.correlation_id}")
        return message

    def request(
        self, message: Message, version: int, response_class: type[M], timeout: float | None = None
    ) -> M:
        if self._in_flight:
            raise RuntimeError("a pipelined request is still in flight on this connection")
        self.send(message, version)
        response = self.receive(timeout)
        assert isinstance(response, response_class), type(response)
        return response

    def _read_frame(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            if len(self._buf) >= 4:
                (size,) = struct.unpack_from(">i", self._buf, 0)
                if len(self._buf) >= 4 + size:
                    frame = bytes(self._buf[4 : 4 + size])
                    del self._buf[: 4 + size]
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response from {self.address} within {timeout:g}s")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"connection to {self.address} closed by the broker")
            self._buf += chunk


T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy (returned) or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def retry(fn: Callable[[], T], ok: Callable[[T], bool], timeout: float = 30.0, what: str = "") -> T:
    """Call ``fn`` until ``ok(result)``; return the last result (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if ok(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s: {what or fn}: last result {result!r}")
        time.sleep(0.1)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit integer."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: abs(hash) mod partitions (abs(MIN_VALUE) = 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def create_topics(address: Address, topics: dict[str, int], timeout: float = 30.0) -> None:
    """Create topics (name → partition count) and wait until every partition has a leader."""
    with WireConnection(address) as conn:
        response = conn.request(
            CreateTopicsRequest(
                topics=[CreatableTopic(name, n, 1) for name, n in topics.items()], timeout_ms=20000
            ),
            5,
            CreateTopicsResponse,
        )
        for result in response.topics:
            if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise AssertionError(
                    f"creating {result.name}: error {ErrorCode.from_code(result.error_code)!r}"
                )

        def ready() -> bool:
            meta = conn.request(
                MetadataRequest(topics=[MetadataRequestTopic(name=t) for t in topics]), 9, MetadataResponse
            )
            seen = {
                t.name: [p for p in t.partitions if p.error_code == 0 and p.leader_id >= 0]
                for t in meta.topics
                if t.error_code == 0
            }
            return all(len(seen.get(t, [])) == n for t, n in topics.items())

        wait_for(ready, timeout, f"leaders for {sorted(topics)}")


def topic_partitions(address: Address, topic: str) -> int:
    with WireConnection(address) as conn:
        meta = conn.request(MetadataRequest(topics=[MetadataRequestTopic(name=topic)]), 9, MetadataResponse)
    for t in meta.topics:
        if t.name == topic and t.error_code == 0:
            return len(t.partitions)
    raise AssertionError(f"topic {topic} not found")


def topic_ids(address: Address, topics: Iterable[str]) -> dict[str, uuid.UUID]:
    """The topic ids the broker's Metadata (v12) reports for ``topics`` that exist."""
    with WireConnection(address) as conn:
        meta = conn.request(
            MetadataRequest(topics=[MetadataRequestTopic(name=t) for t in topics]), 12, MetadataResponse
        )
    return {t.name: t.topic_id for t in meta.topics if t.error_code == 0 and t.name is not None}


def end_offsets(
    address: Address, topic: str, partitions: Iterable[int], timestamp: int = -1
) -> dict[int, int]:
    """Log end offsets (``timestamp`` −1) or log start offsets (−2) of ``topic``'s partitions."""
    parts = list(partitions)
    with WireConnection(address) as conn:
        response = conn.request(
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsTopic(topic, [ListOffsetsPartition(p, timestamp=timestamp) for p in parts])
                ],
            ),
            5,
            ListOffsetsResponse,
        )
    out: dict[int, int] = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code != 0:
                raise AssertionError(f"ListOffsets {topic}-{p.partition_index}: error {p.error_code}")
            out[p.partition_index] = p.offset
    return out


def committed_offsets(
    conn: WireConnection, group: str, topics: Sequence[str] | None = None
) -> dict[tuple[str, int], int]:
    """Committed offsets of ``group`` (OffsetFetch v8, all topics when ``topics`` is None) — only the
    partitions that have one."""
    request_topics = None
    if topics is not None:
        from regroup.protocol.messages.offset_fetch import OffsetFetchRequestTopics

        request_topics = [OffsetFetchRequestTopics(t, list(range(64))) for t in topics]
    response = conn.request(
        OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, topics=request_topics)]),
        8,
        OffsetFetchResponse,
    )
    out: dict[tuple[str, int], int] = {}
    for g in response.groups:
        if g.error_code != 0:
            raise AssertionError(f"OffsetFetch {group}: error {g.error_code}")
        for t in g.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
    return out


def find_coordinator(conn: WireConnection, group: str, timeout: float = 30.0) -> FindCoordinatorResponse:
    """FindCoordinator v4 for ``group``, retried until the coordinator is available."""
    return retry(
        lambda: conn.request(
            FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4, FindCoordinatorResponse
        ),
        lambda r: r.coordinators[0].error_code == 0,
        timeout,
        f"coordinator of {group}",
    )


def fetch_partition(
    address: Address, topic: str, partition: int, start: int = 0, version: int = 12, max_wait_ms: int = 100
) -> list[RecordBatch]:
    """Every record batch of one partition from ``start`` to the high watermark, through the Fetch API."""
    batches: list[RecordBatch] = []
    offset = start
    with WireConnection(address) as conn:
        while True:
            response = conn.request(
                FetchRequest(
                    replica_id=-1,
                    max_wait_ms=max_wait_ms,
                    min_bytes=1,
                    max_bytes=16 << 20,
                    isolation_level=0,
                    topics=[
                        FetchTopic(
                            topic=topic,
                            partitions=[
                                FetchPartition(
                                    partition=partition, fetch_offset=offset, partition_max_bytes=8 << 20
                                )
                            ],
                        )
                    ],
                ),
                version,
                FetchResponse,
            )
            data = response.responses[0].partitions[0]
            if data.error_code != 0:
                raise AssertionError(f"Fetch {topic}-{partition}@{offset}: error {data.error_code}")
            got = decode_batches(data.records or b"") if data.records else []
            got = [b for b in got if b.base_offset + b.last_offset_delta >= offset]
            batches.extend(got)
            if got:
                offset = got[-1].base_offset + got[-1].last_offset_delta + 1
            if offset >= data.high_watermark or not got:
                return batches


def produce(address: Address, topic: str, records: dict[int, int], version: int = 9) -> dict[int, int]:
    """Append ``count`` small records to each partition (``{partition: count}``) with acks=all; returns the
    base offset each batch got."""
    now = int(time.time() * 1000)
    data = [
        PartitionProduceData(
            index=p,
            records=build_batch(
                [
                    Record(offset=i, timestamp=now, key=str(i).encode(), value=str(i).encode())
                    for i in range(n)
                ]
            ),
        )
        for p, n in records.items()
    ]
    with WireConnection(address) as conn:
        response = conn.request(
            ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[TopicProduceData(topic, data)]),
            version,
            ProduceResponse,
        )
    out: dict[int, int] = {}
    for t in response.responses:
        for p in t.partition_responses:
            if p.error_code != 0:
                raise AssertionError(f"Produce {topic}-{p.index}: error {p.error_code}")
            out[p.index] = p.base_offset
    return out
