"""A KIP-848 ``consumer``-protocol group end to end: two members driven over the wire with
ConsumerGroupHeartbeat against ``regroup serve``, which assigns each one of a topic's two partitions; each
commits (OffsetCommit v9, by member epoch) an offset it then never moves while records keep arriving. The
pipeline, reading the broker's data directory, must tell the protocol, the current members with their
subscriptions and assignments (topic ids named), and the owner of each stuck partition — all known by
construction from the heartbeat answers."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from regroup.client.blocking import BlockingConnection
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)

from .support import SPARK_SOCKETS, by_key, compute_tables

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

GROUP = "cp-group"
TOPIC = "cp"
MEMBERS = ("member-a", "member-b")
COMMITTED = {"member-a": 1, "member-b": 2}  # the offset each member commits for its partition
BEFORE, AFTER = 5, 3  # records per partition before and after the commits


@dataclass(frozen=True)
class Answer:
    data_dir: Path
    topic_id: uuid.UUID
    epochs: dict[str, int]  # member → member epoch
    owned: dict[str, int]  # member → its partition
    group_epoch: int
    now_ms: int
    kafka_tables: dict[str, list[dict[str, Any]]]  # computed through Spark's Kafka source


def _heartbeat(
    conn: BlockingConnection, topic_id: uuid.UUID, member: str, epoch: int, owned: list[int]
) -> Any:
    joining = epoch == 0
    request = ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member,
        member_epoch=epoch,
        rebalance_timeout_ms=30_000 if joining else -1,
        subscribed_topic_names=[TOPIC] if joining else None,
        topic_partitions=[ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=topic_id, partitions=owned)]
        if owned or not joining
        else [],
    )
    response = conn.request(request, ConsumerGroupHeartbeatResponse, version=1)
    assert response.error_code == 0, response
    return response


def _reconcile(
    conn: BlockingConnection, topic_id: uuid.UUID
) -> tuple[dict[str, int], dict[str, list[int]], int]:
    """Heartbeat both members (revoking what they are told to give up) until each owns one partition at
    the same epoch: (member epochs, owned partitions, group epoch)."""
    epochs = dict.fromkeys(MEMBERS, 0)
    owned: dict[str, list[int]] = {m: [] for m in MEMBERS}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for m in MEMBERS:
            r = _heartbeat(conn, topic_id, m, epochs[m], owned[m])
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                owned[m] = sorted(
                    p
                    for tp in r.assignment.topic_partitions
                    if tp.topic_id == topic_id
                    for p in tp.partitions
                )
        settled = len(set(epochs.values())) == 1 and sorted(p for m in MEMBERS for p in owned[m]) == [0, 1]
        if settled and all(len(owned[m]) == 1 for m in MEMBERS):
            return epochs, owned, epochs[MEMBERS[0]]
        time.sleep(0.2)
    raise AssertionError(f"the group did not settle: {epochs} {owned}")


@pytest.fixture(scope="module")
def answer(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Answer:
    from kafka import KafkaProducer

    from regroup_pipeline.inputs import TimeWindow, from_kafka

    from .brokers import RegroupBroker

    broker = RegroupBroker(tmp_path_factory.mktemp("consumer-protocol"))
    try:
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        with BlockingConnection((host, int(port))) as conn:
            created = conn.request(
                CreateTopicsRequest(topics=[CreatableTopic(TOPIC, 2, 1)], timeout_ms=5000),
                CreateTopicsResponse,
                version=7,
            )
            assert created.topics[0].error_code == 0, created.topics[0]
            topic_id = created.topics[0].topic_id
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)

            def produce(count: int) -> None:
                for p in (0, 1):
                    for i in range(count):
                        producer.send(TOPIC, value=f"{p}-{i}".encode(), partition=p)
                producer.flush()

            produce(BEFORE)
            epochs, owned, group_epoch = _reconcile(conn, topic_id)
            for m in MEMBERS:
                request = OffsetCommitRequest(
                    group_id=GROUP,
                    generation_id_or_member_epoch=epochs[m],
                    member_id=m,
                    topics=[
                        OffsetCommitRequestTopic(
                            TOPIC, [OffsetCommitRequestPartition(owned[m][0], COMMITTED[m])]
                        )
                    ],
                )
                response = conn.request(request, OffsetCommitResponse, version=9)
                assert response.topics[0].partitions[0].error_code == 0, response
            time.sleep(0.05)  # the later records are stamped after the commits
            produce(AFTER)
            producer.close()
            time.sleep(0.05)
            now_ms = int(time.time() * 1000)
            # The members keep heartbeating (nothing changes, nothing is written) while the cluster is read.
            stop = threading.Event()
            beating = threading.Thread(
                target=_keep_alive, args=((host, int(port)), topic_id, epochs, owned, stop)
            )
            beating.start()
            try:
                kafka_tables = compute_tables(
                    from_kafka(spark, broker.bootstrap_servers, TimeWindow(now_ms=now_ms))
                )
            finally:
                stop.set()
                beating.join(30)
    finally:
        broker.stop()  # the members stay in the group: shutting down writes nothing for them
    return Answer(
        broker.data_dir,
        topic_id,
        epochs,
        {m: owned[m][0] for m in MEMBERS},
        group_epoch,
        now_ms,
        kafka_tables,
    )


def _keep_alive(
    address: tuple[str, int],
    topic_id: uuid.UUID,
    epochs: dict[str, int],
    owned: dict[str, list[int]],
    stop: threading.Event,
) -> None:
    with BlockingConnection(address) as conn:
        while not stop.wait(1.0):
            for m in MEMBERS:
                response = _heartbeat(conn, topic_id, m, epochs[m], owned[m])
                assert response.member_epoch == epochs[m]


@pytest.fixture(scope="module", params=["kafka", "datadir"])
def tables(request: pytest.FixtureRequest, spark: Any, answer: Answer) -> dict[str, list[dict[str, Any]]]:
    from regroup_pipeline.inputs import TimeWindow, from_datadir

    if request.param == "kafka":
        return answer.kafka_tables
    return compute_tables(from_datadir(spark, [str(answer.data_dir)], TimeWindow(now_ms=answer.now_ms)))


def test_protocol_state_and_members(tables: Any, answer: Answer) -> None:
    summary = by_key(tables["group_summary"], "group")[(GROUP,)]
    assert (summary["protocol"], summary["state"], summary["members"], summary["generation"]) == (
        "consumer",
        "Stable",
        2,
        answer.group_epoch,
    )
    assert summary["stuck_partitions"] == 2
    members = by_key(tables["consumer_group_members"], "group", "member_id")
    assert sorted(m for g, m in members if g == GROUP) == sorted(MEMBERS)
    from regroup_pipeline.decode import topic_id_string

    for m in MEMBERS:
        row = members[(GROUP, m)]
        assert row["subscribed_topics"] == [TOPIC]
        assert row["client_host"].startswith("/127.0.0.1")
        assert row["client_id"] is not None
        assert (row["member_epoch"], row["member_state"]) == (answer.epochs[m], "stable")
        assert row["assigned_partitions"] == [
            {"topic": TOPIC, "topic_id": topic_id_string(answer.topic_id), "partitions": [answer.owned[m]]}
        ]
        assert row["partitions_pending_revocation"] == []
        assert row["target_partitions"] == row["assigned_partitions"]


def test_stuck_partitions_name_their_owner(tables: Any, answer: Answer) -> None:
    stuck = by_key([r for r in tables["stuck_partitions"] if r["group"] == GROUP], "topic", "partition")
    members = by_key(tables["consumer_group_members"], "group", "member_id")
    assert set(stuck) == {(TOPIC, 0), (TOPIC, 1)}
    for m in MEMBERS:
        row = stuck[(TOPIC, answer.owned[m])]
        assert (row["group_state"], row["generation"]) == ("Stable", answer.group_epoch)
        assert (row["owner_member_id"], row["committed_offset"]) == (m, COMMITTED[m])
        assert (row["owner_client_id"], row["owner_client_host"]) == (
            members[(GROUP, m)]["client_id"],
            members[(GROUP, m)]["client_host"],
        )
        assert (row["log_end_offset"], row["lag"]) == (BEFORE + AFTER, BEFORE + AFTER - COMMITTED[m])


def test_commits_are_credited_to_the_owning_member(tables: Any) -> None:
    got = {r["member_id"]: r for r in tables["member_commits"] if r["group"] == GROUP}
    assert set(got) == set(MEMBERS)
    for m in MEMBERS:
        # generations: the member epochs it went through while the group reconciled
        assert (got[m]["commits"], got[m]["partitions"]) == (1, 1)
        assert got[m]["generations"] >= 1


def test_protocol_follows_the_latest_records(spark: Any, tmp_path: Path) -> None:
    """Upgrades, downgrades and deletions, from records built by regroup's own coordinator code: the
    protocol and state come from whichever group record came last; a topic id is named by a
    ConsumerGroupPartitionMetadata record (Kafka ≤4.0) when the data directory does not know it."""
    from regroup.group import records as cr
    from regroup.group.consumer_group import MemberAssignment, MemberSubscription
    from regroup.protocol.records.consumer_group_partition_metadata import (
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupPartitionMetadataValue,
        TopicMetadata,
    )
    from regroup_pipeline import jobs
    from regroup_pipeline.inputs import TimeWindow, from_datadir
    from regroup_pipeline.synthetic import MemberSpec, group_metadata

    from .datadirs import Batch, build
    from .support import rows

    t0 = 1_795_000_000_000
    gone = uuid.UUID(int=77)  # a topic the data directory does not have
    named = (
        ConsumerGroupPartitionMetadataKey(group_id="upgraded").encode_versioned(4),
        ConsumerGroupPartitionMetadataValue(
            topics=[TopicMetadata(topic_id=gone, topic_name="old", num_partitions=1)]
        ).encode_versioned(0),
    )

    def consumer(group: str, member: str) -> list[tuple[bytes, bytes | None]]:
        sub = MemberSubscription(
            client_id=f"{member}-client", client_host="/10.1.1.1", subscribed_topic_names=("old",)
        )
        built = [
            cr.consumer_group_metadata_record(group, 3),
            cr.member_subscription_record(group, member, sub),
            cr.target_metadata_record(group, 3),
            cr.target_member_record(group, member, frozenset({(gone, 0)})),
            cr.current_assignment_record(
                group, member, MemberAssignment(member_epoch=3, assigned=frozenset({(gone, 0)}))
            ),
        ]
        return [(r.key, r.value) for r in built]

    def tombstones(group: str, member: str) -> list[tuple[bytes, bytes | None]]:
        built = [
            cr.current_assignment_tombstone(group, member),
            cr.target_member_tombstone(group, member),
            cr.member_subscription_tombstone(group, member),
            cr.target_metadata_tombstone(group),
            cr.consumer_group_metadata_tombstone(group),
        ]
        return [(r.key, r.value) for r in built]

    classic = group_metadata("upgraded", 4, [MemberSpec("c1", ["old"], {"old": [0]})], state_ts=t0)
    records: list[tuple[bytes, bytes | None]] = [
        # upgraded: a classic group, its record tombstoned, then the consumer group's records
        classic,
        (classic[0], None),
        named,
        *consumer("upgraded", "u1"),
        # downgraded: the reverse
        *consumer("downgraded", "d1"),
        *tombstones("downgraded", "d1"),
        group_metadata("downgraded", 5, [MemberSpec("c2", ["old"], {"old": [0]})], state_ts=t0),
        # deleted: a consumer group whose records are all tombstoned
        *consumer("deleted", "x1"),
        *tombstones("deleted", "x1"),
    ]
    data = build(
        tmp_path / "data",
        {"__consumer_offsets": 1},
        [Batch("__consumer_offsets", 0, [(t0 + i, k, v) for i, (k, v) in enumerate(records)])],
        t0,
    )
    inputs = from_datadir(spark, [str(data.path)], TimeWindow(now_ms=t0 + 60_000))
    states = {r["group"]: r for r in rows(jobs.group_states(inputs))}
    assert {g: (r["protocol"], r["state"], r["generation"]) for g, r in states.items()} == {
        "upgraded": ("consumer", "Stable", 3),
        "downgraded": ("classic", "Stable", 5),
        "deleted": ("consumer", "Dead", None),  # as a classic group's tombstone
    }
    (member,) = states["upgraded"]["members"]
    assert (member["member_id"], member["client_id"], member["assignment"]) == (
        "u1",
        "u1-client",
        [{"topic": "old", "partitions": [0]}],
    )
    assert [m["member_id"] for m in states["downgraded"]["members"]] == ["c2"]
    assert [(r["group"], r["member_id"]) for r in rows(jobs.consumer_group_members(inputs))] == [
        ("upgraded", "u1")
    ]
