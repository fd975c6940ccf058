"""Fetch sessions (KIP-227) against Apache Kafka: the same script of full, incremental and closing fetches
on each broker, compared answer by answer (session ids only as "a session" or "none")."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from broker.test_data_apis import batch, create, produce, values
from broker.test_fetch_sessions import request
from regroup.client.blocking import BlockingConnection
from regroup.protocol.messages.fetch import FetchResponse
from regroup.refkafka import skip_reason
from support.brokers import BrokerPair, shared_pair
from support.tools import missing


@pytest.fixture(scope="module")
def pair() -> BrokerPair:
    reason = skip_reason()
    if reason:
        missing(reason)
    return shared_pair()


def script(address: tuple[str, int]) -> list[Any]:
    """Run the script on one broker; returns each step's normalised answer."""
    name = f"fetch-sessions-{uuid.uuid4().hex[:8]}"
    out: list[Any] = []
    with BlockingConnection(address) as conn:
        tid = create(conn, name, 3)
        # Kafka answers NOT_LEADER_OR_FOLLOWER until the new partitions' leaders are ready.
        deadline = time.monotonic() + 60
        while True:
            message, version = request(tid, {0: 0, 1: 0, 2: 0}, session_id=0, epoch=-1)
            ready = conn.request(message, FetchResponse, version=version)
            if all(p.error_code == 0 for t in ready.responses for p in t.partitions):
                break
            assert time.monotonic() < deadline, ready
            time.sleep(0.1)
        assert produce(conn, name, batch(b"a"), partition=0).error_code == 0

        def step(topic: str | uuid.UUID, offsets: dict[int, int], **kw: Any) -> int:
            message, version = request(topic, offsets, **kw)
            r = conn.request(message, FetchResponse, version=version)
            parts = sorted(
                (
                    p.partition_index,
                    p.error_code,
                    p.high_watermark,
                    p.log_start_offset,
                    values(p.records) if p.error_code == 0 else None,
                )
                for t in r.responses
                for p in t.partitions
            )
            out.append((r.error_code, "a session" if r.session_id else "none", parts))
            return r.session_id

        session = step(tid, {0: 0, 1: 0, 2: 0}, session_id=0, epoch=0)
        step(tid, {0: 1}, session_id=session, epoch=1)  # nothing new
        assert produce(conn, name, batch(b"b", b"c"), partition=2).error_code == 0
        step(tid, {}, session_id=session, epoch=2)  # partition 2 only
        step(tid, {2: 2}, session_id=session, epoch=3)
        step(tid, {}, session_id=session, epoch=3)  # the epoch again
        step(tid, {}, session_id=session ^ 1, epoch=4)  # a session never created
        step(name, {}, session_id=session, epoch=4, version=12)  # by name in a session with ids
        step(tid, {1: 7}, session_id=session, epoch=4, forget=[0])  # out of range, partition 0 forgotten
        step(tid, {}, session_id=session, epoch=5)  # the error is answered again
        assert produce(conn, name, batch(b"d"), partition=0).error_code == 0
        step(tid, {1: 0}, session_id=session, epoch=6)  # partition 0 is forgotten: not answered
        step(tid, {0: 0, 1: 0}, session_id=session, epoch=-1)  # closes it: answered sessionless
        step(tid, {}, session_id=session, epoch=7)
    return out


def test_fetch_sessions_answer_as_kafka_does(pair: BrokerPair) -> None:
    kafka = script(pair.kafka_address)
    regroup = script(pair.regroup.address)
    for i, (k, r) in enumerate(zip(kafka, regroup, strict=True)):
        assert r == k, f"step {i}: regroup {r} != kafka {k}"
