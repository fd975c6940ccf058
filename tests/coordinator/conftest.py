"""Fixtures: an in-process broker with the group coordinator (no initial rebalance delay, short minimum
session timeout, few ``__consumer_offsets`` partitions) and connections to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.support import BrokerThread
from coordinator.wire import SETTINGS, GroupClient
from regroup.client.blocking import BlockingConnection


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path / "data", **SETTINGS).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    with BlockingConnection(broker.address) as c:
        yield c


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[GroupClient]:
    with GroupClient(broker.address) as c:
        yield c
