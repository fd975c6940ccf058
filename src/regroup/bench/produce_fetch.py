"""``regroup bench produce-fetch``: producer and consumer throughput and latency through a broker or cluster.

A confluent-kafka (librdkafka) producer writes N records of a fixed size with acks=all (to every partition
of the topic, or to the first ``--busy-partitions``; ``--sequential``: each acknowledged before the next is
sent) while an assign-mode consumer reads them back concurrently. Each value starts with the producer's
send time, so the consumer measures end-to-end latency (send → fetched). Produce latency is send →
delivery report. Without ``--bootstrap`` the benchmark starts the broker — ``regroup serve`` or the Apache
Kafka reference broker, or with ``--nodes`` a cluster of either — on free ports with temporary data;
``--against kafka`` runs the same measurement on Kafka afterwards (one broker or cluster alive at a time)
and prints ratios.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from regroup.bench.groups.brokers import BenchTarget, ExternalBroker, start_broker

__all__ = ["ProduceFetchResult", "main", "measure", "run"]

_STAMP = struct.Struct(">q")
_WARMUP = b"regroup-bench-warmup"


@dataclass(frozen=True)
class ProduceFetchResult:
    records: int
    record_bytes: int
    partitions: int
    busy_partitions: int
    sequential: bool
    replication_factor: int
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


def _parse_overrides(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {item!r}")
        out[key.strip()] = value
    return out


@contextlib.contextmanager
def _target(
    bootstrap: str | None, kind: str, nodes: int, overrides: Mapping[str, str]
) -> Iterator[BenchTarget]:
    target: BenchTarget = ExternalBroker(bootstrap) if bootstrap else start_broker(kind, overrides, nodes)
    try:
        yield target
    finally:
        target.close()


def run(
    *,
    bootstrap: str | None = None,
    broker: str = "regroup",
    nodes: int = 1,
    records: int = 100_000,
    record_bytes: int = 1024,
    partitions: int = 6,
    busy_partitions: int = 0,
    sequential: bool = False,
    replication_factor: int = -1,
    compression: str = "none",
    linger_ms: int = 5,
    broker_overrides: Sequence[str] = (),
) -> ProduceFetchResult:
    """Start ``broker`` (``nodes`` of them as a cluster) unless ``bootstrap`` names a running one, and
    :func:`measure` through it."""
    with _target(bootstrap, broker, nodes, _parse_overrides(broker_overrides)) as target:
        described = bootstrap or f"{target.version} (temporary, started by the benchmark)"
        return measure(
            target.bootstrap,
            described=described,
            overrides=[] if bootstrap else [f"{k}={v}" for k, v in target.overrides.items()],
            records=records,
            record_bytes=record_bytes,
            partitions=partitions,
            busy_partitions=busy_partitions,
            sequential=sequential,
            replication_factor=replication_factor,
            compression=compression,
            linger_ms=linger_ms,
        )


def measure(
    servers: str,
    *,
    described: str = "",
    overrides: Sequence[str] = (),
    records: int = 100_000,
    record_bytes: int = 1024,
    partitions: int = 6,
    busy_partitions: int = 0,
    sequential: bool = False,
    replication_factor: int = -1,
    compression: str = "none",
    linger_ms: int = 5,
) -> ProduceFetchResult:
    """Create a topic of ``partitions`` × ``replication_factor`` (−1: the broker's default) on ``servers``
    and time producing ``records`` into it while a consumer reads them back."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    topic = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(topic, partitions, replication_factor)]).values():
        future.result(60)

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
    busy = busy_partitions if 0 < busy_partitions < partitions else partitions
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
                producer.produce(topic, value, partition=i % busy, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
        if sequential:
            producer.flush(60)
        else:
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
        busy_partitions=busy,
        sequential=sequential,
        replication_factor=replication_factor,
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
        broker=described or servers,
        broker_overrides=list(overrides),
    )


_ROWS = (
    ("produce throughput (MB/s)", "produce_mb_per_s"),
    ("produce throughput (records/s)", "produce_records_per_s"),
    ("consume throughput (MB/s)", "consume_mb_per_s"),
    ("produce latency p50 (ms)", "produce_latency_p50_ms"),
    ("produce latency p99 (ms)", "produce_latency_p99_ms"),
    ("end-to-end latency p50 (ms)", "e2e_latency_p50_ms"),
    ("end-to-end latency p99 (ms)", "e2e_latency_p99_ms"),
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
    busy_partitions: int = 0,
    sequential: bool = False,
    broker_overrides: Sequence[str] = (),
    broker: str = "regroup",
    against: str | None = None,
    nodes: int = 1,
    replication_factor: int = -1,
) -> int:
    kinds = [broker] + ([against] if against and against != broker else [])
    results: list[ProduceFetchResult] = []
    for n, kind in enumerate(kinds):
        results.append(
            run(
                bootstrap=bootstrap if n == 0 else None,
                broker=kind,
                nodes=nodes,
                records=records,
                record_bytes=record_bytes,
                partitions=partitions,
                busy_partitions=busy_partitions,
                sequential=sequential,
                replication_factor=replication_factor,
                compression=compression,
                linger_ms=linger_ms,
                broker_overrides=broker_overrides,
            )
        )
    if json_output:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    first = results[0]
    rf = "broker default" if first.replication_factor < 0 else str(first.replication_factor)
    print(
        f"produce-fetch: {first.records} x {first.record_bytes} B records, acks=all, "
        f"{first.partitions} partitions"
        + (f" ({first.busy_partitions} written)" if first.busy_partitions < first.partitions else "")
        + f", replication factor {rf}, compression {first.compression}"
        + (", one record at a time" if first.sequential else "")
    )
    for kind, r in zip(kinds, results, strict=True):
        overrides = f" with {', '.join(r.broker_overrides)}" if r.broker_overrides else ""
        print(f"  {kind}: {r.broker}{overrides}")
    header = ["metric", *kinds] + ([f"{kinds[0]} / {kinds[1]}"] if len(kinds) == 2 else [])
    table = [header]
    for label, field in _ROWS:
        values = [float(getattr(r, field)) for r in results]
        row = [label, *(f"{v:,.1f}" for v in values)]
        if len(values) == 2:
            row.append(f"{values[0] / values[1]:.2f}" if values[1] else "–")
        table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print(
            "  "
            + row[0].ljust(widths[0])
            + "".join(f"  {c.rjust(w)}" for c, w in zip(row[1:], widths[1:], strict=True))
        )
    return 0
