"""Each control of ``regroup.testing.TestBroker`` has the effect it promises, seen by a wire-level client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from coordinator.wire import GroupClient
from regroup.group.history import JoinDeadlineEvicted, MemberJoined, RebalanceForced, SessionExpired
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from regroup.protocol.messages.heartbeat import HeartbeatRequest
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from regroup.testing import BrokerError, GroupView, TestBroker, close_consumer
from support.kip848 import WireMember

G = "g"


@pytest.fixture
def client(regroup_broker: TestBroker) -> Iterator[GroupClient]:
    regroup_broker.create_topic("t", partitions=2)
    with GroupClient((regroup_broker.host, regroup_broker.port)) as c:
        yield c


def form(
    client: GroupClient, *, session_timeout_ms: int = 10_000, rebalance_timeout_ms: int = 10_000
) -> tuple[str, int]:
    """One member joins and syncs: (member id, generation)."""
    first = client.join(G, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = client.join(
        G, first.member_id, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms
    )
    assert joined.error_code == ErrorCode.NONE
    assert (
        client.sync(G, joined.member_id, joined.generation_id, assignments={joined.member_id: b""}).error_code
        == 0
    )
    return joined.member_id, joined.generation_id


def form_two(a: GroupClient, b: GroupClient, **timeouts: int) -> tuple[str, str, int]:
    a_id, _ = form(a, **timeouts)
    first = b.join(G, **timeouts)
    b.post(b.join_request(G, first.member_id, **timeouts), 9)  # parked: the group rebalances
    again = a.join(G, a_id, **timeouts)
    b_join = b.collect()
    assert again.generation_id == b_join.generation_id
    gen = again.generation_id
    b.post(b.sync_request(G, b_join.member_id, gen), 5)
    assert a.sync(G, a_id, gen, assignments={a_id: b"", b_join.member_id: b""}).error_code == 0
    assert b.collect().error_code == 0
    return a_id, b_join.member_id, gen


# ------------------------------------------------------------------------------------------ lifecycle


def test_start_is_fast_and_clients_connect(regroup_broker_factory: Callable[..., TestBroker]) -> None:
    regroup_broker_factory()  # the first broker of a process also pays for importing the handlers
    b = regroup_broker_factory()
    assert b.startup_seconds is not None
    assert b.startup_seconds < 1.0
    host, port = b.bootstrap_servers.split(":")
    assert host == "127.0.0.1"
    assert int(port) == b.port > 0


def test_context_manager_removes_its_temporary_data_dir() -> None:
    with TestBroker() as b:
        data = b.data_dir
        assert data.is_dir()
    assert not data.exists()


def test_create_topic_twice_fails(regroup_broker: TestBroker) -> None:
    regroup_broker.create_topic("dup", partitions=3)
    with pytest.raises(BrokerError, match="TOPIC_ALREADY_EXISTS"):
        regroup_broker.create_topic("dup")


def test_restart_keeps_data_port_and_virtual_time(regroup_broker: TestBroker, client: GroupClient) -> None:
    b = regroup_broker
    member, gen = form(client)
    assert (
        client.commit(G, {("t", 0): 7}, generation_id=gen, member_id=member)
        .topics[0]
        .partitions[0]
        .error_code
        == 0
    )
    port, now = b.port, b.clock.now_ms()
    b.restart()
    assert b.port == port
    assert b.clock.now_ms() == now
    assert b.committed(G) == {("t", 0): 7}
    view = b.group(G)
    assert view is not None
    assert view.state == "Stable"
    assert view.member_ids == (member,)
    with GroupClient((b.host, b.port)) as again:
        assert again.heartbeat(G, member, gen).error_code == ErrorCode.NONE


# ------------------------------------------------------------------------------------------ clock


def test_advance_fires_session_expiry_only_when_due(regroup_broker: TestBroker, client: GroupClient) -> None:
    b = regroup_broker
    member, gen = form(client, session_timeout_ms=6000)
    b.clock.advance(5999)
    assert b.group(G).state == "Stable"  # type: ignore[union-attr]
    b.clock.advance(1)
    view = b.group(G)
    assert view is not None
    assert view.state == "Empty"
    assert view.members == ()
    assert client.heartbeat(G, member, gen).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert view.history[-1].cause == SessionExpired(member, 6000)
    assert view.history[-2].cause == MemberJoined(member)
    assert b.group(G).generation_id == gen + 1  # type: ignore[union-attr]


def test_real_time_does_not_expire_sessions(regroup_broker: TestBroker, client: GroupClient) -> None:
    form(client, session_timeout_ms=100)
    time.sleep(0.3)  # three sessions of real time: nothing happens on a virtual clock
    assert regroup_broker.group(G).state == "Stable"  # type: ignore[union-attr]


def test_advance_completes_the_initial_rebalance_delay(
    regroup_broker_factory: Callable[..., TestBroker],
) -> None:
    b = regroup_broker_factory(config={"group.initial.rebalance.delay.ms": 3000})
    b.create_topic("t")
    with GroupClient((b.host, b.port)) as c:
        first = c.join(G)
        c.post(c.join_request(G, first.member_id), 9)
        b.wait_for(G, lambda v: v is not None and v.state == "PreparingRebalance")
        b.clock.advance(2999)
        assert b.group(G).state == "PreparingRebalance"  # type: ignore[union-attr]
        b.clock.advance(1)  # returns once the parked JoinGroup is answered
        joined = c.collect()
        assert joined.error_code == ErrorCode.NONE
        assert joined.generation_id == 1


def test_advance_fires_the_rebalance_timeout(regroup_broker: TestBroker) -> None:
    b = regroup_broker
    b.create_topic("t")
    with GroupClient((b.host, b.port)) as a, GroupClient((b.host, b.port)) as c:
        a_id, c_id, gen = form_two(a, c, session_timeout_ms=30_000, rebalance_timeout_ms=5000)
        b.force_rebalance(G)
        a.post(a.join_request(G, a_id, session_timeout_ms=30_000, rebalance_timeout_ms=5000), 9)
        b.clock.advance(4999)
        assert b.group(G).state == "PreparingRebalance"  # type: ignore[union-attr]
        b.clock.advance(1)  # c never rejoined: evicted at the rebalance timeout
        joined = a.collect()
        assert joined.error_code == ErrorCode.NONE
        assert joined.generation_id == gen + 1
        record = b.history(G)[-1]
        assert record.cause == RebalanceForced("forced by test")
        assert record.events == (JoinDeadlineEvicted((c_id,), 5000),)


def test_advance_expires_offsets(regroup_broker_factory: Callable[..., TestBroker]) -> None:
    b = regroup_broker_factory(
        config={"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 1000}
    )
    b.create_topic("t")
    with GroupClient((b.host, b.port)) as c:
        assert (
            c.commit(G, {("t", 0): 3}).topics[0].partitions[0].error_code == 0
        )  # a simple (groupless) commit
    b.clock.advance(59_000)
    assert b.committed(G) == {("t", 0): 3}
    b.clock.advance(2000)
    assert b.committed(G) == {}


def test_one_large_advance_fires_timers_in_deadline_order(
    regroup_broker: TestBroker, client: GroupClient
) -> None:
    member, _ = form(client, session_timeout_ms=6000)
    regroup_broker.clock.advance(300_000)  # below offsets.retention.check.interval.ms: the group stays
    record = regroup_broker.history(G)[-1]
    assert record.cause == SessionExpired(member, 6000)
    # The expiry was handled at its own deadline, not at the end of the jump.
    assert record.rebalance_started_ms == record.join_completed_ms
    assert regroup_broker.clock.now_ms() - record.join_completed_ms == 300_000 - 6000


def test_real_clock_mode_cannot_be_advanced(regroup_broker_factory: Callable[..., TestBroker]) -> None:
    b = regroup_broker_factory(virtual_clock=False)
    assert not b.clock.virtual
    with pytest.raises(RuntimeError, match="real time"):
        b.clock.advance(1)


# ------------------------------------------------------------------------------------------ forcing


def test_expire_member(regroup_broker: TestBroker) -> None:
    b = regroup_broker
    b.create_topic("t")
    with GroupClient((b.host, b.port)) as a, GroupClient((b.host, b.port)) as c:
        a_id, c_id, gen = form_two(a, c)
        b.expire_member(G, c_id)
        assert c.heartbeat(G, c_id, gen).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert a.heartbeat(G, a_id, gen).error_code == ErrorCode.REBALANCE_IN_PROGRESS
        joined = a.join(G, a_id)
        assert joined.generation_id == gen + 1
        assert b.history(G)[-1].cause == SessionExpired(c_id, 10_000)
        with pytest.raises(BrokerError, match="no member"):
            b.expire_member(G, c_id)


def test_force_rebalance_records_its_cause(regroup_broker: TestBroker, client: GroupClient) -> None:
    b = regroup_broker
    member, gen = form(client)
    b.force_rebalance(G, reason="chaos")
    assert client.heartbeat(G, member, gen).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    joined = client.join(G, member)
    client.sync(G, member, joined.generation_id, assignments={member: b""})
    view = b.wait_for_stable(G, members=1, generation_after=gen)
    assert view.history[-1].cause == RebalanceForced("chaos")
    assert "rebalance forced: chaos" in view.history[-1].describe()


def test_force_rebalance_of_an_empty_or_unknown_group_fails(regroup_broker: TestBroker) -> None:
    with pytest.raises(BrokerError, match="does not exist"):
        regroup_broker.force_rebalance("nobody")


def test_unload_and_load_coordinator(regroup_broker: TestBroker, client: GroupClient) -> None:
    b = regroup_broker
    member, gen = form(client)
    assert b.unload_coordinator(G) == b.coordinator_partition(G)
    assert b.coordinator_state(G) == "unloaded"
    assert client.heartbeat(G, member, gen).error_code == ErrorCode.NOT_COORDINATOR
    assert b.group(G) is None
    b.load_coordinator(G)
    assert b.coordinator_state(G) == "active"
    assert client.heartbeat(G, member, gen).error_code == ErrorCode.NONE  # reloaded from its log


def test_move_coordinator_shows_not_coordinator_then_load_in_progress(
    regroup_broker: TestBroker, client: GroupClient
) -> None:
    b = regroup_broker
    member, gen = form(client)
    mover = threading.Thread(
        target=b.move_coordinator, args=(G,), kwargs={"unavailable_s": 0.3, "loading_s": 0.3}
    )
    mover.start()
    seen: list[int] = []
    while mover.is_alive():
        code = (
            client.commit(G, {("t", 0): 1}, generation_id=gen, member_id=member)
            .topics[0]
            .partitions[0]
            .error_code
        )
        if not seen or seen[-1] != code:
            seen.append(code)
        time.sleep(0.01)
    mover.join()
    assert (
        client.commit(G, {("t", 0): 2}, generation_id=gen, member_id=member)
        .topics[0]
        .partitions[0]
        .error_code
        == 0
    )
    assert ErrorCode.NOT_COORDINATOR in seen
    assert ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in seen
    assert seen.index(ErrorCode.NOT_COORDINATOR) < seen.index(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


# ------------------------------------------------------------------------------------------ faults


def test_fail_next_commit_fails_only_that_group_and_count(
    regroup_broker: TestBroker, client: GroupClient
) -> None:
    b = regroup_broker
    member, gen = form(client)
    fault = b.fail_next("OffsetCommit", "REBALANCE_IN_PROGRESS", group=G)
    other = client.commit("other", {("t", 0): 1})
    assert other.topics[0].partitions[0].error_code == ErrorCode.NONE
    failed = client.commit(G, {("t", 0): 5, ("t", 1): 6}, generation_id=gen, member_id=member)
    assert [p.error_code for p in failed.topics[0].partitions] == [ErrorCode.REBALANCE_IN_PROGRESS] * 2
    assert b.committed(G) == {}  # the failed commit was not applied
    ok = client.commit(G, {("t", 0): 5}, generation_id=gen, member_id=member)
    assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert fault.fired == 1
    assert fault.exhausted


def test_fail_next_heartbeat_not_coordinator(regroup_broker: TestBroker, client: GroupClient) -> None:
    member, gen = form(client)
    regroup_broker.fail_next(ApiKey.HEARTBEAT, ErrorCode.NOT_COORDINATOR, count=2)
    codes = [client.heartbeat(G, member, gen).error_code for _ in range(3)]
    assert codes == [ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR, ErrorCode.NONE]


@pytest.mark.parametrize("version", [1, 5, 8])
def test_fail_next_offset_fetch_puts_the_error_where_the_version_has_it(
    regroup_broker: TestBroker, client: GroupClient, version: int
) -> None:
    regroup_broker.fail_next("OffsetFetch", "NOT_COORDINATOR", group=G)
    if version >= 8:
        request = OffsetFetchRequest(
            groups=[OffsetFetchRequestGroup(G, topics=[OffsetFetchRequestTopics("t", [0])])]
        )
    else:
        request = OffsetFetchRequest(group_id=G, topics=[OffsetFetchRequestTopic("t", [0])])
    response = client.call(request, version)
    assert isinstance(response, OffsetFetchResponse)
    if version >= 8:
        assert response.groups[0].error_code == ErrorCode.NOT_COORDINATOR
    elif version >= 2:
        assert response.error_code == ErrorCode.NOT_COORDINATOR
    else:  # v0-1 have no group-level error field
        assert response.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert client.fetch(G, [("t", 0)], version=version) == {("t", 0): (-1, ErrorCode.NONE)}


def test_fail_next_describe_groups_and_find_coordinator(
    regroup_broker: TestBroker, client: GroupClient
) -> None:
    b = regroup_broker
    b.fail_next("DescribeGroups", "COORDINATOR_NOT_AVAILABLE", group=G)
    described = client.call(DescribeGroupsRequest(groups=[G]), 5)
    assert isinstance(described, DescribeGroupsResponse)
    assert described.groups[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    b.fail_next("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2, group=G)
    old = client.call(FindCoordinatorRequest(key=G), 3)
    new = client.call(FindCoordinatorRequest(coordinator_keys=[G]), 4)
    assert isinstance(old, FindCoordinatorResponse)
    assert isinstance(new, FindCoordinatorResponse)
    assert old.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert new.coordinators[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    found = client.call(FindCoordinatorRequest(coordinator_keys=[G]), 4)
    assert found.coordinators[0].error_code == ErrorCode.NONE


def test_fail_next_rejects_unknown_names(regroup_broker: TestBroker) -> None:
    with pytest.raises(ValueError, match="unknown Kafka API"):
        regroup_broker.fail_next("OffsetCommitt", "NONE")
    with pytest.raises(ValueError, match="unknown Kafka error"):
        regroup_broker.fail_next("OffsetCommit", "NOT_A_CODE")


def test_delay_holds_responses(regroup_broker: TestBroker, client: GroupClient) -> None:
    member, gen = form(client)
    regroup_broker.delay("Heartbeat", 0.3, count=1)
    started = time.monotonic()
    assert client.heartbeat(G, member, gen).error_code == ErrorCode.NONE
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    client.heartbeat(G, member, gen)
    assert time.monotonic() - started < 0.3


def test_drop_next_closes_the_connection(regroup_broker: TestBroker, client: GroupClient) -> None:
    member, gen = form(client)
    fault = regroup_broker.drop_next("Heartbeat")
    client.send(HeartbeatRequest(group_id=G, generation_id=gen, member_id=member), 4)
    assert client.is_closed()
    assert fault.fired == 1


def test_drop_connections_of_one_client_id(regroup_broker: TestBroker) -> None:
    b = regroup_broker
    b.create_topic("t")
    with GroupClient((b.host, b.port), client_id="a") as a, GroupClient((b.host, b.port), client_id="c") as c:
        a.join(G)
        c.join(G)  # the broker learns each connection's client id from its requests
        assert b.drop_connections("a") == 1
        assert a.is_closed()
        assert not c.is_closed(timeout=0.2)
        assert b.drop_connections() == 1
        assert c.is_closed()


# ------------------------------------------------------------------------------------------ consumer groups


def converge(b: TestBroker, members: list[WireMember], n: int, timeout: float = 20.0) -> GroupView:
    """Heartbeat every member until the group is Stable with ``n`` members."""
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            assert m.heartbeat().error_code == ErrorCode.NONE
        view = b.group(G)
        if view is not None and view.is_stable and len(view.members) == n:
            return view
        assert time.monotonic() < deadline, f"not Stable with {n} members: {view}"


@pytest.fixture
def kip848(regroup_broker: TestBroker) -> Iterator[Callable[[str], WireMember]]:
    regroup_broker.create_topic("orders", partitions=4)
    made: list[WireMember] = []

    def make(client_id: str) -> WireMember:
        address = (regroup_broker.host, regroup_broker.port)
        made.append(WireMember(address, G, ["orders"], client_id=client_id))
        return made[-1]

    yield make
    for m in made:
        m.close()


def test_consumer_group_view(regroup_broker: TestBroker, kip848: Callable[[str], WireMember]) -> None:
    b = regroup_broker
    a = kip848("app-a")
    a.heartbeat()
    one = b.wait_for_stable(G, members=1)
    assert (one.group_type, one.state, one.group_epoch, one.assignment_epoch) == ("consumer", "Stable", 2, 2)
    c = kip848("app-c")
    view = converge(b, [a, c], 2)
    assert b.wait_for_stable(G, members=2, generation_after=2) == view
    assert view.group_type == "consumer"
    assert view.protocol_type == "consumer"
    assert view.assignor == view.protocol_name == "uniform"
    assert view.generation_id == view.group_epoch == view.assignment_epoch == 3
    assert view.leader_id is None
    by_client = {m.client_id: m for m in view.members}
    for m in view.members:
        assert m.member_type == "consumer"
        assert m.member_epoch == 3
        assert m.member_state == "stable"
        assert m.subscribed_topic_names == ("orders",)
        assert m.pending_revocation == ()
        assert m.target_assignment == m.assignment
        assert m.session_timeout_ms == 45_000
        assert m.rebalance_timeout_ms == 20_000
    assert by_client["app-a"].member_id == a.member_id
    partitions = sorted(p for m in view.members for p in m.assignment["orders"])
    assert partitions == [0, 1, 2, 3]
    assert view.health is not None
    assert view.health.ok
    assert view.owner_of("orders", 0) in (a.member_id, c.member_id)
    doc = view.to_json(detail=True)
    assert (doc["type"], doc["group_epoch"], doc["assignment_epoch"], doc["reconciling"]) == (
        "consumer",
        3,
        3,
        0,
    )
    assert {m["member_epoch"] for m in doc["members"]} == {3}


def test_fence_member_of_a_consumer_group(
    regroup_broker: TestBroker, kip848: Callable[[str], WireMember]
) -> None:
    b = regroup_broker
    a, c = kip848("app-a"), kip848("app-c")
    before = converge(b, [a, c], 2)
    b.fence_member(G, c.member_id)
    timeline = b.runner.call(b.coordinator.history_view, G)
    assert timeline["generations"][-1]["cause"]["kind"] == "member_fenced_session_timeout"
    assert timeline["state"] in ("Assigning", "Reconciling")
    after = b.group(G)
    assert after is not None
    assert after.member_ids == (a.member_id,)
    assert after.group_epoch == before.generation_id + 1
    # Kafka answers a member id it removed with UNKNOWN_MEMBER_ID; the client rejoins with epoch 0.
    assert c.heartbeat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    survivor = converge(b, [a], 1)
    assert survivor.member(a.member_id).assignment == {"orders": (0, 1, 2, 3)}
    assert survivor.member(a.member_id).member_epoch == survivor.group_epoch
    with pytest.raises(BrokerError, match="no member"):
        b.fence_member(G, c.member_id)
    # expire_member takes the same path for consumer groups.
    c.rejoin()
    converge(b, [a, c], 2)
    b.expire_member(G, a.member_id)
    assert a.heartbeat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert converge(b, [c], 1).member(c.member_id).assignment == {"orders": (0, 1, 2, 3)}


def test_expire_rebalance_timeout_fences_a_member_that_does_not_revoke(
    regroup_broker: TestBroker, kip848: Callable[[str], WireMember]
) -> None:
    b = regroup_broker
    a = kip848("app-a")
    converge(b, [a], 1)
    with pytest.raises(BrokerError, match="no rebalance timeout running"):
        b.expire_rebalance_timeout(G, a.member_id)  # nothing to revoke: no timer, as in Kafka
    a.stubborn = True  # from now on it keeps reporting all four partitions
    c = kip848("app-c")
    c.heartbeat()
    a.heartbeat()  # told to revoke half of its partitions
    view = b.group(G)
    assert view is not None
    assert view.state == "Reconciling"
    assert not view.is_stable
    stuck = view.member(a.member_id)
    assert stuck.member_state == "unrevoked_partitions"
    assert len(stuck.pending_revocation) == 2
    assert sum(len(ps) for ps in stuck.target_assignment.values()) == 2
    waiting = view.member(c.member_id)
    assert waiting.member_state == "unreleased_partitions"
    assert waiting.assignment == {}
    with pytest.raises(TimeoutError, match="unrevoked_partitions"):
        b.wait_for_stable(G, members=2, timeout=0.3)

    b.expire_rebalance_timeout(G, a.member_id)
    after = b.group(G)
    assert after is not None
    assert after.member_ids == (c.member_id,)
    assert after.group_epoch == view.generation_id + 1
    # Fenced by its rebalance timer, as the __group_events timeline tells.
    timeline = b.runner.call(b.coordinator.history_view, G)
    assert timeline["generations"][-1]["cause"]["kind"] == "member_fenced_rebalance_timeout"
    assert a.heartbeat().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert converge(b, [c], 1).member(c.member_id).assignment == {"orders": (0, 1, 2, 3)}
    with pytest.raises(BrokerError, match="no member"):
        b.expire_rebalance_timeout(G, a.member_id)


def test_virtual_clock_fires_a_consumer_members_rebalance_timeout(
    regroup_broker: TestBroker, kip848: Callable[[str], WireMember]
) -> None:
    b = regroup_broker
    a = kip848("app-a")
    converge(b, [a], 1)
    a.stubborn = True
    c = kip848("app-c")
    c.heartbeat()
    a.heartbeat()
    b.clock.advance(19_999)  # a's rebalance timeout is 20 s
    assert b.group(G).member(a.member_id).member_state == "unrevoked_partitions"  # type: ignore[union-attr]
    b.clock.advance(1)
    assert b.group(G).member_ids == (c.member_id,)  # type: ignore[union-attr]


def test_confluent_kafka_consumer_protocol_member_fenced(regroup_broker: TestBroker) -> None:
    """librdkafka's KIP-848 consumer (group.protocol=consumer): a fenced member's partitions go to the
    other member, it is told its partitions are lost, and it rejoins."""
    from confluent_kafka import Consumer, TopicPartition

    b = regroup_broker
    b.create_topic("orders", partitions=4)
    lost: dict[str, list[int]] = {"a": [], "c": []}

    def consumer(name: str) -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "group.id": G,
                "group.protocol": "consumer",
                "client.id": name,
                "auto.offset.reset": "earliest",
            }
        )

        def on_lost(_c: Consumer, partitions: list[TopicPartition]) -> None:
            lost[name].extend(tp.partition for tp in partitions)

        c.subscribe(["orders"], on_lost=on_lost)
        return c

    def poll_until(condition: Callable[[], bool], *consumers: Consumer, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out; last seen: {b.group(G)}"
            for c in consumers:
                c.poll(0.05)

    def stable(n: int) -> bool:
        view = b.group(G)
        return view is not None and view.is_stable and len(view.members) == n

    a, c = consumer("a"), consumer("c")
    try:
        poll_until(lambda: stable(2) and bool(a.assignment()) and bool(c.assignment()), a, c)
        before = b.wait_for_stable(G, members=2)
        assert before.group_type == "consumer"
        fenced = next(m for m in before.members if m.client_id == "c")
        assert fenced.member_type == "consumer"
        held = sorted(fenced.assignment["orders"])

        b.fence_member(G, fenced.member_id)
        survivor = b.group(G)
        assert survivor is not None
        assert [m.client_id for m in survivor.members] == ["a"]
        assert survivor.group_epoch == before.generation_id + 1

        # Only a polls: it takes every partition, and c is not in the group meanwhile.
        poll_until(lambda: stable(1) and len(a.assignment()) == 4, a)
        assert b.group(G).member_ids == (survivor.members[0].member_id,)  # type: ignore[union-attr]

        # c learns at its next heartbeat that it was fenced: its partitions are lost; it rejoins.
        poll_until(lambda: sorted(lost["c"]) == held and stable(2), a, c)
        assert lost["a"] == []
        again = b.wait_for_stable(G, members=2, generation_after=survivor.generation_id)
        assert sorted(p for m in again.members for p in m.assignment["orders"]) == [0, 1, 2, 3]
    finally:
        close_consumer(a)
        close_consumer(c)


def test_classic_member_inside_a_consumer_group_is_shown_as_such(
    regroup_broker: TestBroker, kip848: Callable[[str], WireMember]
) -> None:
    b = regroup_broker
    a = kip848("app-a")
    converge(b, [a], 1)
    with GroupClient((b.host, b.port), client_id="legacy") as legacy:
        # A JoinGroup to a consumer group: the member joins it speaking the classic protocol.
        first = legacy.join(G, topics=["orders"])
        joined = (
            legacy.join(G, first.member_id, topics=["orders"])
            if first.error_code == ErrorCode.MEMBER_ID_REQUIRED
            else first
        )
        assert joined.error_code == ErrorCode.NONE, joined
        view = b.group(G)
        assert view is not None
        assert view.group_type == "consumer"
        kinds = {m.member_id: m.member_type for m in view.members}
        assert kinds == {a.member_id: "consumer", joined.member_id: "classic"}
        classic = view.member(joined.member_id)
        assert classic.client_id == "legacy"
        assert classic.session_timeout_ms == 10_000  # its own, from its JoinGroup
        assert classic.subscribed_topic_names == ("orders",)
        members = view.to_json(detail=True)["members"]
        assert {m["member_id"]: m["member_type"] for m in members} == kinds
