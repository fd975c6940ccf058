"""confluent-kafka: an app that commits on revoke hands its partitions over without duplicates."""

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from regroup.testing import RebalanceForced, TestBroker, close_consumer

TOPIC, GROUP = "orders", "billing"


def start_consumer(b: TestBroker, name: str, events: list) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap_servers,
            "group.id": GROUP,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 100,  # client-side, real time: notice rebalances quickly
        }
    )

    def on_revoke(c, partitions):
        events.append((name, "revoked", sorted(p.partition for p in partitions)))
        try:
            c.commit(asynchronous=False)  # commit what was processed before the partitions go
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing processed yet
                raise

    def on_assign(c, partitions):
        events.append((name, "assigned", sorted(p.partition for p in partitions)))

    consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
    return consumer


def poll_until(condition, consumers, processed, timeout=20.0):
    """Poll ``consumers`` (name -> Consumer), "processing" records, until ``condition()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        for name, consumer in consumers.items():
            msg = consumer.poll(0.05)
            if msg is not None and not msg.error():
                processed.append((name, msg.partition(), msg.offset()))


def produce(b: TestBroker, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": b.bootstrap_servers})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=b"order-%d" % i, partition=i % 4)
    producer.flush(10)


def stable_with(b: TestBroker, members: int) -> bool:
    view = b.group(GROUP)  # a snapshot: never blocks the consumers, which must keep polling
    return view is not None and view.state == "Stable" and len(view.members) == members


def test_commit_on_revoke_survives_forced_rebalance_and_scale_out(regroup_broker: TestBroker) -> None:
    b = regroup_broker
    b.create_topic(TOPIC, partitions=4)
    produce(b, 0, 40)
    processed, events = [], []
    a = start_consumer(b, "a", events)
    poll_until(lambda: len(processed) >= 20, {"a": a}, processed)
    first = b.wait_for_stable(GROUP, members=1)

    # A forced rebalance revokes every partition (eager protocol) and assigns them again.
    b.force_rebalance(GROUP, reason="deploy")
    poll_until(lambda: ("a", "revoked", [0, 1, 2, 3]) in events and len(processed) >= 30, {"a": a}, processed)
    forced = b.wait_for_stable(GROUP, members=1, generation_after=first.generation_id)
    assert forced.history[-1].cause == RebalanceForced("deploy")

    # A second instance joins: half of the partitions move from a to c, which starts at a's commits.
    c = start_consumer(b, "c", events)
    poll_until(lambda: stable_with(b, 2), {"a": a, "c": c}, processed)
    produce(b, 40, 40)
    poll_until(lambda: len(processed) >= 80, {"a": a, "c": c}, processed)
    scaled = b.group(GROUP)
    owners = {m.client_id: m.assignment[TOPIC] for m in scaled.members}
    assert sorted(owners["a"] + owners["c"]) == [0, 1, 2, 3]
    assert any(name == "c" for name, _, _ in processed)
    records = [(partition, offset) for _, partition, offset in processed]
    assert len(records) == len(set(records)) == 80  # every record processed exactly once
    # Closing gives up the partitions first: on_revoke commits what is left, as at any shutdown.
    assert close_consumer(a)
    assert close_consumer(c)
    assert b.committed(GROUP) == {(TOPIC, p): 20 for p in range(4)}
