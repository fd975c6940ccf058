"""Wire helpers for tests, on regroup's :class:`~regroup.client.blocking.BlockingConnection`: create
topics, produce, fetch, read offsets and coordinators, and wait for observable states.

A :class:`BlockingConnection` pipelines: ``send`` returns at once and ``receive`` collects the responses in
order, which is how a test parks a JoinGroup/SyncGroup on one connection while other connections keep
talking to the broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.javahash import group_partition as partition_for
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
    "committed_offsets",
    "create_topics",
    "end_offsets",
    "fetch_partition",
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


def create_topics(address: Address, topics: dict[str, int], timeout: float = 30.0) -> None:
    """Create topics (name → partition count) and wait until every partition has a leader."""
    with BlockingConnection(address) as conn:
        response = conn.request(
            CreateTopicsRequest(
                topics=[CreatableTopic(name, n, 1) for name, n in topics.items()], timeout_ms=20000
            ),
            CreateTopicsResponse,
            version=5,
        )
        for result in response.topics:
            if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise AssertionError(
                    f"creating {result.name}: error {ErrorCode.from_code(result.error_code)!r}"
                )

        def ready() -> bool:
            meta = conn.request(
                MetadataRequest(topics=[MetadataRequestTopic(name=t) for t in topics]),
                MetadataResponse,
                version=9,
            )
            seen = {
                t.name: [p for p in t.partitions if p.error_code == 0 and p.leader_id >= 0]
                for t in meta.topics
                if t.error_code == 0
            }
            return all(len(seen.get(t, [])) == n for t, n in topics.items())

        wait_for(ready, timeout, f"leaders for {sorted(topics)}")


def topic_partitions(address: Address, topic: str) -> int:
    with BlockingConnection(address) as conn:
        meta = conn.request(
            MetadataRequest(topics=[MetadataRequestTopic(name=topic)]), MetadataResponse, version=9
        )
    for t in meta.topics:
        if t.name == topic and t.error_code == 0:
            return len(t.partitions)
    raise AssertionError(f"topic {topic} not found")


def topic_ids(address: Address, topics: Iterable[str]) -> dict[str, uuid.UUID]:
    """The topic ids the broker's Metadata (v12) reports for ``topics`` that exist."""
    with BlockingConnection(address) as conn:
        meta = conn.request(
            MetadataRequest(topics=[MetadataRequestTopic(name=t) for t in topics]),
            MetadataResponse,
            version=12,
        )
    return {t.name: t.topic_id for t in meta.topics if t.error_code == 0 and t.name is not None}


def end_offsets(
    address: Address, topic: str, partitions: Iterable[int], timestamp: int = -1
) -> dict[int, int]:
    """Log end offsets (``timestamp`` −1) or log start offsets (−2) of ``topic``'s partitions."""
    parts = list(partitions)
    with BlockingConnection(address) as conn:
        response = conn.request(
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsTopic(topic, [ListOffsetsPartition(p, timestamp=timestamp) for p in parts])
                ],
            ),
            ListOffsetsResponse,
            version=5,
        )
    out: dict[int, int] = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code != 0:
                raise AssertionError(f"ListOffsets {topic}-{p.partition_index}: error {p.error_code}")
            out[p.partition_index] = p.offset
    return out


def committed_offsets(
    conn: BlockingConnection, group: str, topics: Sequence[str] | None = None
) -> dict[tuple[str, int], int]:
    """Committed offsets of ``group`` (OffsetFetch v8, all topics when ``topics`` is None) — only the
    partitions that have one."""
    request_topics = None
    if topics is not None:
        from regroup.protocol.messages.offset_fetch import OffsetFetchRequestTopics

        request_topics = [OffsetFetchRequestTopics(t, list(range(64))) for t in topics]
    response = conn.request(
        OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, topics=request_topics)]),
        OffsetFetchResponse,
        version=8,
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


def find_coordinator(conn: BlockingConnection, group: str, timeout: float = 30.0) -> FindCoordinatorResponse:
    """FindCoordinator v4 for ``group``, retried until the coordinator is available."""
    return retry(
        lambda: conn.request(
            FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, version=4
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
    with BlockingConnection(address) as conn:
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
                FetchResponse,
                version=version,
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
    with BlockingConnection(address) as conn:
        response = conn.request(
            ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[TopicProduceData(topic, data)]),
            ProduceResponse,
            version=version,
        )
    out: dict[int, int] = {}
    for t in response.responses:
        for p in t.partition_responses:
            if p.error_code != 0:
                raise AssertionError(f"Produce {topic}-{p.index}: error {p.error_code}")
            out[p.index] = p.base_offset
    return out
