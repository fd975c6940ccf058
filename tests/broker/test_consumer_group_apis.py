"""KIP-848 over the wire: ConsumerGroupHeartbeat and ConsumerGroupDescribe served by a broker (advertised
only with ``consumer`` in ``group.coordinator.rebalance.protocols``), the topic metadata they assign from
(created and deleted topics), and OffsetCommit/OffsetFetch v9 validated by member epoch."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from broker.support import BrokerThread
from regroup.client.blocking import BlockingConnection
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)

AV = ApiVersionsRequest(client_software_name="regroup-tests", client_software_version="1.0")


def create(conn: BlockingConnection, name: str, partitions: int) -> uuid.UUID:
    response = conn.request(
        CreateTopicsRequest(topics=[CreatableTopic(name, partitions, 1)], timeout_ms=5000),
        CreateTopicsResponse,
        version=7,
    )
    assert response.topics[0].error_code == 0, response.topics[0]
    return response.topics[0].topic_id


def cgh(
    conn: BlockingConnection,
    member_id: str,
    epoch: int,
    *,
    names: list[str] | None = None,
    owned: dict[uuid.UUID, list[int]] | None = None,
    group_id: str = "g",
) -> ConsumerGroupHeartbeatResponse:
    joining = epoch == 0
    request = ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout_ms=30_000 if joining else -1,
        subscribed_topic_names=names,
        topic_partitions=None
        if owned is None and not joining
        else [
            ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=ps)
            for t, ps in (owned or {}).items()
        ],
    )
    return conn.request(request, ConsumerGroupHeartbeatResponse, version=1)


def assigned(response: ConsumerGroupHeartbeatResponse) -> dict[uuid.UUID, list[int]] | None:
    if response.assignment is None:
        return None
    return {tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions}


def test_advertised_only_with_the_consumer_protocol(make_broker: Callable[..., BrokerThread]) -> None:
    with BlockingConnection(make_broker().address) as conn:
        advertised = {
            k.api_key: (k.min_version, k.max_version)
            for k in conn.request(AV, ApiVersionsResponse, version=3).api_keys
        }
    assert advertised[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert advertised[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 1)
    classic = make_broker(group_coordinator_rebalance_protocols="classic")
    with BlockingConnection(classic.address) as conn:
        keys = {k.api_key for k in conn.request(AV, ApiVersionsResponse, version=3).api_keys}
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT not in keys
    assert ApiKey.CONSUMER_GROUP_DESCRIBE not in keys
    assert ApiKey.HEARTBEAT in keys


def test_join_heartbeat_leave_and_topic_changes(make_broker: Callable[..., BrokerThread]) -> None:
    # every epoch bump recomputes the target at once (Kafka 4.3 waits up to 1 s by default)
    broker = make_broker(group_consumer_assignment_interval_ms=0)
    with BlockingConnection(broker.address) as conn:
        _join_heartbeat_leave_and_topic_changes(conn)


def _join_heartbeat_leave_and_topic_changes(conn: BlockingConnection) -> None:
    t = create(conn, "t", 2)
    joined = cgh(conn, "a", 0, names=["t", "later"])
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.member_epoch == 2
    assert joined.heartbeat_interval_ms == 5000
    assert assigned(joined) == {t: [0, 1]}
    # a subscribed topic appears: the next heartbeat bumps the epoch and assigns it
    later = create(conn, "later", 1)
    grown = cgh(conn, "a", 2, owned={t: [0, 1]})
    assert grown.member_epoch == 3
    assert assigned(grown) == {t: [0, 1], later: [0]}
    # a subscribed topic is deleted: revoked on the next heartbeat
    response = conn.request(
        DeleteTopicsRequest(topic_names=["later"], timeout_ms=5000), DeleteTopicsResponse, version=5
    )
    assert response.responses[0].error_code == 0
    revoking = cgh(conn, "a", 3, owned={t: [0, 1], later: [0]})
    assert (revoking.member_epoch, assigned(revoking)) == (3, {t: [0, 1]})
    released = cgh(conn, "a", 3, owned={t: [0, 1]})
    assert released.member_epoch == 4

    described = conn.request(
        ConsumerGroupDescribeRequest(group_ids=["g", "nope"]), ConsumerGroupDescribeResponse, version=0
    )
    g, nope = described.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignor_name) == (0, "Stable", 4, "uniform")
    (member,) = g.members
    assert member.member_id == "a"
    assert member.client_host.startswith("/127.0.0.1")
    assert {tp.topic_name: sorted(tp.partitions) for tp in member.assignment.topic_partitions} == {
        "t": [0, 1]
    }
    assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # v1 (KIP-1099) adds MemberType: 1 for a consumer-protocol member
    v1 = conn.request(ConsumerGroupDescribeRequest(group_ids=["g"]), ConsumerGroupDescribeResponse, version=1)
    assert [m.member_type for m in v1.groups[0].members] == [1]

    listed = conn.request(ListGroupsRequest(types_filter=["consumer"]), ListGroupsResponse, version=5)
    assert [(x.group_id, x.group_type, x.protocol_type, x.group_state) for x in listed.groups] == [
        ("g", "consumer", "consumer", "Stable")
    ]
    dead = conn.request(DescribeGroupsRequest(groups=["g"]), DescribeGroupsResponse, version=5).groups[0]
    assert (dead.group_state, dead.error_code) == ("Dead", 0)
    dead = conn.request(DescribeGroupsRequest(groups=["g"]), DescribeGroupsResponse, version=6).groups[0]
    assert (dead.group_state, dead.error_code, dead.error_message) == (
        "Dead",
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group g is not a classic group.",
    )

    left = cgh(conn, "a", -1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    assert cgh(conn, "a", 4, owned={}).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_offsets_validated_by_member_epoch(conn: BlockingConnection) -> None:
    create(conn, "t", 1)
    assert cgh(conn, "a", 0, names=["t"]).member_epoch == 2

    def commit(epoch: int, version: int = 9) -> ErrorCode:
        request = OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=epoch,
            member_id="a",
            topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 42)])],
        )
        response = conn.request(request, OffsetCommitResponse, version=version)
        return ErrorCode(response.topics[0].partitions[0].error_code)

    def fetch(epoch: int) -> tuple[ErrorCode, int | None]:
        request = OffsetFetchRequest(
            groups=[
                OffsetFetchRequestGroup(
                    group_id="g",
                    member_id="a",
                    member_epoch=epoch,
                    topics=[OffsetFetchRequestTopics("t", [0])],
                )
            ]
        )
        group = conn.request(request, OffsetFetchResponse, version=9).groups[0]
        offset = group.topics[0].partitions[0].committed_offset if group.topics else None
        return ErrorCode(group.error_code), offset

    assert commit(2, version=8) is ErrorCode.UNSUPPORTED_VERSION
    assert commit(3) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit(2) is ErrorCode.NONE
    assert fetch(1) == (ErrorCode.STALE_MEMBER_EPOCH, None)
    assert fetch(2) == (ErrorCode.NONE, 42)


def test_consumer_group_describe_of_a_classic_group(conn: BlockingConnection) -> None:
    # Kafka's consumerGroup(): a classic group (here a simple one, made by an Admin-style commit) is not
    # found, with its own message; the Admin client then falls back to DescribeGroups.
    create(conn, "t", 1)
    request = OffsetCommitRequest(
        group_id="simple",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 1)])],
    )
    assert conn.request(request, OffsetCommitResponse, version=9).topics[0].partitions[0].error_code == 0
    [simple] = conn.request(
        ConsumerGroupDescribeRequest(group_ids=["simple"]), ConsumerGroupDescribeResponse, version=1
    ).groups
    assert (simple.error_code, simple.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group simple is not a consumer group.",
    )
    [classic] = conn.request(
        DescribeGroupsRequest(groups=["simple"]), DescribeGroupsResponse, version=6
    ).groups
    assert (classic.error_code, classic.error_message, classic.group_state) == (0, None, "Empty")
