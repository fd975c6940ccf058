"""A kafka-python group member as its own process (its client state, sockets and threads stay out of the
test process): consumes ``topic`` in ``group``, commits synchronously after each poll and prints one JSON
line per event — ``{"consumed": n}``, ``{"committed": [[partition, offset], ...]}``, ``{"error": text}`` —
until SIGTERM, when it closes the consumer.

    python kafka_python_member.py BOOTSTRAP TOPIC GROUP NAME
"""

from __future__ import annotations

import json
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def main(bootstrap: str, topic: str, group: str, name: str) -> None:
    from support.kafka_python_join import patch_kafka_python_join

    patch_kafka_python_join()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap.split(","),
        group_id=group,
        client_id=name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1000,
    )
    emit({"started": name})
    try:
        while not stopping:
            try:
                polled = consumer.poll(timeout_ms=200, max_records=50)
            except KafkaError as exc:
                emit({"error": str(exc)})
                continue
            if not polled:
                continue
            offsets = {}
            for tp, records in polled.items():
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
            emit({"consumed": sum(len(r) for r in polled.values())})
            try:
                consumer.commit(offsets)
            except KafkaError as exc:
                emit({"error": str(exc)})
                continue
            emit({"committed": [[tp.partition, om.offset] for tp, om in offsets.items()]})
    finally:
        consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
