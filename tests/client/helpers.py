"""Helpers for the client tests: topic creation through our own connection, and waiting on conditions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from regroup.client import GroupMember, TopicPartition
from regroup.client.connection import open_connection, parse_bootstrap_servers
from regroup.client.requests import metadata_request, read_metadata
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.metadata import MetadataResponse


async def create_topics(bootstrap: str, topics: Mapping[str, int], timeout: float = 30.0) -> None:
    """Create ``topics`` ({name: partitions}, replication 1) and wait until Metadata shows them."""
    host, port = parse_bootstrap_servers(bootstrap)[0]
    conn = await open_connection(host, port)
    try:
        req = CreateTopicsRequest(
            topics=[
                CreatableTopic(name=t, num_partitions=n, replication_factor=1) for t, n in topics.items()
            ],
            timeout_ms=int(timeout * 1000),
        )
        resp = await conn.request(req, CreateTopicsResponse, timeout_ms=int(timeout * 1000) + 5000)
        for result in resp.topics:
            if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise AssertionError(f"creating {result.name}: {ErrorCode.from_code(result.error_code).name}")
        deadline = time.monotonic() + timeout
        while True:
            version = conn.version(ApiKey.METADATA)
            meta = await conn.request(metadata_request(version, topics, False), MetadataResponse)
            counts = read_metadata(meta)
            ready = all(counts.get(t) == n for t, n in topics.items()) and all(
                p.leader_id >= 0 for t in meta.topics for p in t.partitions
            )
            if ready:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"topics not ready: {counts}")
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def wait_for(
    condition: Callable[[], bool], timeout: float, *, step: Callable[[], Awaitable[object]] | None = None
) -> None:
    """Await ``step`` (or sleep) until ``condition()`` holds; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        if step is not None:
            await step()
        else:
            await asyncio.sleep(0.05)


async def poll_all(members: Iterable[GroupMember], timeout_ms: int = 200) -> None:
    """One ``poll`` of every member, concurrently."""
    await asyncio.gather(*(m.poll(timeout_ms) for m in members))


def all_partitions(topics: Mapping[str, int]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, n in topics.items() for p in range(n)}


def disjoint_and_complete(
    assignments: Iterable[frozenset[TopicPartition]], expected: set[TopicPartition]
) -> bool:
    seen: list[TopicPartition] = [tp for a in assignments for tp in a]
    return len(seen) == len(set(seen)) and set(seen) == expected
