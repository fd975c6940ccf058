"""kafka-python: a member whose session expires loses its partitions, and its late commit is rejected."""

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import CommitFailedError, RebalanceInProgressError

from regroup.testing import SessionExpired, TestBroker

TOPIC, GROUP = "payments", "ledger"


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.lost = []

    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        pass

    def on_partitions_lost(self, lost):  # kafka-python 3: the session ended, nothing can be committed
        self.lost.extend(sorted(tp.partition for tp in lost))


def consumer(b: TestBroker, name: str, listener: ConsumerRebalanceListener) -> KafkaConsumer:
    c = KafkaConsumer(
        bootstrap_servers=b.bootstrap_servers,
        group_id=GROUP,
        client_id=name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=100,
    )
    c.subscribe([TOPIC], listener=listener)
    return c


def poll_until(condition, *consumers, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        for c in consumers:
            c.poll(timeout_ms=50)


def commit(c: KafkaConsumer, offsets: dict, *others: KafkaConsumer, timeout=20.0) -> None:
    """Commit; while kafka-python still rebalances (it may rejoin once more of its own accord right after
    an assignment, e.g. when its metadata catches up) it refuses commits: poll and retry, as it advises."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.commit(offsets)
            return
        except RebalanceInProgressError:
            assert time.monotonic() < deadline, "timed out"
            for x in (c, *others):
                x.poll(timeout_ms=50)


def test_expired_member_loses_partitions_and_its_late_commit(regroup_broker: TestBroker) -> None:
    b = regroup_broker
    b.create_topic(TOPIC, partitions=2)
    producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
    for i in range(10):
        producer.send(TOPIC, b"payment-%d" % i, partition=i % 2)
    producer.close()

    slow_events, healthy_events = Recorder(), Recorder()
    with consumer(b, "slow", slow_events) as slow, consumer(b, "healthy", healthy_events) as healthy:

        def stable(members, *consumers):
            # The coordinator is Stable once the leader's assignment arrives; each member also has to have
            # read its own SyncGroup answer before it stops counting itself as rebalancing.
            view = b.group(GROUP)
            in_sync = all(c.assignment() for c in consumers)
            return view is not None and view.state == "Stable" and len(view.members) == members and in_sync

        poll_until(lambda: stable(2, slow, healthy), slow, healthy)
        view = b.group(GROUP)
        slow_member = next(m for m in view.members if m.client_id == "slow")
        (slow_partition,) = slow_member.assignment[TOPIC]
        tp = TopicPartition(TOPIC, slow_partition)
        commit(slow, {tp: OffsetAndMetadata(3, "", -1)}, healthy)

        b.expire_member(GROUP, slow_member.member_id)  # as if its session timed out

        # The group rebalances without it: the healthy member now owns every partition.
        poll_until(lambda: stable(1, healthy), healthy)
        after = b.group(GROUP)
        assert after.member_ids != view.member_ids
        assert after.members[0].client_id == "healthy"
        assert after.members[0].assignment[TOPIC] == (0, 1)
        # The rebalance that removed it was caused by its session (kafka-python may rejoin once more after).
        (removal,) = [g for g in after.history if slow_member.member_id in g.left]
        assert isinstance(removal.cause, SessionExpired)
        assert removal.cause.member_id == slow_member.member_id

        # The expired member's late commit is rejected, and nothing it committed late is stored.
        with pytest.raises(CommitFailedError):
            slow.commit({tp: OffsetAndMetadata(5, "", -1)})
        assert b.committed(GROUP)[(TOPIC, slow_partition)] == 3

        # When it polls again it learns its partitions are lost (not revoked: it cannot commit them).
        poll_until(lambda: slow_events.lost, slow, healthy)
        assert slow_events.lost == [slow_partition]
