"""A consumer-group member or a producer written with one of the Python Kafka clients (confluent-kafka,
kafka-python, aiokafka), printing the JSON events of Apache Kafka's VerifiableConsumer/VerifiableProducer
on stdout so that one harness can drive every client.

    python pyclient.py consume --client confluent --bootstrap 127.0.0.1:9092 --topic t --group g
    python pyclient.py produce --client aiokafka --bootstrap 127.0.0.1:9092 --topic t --rate 100

A consumer commits synchronously after processing each batch and, on SIGTERM, commits, leaves the group
(closes the consumer) and prints ``shutdown_complete``. A producer sends until SIGTERM, then flushes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STOP = False


def _stop(signum: int, frame: object) -> None:
    global STOP  # noqa: PLW0603 - the signal handler's only way to reach the loops
    STOP = True


def emit(name: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields}) + "\n")
    sys.stdout.flush()


def parts(topic_partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(topic_partitions)]


def consumed(records: Iterable[tuple[str, int, int]]) -> None:
    """One records_consumed event for a batch of (topic, partition, offset)."""
    by_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, o in records:
        by_tp.setdefault((t, p), []).append(o)
    if by_tp:
        emit(
            "records_consumed",
            count=sum(len(v) for v in by_tp.values()),
            partitions=[
                {"topic": t, "partition": p, "count": len(v), "minOffset": min(v), "maxOffset": max(v)}
                for (t, p), v in sorted(by_tp.items())
            ],
        )


def next_offsets(records: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for t, p, o in records:
        out[(t, p)] = max(out.get((t, p), 0), o + 1)
    return out


# ---------------------------------------------------------------------------------------- confluent-kafka


def confluent_consume(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "client.id": a.name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if a.group_protocol == "consumer":
        # KIP-848: the broker assigns and sets session and heartbeat; librdkafka refuses the classic knobs.
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = a.session_timeout
        conf["heartbeat.interval.ms"] = a.heartbeat_interval
        conf["partition.assignment.strategy"] = a.assignor
    if a.instance_id:
        conf["group.instance.id"] = a.instance_id
    consumer = Consumer(conf)

    def on_assign(c: Any, tps: list[Any]) -> None:
        emit("partitions_assigned", partitions=parts((tp.topic, tp.partition) for tp in tps))

    def on_revoke(c: Any, tps: list[Any]) -> None:
        emit("partitions_revoked", partitions=parts((tp.topic, tp.partition) for tp in tps))

    consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    emit("startup_complete")
    while not STOP:
        msgs = consumer.consume(num_messages=500, timeout=0.2)
        batch = [
            (str(m.topic()), int(m.partition() or 0), int(m.offset() or 0)) for m in msgs if m.error() is None
        ]
        if not batch:
            continue
        consumed(batch)
        offsets = next_offsets(batch)
        try:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
            )
            ok, err = True, None
        except KafkaException as exc:
            ok, err = False, str(exc)
        emit(
            "offsets_committed",
            offsets=[{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()],
            success=ok,
            error=err,
        )
    consumer.close()
    emit("shutdown_complete")


def confluent_produce(a: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": a.bootstrap, "client.id": a.name, "acks": "all", "linger.ms": 5}
    )

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            emit(
                "producer_send_success",
                topic=msg.topic(),
                partition=msg.partition(),
                offset=msg.offset(),
                value=msg.value().decode(),
            )
        else:
            emit("producer_send_error", error=str(err))

    emit("startup_complete")
    i = 0
    while not STOP:
        producer.produce(a.topic, value=str(i).encode(), key=str(i).encode(), on_delivery=delivered)
        producer.poll(0)
        i += 1
        time.sleep(1.0 / a.rate)
    producer.flush(30)
    emit("shutdown_complete")


# ------------------------------------------------------------------------------------------ kafka-python


def kafka_python_consume(a: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from support.kafka_python_join import patch_kafka_python_join

    patch_kafka_python_join()
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    assignor = {"range": RangePartitionAssignor, "sticky": StickyPartitionAssignor}[a.assignor]
    extra: dict[str, Any] = {"group_instance_id": a.instance_id} if a.instance_id else {}
    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        client_id=a.name,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_timeout,
        heartbeat_interval_ms=a.heartbeat_interval,
        partition_assignment_strategy=[assignor],
        **extra,
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("partitions_revoked", partitions=parts((tp.topic, tp.partition) for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("partitions_assigned", partitions=parts((tp.topic, tp.partition) for tp in assigned))

    consumer.subscribe([a.topic], listener=Listener())
    emit("startup_complete")
    while not STOP:
        polled = consumer.poll(timeout_ms=200)
        batch = [(r.topic, r.partition, r.offset) for recs in polled.values() for r in recs]
        if not batch:
            continue
        consumed(batch)
        offsets = next_offsets(batch)
        try:
            consumer.commit(
                {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
            )
            ok, err = True, None
        except KafkaError as exc:
            ok, err = False, repr(exc)
        emit(
            "offsets_committed",
            offsets=[{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()],
            success=ok,
            error=err,
        )
    consumer.close()
    emit("shutdown_complete")


def kafka_python_produce(a: argparse.Namespace) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=a.bootstrap, client_id=a.name, acks="all", linger_ms=5)
    emit("startup_complete")
    i = 0
    while not STOP:
        future = producer.send(a.topic, key=str(i).encode(), value=str(i).encode())
        future.add_callback(
            lambda md, v=i: emit(
                "producer_send_success",
                topic=md.topic,
                partition=md.partition,
                offset=md.offset,
                value=str(v),
            )
        )
        future.add_errback(lambda exc: emit("producer_send_error", error=repr(exc)))
        i += 1
        time.sleep(1.0 / a.rate)
    producer.flush(30)
    producer.close()
    emit("shutdown_complete")


# -------------------------------------------------------------------------------------------------- aiokafka


async def aiokafka_consume(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[a.assignor]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap,
        group_id=a.group,
        client_id=a.name,
        group_instance_id=a.instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_timeout,
        heartbeat_interval_ms=a.heartbeat_interval,
        partition_assignment_strategy=(assignor,),
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit("partitions_revoked", partitions=parts((tp.topic, tp.partition) for tp in revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit("partitions_assigned", partitions=parts((tp.topic, tp.partition) for tp in assigned))

    await consumer.start()
    consumer.subscribe([a.topic], listener=Listener())
    emit("startup_complete")
    while not STOP:
        polled = await consumer.getmany(timeout_ms=200)
        batch = [(r.topic, r.partition, r.offset) for recs in polled.values() for r in recs]
        if not batch:
            continue
        consumed(batch)
        offsets = next_offsets(batch)
        try:
            await consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})
            ok, err = True, None
        except KafkaError as exc:
            ok, err = False, repr(exc)
        emit(
            "offsets_committed",
            offsets=[{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()],
            success=ok,
            error=err,
        )
    await consumer.stop()
    emit("shutdown_complete")


async def aiokafka_produce(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=a.bootstrap, client_id=a.name, acks="all", linger_ms=5)
    await producer.start()
    emit("startup_complete")
    pending: set[asyncio.Task[None]] = set()

    async def send(i: int) -> None:
        try:
            md = await producer.send_and_wait(a.topic, key=str(i).encode(), value=str(i).encode())
            emit(
                "producer_send_success",
                topic=md.topic,
                partition=md.partition,
                offset=md.offset,
                value=str(i),
            )
        except Exception as exc:  # reported, not raised: the harness counts failures
            emit("producer_send_error", error=repr(exc))

    i = 0
    while not STOP:
        task = asyncio.create_task(send(i))
        pending.add(task)
        task.add_done_callback(pending.discard)
        i += 1
        await asyncio.sleep(1.0 / a.rate)
    if pending:
        await asyncio.wait(pending)
    await producer.stop()
    emit("shutdown_complete")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["consume", "produce"])
    parser.add_argument("--client", required=True, choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="")
    parser.add_argument("--name", default="pyclient")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    parser.add_argument("--session-timeout", type=int, default=4000)
    parser.add_argument("--heartbeat-interval", type=int, default=500)
    parser.add_argument("--rate", type=float, default=100.0)
    a = parser.parse_args(argv)
    if os.environ.get("PYCLIENT_LOG"):  # client library logs on stderr, e.g. PYCLIENT_LOG=DEBUG
        logging.basicConfig(
            level=os.environ["PYCLIENT_LOG"], stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
        )
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if a.client == "confluent":
        (confluent_consume if a.mode == "consume" else confluent_produce)(a)
    elif a.client == "kafka-python":
        (kafka_python_consume if a.mode == "consume" else kafka_python_produce)(a)
    else:
        asyncio.run(aiokafka_consume(a) if a.mode == "consume" else aiokafka_produce(a))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
