"""aiokafka: a consumer rides out a storm of NOT_COORDINATOR errors on heartbeats and commits."""

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from regroup.testing import TestBroker

TOPIC, GROUP = "clicks", "sessionizer"


async def run_app(b: TestBroker) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await producer.start()
    for i in range(50):
        await producer.send_and_wait(TOPIC, b"click-%d" % i, partition=i % 2)
    await producer.stop()

    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=b.bootstrap_servers,
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=100,
        retry_backoff_ms=20,
    )
    await consumer.start()
    seen = []

    async def consume(until: int) -> None:
        while len(seen) < until:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                seen.extend((r.partition, r.offset) for r in records)

    await asyncio.wait_for(consume(10), 20)
    # Control calls block: from async code, run the waiting ones in a thread so the client keeps going.
    before = await asyncio.to_thread(b.wait_for_stable, GROUP, 1)

    heartbeats = b.fail_next("Heartbeat", "NOT_COORDINATOR", count=6, group=GROUP)
    commits = b.fail_next("OffsetCommit", "NOT_COORDINATOR", count=3, group=GROUP)
    await asyncio.wait_for(consumer.commit(), 20)  # retried until the storm passes
    assert commits.fired == 3
    await asyncio.wait_for(consume(50), 20)
    while heartbeats.fired < 6:
        await asyncio.sleep(0.05)
    await consumer.commit()

    after = await asyncio.to_thread(b.wait_for_stable, GROUP, 1)
    assert after.generation_id == before.generation_id  # no rebalance: the client kept its membership
    assert len(seen) == len(set(seen)) == 50  # every record once
    assert after.committed == {(TOPIC, 0): 25, (TOPIC, 1): 25}
    await consumer.stop()


def test_not_coordinator_storm_is_survived(regroup_broker: TestBroker) -> None:
    regroup_broker.create_topic(TOPIC, partitions=2)
    asyncio.run(run_app(regroup_broker))
