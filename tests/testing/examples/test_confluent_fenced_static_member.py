"""confluent-kafka: a static member replaced by another instance with its group.instance.id is fenced."""

import time

from confluent_kafka import Consumer, KafkaError, KafkaException

from regroup.testing import TestBroker, close_consumer

TOPIC, GROUP = "events", "indexer"


def static_consumer(b: TestBroker, name: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap_servers,
            "group.id": GROUP,
            "group.instance.id": "indexer-0",  # static membership: survives restarts within its session
            "client.id": name,
            "heartbeat.interval.ms": 100,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    return consumer


def poll_errors(consumer: Consumer) -> list[KafkaError]:
    try:
        msg = consumer.poll(0.05)
    except KafkaException as e:
        return [e.args[0]]
    return [msg.error()] if msg is not None and msg.error() else []


def test_static_member_replaced_by_a_new_instance_is_fenced(regroup_broker: TestBroker) -> None:
    b = regroup_broker
    b.create_topic(TOPIC, partitions=2)
    old = static_consumer(b, "old")
    deadline = time.monotonic() + 20
    while (b.group(GROUP) is None or b.group(GROUP).state != "Stable") and time.monotonic() < deadline:
        old.poll(0.05)
    before = b.wait_for_stable(GROUP, members=1)

    # A second process starts with the same group.instance.id (say, a deploy that did not stop the old one).
    new = static_consumer(b, "new")
    errors = []
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        new.poll(0.05)
        errors += poll_errors(old)

    # The old instance is told it was fenced: librdkafka raises it as a fatal error.
    assert errors, "the old instance was never told"
    assert errors[0].code() == KafkaError._FATAL
    assert "fenced" in errors[0].str()
    # The new instance took over the static member's place: a new member id, no rebalance.
    after = b.group(GROUP)
    assert after.generation_id == before.generation_id
    (member,) = after.members
    assert member.group_instance_id == "indexer-0"
    assert member.member_id != before.members[0].member_id
    assert close_consumer(new, 30)
    # The fenced instance failed fatally: it can only be dropped, and close_consumer leaves it so.
    assert not close_consumer(old, 10)
