"""Brokers for the group-benchmark smoke tests: the fake responder, regroup with its defaults, and the Apache
Kafka reference broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from regroup import refkafka
from regroup.bench.groups.brokers import BenchTarget, start_broker


@pytest.fixture(scope="module")
def fake_broker() -> Iterator[BenchTarget]:
    broker = start_broker("fake", {})
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def regroup_broker() -> Iterator[BenchTarget]:
    broker = start_broker("regroup", {})
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="module")
def kafka_broker() -> Iterator[BenchTarget]:
    reason = refkafka.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    broker = start_broker("kafka", {})
    try:
        yield broker
    finally:
        broker.close()
