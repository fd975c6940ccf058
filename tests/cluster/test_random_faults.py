"""A Jepsen-style run: producers (librdkafka, and Kafka's Java producer when Java is there) and a consumer
group write and commit while random faults hit random nodes — SIGKILL and restart, SIGTERM (controlled
shutdown) and restart, SIGSTOP past the session and SIGCONT — then, after healing and quiescence, a checker
reads everything back:

(a) every acknowledged acks=all record is at its acknowledged offset; (b) no value twice; (c) offsets
increasing and each producer's values in send order per partition; (d) every replica byte for byte the
same; (e) each partition's committed offset at least the last acknowledged commit.

CI runs a short, seeded version (three faults); ``--run-slow`` runs a long randomized one.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from regroup import refkafka
from regroup.testing import Cluster
from support.etcd import require_etcd

from .members import CommitHistory, ConfluentMember, check_commits
from .workloads import (
    ConfluentProducer,
    JavaProducer,
    ProducerHistory,
    check_acknowledged,
    read_partitions,
    replica_batches,
)

pytestmark = [pytest.mark.interop]

confluent_admin = pytest.importorskip("confluent_kafka.admin")

TOPIC = "work"
PARTITIONS = 3


def heal(cluster: Cluster) -> None:
    for node_id in cluster.node_ids:
        node = cluster.node(node_id)
        node.resume()
        if not node.running:
            node.start()
    for p in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, p, timeout=120)


def fault(cluster: Cluster, rng: random.Random) -> str:
    """One random fault on one random node, and the way back from it; returns what was done."""
    node_id = rng.choice(cluster.node_ids)
    node = cluster.node(node_id)
    kind = rng.choice(["kill", "stop", "pause"])
    if kind == "kill":
        node.kill()
        cluster.wait_for(
            lambda image: node_id not in image.nodes, 60, what=f"node {node_id}'s session to end"
        )
        node.start()
    elif kind == "stop":
        node.stop()
        node.start()
    else:
        node.pause()  # until its session ends: the others must go on without it
        cluster.wait_for(
            lambda image: node_id not in image.nodes, 60, what=f"node {node_id}'s session to end"
        )
        node.resume()
    heal(cluster)
    return f"{kind} {node_id}"


def run(tmp_path: Path, rounds: int, seed: int) -> None:
    require_etcd()
    rng = random.Random(seed)
    with Cluster(3, config={"min.insync.replicas": 2}, data_dir=tmp_path / "cluster") as cluster:
        admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([confluent_admin.NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
        for p in range(PARTITIONS):
            cluster.wait_for_isr(TOPIC, p)
        producers: list[ConfluentProducer | JavaProducer] = [
            ConfluentProducer(cluster.bootstrap_servers, TOPIC, rate=200).start()
        ]
        if refkafka.skip_reason() is None:
            producers.append(JavaProducer(cluster.bootstrap_servers, TOPIC, throughput=200))
        members = [
            ConfluentMember(cluster.bootstrap_servers, TOPIC, "checked", f"member-{i}").start()
            for i in range(2)
        ]
        done: list[str] = []
        histories: list[ProducerHistory] = []
        commits: list[CommitHistory] = []
        try:
            for _ in range(rounds):
                before = [p.history.count() for p in producers]
                done.append(fault(cluster, rng))
                deadline = time.monotonic() + 120
                while not all(p.history.count() > b for p, b in zip(producers, before, strict=True)):
                    assert time.monotonic() < deadline, f"no progress after {done}"
                    time.sleep(0.2)
        finally:
            histories = [p.stop() for p in producers]
            commits = [m.stop() for m in members]
        heal(cluster)
        log = read_partitions(cluster.bootstrap_servers, TOPIC, PARTITIONS)
        checked = check_acknowledged(histories, log)
        assert checked > 0
        for p in range(PARTITIONS):
            copies = {n: replica_batches(cluster.node(n).data_dir, TOPIC, p) for n in cluster.node_ids}
            first = copies[cluster.node_ids[0]]
            assert all(c == first for c in copies.values()), f"replicas of {TOPIC}-{p} differ after {done}"
        check_commits(cluster, "checked", TOPIC, commits)


def test_short_seeded_fault_run(tmp_path: Path) -> None:
    run(tmp_path, rounds=3, seed=20261125)


@pytest.mark.slow
def test_long_randomized_fault_run(tmp_path: Path) -> None:
    seed = int(os.environ.get("REGROUP_TEST_FAULT_SEED", str(random.randrange(1 << 30))))
    print(f"fault seed {seed} (REGROUP_TEST_FAULT_SEED={seed} repeats it)")
    run(tmp_path, rounds=int(os.environ.get("REGROUP_TEST_FAULT_ROUNDS", "20")), seed=seed)
