"""A tiny broker that speaks only the API versions of an old Kafka (about 2.1): no batched FindCoordinator,
no ListGroups state/type filters, single-group OffsetFetch, no OffsetDelete, no ConsumerGroupDescribe.

It serves one node from a thread with its own event loop, from a fixed in-memory model, so that the admin
client's fallback paths can be exercised over a real socket.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import FrameReader, decode_request, encode_response
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from regroup.protocol.messages.delete_groups import DeletableGroupResult, DeleteGroupsResponse
from regroup.protocol.messages.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from regroup.protocol.messages.find_coordinator import FindCoordinatorResponse
from regroup.protocol.messages.list_groups import ListedGroup, ListGroupsResponse
from regroup.protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from regroup.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from regroup.protocol.messages.offset_commit import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)

VERSIONS = {
    ApiKey.API_VERSIONS: (0, 2),
    ApiKey.METADATA: (0, 7),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.DESCRIBE_GROUPS: (0, 2),
    ApiKey.OFFSET_FETCH: (0, 5),
    ApiKey.LIST_OFFSETS: (0, 4),
    ApiKey.OFFSET_COMMIT: (0, 6),
    ApiKey.DELETE_GROUPS: (0, 1),
}


@dataclass
class Group:
    state: str
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    # (member id, client id, assigned (topic, partition)s)
    members: list[tuple[str, str, list[tuple[str, int]]]] = field(default_factory=list)


@dataclass
class Model:
    # topic -> [(log start, log end)] per partition
    topics: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)
    requests: list[tuple[str, int]] = field(default_factory=list)


class OldBroker:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> OldBroker:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader(1 << 20)
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    writer.write(self._answer(frame))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _answer(self, frame: bytes) -> bytes:
        key = int.from_bytes(frame[:2], "big", signed=True)
        version = int.from_bytes(frame[2:4], "big", signed=True)
        correlation = int.from_bytes(frame[4:8], "big", signed=True)
        api = ApiKey(key)
        if api is ApiKey.API_VERSIONS and version > VERSIONS[api][1]:
            # An old broker answers a too-new ApiVersions with a v0 body listing what it serves.
            body = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys())
            return encode_response(body, 0, correlation)
        _, request = decode_request(frame)
        self.model.requests.append((api.name, version))
        return encode_response(self._handle(api, request), version, correlation)

    def _handle(self, api: ApiKey, request: Message) -> Message:
        m = self.model
        node = (1, "127.0.0.1", self.port)
        if api is ApiKey.API_VERSIONS:
            return ApiVersionsResponse(api_keys=_api_keys())
        if api is ApiKey.METADATA:
            wanted = None if request.topics is None else [t.name for t in request.topics]  # type: ignore[attr-defined]
            topics = []
            for name in m.topics if wanted is None else wanted:
                if name not in m.topics:
                    topics.append(
                        MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name)
                    )
                    continue
                partitions = [
                    MetadataResponsePartition(
                        partition_index=p, leader_id=1, replica_nodes=[1], isr_nodes=[1]
                    )
                    for p in range(len(m.topics[name]))
                ]
                topics.append(MetadataResponseTopic(name=name, partitions=partitions))
            return MetadataResponse(brokers=[MetadataResponseBroker(*node)], controller_id=1, topics=topics)
        if api is ApiKey.FIND_COORDINATOR:
            return FindCoordinatorResponse(node_id=1, host="127.0.0.1", port=self.port, error_message=None)
        if api is ApiKey.LIST_GROUPS:
            return ListGroupsResponse(groups=[ListedGroup(g, "consumer") for g in m.groups])
        if api is ApiKey.DESCRIBE_GROUPS:
            out = []
            for gid in request.groups:  # type: ignore[attr-defined]
                g = m.groups.get(gid)
                if g is None:
                    out.append(DescribedGroup(group_id=gid, group_state="Dead"))
                    continue
                members = [
                    DescribedGroupMember(
                        member_id=mid,
                        client_id=cid,
                        client_host="/127.0.0.1",
                        member_assignment=_assignment(tps),
                    )
                    for mid, cid, tps in g.members
                ]
                out.append(
                    DescribedGroup(
                        group_id=gid,
                        group_state=g.state,
                        protocol_type="consumer",
                        protocol_data="range" if g.state == "Stable" else "",
                        members=members,
                    )
                )
            return DescribeGroupsResponse(groups=out)
        if api is ApiKey.OFFSET_FETCH:
            g = m.groups.get(request.group_id)  # type: ignore[attr-defined]
            by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
            for (topic, partition), offset in sorted((g.offsets if g else {}).items()):
                by_topic.setdefault(topic, []).append(
                    OffsetFetchResponsePartition(
                        partition_index=partition, committed_offset=offset, metadata=""
                    )
                )
            return OffsetFetchResponse(topics=[OffsetFetchResponseTopic(t, ps) for t, ps in by_topic.items()])
        if api is ApiKey.LIST_OFFSETS:
            topics = []
            for t in request.topics:  # type: ignore[attr-defined]
                parts = []
                for p in t.partitions:
                    start, end = m.topics[t.name][p.partition_index]
                    offset = start if p.timestamp == -2 else end if p.timestamp == -1 else -1
                    parts.append(
                        ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=offset)
                    )
                topics.append(ListOffsetsTopicResponse(t.name, parts))
            return ListOffsetsResponse(topics=topics)
        if api is ApiKey.OFFSET_COMMIT:
            g = m.groups.setdefault(request.group_id, Group("Empty"))  # type: ignore[attr-defined]
            error = ErrorCode.NONE if g.state == "Empty" else ErrorCode.UNKNOWN_MEMBER_ID
            topics = []
            for t in request.topics:  # type: ignore[attr-defined]
                for p in t.partitions:
                    if error is ErrorCode.NONE:
                        g.offsets[(t.name, p.partition_index)] = p.committed_offset
                topics.append(
                    OffsetCommitResponseTopic(
                        t.name,
                        [OffsetCommitResponsePartition(p.partition_index, error) for p in t.partitions],
                    )
                )
            return OffsetCommitResponse(topics=topics)
        if api is ApiKey.DELETE_GROUPS:
            results = []
            for gid in request.groups_names:  # type: ignore[attr-defined]
                g = m.groups.get(gid)
                code = ErrorCode.GROUP_ID_NOT_FOUND if g is None else ErrorCode.NONE
                if g is not None and g.state != "Empty":
                    code = ErrorCode.NON_EMPTY_GROUP
                if code is ErrorCode.NONE:
                    del m.groups[gid]
                results.append(DeletableGroupResult(gid, code))
            return DeleteGroupsResponse(results=results)
        raise AssertionError(f"unexpected {api.name}")


def _api_keys() -> list[ApiVersion]:
    return [ApiVersion(int(k), lo, hi) for k, (lo, hi) in VERSIONS.items()]


def _assignment(tps: list[tuple[str, int]]) -> bytes:
    grouped: dict[str, list[int]] = {}
    for topic, partition in tps:
        grouped.setdefault(topic, []).append(partition)
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition(t, ps) for t, ps in grouped.items()]
    )
    return assignment.encode_versioned(0)


@contextmanager
def old_broker(model: Model) -> Iterator[OldBroker]:
    broker = OldBroker(model).start()
    try:
        yield broker
    finally:
        broker.stop()
