"""Brokers for the group-benchmark smoke tests: the fake responder, regroup with its defaults, and the Apache
Kafka reference broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from regroup import refkafka
from regroup.bench.groups.brokers import BenchTarget, start_broker


def _started(kind: str) -> Iterator[BenchTarget]:
    broker = start_broker(kind, {})
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def fake_broker() -> Iterator[BenchTarget]:
    yield from _started("fake")


@pytest.fixture(scope="module")
def regroup_broker() -> Iterator[BenchTarget]:
    yield from _started("regroup")


@pytest.fixture(scope="module")
def kafka_broker() -> Iterator[BenchTarget]:
    reason = refkafka.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    yield from _started("kafka")
