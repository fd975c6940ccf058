"""kafka-python and confluent-kafka (librdkafka) against ``regroup serve``: producers and assign-mode
consumers round-trip records over 6 partitions with every compression codec, each client reading what
either wrote."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its schemas with importlib.resources.read_text, deprecated in 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KPTopicPartition

from broker.support import ServeProcess

pytestmark = pytest.mark.interop

PARTITIONS = 6
PER_CELL = 50_000  # per codec: 2 producers x 50,000 = 100,000 records, each read back by both consumers
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def expected(tag: str, i: int) -> tuple[bytes, bytes, tuple[tuple[str, bytes], ...], int]:
    key = f"{tag}-{i}".encode()
    value = (f"value {i} of {tag} " * (1 + i % 7)).encode()
    headers = (("i", str(i).encode()), ("tag", tag.encode()))
    return key, value, headers, BASE_TS + i


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)


def produce_confluent(bootstrap: str, topic: str, tag: str, codec: str, n: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5, "acks": "all"}
    )
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(n):
        key, value, headers, ts = expected(tag, i)
        producer.produce(
            topic,
            value,
            key,
            partition=i % PARTITIONS,
            timestamp=ts,
            headers=list(headers),
            on_delivery=on_delivery,
        )
        if i % 2000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    assert errors == []


def produce_kafka_python(bootstrap: str, topic: str, tag: str, codec: str, n: int) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=5,
    )
    futures = []
    for i in range(n):
        key, value, headers, ts = expected(tag, i)
        futures.append(
            producer.send(
                topic, value=value, key=key, partition=i % PARTITIONS, headers=list(headers), timestamp_ms=ts
            )
        )
    producer.flush(300)
    for f in futures:
        f.get(30)
    producer.close()


def consume_confluent(bootstrap: str, topic: str, n: int) -> dict[int, list[Rec]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "interop-assign",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    got = 0
    deadline = time.monotonic() + 300
    try:
        while got < n and time.monotonic() < deadline:
            for msg in consumer.consume(5000, timeout=1):
                assert msg.error() is None, msg.error()
                headers = tuple((k, v) for k, v in (msg.headers() or []))
                out[msg.partition()].append(
                    Rec(msg.offset(), msg.key(), msg.value(), headers, msg.timestamp()[1])
                )
                got += 1
    finally:
        consumer.close()
    return out


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> dict[int, list[Rec]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    consumer.assign([KPTopicPartition(topic, p) for p in range(PARTITIONS)])
    out: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    got = 0
    deadline = time.monotonic() + 300
    try:
        while got < n and time.monotonic() < deadline:
            for tp, messages in consumer.poll(1000, max_records=5000).items():
                for m in messages:
                    headers = tuple((k, v) for k, v in m.headers)
                    out[tp.partition].append(Rec(m.offset, m.key, m.value, headers, m.timestamp))
                    got += 1
    finally:
        consumer.close()
    return out


def check(tag: str, n: int, records: dict[int, list[Rec]]) -> None:
    for p in range(PARTITIONS):
        recs = records[p]
        indexes = list(range(p, n, PARTITIONS))
        assert [r.offset for r in recs] == list(range(len(indexes))), f"partition {p}: offsets not contiguous"
        for r, i in zip(recs, indexes, strict=True):
            key, value, headers, ts = expected(tag, i)
            assert (r.key, r.value, r.headers, r.timestamp) == (key, value, headers, ts)


PRODUCERS: dict[str, Callable[[str, str, str, str, int], None]] = {
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
}
CONSUMERS: dict[str, Callable[[str, str, int], dict[int, list[Rec]]]] = {
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
}


def test_roundtrip_matrix_every_codec_and_client(serve: ServeProcess) -> None:
    """100,000 records per codec (half from each producer), each record read back by both consumers."""
    for codec in CODECS:
        for producer_name, produce in PRODUCERS.items():
            topic = f"matrix-{codec}-{producer_name}"
            create_topic(serve.bootstrap, topic)
            produce(serve.bootstrap, topic, topic, codec, PER_CELL)
            for consumer_name, consume in CONSUMERS.items():
                records = consume(serve.bootstrap, topic, PER_CELL)
                try:
                    check(topic, PER_CELL, records)
                except AssertionError as exc:
                    raise AssertionError(
                        f"{codec}, produced by {producer_name}, read by {consumer_name}: {exc}"
                    ) from exc


def test_admin_metadata_and_auto_creation(serve: ServeProcess) -> None:
    admin = AdminClient({"bootstrap.servers": serve.bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert metadata.cluster_id == serve.cluster_id
    assert list(metadata.brokers) == [1]
    # librdkafka's producer asks Metadata for an unknown topic, which creates it with num.partitions.
    producer = Producer({"bootstrap.servers": serve.bootstrap})
    producer.produce("auto-created", b"v")
    assert producer.flush(30) == 0
    topic = admin.list_topics("auto-created", timeout=10).topics["auto-created"]
    assert len(topic.partitions) == PARTITIONS
