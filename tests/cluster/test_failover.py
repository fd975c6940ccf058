"""Three ``regroup serve`` processes on a real etcd, real clients, real faults: a partition leader killed
with SIGKILL while librdkafka and Kafka's Java producer write with acks=all; a leader paused with SIGSTOP past
its session; Kafka's own tools describing the cluster. After each, a checker reads the whole log back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup import refkafka
from regroup.testing import Cluster
from support.etcd import require_etcd

from .workloads import ConfluentProducer, JavaProducer, check_acknowledged, read_partitions, replica_batches

pytestmark = [pytest.mark.interop]

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

TOPIC = "ledger"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    require_etcd()
    with Cluster(3, config={"min.insync.replicas": 2}, data_dir=tmp_path / "cluster") as c:
        yield c


def create_topic(cluster: Cluster, name: str = TOPIC, partitions: int = PARTITIONS) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([confluent_admin.NewTopic(name, partitions, 3)])[name].result(60)
    for p in range(partitions):
        cluster.wait_for_isr(name, p)


def wait_for(check: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


def java_available() -> bool:
    return refkafka.skip_reason() is None


def test_acknowledged_writes_survive_a_leader_crash(cluster: Cluster) -> None:
    create_topic(cluster)
    producers: list[ConfluentProducer | JavaProducer] = [
        ConfluentProducer(cluster.bootstrap_servers, TOPIC).start()
    ]
    if java_available():
        producers.append(JavaProducer(cluster.bootstrap_servers, TOPIC))
    wait_for(
        lambda: all(p.history.count() >= 100 for p in producers), "every producer acknowledged 100 records"
    )
    victim = cluster.leader(TOPIC, 0)
    before = [p.history.count() for p in producers]
    cluster.node(victim).kill()
    new_leader = cluster.wait_for_leader(TOPIC, 0, not_on=victim)
    assert new_leader != victim
    wait_for(
        lambda: all(p.history.count() >= b + 200 for p, b in zip(producers, before, strict=True)),
        "every producer acknowledged 200 more records after the crash",
    )
    histories = [p.stop() for p in producers]
    assert all(not h.failed for h in histories), [h.failed[:3] for h in histories]
    # The killed node comes back: it truncates what it alone had, catches up and rejoins every ISR.
    cluster.node(victim).start()
    for p in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, p)
    log = read_partitions(cluster.bootstrap_servers, TOPIC, PARTITIONS)
    checked = check_acknowledged(histories, log)
    assert checked == sum(len(h.acked) for h in histories) >= 600


def test_a_paused_leader_loses_its_leadership_and_truncates_what_it_alone_had(cluster: Cluster) -> None:
    create_topic(cluster, "paused", 1)
    victim = cluster.leader("paused", 0)
    producer = ConfluentProducer(cluster.bootstrap_servers, "paused", name="before").start()
    wait_for(lambda: producer.history.count() >= 100, "100 records acknowledged")
    before = producer.stop()
    cluster.node(victim).pause()  # past its session: cut off from etcd and from the other nodes
    try:
        new_leader = cluster.wait_for_leader("paused", 0, not_on=victim)
        after = ConfluentProducer(cluster.bootstrap_servers, "paused", name="after").start()
        wait_for(lambda: after.history.count() >= 100, "100 records acknowledged by the new leader")
        after_history = after.stop()
    finally:
        cluster.node(victim).resume()
    assert new_leader != victim
    cluster.wait_for_isr("paused", 0)
    log = read_partitions(cluster.bootstrap_servers, "paused", 1)
    check_acknowledged([before, after_history], log)


def test_kafka_tools_describe_the_cluster(cluster: Cluster) -> None:
    if not java_available():
        pytest.skip(str(refkafka.skip_reason()))
    create_topic(cluster, "described", 3)
    for node_id in cluster.node_ids:
        bootstrap = cluster.node(node_id).listener
        result = refkafka.run_tool(
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic",
            "described",
        )
        assert result.returncode == 0, result.stderr[-2000:]
        lines = [line for line in result.stdout.splitlines() if "Partition:" in line]
        assert len(lines) == 3
        image = cluster.image()
        for p, line in enumerate(sorted(lines)):
            state = image.partition("described", p)
            assert state is not None
            assert f"Leader: {state.leader}" in line
            assert f"Replicas: {','.join(map(str, image.replicas_of('described', p)))}" in line
            assert f"Isr: {','.join(map(str, state.isr))}" in line


def test_a_deposed_leader_truncates_the_tail_only_it_had(cluster: Cluster) -> None:
    """KIP-101: acks=1 records only the leader wrote are not committed; once another replica leads, the old
    leader's log follows the new one's — its divergent tail is truncated, nothing acknowledged with acks=all
    is lost."""
    create_topic(cluster, "tail", 1)
    leader = cluster.leader("tail", 0)
    followers = [n for n in cluster.node_ids if n != leader]
    committed = ConfluentProducer(cluster.bootstrap_servers, "tail", name="committed").start()
    wait_for(lambda: committed.history.count() >= 50, "50 records acknowledged by the whole ISR")
    committed_history = committed.stop()
    for node_id in followers:
        cluster.node(node_id).pause()
    # A fetch a follower sent before it stopped may be parked at the leader for up to
    # replica.fetch.wait.max.ms (200 ms here), and would carry what is written meanwhile into the stopped
    # follower's socket; past that window nothing written can reach a follower.
    time.sleep(1.0)
    try:
        # Written by the leader alone: acks=1 answers before any follower has them.
        lonely = ConfluentProducer(cluster.bootstrap_servers, "tail", name="lonely", acks="1").start()
        wait_for(lambda: lonely.history.count() >= 20, "20 records acknowledged by the leader alone")
        lonely_history = lonely.stop()
        cluster.node(leader).pause()
    finally:
        for node_id in followers:
            cluster.node(node_id).resume()
    try:
        new_leader = cluster.wait_for_leader("tail", 0, not_on=leader)
        after = ConfluentProducer(cluster.bootstrap_servers, "tail", name="after").start()
        wait_for(lambda: after.history.count() >= 50, "50 records acknowledged by the new leader's ISR")
        after_history = after.stop()
    finally:
        cluster.node(leader).resume()
    cluster.wait_for_isr("tail", 0)
    old_dir = cluster.node(leader).data_dir
    new_dir = cluster.node(new_leader).data_dir
    wait_for(
        lambda: replica_batches(old_dir, "tail", 0) == replica_batches(new_dir, "tail", 0),
        "the old leader's log byte for byte the new leader's",
    )
    log = read_partitions(cluster.bootstrap_servers, "tail", 1)
    check_acknowledged([committed_history, after_history], log)
    values = {value for records in log.values() for _, value in records}
    assert not values & {a.value for a in lonely_history.acked}, "the unreplicated tail survived"


def test_kafka_consumer_groups_describes_a_group_from_every_node(cluster: Cluster) -> None:
    if not java_available():
        pytest.skip(str(refkafka.skip_reason()))
    create_topic(cluster, "grouped", 3)
    producer = ConfluentProducer(cluster.bootstrap_servers, "grouped", name="g").start()
    wait_for(lambda: producer.history.count() >= 60, "60 records")
    produced = producer.stop().count()
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "described-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["grouped"])
        read = 0
        deadline = time.monotonic() + 60
        while read < produced and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                read += 1
        consumer.commit(asynchronous=False)
        cluster.wait_for_stable("described-group", members=1)
        outputs = []
        for node_id in cluster.node_ids:
            result = refkafka.run_tool(
                refkafka.CONSUMER_GROUPS_COMMAND,
                "--bootstrap-server", cluster.node(node_id).listener,
                "--describe", "--group", "described-group",
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-2000:]
            rows = sorted(
                line.split()[:6] for line in result.stdout.splitlines() if line.startswith("described-group")
            )
            outputs.append(rows)
        assert len(outputs[0]) == 3, outputs
        assert all(rows == outputs[0] for rows in outputs), outputs
        assert sum(int(row[3]) for row in outputs[0]) == produced, outputs  # CURRENT-OFFSET
        assert all(row[3] == row[4] for row in outputs[0])  # no lag: CURRENT-OFFSET == LOG-END-OFFSET
    finally:
        consumer.close()
