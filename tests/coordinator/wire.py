"""A blocking group-API client on regroup's codecs: one call per request, or send now / receive later for
requests the coordinator parks (JoinGroup, SyncGroup)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from regroup.client.blocking import BlockingConnection
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.message import Message
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from regroup.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from regroup.protocol.records.consumer_protocol import ConsumerProtocolSubscription

M = TypeVar("M", bound=Message)

SETTINGS = {
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 1000,
    "offsets_topic_num_partitions": 5,
}
"""Broker overrides for the in-process coordinator tests (``BrokerThread(**SETTINGS)``)."""


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(topics=sorted(topics)).encode_versioned(0)


class GroupClient(BlockingConnection):
    """Group requests by name and version; ``post`` parks one and ``collect`` takes its answer later."""

    def __init__(self, address: tuple[str, int], timeout: float = 15.0, client_id: str = "wire") -> None:
        super().__init__(address, client_id=client_id, timeout=timeout)

    def call(self, request: M | Message, version: int) -> Any:
        self.post(request, version)
        return self.collect()

    def post(self, request: Message, version: int) -> None:
        request.encode(version)  # the request must fit its version
        self.send(request, version)

    def collect(self) -> Any:
        return self.receive()

    # ------------------------------------------------------------------ builders

    def create_topic(self, name: str, partitions: int) -> None:
        response = self.call(
            CreateTopicsRequest(topics=[CreatableTopic(name, partitions, 1)], timeout_ms=5000), 7
        )
        assert isinstance(response, CreateTopicsResponse)
        assert response.topics[0].error_code == 0, response.topics[0]

    @staticmethod
    def join_request(
        group_id: str,
        member_id: str = "",
        version: int = 9,
        *,
        instance_id: str | None = None,
        topics: Sequence[str] = ("t",),
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 10_000,
    ) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms if version >= 1 else -1,
            member_id=member_id,
            group_instance_id=instance_id if version >= 5 else None,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=subscription(*topics))],
        )

    def join(self, group_id: str, member_id: str = "", version: int = 9, **kw: Any) -> JoinGroupResponse:
        response = self.call(self.join_request(group_id, member_id, version, **kw), version)
        assert isinstance(response, JoinGroupResponse)
        return response

    @staticmethod
    def sync_request(
        group_id: str,
        member_id: str,
        generation_id: int,
        version: int = 5,
        assignments: Mapping[str, bytes] | None = None,
        instance_id: str | None = None,
    ) -> SyncGroupRequest:
        return SyncGroupRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id if version >= 3 else None,
            protocol_type="consumer" if version >= 5 else None,
            protocol_name="range" if version >= 5 else None,
            assignments=[SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()],
        )

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        version: int = 5,
        assignments: Mapping[str, bytes] | None = None,
        instance_id: str | None = None,
    ) -> SyncGroupResponse:
        response = self.call(
            self.sync_request(group_id, member_id, generation_id, version, assignments, instance_id), version
        )
        assert isinstance(response, SyncGroupResponse)
        return response

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        version: int = 4,
        instance_id: str | None = None,
    ) -> HeartbeatResponse:
        response = self.call(
            HeartbeatRequest(
                group_id=group_id,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=instance_id if version >= 3 else None,
            ),
            version,
        )
        assert isinstance(response, HeartbeatResponse)
        return response

    def commit(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        generation_id: int = -1,
        member_id: str = "",
        version: int = 9,
        metadata: str = "",
    ) -> OffsetCommitResponse:
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata=metadata
                )
            )
        response = self.call(
            OffsetCommitRequest(
                group_id=group_id,
                generation_id_or_member_epoch=generation_id,
                member_id=member_id,
                topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
            ),
            version,
        )
        assert isinstance(response, OffsetCommitResponse)
        return response

    def fetch(
        self, group_id: str, tps: Sequence[tuple[str, int]] | None, version: int = 9
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """(offset, error) per partition of one group."""
        topics: dict[str, list[int]] = {}
        for t, p in tps or ():
            topics.setdefault(t, []).append(p)
        if version >= 8:
            request = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(
                        group_id=group_id,
                        topics=None
                        if tps is None
                        else [
                            OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics.items()
                        ],
                    )
                ]
            )
        else:
            request = OffsetFetchRequest(
                group_id=group_id,
                topics=None
                if tps is None
                else [OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()],
            )
        response = self.call(request, version)
        assert isinstance(response, OffsetFetchResponse)
        if version >= 8:
            [group] = response.groups
            assert group.error_code == 0, group
            found = group.topics
        else:
            assert response.error_code == 0, response
            found = response.topics  # type: ignore[assignment]
        return {
            (t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in found
            for p in t.partitions
        }


def errors(response: Any) -> list[int]:
    """Every partition error code of a commit-like response, in order."""
    return [p.error_code for t in response.topics for p in t.partitions]


def api_key(message: Message) -> ApiKey:
    return ApiKey(message.API_KEY)
