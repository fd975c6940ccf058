"""A confluent-kafka consumer (``group.protocol=consumer``, KIP-848) subscribed to a ``^regex``, printing one
JSON object per line, as Apache Kafka's VerifiableConsumer: ``startup_complete``,
``partitions_assigned``/``partitions_revoked``, ``records_consumed`` (per batch: topic, partition, count,
minOffset, maxOffset) and ``shutdown_complete``. Commits synchronously after each
batch; SIGTERM closes the consumer (leaving the group).

    python confluent_regex.py <bootstrap> <group> '^regex'
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

STOP = False


def _stop(signum: int, frame: object) -> None:
    global STOP  # noqa: PLW0603 - the signal handler's only way to reach the loop
    STOP = True


def emit(name: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields}) + "\n")
    sys.stdout.flush()


def main(bootstrap: str, group: str, regex: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    signal.signal(signal.SIGTERM, _stop)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": "confluent-regex",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 2000,
        }
    )

    def partitions(tps: list[Any]) -> list[dict[str, Any]]:
        return [{"topic": tp.topic, "partition": tp.partition} for tp in tps]

    consumer.subscribe(
        [regex],
        on_assign=lambda c, tps: emit("partitions_assigned", partitions=partitions(tps)),
        on_revoke=lambda c, tps: emit("partitions_revoked", partitions=partitions(tps)),
    )
    emit("startup_complete")
    while not STOP:
        msgs = [m for m in consumer.consume(num_messages=500, timeout=0.2) if m.error() is None]
        by_tp: dict[tuple[str, int], list[int]] = {}
        for m in msgs:
            by_tp.setdefault((str(m.topic()), int(m.partition() or 0)), []).append(int(m.offset() or 0))
        if by_tp:
            batch = [
                {"topic": t, "partition": p, "count": len(o), "minOffset": min(o), "maxOffset": max(o)}
                for (t, p), o in sorted(by_tp.items())
            ]
            emit("records_consumed", count=len(msgs), partitions=batch)
        if msgs:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                emit("commit_failed", error=str(exc))
    consumer.close()
    emit("shutdown_complete")


if __name__ == "__main__":
    main(*sys.argv[1:4])
