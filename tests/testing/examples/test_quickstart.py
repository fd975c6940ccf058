"""Quick start: a broker for one test, a consumer group, and coordinator time that moves only when told."""

import time

from confluent_kafka import Consumer

import regroup.testing


def test_a_silent_member_is_expired_when_the_clock_says_so() -> None:
    with regroup.testing.TestBroker() as b:
        b.create_topic("orders", partitions=3)
        consumer = Consumer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "group.id": "shipping",
                "session.timeout.ms": 45_000,
                "heartbeat.interval.ms": 100,
            }
        )
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 20
        while b.group("shipping") is None or b.group("shipping").state != "Stable":
            assert time.monotonic() < deadline
            consumer.poll(0.05)
        before = b.wait_for_stable("shipping", members=1)
        assert before.members[0].assignment == {"orders": (0, 1, 2)}

        # Heartbeats keep arriving in real time, but coordinator time stands still: 45 s pass at once,
        # and the session expires as if the consumer had been silent all along.
        b.clock.advance(45_000)
        assert b.group("shipping").state == "Empty"
        assert b.history("shipping")[-1].cause == regroup.testing.SessionExpired(
            before.members[0].member_id, 45_000
        )

        # The consumer finds out at its next heartbeat and joins again as a new member.
        while b.group("shipping").state != "Stable":
            assert time.monotonic() < deadline
            consumer.poll(0.05)
        after = b.wait_for_stable("shipping", members=1)
        assert after.member_ids != before.member_ids
        assert regroup.testing.close_consumer(consumer)  # see "The broker shares the test's process"
