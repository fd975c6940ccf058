"""Workloads for the cluster's fault tests, each keeping the history a checker needs: what was sent, what
was acknowledged (partition, offset), what was consumed, what was committed.

- :class:`ConfluentProducer`: librdkafka, acks=all, idempotent, keyed values, in a thread.
- :class:`JavaProducer`: Kafka's own ``VerifiableProducer`` (the tool Kafka's system tests use), acks=all,
  reporting every acknowledged send with its offset.
- :func:`read_partitions`: every record of a topic, partition by partition, from the log start.
- :func:`check_acknowledged`: the Jepsen-style checks of an append-only log: every acknowledged record is at
  its acknowledged offset, no value appears twice, offsets increase and each producer's values keep their
  send order within a partition.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup import refkafka


@dataclass(frozen=True, slots=True)
class Ack:
    partition: int
    offset: int
    value: bytes
    # time.monotonic() when the acknowledgement reached the producer.
    at: float = field(default_factory=time.monotonic)


@dataclass
class ProducerHistory:
    name: str
    value_prefix: bytes
    """Every value this producer sends is the prefix and a sequence number."""
    sent: int = 0
    acked: list[Ack] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ack: Ack) -> None:
        with self.lock:
            self.acked.append(ack)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


class ConfluentProducer:
    """Produces ``<name>-<n>`` values (keyed by n) with acks=all until stopped."""

    def __init__(
        self, bootstrap: str, topic: str, name: str = "confluent", rate: float = 400.0, acks: str = "all"
    ) -> None:
        import confluent_kafka

        self.history = ProducerHistory(name, f"{name}-".encode())
        self._topic = topic
        self._rate = rate
        self._stop = threading.Event()
        self._producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": acks,
                "enable.idempotence": acks == "all",
                "linger.ms": 2,
                "delivery.timeout.ms": 120_000,
                "retry.backoff.ms": 100,
            }
        )
        self._thread = threading.Thread(target=self._run, name=f"producer {name}", daemon=True)

    def start(self) -> ConfluentProducer:
        self._thread.start()
        return self

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.history.failed.append(str(err))
        else:
            self.history.add(Ack(msg.partition(), msg.offset(), msg.value()))

    def _run(self) -> None:
        n = 0
        interval = 1.0 / self._rate
        while not self._stop.is_set():
            value = f"{self.history.name}-{n}".encode()
            try:
                self._producer.produce(self._topic, value, key=str(n).encode(), on_delivery=self._delivered)
            except BufferError:
                self._producer.poll(0.1)
                continue
            self.history.sent += 1
            n += 1
            self._producer.poll(0)
            time.sleep(interval)

    def stop(self, timeout: float = 120.0) -> ProducerHistory:
        self._stop.set()
        self._thread.join(30)
        remaining = self._producer.flush(timeout)
        assert remaining == 0, f"{remaining} records still undelivered after {timeout} s"
        return self.history


class JavaProducer:
    """Kafka's ``VerifiableProducer`` (acks=all, idempotent by default in Kafka 4) until stopped."""

    def __init__(
        self, bootstrap: str, topic: str, name: str = "java", throughput: int = 300, value_prefix: int = 4242
    ) -> None:
        # VerifiableProducer's values are "<integer prefix>.<n>"
        self.history = ProducerHistory(name, f"{value_prefix}.".encode())
        # Retried as librdkafka retries (within delivery.timeout.ms), so a leader change is not a failed send.
        self._config = tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False)  # noqa: SIM115
        self._config.write("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=120000\n")
        self._config.close()
        self._process = subprocess.Popen(
            refkafka.tool_command(
                "org.apache.kafka.tools.VerifiableProducer",
                "--command-config",
                self._config.name,
                "--topic",
                topic,
                "--bootstrap-server",
                bootstrap,
                "--acks",
                "-1",
                "--throughput",
                str(throughput),
                "--value-prefix",
                str(value_prefix),
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"producer {name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            name = event.get("name")
            if name == "producer_send_success":
                self.history.sent += 1
                self.history.add(
                    Ack(int(event["partition"]), int(event["offset"]), str(event["value"]).encode())
                )
            elif name == "producer_send_error":
                self.history.sent += 1
                self.history.failed.append(str(event.get("exception")))

    def stop(self) -> ProducerHistory:
        self._process.terminate()  # VerifiableProducer closes its producer (flushing) on SIGTERM
        try:
            self._process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)
        self._reader.join(30)
        if self._process.stdout is not None:
            self._process.stdout.close()
        os.unlink(self._config.name)
        return self.history


def read_partitions(
    bootstrap: str, topic: str, partitions: int, timeout: float = 120.0
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` as (offset, value), per partition, up to each partition's end."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        ended: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(ended) < partitions:
            assert time.monotonic() < deadline, (
                f"reading {topic} did not reach the end of {set(range(partitions)) - ended}"
            )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    ended.add(msg.partition())
                continue
            out[msg.partition()].append((msg.offset(), msg.value()))
            ended.discard(msg.partition())
    finally:
        consumer.close()
    return out


def check_acknowledged(histories: Iterable[ProducerHistory], log: dict[int, list[tuple[int, bytes]]]) -> int:
    """Assert the append-only log properties; returns the number of acknowledged records checked."""
    at: dict[tuple[int, int], bytes] = {}
    seen: set[bytes] = set()
    for partition, records in log.items():
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets not strictly increasing"
        for offset, value in records:
            assert value not in seen, f"{value!r} appears twice (partition {partition}, offset {offset})"
            seen.add(value)
            at[(partition, offset)] = value
    checked = 0
    for history in histories:
        for ack in history.acked:
            found = at.get((ack.partition, ack.offset))
            assert found == ack.value, (
                f"{history.name}: acknowledged {ack.value!r} at {ack.partition}/{ack.offset}, "
                f"the log has {found!r}"
            )
            checked += 1
        # Within a partition a producer's values keep their send order.
        for partition, records in log.items():
            prefix = history.value_prefix
            mine = [int(v[len(prefix) :]) for _, v in records if v.startswith(prefix)]
            assert mine == sorted(mine), f"{history.name}: values out of order in partition {partition}"
    return checked


def replica_batches(data_dir: Path, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """(base offset, raw batch bytes) of every whole batch in one replica's log files, read straight from
    its data directory (the node may be running: segments are append-only)."""
    from regroup.protocol.record_batch import iter_batches

    directory = data_dir / f"{topic}-{partition}"
    out: list[tuple[int, bytes]] = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batches(data):
            out.append((header.base_offset, data[pos : pos + header.batch_length + 12]))
    return out
