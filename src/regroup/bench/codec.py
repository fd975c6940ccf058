"""``regroup bench codec``: encode/decode cost of hot-path messages, regroup beside kafka-python.

Each case is measured with ``timeit`` (best of several repeats) in one process, so both libraries see the
same machine state; the table reports microseconds per operation and the speed-up ratio
(kafka-python time / regroup time). kafka-python is optional: without it only regroup's numbers print.
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from regroup.protocol.messages.heartbeat import HeartbeatRequest
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from regroup.protocol.records.consumer_protocol import ConsumerProtocolSubscription

__all__ = ["Case", "Measurement", "cases", "main", "measure"]


@dataclass(frozen=True)
class Case:
    name: str
    op: str  # "encode" | "decode"
    regroup: Callable[[], object]
    kafka_python: Callable[[], object] | None


@dataclass(frozen=True)
class Measurement:
    name: str
    op: str
    regroup_us: float
    kafka_python_us: float | None

    @property
    def speedup(self) -> float | None:
        if self.kafka_python_us is None:
            return None
        return self.kafka_python_us / self.regroup_us


def _subscription() -> bytes:
    sub = ConsumerProtocolSubscription(topics=["orders", "payments", "shipments"], user_data=None)
    return sub.encode_versioned(3)


def _message_cases() -> list[tuple[str, Any, int, Callable[[], Any] | None]]:
    """(name, regroup message, version, factory of the equal kafka-python message or None)."""
    heartbeat = HeartbeatRequest(
        group_id="orders-service", generation_id=42, member_id="consumer-1-" + "a" * 36
    )
    metadata = _subscription()
    protocols = ["range", "roundrobin", "sticky", "cooperative-sticky", "custom"]
    join = JoinGroupRequest(
        group_id="orders-service",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id="consumer-1-" + "a" * 36,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name=p, metadata=metadata) for p in protocols],
        reason="rebalance failed due to UnjoinedGroupException",
    )
    commit = OffsetCommitRequest(
        group_id="orders-service",
        generation_id_or_member_epoch=42,
        member_id="consumer-1-" + "a" * 36,
        group_instance_id=None,
        topics=[
            OffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    OffsetCommitRequestPartition(
                        partition_index=i,
                        committed_offset=1_000_000 + i,
                        committed_leader_epoch=3,
                        committed_metadata="",
                    )
                    for i in range(10)
                ],
            )
        ],
    )
    try:
        from kafka.protocol.consumer.group import HeartbeatRequest as KHeartbeat
        from kafka.protocol.consumer.group import JoinGroupRequest as KJoin
        from kafka.protocol.consumer.group import OffsetCommitRequest as KCommit
    except ImportError:
        return [
            ("Heartbeat v4 request", heartbeat, 4, None),
            ("JoinGroup v9 request (5 protocols)", join, 9, None),
            ("OffsetCommit v9 request (10 partitions)", commit, 9, None),
        ]

    def k_heartbeat() -> Any:
        return KHeartbeat[4](
            group_id=heartbeat.group_id,
            generation_id=42,
            member_id=heartbeat.member_id,
            group_instance_id=None,
        )

    def k_join() -> Any:
        proto = KJoin.JoinGroupRequestProtocol
        return KJoin[9](
            group_id=join.group_id,
            session_timeout_ms=45000,
            rebalance_timeout_ms=300000,
            member_id=join.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[proto(name=p, metadata=metadata) for p in protocols],
            reason=join.reason,
        )

    def k_commit() -> Any:
        topic = KCommit.OffsetCommitRequestTopic
        part = topic.OffsetCommitRequestPartition
        return KCommit[9](
            group_id=commit.group_id,
            generation_id_or_member_epoch=42,
            member_id=commit.member_id,
            group_instance_id=None,
            topics=[
                topic(
                    name="orders",
                    partitions=[
                        part(
                            partition_index=i,
                            committed_offset=1_000_000 + i,
                            committed_leader_epoch=3,
                            committed_metadata="",
                        )
                        for i in range(10)
                    ],
                )
            ],
        )

    return [
        ("Heartbeat v4 request", heartbeat, 4, k_heartbeat),
        ("JoinGroup v9 request (5 protocols)", join, 9, k_join),
        ("OffsetCommit v9 request (10 partitions)", commit, 9, k_commit),
    ]


def _batch_cases() -> list[Case]:
    from regroup.protocol import record_batch as rb

    records = [
        rb.Record(
            offset=i,
            timestamp=1_700_000_000_000 + i,
            key=b"key-%06d" % i,
            value=bytes(100),
            headers=[("trace", b"abc")],
        )
        for i in range(100)
    ]
    encoded = rb.build_batch(records, base_offset=0)
    out = [
        Case(
            "RecordBatch, 100 records × 100 B", "encode", lambda: rb.build_batch(records, base_offset=0), None
        ),
        Case("RecordBatch, 100 records × 100 B", "decode", lambda: rb.decode_batch(encoded), None),
    ]
    try:
        from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    except ImportError:
        return out

    def k_build() -> bytes:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for r in records:
            builder.append(r.offset, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
        return bytes(builder.build())

    def k_decode() -> list[Any]:
        return list(DefaultRecordBatch(encoded))

    return [
        Case(out[0].name, "encode", out[0].regroup, k_build),
        Case(out[1].name, "decode", out[1].regroup, k_decode),
    ]


def _encoder(msg: Any, version: int) -> Callable[[], object]:
    return lambda: msg.encode(version)


def _decoder(cls: Any, data: bytes, version: int) -> Callable[[], object]:
    return lambda: cls.decode(data, version)


def cases() -> list[Case]:
    out: list[Case] = []
    for name, msg, version, k_factory in _message_cases():
        data = msg.encode(version)
        k_enc: Callable[[], object] | None = None
        k_dec: Callable[[], object] | None = None
        if k_factory is not None:
            k_msg = k_factory()
            k_bytes = bytes(k_msg.encode())
            if k_bytes != data:
                raise AssertionError(
                    f"{name}: kafka-python encodes different bytes; the comparison would be unfair"
                )
            k_enc = k_msg.encode
            k_dec = _decoder(type(k_msg)[version], k_bytes, version)
        out.append(Case(name, "encode", _encoder(msg, version), k_enc))
        out.append(Case(name, "decode", _decoder(type(msg), data, version), k_dec))
    out.extend(_batch_cases())
    return out


def _calibrate(fn: Callable[[], object], iterations: int) -> int:
    if iterations > 0:
        return iterations
    n, _ = timeit.Timer(fn).autorange()
    return max(n, 1)


def _best(timer: timeit.Timer, number: int) -> float:
    return timer.timeit(number) / number * 1e6


def measure(iterations: int = 0, rounds: int = 7) -> list[Measurement]:
    """Best-of-``rounds`` µs per call; regroup and kafka-python runs alternate within each case so that
    both see the same background load."""
    results = []
    for case in cases():
        ours_n = _calibrate(case.regroup, iterations)
        ours_t = timeit.Timer(case.regroup)
        ours = float("inf")
        theirs: float | None = None
        theirs_n = 0
        theirs_t: timeit.Timer | None = None
        if case.kafka_python is not None:
            theirs_n = _calibrate(case.kafka_python, iterations)
            theirs_t = timeit.Timer(case.kafka_python)
            theirs = float("inf")
        for _ in range(rounds):
            ours = min(ours, _best(ours_t, ours_n))
            if theirs_t is not None and theirs is not None:
                theirs = min(theirs, _best(theirs_t, theirs_n))
        results.append(Measurement(case.name, case.op, ours, theirs))
    return results


def _table(results: list[Measurement]) -> str:
    rows = [("message", "op", "regroup µs", "kafka-python µs", "speed-up")]
    for m in results:
        rows.append(
            (
                m.name,
                m.op,
                f"{m.regroup_us:.2f}",
                f"{m.kafka_python_us:.2f}" if m.kafka_python_us is not None else "-",
                f"{m.speedup:.1f}×" if m.speedup is not None else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    return "\n".join(lines)


def main(json_output: bool = False, iterations: int = 0) -> int:
    results = measure(iterations)
    if json_output:
        payload = [
            {
                "message": m.name,
                "op": m.op,
                "regroup_us": m.regroup_us,
                "kafka_python_us": m.kafka_python_us,
                "speedup": m.speedup,
            }
            for m in results
        ]
        print(json.dumps({"python": sys.version.split()[0], "results": payload}, indent=2))
    else:
        print(_table(results))
    return 0
