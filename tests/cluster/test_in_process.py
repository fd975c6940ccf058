"""Three regroup nodes in one process, a shared in-process metadata store, and a real client
(confluent-kafka / librdkafka): replicated topics, acks=all, consumer groups coordinated by the leader of
their ``__consumer_offsets`` partition, and leadership moving when a node stops or crashes."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from regroup.group.config import partition_for

from .inprocess import InProcessCluster, in_process_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")


def produce(bootstrap: str, topic: str, values: list[bytes], *, acks: str = "all") -> list[tuple[int, int]]:
    """Produce ``values`` (one partition key each) and return the acknowledged (partition, offset)s."""
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all", "linger.ms": 5}
    )
    for value in values:
        producer.produce(topic, value, key=value, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert not errors, errors
    return acked


def consume_all(bootstrap: str, topic: str, expected: int, group: str | None = None) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"g-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(600):
            if len(values) >= expected:
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            values.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def create(cluster: InProcessCluster, topic: str, partitions: int, rf: int = 3) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([confluent_admin.NewTopic(topic, partitions, rf)])
    futures[topic].result(30)
    cluster.wait_for(
        lambda image: (
            topic in image.topics and all(image.leader_of(topic, p) >= 0 for p in range(partitions))
        ),
        what=f"{topic} created",
    )


def test_a_replicated_topic_takes_acks_all_writes_and_every_replica_has_them(tmp_path: Path) -> None:
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "orders", 3)
        values = [f"v{i}".encode() for i in range(300)]
        acked = produce(cluster.bootstrap_servers, "orders", values)
        assert len(acked) == 300
        assert sorted(consume_all(cluster.bootstrap_servers, "orders", 300)) == sorted(values)

        def replicas_equal() -> bool:
            ends = {
                (n, p): b.logs.partition("orders", p).log_end_offset  # type: ignore[union-attr]
                for n, b in cluster.brokers.items()
                for p in range(3)
            }
            return all(len({ends[(n, p)] for n in cluster.brokers}) == 1 for p in range(3))

        cluster.wait_until(replicas_equal, what="every replica at the same log end")

        # Followers fetch in sessions (KIP-227): every node leads partitions the others follow.
        def every_node_has_follower_sessions() -> bool:
            return all(any(s.privileged for s in b.fetch_sessions) for b in cluster.brokers.values())

        cluster.wait_until(every_node_has_follower_sessions, what="follower fetch sessions on every node")


def test_the_group_coordinator_is_the_offsets_partition_leader_and_commits_survive_its_loss(
    tmp_path: Path,
) -> None:
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "events", 2)
        produce(cluster.bootstrap_servers, "events", [f"e{i}".encode() for i in range(50)])
        assert len(consume_all(cluster.bootstrap_servers, "events", 50, group="readers")) == 50
        image = cluster.image()
        coordinator = image.leader_of("__consumer_offsets", partition_for("readers", 3))
        assert coordinator in cluster.brokers
        cluster.crash_node(coordinator)
        cluster.wait_for(
            lambda i: (
                coordinator not in i.nodes
                and i.leader_of("__consumer_offsets", partition_for("readers", 3)) not in (-1, coordinator)
            ),
            what="a new coordinator for the group",
        )
        # The committed position came back from the new coordinator: nothing is read twice.
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            parts = [confluent_kafka.TopicPartition("events", p) for p in range(2)]
            committed = consumer.committed(parts, timeout=30)
            assert sum(tp.offset for tp in committed) == 50
        finally:
            consumer.close()


def test_leadership_moves_away_on_a_controlled_shutdown_and_writes_continue(tmp_path: Path) -> None:
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "t", 3)
        produce(cluster.bootstrap_servers, "t", [b"a", b"b", b"c"])
        leader = cluster.image().leader_of("t", 0)
        cluster.stop_node(leader)
        image = cluster.wait_for(lambda i: leader not in i.nodes, what=f"node {leader} gone")
        assert all(image.leader_of("t", p) not in (-1, leader) for p in range(3))
        acked = produce(cluster.bootstrap_servers, "t", [f"x{i}".encode() for i in range(20)])
        assert len(acked) == 20
        assert len(consume_all(cluster.bootstrap_servers, "t", 23)) == 23
        cluster.start_node(leader)
        cluster.wait_for(
            lambda i: (
                leader in i.nodes
                and all((s := i.partition("t", p)) is not None and leader in s.isr for p in range(3))
            ),
            what=f"node {leader} back in every ISR",
        )


def test_acks_all_needs_min_insync_replicas_and_acks_1_does_not(tmp_path: Path) -> None:
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "strict", 1)
        leader = cluster.image().leader_of("strict", 0)
        for node_id in [n for n in list(cluster.brokers) if n != leader]:
            cluster.crash_node(node_id)
        cluster.wait_for(
            lambda i: (s := i.partition("strict", 0)) is not None and s.isr == (leader,),
            what="the ISR down to the leader alone",
        )
        errors: list[str] = []
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "retries": 0,
                "enable.idempotence": False,
                "message.timeout.ms": 10_000,
            }
        )
        producer.produce(
            "strict", b"x", on_delivery=lambda err, _msg: errors.append(err.name() if err else "OK")
        )
        producer.flush(30)
        assert errors == ["NOT_ENOUGH_REPLICAS"]
        # acks=1 only needs the leader.
        assert produce(cluster.bootstrap_servers, "strict", [b"y"], acks="1") == [(0, 0)]


def test_a_quiet_partition_keeps_its_followers_caught_up_while_their_fetches_do_not_name_it(
    tmp_path: Path,
) -> None:
    # Followers fetch in sessions; while partition 0 takes writes, their fetches name only partition 0 and
    # the leader of partition 1 still refreshes their caught-up clocks for it (Kafka's fetches do so at
    # every fetch, at least every replica.fetch.wait.max.ms).
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "quiet", 2)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        producer.produce("quiet", b"first", partition=1)
        assert producer.flush(30) == 0
        busy_until = time.monotonic() + 5
        while time.monotonic() < busy_until:
            producer.produce("quiet", b"x", partition=0)
            assert producer.flush(30) == 0

        def stale_followers() -> list[tuple[int, int | None]]:
            leader = cluster.image().leader_of("quiet", 1)
            broker = cluster.brokers[leader]
            assert broker.cluster is not None
            state = broker.cluster.replicas.leader_state("quiet", 1)
            assert state is not None
            now = broker.clock.now_ms()
            followers = [(r, state.follower(r)) for r in state.replicas if r != leader]
            return [
                (r, None if f is None else f.last_caught_up_time_ms)
                for r, f in followers
                if f is None or f.last_caught_up_time_ms is None or now - f.last_caught_up_time_ms > 3000
            ]

        assert cluster.call(stale_followers) == []
        record = cluster.image().partition("quiet", 1)
        assert record is not None
        assert len(record.isr) == 3


def test_a_topic_deleted_and_created_again_replicates_afresh(tmp_path: Path) -> None:
    # Followers drop what they knew of the old topic (its log, its fetch state) and follow the new one
    # from its start: every replica of the new topic holds exactly its records.
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "again", 2)
        produce(cluster.bootstrap_servers, "again", [f"old-{i}".encode() for i in range(30)])
        old_id = cluster.image().topics["again"].topic_id
        admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.delete_topics(["again"])["again"].result(30)
        cluster.wait_for(lambda image: "again" not in image.topics, what="again deleted")
        create(cluster, "again", 2)
        assert cluster.image().topics["again"].topic_id != old_id
        acked = produce(cluster.bootstrap_servers, "again", [f"new-{i}".encode() for i in range(10)])
        ends = {p: 1 + max(o for q, o in acked if q == p) for p in {q for q, _ in acked}}

        def replicas_at_end() -> bool:
            def check() -> bool:
                for broker in cluster.brokers.values():
                    for p, end in ends.items():
                        plog = broker.logs.partition("again", p)
                        if plog is None or plog.log_end_offset != end or plog.high_watermark != end:
                            return False
                return True

            return cluster.call(check)

        deadline = time.monotonic() + 60
        while not replicas_at_end():
            assert time.monotonic() < deadline, "every replica of the new topic at its end within 60 s"
            time.sleep(0.1)
        assert sorted(consume_all(cluster.bootstrap_servers, "again", 10)) == sorted(
            f"new-{i}".encode() for i in range(10)
        )


def test_a_follower_that_reconnects_closes_its_old_session_on_the_leader(tmp_path: Path) -> None:
    # Its first fetch on the new connection names the old session with epoch 0 (Kafka's
    # FetchSessionHandler after an error), so the leader closes it instead of keeping it until eviction.
    with in_process_cluster(tmp_path) as cluster:
        create(cluster, "orders", 3)

        def follower_sessions() -> dict[int, set[int]]:
            return {n: {s.id for s in b.fetch_sessions if s.privileged} for n, b in cluster.brokers.items()}

        cluster.wait_until(lambda: all(follower_sessions().values()), what="follower sessions on every node")
        before = cluster.call(follower_sessions)

        async def drop_connections() -> None:
            for broker in cluster.brokers.values():
                assert broker.cluster is not None
                for fetcher in broker.cluster.fetchers._fetchers.values():
                    if fetcher._conn is not None:
                        await fetcher._conn.close()

        cluster.run(drop_connections())

        def renewed() -> bool:
            now = follower_sessions()
            return all(now[n] and not now[n] & before[n] for n in now)

        cluster.wait_until(renewed, what="each follower's old session closed and a new one open")


def test_offsets_partitions_spread_over_every_node_and_sole_replicas_write_behind(tmp_path: Path) -> None:
    """``__consumer_offsets`` appears on the first FindCoordinator (as on Kafka), once every node runs, so
    with a replication factor below the node count its partitions still land on all of them (created when
    the first node registered, they all sat on that one). A partition with no other replica writes a
    connection's commits behind its read, as one node does; a replicated one never does."""
    from regroup.client.blocking import connect
    from regroup.protocol.messages.offset_commit import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
        OffsetCommitResponse,
    )

    with in_process_cluster(
        tmp_path,
        **{"offsets.topic.num.partitions": "6", "offsets.topic.replication.factor": "1"},
        **{"min.insync.replicas": "1", "default.replication.factor": "1"},
    ) as cluster:
        image = cluster.image()
        offsets = image.topics["__consumer_offsets"]
        assert {r[0] for r in offsets.replicas} == {1, 2, 3}
        assert all(len(r) == 1 for r in offsets.replicas)
        create(cluster, "t", 1, 1)
        group = "behind"
        partition = partition_for(group, 6)
        leader = cluster.image().leader_of("__consumer_offsets", partition)
        with connect(("127.0.0.1", cluster.ports[leader])) as conn:
            for i in range(5):
                conn.send(
                    OffsetCommitRequest(
                        group_id=group,
                        generation_id_or_member_epoch=-1,
                        member_id="",
                        topics=[
                            OffsetCommitRequestTopic(
                                name="t",
                                partitions=[
                                    OffsetCommitRequestPartition(partition_index=0, committed_offset=i)
                                ],
                            )
                        ],
                    ),
                    9,
                )
            for _ in range(5):
                response = conn.receive()
                assert isinstance(response, OffsetCommitResponse)
                assert response.topics[0].partitions[0].error_code == 0
        runner = cluster.call(lambda: cluster.brokers[leader].group_coordinator.runner(partition))
        assert runner is not None
        assert runner.stats.written_behind >= 1


def test_a_replicated_offsets_partition_never_writes_behind(tmp_path: Path) -> None:
    with in_process_cluster(tmp_path, **{"offsets.topic.num.partitions": "3"}) as cluster:
        bootstrap = cluster.bootstrap_servers
        create(cluster, "r", 1)
        produce(bootstrap, "r", [b"a", b"b"])
        group = f"g-{uuid.uuid4()}"
        consume_all(bootstrap, "r", 2, group)
        partition = partition_for(group, 3)
        leader = cluster.image().leader_of("__consumer_offsets", partition)
        runner = cluster.call(lambda: cluster.brokers[leader].group_coordinator.runner(partition))
        assert runner is not None
        assert runner.stats.appends > 0
        assert runner.stats.written_behind == 0
