"""Every group API over the wire, at its lowest and highest served version, against an in-process broker."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.support import BrokerThread
from coordinator.wire import SETTINGS, GroupClient, errors
from regroup.client.blocking import BlockingConnection
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from regroup.protocol.messages.delete_topics import DeleteTopicsRequest
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from regroup.protocol.messages.join_group import JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from regroup.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
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
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from regroup.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

EXPECTED_RANGES = {
    ApiKey.OFFSET_COMMIT: (1, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
}


def test_api_versions_advertise_every_group_api(conn: BlockingConnection) -> None:
    response = conn.request(
        ApiVersionsRequest(client_software_name="tests", client_software_version="1"),
        ApiVersionsResponse,
        version=3,
    )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key, expected in EXPECTED_RANGES.items():
        assert ranges.get(int(key)) == expected, key.name


# ------------------------------------------------------------------------------------------- FindCoordinator


def test_find_coordinator_v0_and_v3_name_this_node(client: GroupClient, broker: BrokerThread) -> None:
    host, port = broker.address
    for version in (0, 3):
        r = client.call(FindCoordinatorRequest(key="orders"), version)
        assert isinstance(r, FindCoordinatorResponse)
        assert (r.error_code, r.node_id, r.host, r.port) == (0, 1, host, port)
        if version >= 1:
            assert r.error_message == "NONE"  # Kafka's Errors.NONE.message()


def test_find_coordinator_v1_transaction_key_is_not_available(client: GroupClient) -> None:
    r = client.call(FindCoordinatorRequest(key="txn", key_type=1), 1)
    assert (r.error_code, r.node_id, r.host, r.port) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    assert r.error_message == "The coordinator is not available."


def test_find_coordinator_v6_batches_group_transaction_and_share_keys(
    client: GroupClient, broker: BrokerThread
) -> None:
    host, port = broker.address
    r = client.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), 6)
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
        ("a", 0, 1, host, port),
        ("b", 0, 1, host, port),
    ]
    r = client.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 6)
    assert [(c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    ]
    topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    r = client.call(FindCoordinatorRequest(key_type=2, coordinator_keys=[f"g:{topic_id}:0", "bad"]), 6)
    assert [c.error_code for c in r.coordinators] == [
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.INVALID_REQUEST,
    ]
    r = client.call(FindCoordinatorRequest(key_type=2, coordinator_keys=[f"g:{topic_id}:0"]), 5)
    assert [(c.error_code, c.error_message) for c in r.coordinators] == [(ErrorCode.INVALID_REQUEST, "")]
    # An unknown key type fails the request as a whole; Kafka's error path fills in the message.
    r = client.call(FindCoordinatorRequest(key_type=7, coordinator_keys=["a"]), 5)
    assert [(c.error_code, c.error_message) for c in r.coordinators] == [
        (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST.message)
    ]


# ------------------------------------------------------------------------------------------- lowest versions


def test_group_lifecycle_at_the_lowest_versions(client: GroupClient, broker: BrokerThread) -> None:
    client.create_topic("t", 2)
    join = client.join("old", version=0)  # v0-3: no MEMBER_ID_REQUIRED round trip
    assert join.error_code == 0
    assert join.generation_id == 1
    assert join.leader == join.member_id
    assert join.member_id.startswith("wire-")
    sync = client.sync("old", join.member_id, 1, version=0, assignments={join.member_id: b"a0"})
    assert (sync.error_code, sync.assignment) == (0, b"a0")
    assert client.heartbeat("old", join.member_id, 1, version=0).error_code == 0
    assert errors(
        client.commit("old", {("t", 0): 5, ("t", 9): 1}, generation_id=1, member_id=join.member_id, version=1)
    ) == [
        0,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert client.fetch("old", [("t", 0), ("t", 1)], version=1) == {("t", 0): (5, 0), ("t", 1): (-1, 0)}
    described = client.call(DescribeGroupsRequest(groups=["old"]), 0)
    assert isinstance(described, DescribeGroupsResponse)
    [group] = described.groups
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.member_assignment) for m in group.members] == [
        (join.member_id, "wire", "/127.0.0.1", b"a0")
    ]
    listed = client.call(ListGroupsRequest(), 0)
    assert isinstance(listed, ListGroupsResponse)
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("old", "consumer")]
    left = client.call(LeaveGroupRequest(group_id="old", member_id=join.member_id), 0)
    assert isinstance(left, LeaveGroupResponse)
    assert left.error_code == 0
    deleted = client.call(DeleteGroupsRequest(groups_names=["old", "old", "nope"]), 0)
    assert isinstance(deleted, DeleteGroupsResponse)
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("old", 0),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert client.fetch("old", [("t", 0)], version=1) == {("t", 0): (-1, 0)}


def test_unloaded_partition_answers_not_coordinator_and_fetch_v1_puts_it_on_every_partition(
    client: GroupClient, broker: BrokerThread
) -> None:
    coord = broker.broker.group_coordinator
    asyncio.run_coroutine_threadsafe(coord.unload(coord.partition_for("g")), broker.loop).result(10)
    response = client.call(OffsetFetchRequest(group_id="g", topics=[OffsetFetchRequestTopic("t", [0, 1])]), 1)
    assert [
        (p.partition_index, p.committed_offset, p.error_code) for t in response.topics for p in t.partitions
    ] == [
        (0, -1, ErrorCode.NOT_COORDINATOR),
        (1, -1, ErrorCode.NOT_COORDINATOR),
    ]
    response = client.call(OffsetFetchRequest(group_id="g", topics=None), 2)
    assert (response.error_code, response.topics) == (ErrorCode.NOT_COORDINATOR, [])
    assert client.heartbeat("g", "m", 1).error_code == ErrorCode.NOT_COORDINATOR
    assert client.join("g").error_code == ErrorCode.NOT_COORDINATOR
    # FindCoordinator still names this node (single node: it is the partition's leader).
    assert client.call(FindCoordinatorRequest(key="g"), 3).error_code == 0
    asyncio.run_coroutine_threadsafe(coord.load(coord.partition_for("g")), broker.loop).result(10)
    assert client.join("g").error_code == ErrorCode.MEMBER_ID_REQUIRED


# ------------------------------------------------------------------------------------------- highest versions


@pytest.fixture
def delayed_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A broker whose initial rebalance waits 500 ms, so two members joining together form one generation."""
    b = BrokerThread(tmp_path / "data", **{**SETTINGS, "group_initial_rebalance_delay_ms": 500}).start()
    try:
        yield b
    finally:
        b.stop()


def test_group_lifecycle_at_the_highest_versions(delayed_broker: BrokerThread) -> None:
    broker = delayed_broker
    with GroupClient(broker.address, client_id="a") as a, GroupClient(broker.address, client_id="b") as b:
        a.create_topic("t", 4)
        first = a.join("new", instance_id=None)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        member_a = first.member_id
        a.post(a.join_request("new", member_a), 9)
        static = b.join("new", instance_id="inst-b")  # static members never get MEMBER_ID_REQUIRED
        joined_a = a.collect()
        assert isinstance(joined_a, JoinGroupResponse)
        assert static.error_code == joined_a.error_code == 0
        assert static.generation_id == joined_a.generation_id == 1
        leader = a if joined_a.leader == member_a else b
        leader_id = joined_a.leader
        assert {m.member_id for m in (joined_a if leader is a else static).members} == {
            member_a,
            static.member_id,
        }
        assignments = {member_a: b"A", static.member_id: b"B"}
        follower = b if leader is a else a
        follower_id = static.member_id if leader is a else member_a
        follower.post(
            follower.sync_request("new", follower_id, 1, instance_id="inst-b" if follower is b else None),
            5,
        )
        synced = leader.sync(
            "new", leader_id, 1, assignments=assignments, instance_id="inst-b" if leader is b else None
        )
        followed = follower.collect()
        assert isinstance(followed, SyncGroupResponse)
        assert (synced.error_code, synced.protocol_type, synced.protocol_name) == (0, "consumer", "range")
        assert {synced.assignment, followed.assignment} == {b"A", b"B"}
        assert a.heartbeat("new", member_a, 1).error_code == 0
        assert b.heartbeat("new", static.member_id, 1, instance_id="inst-b").error_code == 0
        assert errors(a.commit("new", {("t", 0): 10, ("t", 3): 13}, generation_id=1, member_id=member_a)) == [
            0,
            0,
        ]
        # v9 OffsetFetch with two groups in different coordinator partitions, merged in request order.
        request_groups = ["new", "unknown-group"]
        fetched = a.call(
            OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(group_id="new", topics=None),
                    OffsetFetchRequestGroup(
                        group_id="unknown-group", topics=[OffsetFetchRequestTopics("t", [0])]
                    ),
                ]
            ),
            9,
        )
        assert [g.group_id for g in fetched.groups] == request_groups
        assert {
            (t.name, p.partition_index, p.committed_offset)
            for t in fetched.groups[0].topics
            for p in t.partitions
        } == {
            ("t", 0, 10),
            ("t", 3, 13),
        }
        assert [
            (p.committed_offset, p.error_code) for t in fetched.groups[1].topics for p in t.partitions
        ] == [(-1, 0)]
        described = a.call(
            DescribeGroupsRequest(groups=["new", "ghost"], include_authorized_operations=True), 5
        )
        [group, ghost] = described.groups
        assert group.group_state == "Stable"
        assert len(group.members) == 2
        assert {m.group_instance_id for m in group.members} == {None, "inst-b"}
        assert group.authorized_operations == 3400  # Kafka 4.3 without an authorizer
        assert (ghost.group_state, ghost.error_code) == ("Dead", 0)
        # v6 (KIP-1043): the unknown group is an error, with Kafka's message; the known one is unchanged
        [group6, ghost6] = a.call(
            DescribeGroupsRequest(groups=["new", "ghost"], include_authorized_operations=True), 6
        ).groups
        assert (group6.group_state, group6.error_code, group6.error_message) == ("Stable", 0, None)
        assert group6.authorized_operations == 3400
        assert (ghost6.group_id, ghost6.group_state, ghost6.error_code, ghost6.error_message) == (
            "ghost",
            "Dead",
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Group ghost not found.",
        )
        assert ghost6.authorized_operations == -2147483648
        listed = a.call(ListGroupsRequest(states_filter=["stable"], types_filter=["classic"]), 5)
        assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [
            ("new", "Stable", "classic")
        ]
        listed = a.call(ListGroupsRequest(states_filter=["empty"]), 5)
        assert listed.groups == []
        # OffsetDelete refuses subscribed topics while the group is active; the unknown topic is the broker's.
        deleted = a.call(
            OffsetDeleteRequest(
                group_id="new",
                topics=[
                    OffsetDeleteRequestTopic("t", [OffsetDeleteRequestPartition(0)]),
                    OffsetDeleteRequestTopic("missing", [OffsetDeleteRequestPartition(0)]),
                ],
            ),
            0,
        )
        assert isinstance(deleted, OffsetDeleteResponse)
        assert deleted.error_code == 0
        assert errors(deleted) == [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        left = a.call(
            LeaveGroupRequest(
                group_id="new",
                members=[
                    MemberIdentity(member_id=member_a),
                    MemberIdentity(member_id="", group_instance_id="inst-b"),
                ],
            ),
            5,
        )
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in left.members] == [
            (member_a, None, 0),
            ("", "inst-b", 0),
        ]
        deleted = a.call(
            OffsetDeleteRequest(
                group_id="new", topics=[OffsetDeleteRequestTopic("t", [OffsetDeleteRequestPartition(0)])]
            ),
            0,
        )
        assert errors(deleted) == [0]
        assert a.fetch("new", [("t", 0), ("t", 3)]) == {("t", 0): (-1, 0), ("t", 3): (13, 0)}
        result = a.call(DeleteGroupsRequest(groups_names=["new"]), 2)
        assert [(r.group_id, r.error_code) for r in result.results] == [("new", 0)]


def test_sync_group_v5_without_protocol_is_inconsistent(client: GroupClient) -> None:
    response = client.call(
        SyncGroupRequest(
            group_id="g", generation_id=1, member_id="m", protocol_type=None, protocol_name="range"
        ),
        5,
    )
    assert isinstance(response, SyncGroupResponse)
    assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_commit_with_only_unknown_partitions_never_reaches_the_coordinator(client: GroupClient) -> None:
    client.create_topic("t", 1)
    # Against the coordinator this would be ILLEGAL_GENERATION (unknown group, generation >= 0).
    response = client.commit(
        "nobody", {("t", 1): 1, ("nope", 0): 1}, generation_id=3, member_id="m", version=8
    )
    assert errors(response) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    response = client.commit(
        "nobody", {("t", 0): 1, ("nope", 0): 1}, generation_id=3, member_id="m", version=8
    )
    assert errors(response) == [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    response = client.commit("nobody", {("t", 0): 1}, generation_id=3, member_id="m", version=9)
    assert errors(response) == [ErrorCode.GROUP_ID_NOT_FOUND]


def test_offset_delete_always_consults_the_coordinator(client: GroupClient) -> None:
    response = client.call(
        OffsetDeleteRequest(
            group_id="nobody", topics=[OffsetDeleteRequestTopic("nope", [OffsetDeleteRequestPartition(0)])]
        ),
        0,
    )
    assert (response.error_code, response.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, [])
    response = client.call(OffsetDeleteRequest(group_id="", topics=[]), 0)
    assert response.error_code == ErrorCode.INVALID_GROUP_ID


@pytest.mark.parametrize("version", [0, 4])
def test_txn_offset_commit_is_refused_without_a_transaction(client: GroupClient, version: int) -> None:
    client.create_topic("t", 1)
    response = client.call(
        TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id="g",
            producer_id=1,
            producer_epoch=0,
            topics=[
                TxnOffsetCommitRequestTopic(
                    "t", [TxnOffsetCommitRequestPartition(0, 5), TxnOffsetCommitRequestPartition(7, 5)]
                ),
            ],
        ),
        version,
    )
    assert isinstance(response, TxnOffsetCommitResponse)
    assert errors(response) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert client.fetch("g", [("t", 0)]) == {("t", 0): (-1, 0)}


def test_commit_v1_and_v9_store_what_fetch_v1_and_v9_return(client: GroupClient) -> None:
    client.create_topic("t", 2)
    assert errors(client.commit("simple", {("t", 0): 3}, version=1)) == [0]
    assert errors(client.commit("simple", {("t", 1): 4}, version=9, metadata="m")) == [0]
    assert client.fetch("simple", None, version=7) == {("t", 0): (3, 0), ("t", 1): (4, 0)}
    raw = client.call(
        OffsetCommitRequest(
            group_id="simple",
            topics=[
                OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 8, committed_metadata=None)])
            ],
        ),
        9,
    )
    assert errors(raw) == [0]
    assert client.fetch("simple", [("t", 0)], version=1) == {("t", 0): (8, 0)}


def test_deleting_a_topic_drops_its_committed_offsets_in_every_group(client: GroupClient) -> None:
    client.create_topic("gone", 2)
    client.create_topic("kept", 1)
    for group in ("g1", "g2"):
        assert errors(client.commit(group, {("gone", 0): 3, ("gone", 1): 4, ("kept", 0): 5})) == [0, 0, 0]
    response = client.call(DeleteTopicsRequest(topic_names=["gone"]), 4)
    assert [r.error_code for r in response.responses] == [0]
    for group in ("g1", "g2"):
        assert client.fetch(group, None, version=7) == {("kept", 0): (5, 0)}
    client.create_topic("gone", 2)  # a new topic of the same name starts without committed offsets
    assert client.fetch("g1", [("gone", 0)], version=7) == {("gone", 0): (-1, 0)}


# ------------------------------------------------------------------------------------------- lifecycle


def test_shutdown_answers_a_parked_join_at_once(tmp_path: Path) -> None:
    broker = BrokerThread(tmp_path / "data", group_initial_rebalance_delay_ms=60_000).start()
    client = GroupClient(broker.address)
    try:
        first = client.join("slow")
        client.post(client.join_request("slow", first.member_id), 9)
        time.sleep(0.2)
        answered: list[JoinGroupResponse] = []
        reader = threading.Thread(target=lambda: answered.append(client.collect()), daemon=True)
        reader.start()
        started = time.monotonic()
        broker.stop()
        reader.join(10)
        assert time.monotonic() - started < 4  # not the 5 s grace period
        assert [r.error_code for r in answered] == [ErrorCode.NOT_COORDINATOR]
    finally:
        client.close()
        broker.stop()


def test_a_manual_clock_drives_coordinator_timers_through_the_broker(tmp_path: Path) -> None:
    from regroup.broker.state import Broker
    from regroup.runtime.clock import ManualClock

    clock = ManualClock(1_700_000_000_000)
    thread = BrokerThread(tmp_path / "data", **SETTINGS)
    thread.broker = Broker(thread.config, clock=clock, shutdown_grace_seconds=5)
    thread.start()
    try:
        with GroupClient(thread.address) as client:
            first = client.join("timed", session_timeout_ms=10_000)
            joined = client.join("timed", first.member_id, session_timeout_ms=10_000)
            assert joined.error_code == 0
            sync = client.sync(
                "timed", joined.member_id, joined.generation_id, assignments={joined.member_id: b"x"}
            )
            assert sync.error_code == 0
            thread.call(clock.advance, 9_999)
            assert client.heartbeat("timed", joined.member_id, joined.generation_id).error_code == 0
            thread.call(clock.advance, 9_999)  # the heartbeat re-armed the session: still alive
            assert client.heartbeat("timed", joined.member_id, joined.generation_id).error_code == 0
            thread.call(clock.advance, 10_001)  # silent for longer than the session timeout
            deadline = time.monotonic() + 5
            while True:
                code = client.heartbeat("timed", joined.member_id, joined.generation_id).error_code
                if code != 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            assert code == ErrorCode.UNKNOWN_MEMBER_ID
            [group] = client.call(DescribeGroupsRequest(groups=["timed"]), 5).groups
            assert group.group_state == "Empty"
    finally:
        thread.stop()
