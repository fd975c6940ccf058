"""One consumer-group member as a subprocess (so SIGKILL is real), for the interop tests.

Usage: ``python interop_worker.py CLIENT BOOTSTRAP GROUP TOPIC [--assignor A] [--instance-id I]
[--session-ms N]`` with CLIENT one of confluent, kafka-python, aiokafka. Prints JSON lines, flushed:
``{"ev": "ready"}``, ``{"ev": "assignment", "parts": [...]}`` (the full current assignment, after every
change), ``{"ev": "rec", "p": P, "o": O, "v": V}`` for each record processed, then
``{"ev": "commit", "p": P, "o": NEXT}`` once a synchronous commit of the batch succeeded, or
``{"ev": "commit_failed", "error": E, "ranges": [[P, FIRST, NEXT], ...]}`` naming the batch's records whose
commit failed (a commit during a rebalance is refused, as on Kafka: those records may be consumed again by
the partition's next owner). SIGTERM closes
the consumer cleanly (commit, LeaveGroup for dynamic members) and exits 0. With REGROUP_INTEROP_DEBUG=DIR
the client library's DEBUG log goes to DIR/NAME.log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

stop = threading.Event()


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def emit_commit_failed(exc: BaseException, first: dict[int, int], nxt: dict[int, int]) -> None:
    """A batch's commit failed: its records, ``first[p]`` up to ``nxt[p]`` on each partition, stay
    uncommitted by this member."""
    emit(ev="commit_failed", error=str(exc), ranges=[[p, first[p], nxt[p]] for p in sorted(nxt)])


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": f"interop-{args.name}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": args.assignor,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    current: set[int] = set()

    def on_assign(c: Any, parts: list[Any]) -> None:
        current.update(p.partition for p in parts)
        if args.assignor == "cooperative-sticky":
            c.incremental_assign(parts)
        else:
            c.assign(parts)
        emit(ev="assignment", parts=sorted(current))

    def on_revoke(c: Any, parts: list[Any]) -> None:
        current.difference_update(p.partition for p in parts)
        if args.assignor == "cooperative-sticky":
            c.incremental_unassign(parts)
        else:
            c.unassign()
        emit(ev="assignment", parts=sorted(current))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    emit(ev="ready")
    while not stop.is_set():
        msgs = consumer.consume(200, timeout=0.2)
        batch = [m for m in msgs if m.error() is None]
        if not batch:
            continue
        first: dict[int, int] = {}
        nxt: dict[int, int] = {}
        for m in batch:
            emit(ev="rec", p=m.partition(), o=m.offset(), v=m.value().decode())
            first.setdefault(m.partition(), m.offset())
            nxt[m.partition()] = m.offset() + 1
        try:
            consumer.commit(
                offsets=[TopicPartition(args.topic, p, o) for p, o in nxt.items()], asynchronous=False
            )
        except KafkaException as exc:
            emit_commit_failed(exc, first, nxt)
            continue
        for p, o in nxt.items():
            emit(ev="commit", p=p, o=o)
    consumer.close()


def run_kafka_python(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.kafka_python_join import patch_kafka_python_join

    patch_kafka_python_join()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
        from kafka.errors import CommitFailedError, KafkaError
        from kafka.structs import OffsetAndMetadata

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(ev="assignment", parts=[])

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(ev="assignment", parts=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_instance_id=args.instance_id,
        client_id=f"interop-{args.name}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=500,
        metadata_max_age_ms=2000,
    )
    consumer.subscribe([args.topic], listener=Listener())
    emit(ev="ready")
    while not stop.is_set():
        polled = consumer.poll(timeout_ms=200, max_records=200)
        if not polled:
            continue
        offsets = {}
        for tp, records in polled.items():
            for r in records:
                emit(ev="rec", p=tp.partition, o=r.offset, v=r.value.decode())
            offsets[TopicPartition(tp.topic, tp.partition)] = OffsetAndMetadata(
                records[-1].offset + 1, "", -1
            )
        try:
            consumer.commit(offsets)
        except (CommitFailedError, KafkaError) as exc:
            emit_commit_failed(
                exc,
                {tp.partition: records[0].offset for tp, records in polled.items()},
                {tp.partition: om.offset for tp, om in offsets.items()},
            )
            continue
        for tp, om in offsets.items():
            emit(ev="commit", p=tp.partition, o=om.offset)
    consumer.close()


def run_aiokafka(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import CommitFailedError, KafkaError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit(ev="assignment", parts=[])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit(ev="assignment", parts=sorted(tp.partition for tp in assigned))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            group_instance_id=args.instance_id,
            client_id=f"interop-{args.name}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=500,
            metadata_max_age_ms=2000,
        )
        await consumer.start()
        consumer.subscribe([args.topic], listener=Listener())
        emit(ev="ready")
        try:
            while not stop.is_set():
                polled = await consumer.getmany(timeout_ms=200, max_records=200)
                if not polled:
                    continue
                offsets = {}
                for tp, records in polled.items():
                    for r in records:
                        emit(ev="rec", p=tp.partition, o=r.offset, v=r.value.decode())
                    offsets[TopicPartition(tp.topic, tp.partition)] = records[-1].offset + 1
                try:
                    await consumer.commit(offsets)
                except (CommitFailedError, KafkaError) as exc:
                    emit_commit_failed(
                        exc,
                        {tp.partition: records[0].offset for tp, records in polled.items()},
                        {tp.partition: offset for tp, offset in offsets.items()},
                    )
                    continue
                for tp, offset in offsets.items():
                    emit(ev="commit", p=tp.partition, o=offset)
        finally:
            await consumer.stop()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--name", default="m")
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--session-ms", type=int, default=6000)
    args = parser.parse_args()
    debug_dir = os.environ.get("REGROUP_INTEROP_DEBUG")
    if debug_dir:  # the client library's own DEBUG log, one file per member, for chasing a failure
        logging.basicConfig(
            filename=os.path.join(debug_dir, f"{args.name}.log"),
            level=logging.DEBUG,
            format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
        )
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runner = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}
    runner[args.client](args)
    emit(ev="closed")


if __name__ == "__main__":
    main()
