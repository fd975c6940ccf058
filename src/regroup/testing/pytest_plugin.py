"""pytest plugin (entry point ``regroup``): the ``regroup_broker`` fixture and a factory for custom ones.

Nothing is imported or started until a test asks for a fixture, so the plugin costs other suites nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from regroup.testing.broker import TestBroker
    from regroup.testing.cluster import Cluster

__all__ = ["regroup_broker", "regroup_broker_factory", "regroup_cluster"]


@pytest.fixture
def regroup_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., TestBroker]]:
    """``make(**kwargs)`` starts a :class:`regroup.testing.TestBroker` (same arguments); all are stopped at
    the end of the test."""
    from regroup.testing.broker import TestBroker

    started: list[TestBroker] = []

    def make(**kwargs: Any) -> TestBroker:
        if "data_dir" not in kwargs:
            kwargs["data_dir"] = Path(tmp_path_factory.mktemp("regroup")) / "data"
        broker = TestBroker(**kwargs).start()
        started.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture
def regroup_broker(regroup_broker_factory: Callable[..., TestBroker]) -> TestBroker:
    """A running regroup broker with a virtual coordinator clock, for one test."""
    return regroup_broker_factory()


@pytest.fixture
def regroup_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A running three-node regroup cluster (a private etcd and three ``regroup serve`` processes), for one
    test; needs Debian's ``etcd-server``."""
    from regroup.testing.cluster import Cluster

    cluster = Cluster(3, data_dir=Path(tmp_path_factory.mktemp("regroup-cluster"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()
