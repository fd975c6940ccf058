"""A small regroup cluster for the pipeline tests: three nodes (``regroup.testing.Cluster``), every
partition on each of them, and real confluent-kafka consumer groups that leave offsets, a rebalance and a
lag behind. Its nodes' data directories and its Kafka listeners are two inputs of the same data."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

TOPIC: Final = "cl-events"
PARTITIONS: Final = 4
RECORDS: Final = 400


@dataclass(frozen=True)
class ClusterData:
    bootstrap: str
    node_dirs: tuple[Path, ...]
    snapshot_ms: int


def _consume(bootstrap: str, group: str, upto: int, *, commit_every: int = 20) -> Any:
    """A member of ``group`` that has consumed and committed ``upto`` records, still in the group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"{group}-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    consumer.subscribe([TOPIC])
    seen = 0
    position: dict[int, int] = {}
    deadline = time.monotonic() + 90
    while seen < upto:
        assert time.monotonic() < deadline, f"{group} consumed only {seen} of {upto} records"
        for message in consumer.consume(50, 0.5):
            if message.error() is None and seen < upto:
                seen += 1
                position[message.partition()] = message.offset() + 1
                if seen % commit_every == 0 or seen == upto:
                    done = [TopicPartition(TOPIC, p, o) for p, o in sorted(position.items())]
                    consumer.commit(offsets=done, asynchronous=False)
    return consumer


def run_workload(cluster: Any, data_dir: Path) -> ClusterData:
    """Write ``RECORDS`` records over ``PARTITIONS`` partitions replicated on every node; group
    ``cl-done`` reads them all with three members one after the other, ``cl-behind`` half of them; then
    wait until every replica has every record of ``__consumer_offsets`` and of the topic."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from regroup_pipeline import logdir

    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(TOPIC, f"r-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    # cl-done: three members one after the other (a generation each), which read everything between them.
    for share in (RECORDS // 4, RECORDS // 4, RECORDS // 2):
        _consume(bootstrap, "cl-done", share).close()
    _consume(bootstrap, "cl-behind", RECORDS // 2).close()
    node_dirs = tuple(sorted(p for p in data_dir.iterdir() if p.is_dir() and p.name.startswith("node-")))
    assert len(node_dirs) == 3, node_dirs
    # The Kafka source reads up to each partition's high watermark, the data directories everything on
    # disk: wait until the two agree, i.e. every replica caught up with its leader.
    from confluent_kafka import Consumer

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "cl-probe"})
    try:
        deadline = time.monotonic() + 60
        while True:
            ends: dict[tuple[str, int], set[int]] = {}
            for p in logdir.partition_copies(node_dirs):
                if p.topic in (TOPIC, "__consumer_offsets"):
                    ends.setdefault((p.topic, p.partition), set()).add(logdir.partition_end(p).log_end_offset)
            # Every copy ends at the partition's high watermark.
            caught_up = all(
                copy_ends == {probe.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]}
                for (t, p), copy_ends in ends.items()
            )
            if caught_up:
                break
            assert time.monotonic() < deadline, "the replicas did not catch up with their leaders"
            time.sleep(0.2)
    finally:
        probe.close()
    return ClusterData(bootstrap, node_dirs, int(time.time() * 1000))
