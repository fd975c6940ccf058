"""A trivially fast fake coordinator, to measure the load generator's own ceiling.

It answers every request at once and keeps no group state (only the partition counts of the topics it
was asked to create): a JoinGroup makes the member the leader of a group of one (generation 1), SyncGroup
hands the leader its own assignment back, heartbeats and commits always succeed. Heartbeat answers are
pre-encoded, so the fake spends less per request than the load generator does; a benchmark that runs
against it is limited by the generator (or the loopback), not by a coordinator.
``python -m regroup.bench.groups.fake --port 0`` prints ``fake ready on 127.0.0.1:<port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import struct
from collections.abc import Callable
from typing import cast

from regroup.protocol.api_keys import ApiKey
from regroup.protocol.framing import FrameReader, decode_request, encode_response
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from regroup.protocol.messages.create_topics import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from regroup.protocol.messages.describe_configs import DescribeConfigsResponse
from regroup.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from regroup.protocol.messages.heartbeat import HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse
from regroup.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from regroup.protocol.primitives import I32, DecodeError

__all__ = ["FakeCoordinator", "main", "serve"]

_MEMBER_ID_REQUIRED = 79
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_SERVED = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.METADATA: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
}


class FakeCoordinator:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._ids = itertools.count(1)
        self._topics: dict[str, int] = {}
        self._heartbeat = {v: HeartbeatResponse().encode(v) for v in range(5)}
        self._handlers: dict[int, Callable[[Message, int], Message]] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self._join_group,
            ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DESCRIBE_CONFIGS: lambda _req, _v: DescribeConfigsResponse(),
        }

    def answer(self, frame: bytes) -> bytes:
        api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
        if api_key == ApiKey.HEARTBEAT:
            body = self._heartbeat[version]
            # Heartbeat v4 is flexible: response header v1 (correlation id + empty tagged fields).
            head = I32.pack(correlation_id) + (b"\0" if version >= 4 else b"")
            return I32.pack(len(head) + len(body)) + head + body
        header, request = decode_request(frame)
        response = self._handlers[header.api_key](request, version)
        return encode_response(response, version, header.correlation_id)

    def _api_versions(self, _request: Message, _version: int) -> Message:
        return ApiVersionsResponse(
            api_keys=[
                ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in _SERVED.items()
            ]
        )

    def _metadata(self, request: Message, _version: int) -> Message:
        assert isinstance(request, MetadataRequest)
        names = [t.name for t in request.topics or [] if t.name in self._topics]
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=0, host=self.host, port=self.port)],
            controller_id=0,
            topics=[
                MetadataResponseTopic(
                    name=name,
                    partitions=[
                        MetadataResponsePartition(
                            partition_index=i, leader_id=0, replica_nodes=[0], isr_nodes=[0]
                        )
                        for i in range(self._topics[name])
                    ],
                )
                for name in names
                if name is not None
            ],
        )

    def _find_coordinator(self, request: Message, version: int) -> Message:
        assert isinstance(request, FindCoordinatorRequest)
        if version >= 4:
            return FindCoordinatorResponse(
                coordinators=[
                    Coordinator(key=k, node_id=0, host=self.host, port=self.port)
                    for k in request.coordinator_keys
                ]
            )
        return FindCoordinatorResponse(node_id=0, host=self.host, port=self.port)

    def _join_group(self, request: Message, version: int) -> Message:
        assert isinstance(request, JoinGroupRequest)
        if not request.member_id and version >= 4:
            return JoinGroupResponse(
                error_code=_MEMBER_ID_REQUIRED, member_id=f"m-{next(self._ids)}", protocol_name=None
            )
        member_id = request.member_id or f"m-{next(self._ids)}"
        protocol = request.protocols[0]
        return JoinGroupResponse(
            generation_id=1,
            protocol_type=request.protocol_type,
            protocol_name=protocol.name,
            leader=member_id,
            member_id=member_id,
            members=[
                JoinGroupResponseMember(
                    member_id=member_id,
                    group_instance_id=request.group_instance_id,
                    metadata=protocol.metadata,
                )
            ],
        )

    def _sync_group(self, request: Message, _version: int) -> Message:
        assert isinstance(request, SyncGroupRequest)
        mine = [a.assignment for a in request.assignments if a.member_id == request.member_id]
        return SyncGroupResponse(
            protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
            assignment=mine[0] if mine else b"\0\0\0\0\0\0\xff\xff\xff\xff",
        )

    def _leave_group(self, request: Message, _version: int) -> Message:
        assert isinstance(request, LeaveGroupRequest)
        return LeaveGroupResponse(
            members=[
                MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id)
                for m in request.members
            ]
        )

    def _offset_commit(self, request: Message, _version: int) -> Message:
        assert isinstance(request, OffsetCommitRequest)
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetCommitResponsePartition(partition_index=p.partition_index) for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )

    def _offset_fetch(self, request: Message, version: int) -> Message:
        """Nothing committed, ever."""
        assert isinstance(request, OffsetFetchRequest)
        if version >= 8:
            return OffsetFetchResponse(
                groups=[
                    OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        topics=[
                            OffsetFetchResponseTopics(
                                name=t.name,
                                partitions=[
                                    OffsetFetchResponsePartitions(partition_index=i, committed_offset=-1)
                                    for i in t.partition_indexes
                                ],
                            )
                            for t in g.topics or []
                        ],
                    )
                    for g in request.groups
                ]
            )
        return OffsetFetchResponse(
            topics=[
                OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetFetchResponsePartition(partition_index=i, committed_offset=-1)
                        for i in t.partition_indexes
                    ],
                )
                for t in request.topics or []
            ]
        )

    def _create_topics(self, request: Message, _version: int) -> Message:
        assert isinstance(request, CreateTopicsRequest)
        for t in request.topics:
            self._topics[t.name] = t.num_partitions
        return CreateTopicsResponse(
            topics=[
                CreatableTopicResult(name=t.name, num_partitions=t.num_partitions, replication_factor=1)
                for t in request.topics
            ]
        )


class _FakeConnection(asyncio.Protocol):
    def __init__(self, fake: FakeCoordinator) -> None:
        self._fake = fake
        self._reader = FrameReader(64 * 1024 * 1024)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        try:
            out = [self._fake.answer(frame) for frame in self._reader.feed(data)]
        except (DecodeError, KeyError):
            self._transport.close()
            return
        self._transport.write(b"".join(out))


async def serve(host: str = "127.0.0.1", port: int = 0) -> None:
    loop = asyncio.get_running_loop()
    fake = FakeCoordinator(host, port)
    server = await loop.create_server(lambda: _FakeConnection(fake), host, port, backlog=4096)
    fake.port = server.sockets[0].getsockname()[1]
    print(f"fake ready on {host}:{fake.port} ", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m regroup.bench.groups.fake", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        runner = asyncio.Runner()
    else:
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    with runner:
        runner.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
