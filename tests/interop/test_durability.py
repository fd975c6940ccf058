"""Crash and restart behaviour seen by real clients: idempotent retries across a broker restart, kill -9
during acks=all writes with an fsync per batch, and a damaged segment tail."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.support import ServeProcess
from regroup.runtime.ports import free_port

pytestmark = pytest.mark.interop


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def read_all(
    bootstrap: str, topic: str, partitions: int, timeout: float = 30
) -> dict[int, list[tuple[int, bytes]]]:
    """Every (offset, value) of every partition, up to the current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "durability-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(5000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                value = msg.value()
                assert value is not None
                out[msg.partition()].append((msg.offset(), value))
    finally:
        consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return out


def test_idempotent_producer_survives_a_restart_without_duplicates(tmp_path: Path) -> None:
    port = free_port(lasting=True)  # the broker restarts on it
    data = tmp_path / "data"
    broker = ServeProcess(data, port=port).wait_ready()
    n = 30_000
    try:
        create_topic(broker.bootstrap, "idem", 3)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
                "message.timeout.ms": 60_000,
            }
        )
        errors: list[object] = []

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        for i in range(n):
            producer.produce("idem", str(i).encode(), partition=i % 3, on_delivery=on_delivery)
            if i % 500 == 0:
                producer.poll(0)
            if i == n // 3:
                # Drop the acknowledgements of whatever is in flight: kill the broker, restart it.
                broker.kill()
                broker = ServeProcess(data, port=port).wait_ready()
        assert producer.flush(60) == 0
        assert errors == []
        seen = read_all(broker.bootstrap, "idem", 3)
        values = [v for recs in seen.values() for _, v in recs]
        assert len(values) == len(set(values)), "duplicates in the log"
        assert sorted(int(v) for v in values) == list(range(n))
    finally:
        broker.kill()


def test_kill_9_during_acks_all_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    port = free_port(lasting=True)  # the broker restarts on it
    data = tmp_path / "data"
    flush_each = ("--override", "log.flush.interval.messages=1")
    broker = ServeProcess(data, *flush_each, port=port).wait_ready()
    acked: dict[tuple[int, int], bytes] = {}
    try:
        create_topic(broker.bootstrap, "crash", 2)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "batch.num.messages": 1,  # one record per batch: an fsync for every batch
                "message.timeout.ms": 1500,
                "reconnect.backoff.ms": 50,
            }
        )
        lock = threading.Lock()

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                with lock:
                    acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

        killer = threading.Timer(1.5, lambda: broker.proc.send_signal(signal.SIGKILL))
        killer.start()
        i = 0
        deadline = time.monotonic() + 10
        while broker.proc.poll() is None and time.monotonic() < deadline:
            if len(producer) > 2000:  # keep a bounded number of records in flight
                producer.poll(0.01)
                continue
            producer.produce("crash", b"record-%d" % i, partition=i % 2, on_delivery=on_delivery)
            producer.poll(0)
            i += 1
        killer.join()
        producer.flush(5)  # undelivered records time out; they were never acknowledged
        broker.kill()
        assert len(acked) > 100, "too few writes were acknowledged before the crash"

        broker = ServeProcess(data, *flush_each, port=port).wait_ready()
        seen = read_all(broker.bootstrap, "crash", 2)
        stored = {(p, off): v for p, recs in seen.items() for off, v in recs}
        missing = [key for key in acked if stored.get(key) != acked[key]]
        assert missing == [], f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:5]}"
        for recs in seen.values():
            assert [off for off, _ in recs] == list(range(len(recs)))

        # New writes work and continue the offsets.
        after = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        results: list[tuple[int, int]] = []
        after.produce(
            "crash",
            b"after",
            partition=0,
            on_delivery=lambda e, m: results.append((m.partition(), m.offset())),
        )
        assert after.flush(30) == 0
        assert results == [(0, len(seen[0]))]
    finally:
        broker.kill()


def test_corrupted_segment_tail_is_truncated_on_restart(tmp_path: Path) -> None:
    port = free_port(lasting=True)  # the broker restarts on it
    data = tmp_path / "data"
    broker = ServeProcess(data, port=port).wait_ready()
    try:
        create_topic(broker.bootstrap, "torn", 2)
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 10}
        )
        for i in range(1000):
            producer.produce("torn", b"v%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        broker.kill()  # unclean: the restart must check the segments' tails
        garbage_tail = data / "torn-0" / "00000000000000000000.log"
        with open(garbage_tail, "ab") as fh:
            fh.write(b"\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00garbage after a torn write")
        flipped = data / "torn-1" / "00000000000000000000.log"
        raw = bytearray(flipped.read_bytes())
        raw[-5] ^= 0xFF  # corrupt the last batch (CRC mismatch)
        flipped.write_bytes(bytes(raw))

        broker = ServeProcess(data, port=port).wait_ready()
        seen = read_all(broker.bootstrap, "torn", 2)
        assert len(seen[0]) == 500
        assert 450 <= len(seen[1]) < 500
        assert [v for _, v in seen[0]] == [b"v%d" % i for i in range(0, 1000, 2)]
        after = Producer({"bootstrap.servers": broker.bootstrap})
        after.produce("torn", b"new", partition=1)
        assert after.flush(30) == 0
        assert read_all(broker.bootstrap, "torn", 2)[1][-1] == (len(seen[1]), b"new")
        code, err = broker.terminate()
        assert code == 0
        assert "truncated" in err
        assert "torn-0" in err
        assert "torn-1" in err
    finally:
        broker.kill()
