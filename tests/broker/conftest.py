"""Fixtures: an in-process broker per test and connections to it.

Brokers here get ``offsets.topic.num.partitions=1`` unless a test asks otherwise: creating Kafka's 50
``__consumer_offsets`` partitions at every start would dominate the run time of these tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.support import BrokerThread
from regroup.client.blocking import BlockingConnection

FAST = {"offsets_topic_num_partitions": 1}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path / "data", **FAST).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    """Start brokers with setting overrides (``log_flush_interval_messages=1``); all stopped at the end."""
    started: list[BrokerThread] = []

    def make(data_dir: Path | None = None, **overrides: Any) -> BrokerThread:
        b = BrokerThread(data_dir or tmp_path / "data", **{**FAST, **overrides}).start()
        started.append(b)
        return b

    try:
        yield make
    finally:
        for b in reversed(started):
            b.stop()


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    with BlockingConnection(broker.address) as c:
        yield c
