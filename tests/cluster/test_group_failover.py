"""A consumer group across a coordinator failover and a rolling restart, on three ``regroup serve``
processes and a real etcd: members of three client libraries commit while the node coordinating their
group is killed; the group carries on with the new coordinator, and every commit the old one acknowledged is
what the new one returns. Static members ride through a rolling restart (SIGTERM, one node at a time)
without a rebalance."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regroup import refkafka
from regroup.testing import Cluster
from support.etcd import require_etcd

from .members import ConfluentMember, JavaMember, KafkaPythonMember, check_commits, wait_for
from .workloads import ConfluentProducer

pytestmark = [pytest.mark.interop]

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

TOPIC = "work"
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    require_etcd()
    with Cluster(3, config={"min.insync.replicas": 2}, data_dir=tmp_path / "cluster") as c:
        admin = confluent_admin.AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([confluent_admin.NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
        for p in range(PARTITIONS):
            c.wait_for_isr(TOPIC, p)
        yield c


def test_a_group_survives_its_coordinator_crash_and_keeps_every_acknowledged_commit(cluster: Cluster) -> None:
    producer = ConfluentProducer(cluster.bootstrap_servers, TOPIC, rate=300).start()
    group = "workers"
    members: list[ConfluentMember | KafkaPythonMember | JavaMember] = [
        ConfluentMember(cluster.bootstrap_servers, TOPIC, group, "librdkafka").start(),
        KafkaPythonMember(cluster.bootstrap_servers, TOPIC, group, "kafka-python"),
    ]
    if refkafka.skip_reason() is None:
        members.append(JavaMember(cluster.bootstrap_servers, TOPIC, group, "java"))
    try:
        cluster.wait_for_stable(group, members=len(members), timeout=120)
        wait_for(lambda: all(m.history.commits() > 0 for m in members), "every member committed")
        coordinator = cluster.coordinator_of(group)
        before = [m.history.commits() for m in members]
        cluster.node(coordinator).kill()
        cluster.wait_for(
            lambda image: cluster.coordinator_of(group) not in (-1, coordinator), what="a new coordinator"
        )
        wait_for(
            lambda: all(m.history.commits() > b for m, b in zip(members, before, strict=True)),
            "every member committed through the new coordinator",
        )
        cluster.wait_for_stable(group, members=len(members), timeout=120)
        # __group_events is replicated: the timeline written before the crash is read from the new leader.
        timeline = _history(cluster, group)
        assert timeline["generations"], timeline
        assert timeline["generations"][0]["generation_id"] >= 1
    finally:
        histories = [m.stop() for m in members]
        producer.stop()
    check_commits(cluster, group, TOPIC, histories)


def _history(cluster: Cluster, group: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            sys.executable, "-m", "regroup.cli", "groups", "--bootstrap-server", cluster.bootstrap_servers,
            "--history", "--group", group, "--output", "json",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)
    timeline: dict[str, Any] = document["groups"][0]
    return timeline


def test_static_members_ride_through_a_rolling_restart_without_a_rebalance(cluster: Cluster) -> None:
    producer = ConfluentProducer(cluster.bootstrap_servers, TOPIC, rate=100).start()
    group = "static"
    members = [
        ConfluentMember(
            cluster.bootstrap_servers, TOPIC, group, f"static-{i}", instance_id=f"instance-{i}"
        ).start()
        for i in range(2)
    ]
    try:
        stable = cluster.wait_for_stable(group, members=2, timeout=120)
        wait_for(lambda: all(m.history.commits() > 0 for m in members), "every member committed")
        generation = _generation(cluster, group)
        for node_id in cluster.node_ids:
            node = cluster.node(node_id)
            node.stop()  # SIGTERM: a controlled shutdown moves its leaderships away first
            node.start()
            for p in range(PARTITIONS):
                cluster.wait_for_isr(TOPIC, p)
            cluster.wait_for(
                lambda image: all(
                    image.leader_of("__consumer_offsets", p) >= 0
                    for p in range(image.topics["__consumer_offsets"].partitions)
                ),
                what="__consumer_offsets led",
            )
        before = [m.history.commits() for m in members]
        wait_for(
            lambda: all(m.history.commits() > b for m, b in zip(members, before, strict=True)),
            "every member committing after the restarts",
        )
        after = cluster.wait_for_stable(group, members=2)
        assert {m.member_id for m in after.members} == {m.member_id for m in stable.members}
        assert _generation(cluster, group) == generation
    finally:
        histories = [m.stop() for m in members]
        producer.stop()
    check_commits(cluster, group, TOPIC, histories)


def _generation(cluster: Cluster, group: str) -> int:
    generation = cluster.generation(group)
    assert generation >= 0, f"the coordinator of {group} does not know it"
    return generation
