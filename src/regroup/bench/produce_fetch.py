"""``regroup bench produce-fetch``: producer and consumer throughput and latency through a broker.

A confluent-kafka (librdkafka) producer writes N records of a fixed size with acks=all while an assign-mode
consumer reads them back concurrently. Each value starts with the producer's send time, so the consumer
measures end-to-end latency (send → fetched). Produce latency is send → delivery report. Without
``--bootstrap`` a ``regroup serve`` subprocess is started on a free port with a temporary data directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ProduceFetchResult", "main", "run"]

_STAMP = struct.Struct(">q")
_WARMUP = b"regroup-bench-warmup"
_READY = re.compile(r"ready on (\S+) ")


@dataclass(frozen=True)
class ProduceFetchResult:
    records: int
    record_bytes: int
    partitions: int
    compression: str
    produce_seconds: float
    produce_mb_per_s: float
    produce_records_per_s: float
    consume_seconds: float
    consume_mb_per_s: float
    produce_latency_p50_ms: float
    produce_latency_p99_ms: float
    e2e_latency_p50_ms: float
    e2e_latency_p99_ms: float
    broker: str
    broker_overrides: list[str]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def _broker(bootstrap: str | None, partitions: int, overrides: Sequence[str]) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="regroup-bench-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "regroup.cli",
            "serve",
            "--log-level",
            "WARNING",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={tmp}/data",
            "--override",
            f"num.partitions={partitions}",
        ]
        for item in overrides:
            cmd += ["--override", item]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            match = _READY.search(line)
            if match is None:
                raise RuntimeError(f"regroup serve did not start: {line!r}")
            yield match.group(1)
        finally:
            proc.terminate()
            proc.wait(30)


def run(
    *,
    bootstrap: str | None = None,
    records: int = 100_000,
    record_bytes: int = 1024,
    partitions: int = 6,
    compression: str = "none",
    linger_ms: int = 5,
    broker_overrides: Sequence[str] = (),
) -> ProduceFetchResult:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    with _broker(bootstrap, partitions, broker_overrides) as servers:
        topic = f"bench-{os.getpid()}-{time.monotonic_ns()}"
        admin = AdminClient({"bootstrap.servers": servers})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(30)

        e2e: list[float] = []
        consumed = threading.Event()
        ready = threading.Event()
        consume_times: list[float] = []

        def consume() -> None:
            consumer = Consumer(
                {
                    "bootstrap.servers": servers,
                    "group.id": "regroup-bench",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 100,
                }
            )
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            got = 0
            deadline = time.monotonic() + 300
            try:
                while got < records and time.monotonic() < deadline:
                    for msg in consumer.consume(10_000, timeout=0.2):
                        if msg.error() is not None:
                            continue
                        value = msg.value()
                        if value is None:
                            continue
                        if value == _WARMUP:
                            ready.set()
                            continue
                        if not consume_times:
                            consume_times.append(time.perf_counter())
                        e2e.append((time.perf_counter_ns() - _STAMP.unpack_from(value)[0]) / 1e6)
                        got += 1
                consume_times.append(time.perf_counter())
            finally:
                consumer.close()
                consumed.set()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        producer = Producer(
            {
                "bootstrap.servers": servers,
                "acks": "all",
                "linger.ms": linger_ms,
                "compression.type": compression,
                "queue.buffering.max.messages": 200_000,
            }
        )
        latencies: list[float] = []
        failures: list[Any] = []
        padding = os.urandom(max(0, record_bytes - _STAMP.size))
        # Wait until the consumer is fetching, so end-to-end latency does not include its start-up.
        producer.produce(topic, _WARMUP, partition=0)
        producer.flush(30)
        if not ready.wait(60):
            raise RuntimeError("the consumer did not start")

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(err)
                return
            latencies.append((time.perf_counter_ns() - _STAMP.unpack_from(msg.value())[0]) / 1e6)

        started = time.perf_counter()
        for i in range(records):
            value = _STAMP.pack(time.perf_counter_ns()) + padding
            while True:
                try:
                    producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.005)
            producer.poll(0)
        producer.flush(300)
        produce_seconds = time.perf_counter() - started
        consumed.wait(300)
        if failures:
            raise RuntimeError(f"{len(failures)} records failed, e.g. {failures[0]}")
        consume_seconds = (consume_times[-1] - started) if consume_times else float("nan")
        total_mb = records * record_bytes / 1e6
        del producer, admin  # disconnect before the broker goes away (no reconnect noise)
        return ProduceFetchResult(
            records=records,
            record_bytes=record_bytes,
            partitions=partitions,
            compression=compression,
            produce_seconds=round(produce_seconds, 3),
            produce_mb_per_s=round(total_mb / produce_seconds, 2),
            produce_records_per_s=round(records / produce_seconds),
            consume_seconds=round(consume_seconds, 3),
            consume_mb_per_s=round(total_mb / consume_seconds, 2),
            produce_latency_p50_ms=round(_percentile(latencies, 0.50), 2),
            produce_latency_p99_ms=round(_percentile(latencies, 0.99), 2),
            e2e_latency_p50_ms=round(_percentile(e2e, 0.50), 2),
            e2e_latency_p99_ms=round(_percentile(e2e, 0.99), 2),
            broker=bootstrap or "regroup serve (temporary, started by the benchmark)",
            broker_overrides=[] if bootstrap else list(broker_overrides),
        )


def main(
    *,
    json_output: bool,
    bootstrap: str | None,
    records: int,
    record_bytes: int,
    partitions: int,
    compression: str,
    linger_ms: int,
    broker_overrides: Sequence[str] = (),
) -> int:
    result = run(
        bootstrap=bootstrap,
        records=records,
        record_bytes=record_bytes,
        partitions=partitions,
        compression=compression,
        linger_ms=linger_ms,
        broker_overrides=broker_overrides,
    )
    if json_output:
        print(json.dumps(asdict(result), indent=2))
        return 0
    overrides = f" with {', '.join(result.broker_overrides)}" if result.broker_overrides else ""
    print(
        f"produce-fetch: {result.records} x {result.record_bytes} B records, acks=all, "
        f"{result.partitions} partitions, compression {result.compression}, "
        f"broker: {result.broker}{overrides}"
    )
    rows = [
        (
            "produce throughput",
            f"{result.produce_mb_per_s:.1f} MB/s ({result.produce_records_per_s} records/s)",
        ),
        ("consume throughput", f"{result.consume_mb_per_s:.1f} MB/s"),
        (
            "produce latency p50 / p99",
            f"{result.produce_latency_p50_ms:.1f} / {result.produce_latency_p99_ms:.1f} ms",
        ),
        (
            "end-to-end latency p50 / p99",
            f"{result.e2e_latency_p50_ms:.1f} / {result.e2e_latency_p99_ms:.1f} ms",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")
    return 0
