"""Several real regroup nodes in one process, on one event-loop thread, sharing an in-process metadata
store (:class:`~regroup.cluster.memory.MemoryStore`, etcd's semantics): a cluster real clients can use from
the test thread, with nodes stopped (controlled), crashed (the session left to expire) and restarted."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from regroup.broker.config import BrokerConfig
from regroup.broker.state import Broker
from regroup.cluster.local import offsets_topic_created
from regroup.cluster.memory import MemoryStore
from regroup.cluster.model import ClusterImage

T = TypeVar("T")

DEFAULTS = {
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "admin.listener": "",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "300",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "group.min.session.timeout.ms": "1000",
}


class InProcessCluster:
    def __init__(self, root: Path, nodes: int = 3, **overrides: object) -> None:
        self.root = root
        self.count = nodes
        self.settings = dict(DEFAULTS)
        self.settings.update({k: str(v) for k, v in overrides.items()})
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="regroup cluster", daemon=True)
        self._thread.start()
        self.store = self.run(self._make_store())
        self.brokers: dict[int, Broker] = {}
        self.ports: dict[int, int] = {}

    async def _make_store(self) -> MemoryStore:
        return MemoryStore()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return self.run(run())

    # ------------------------------------------------------------------------------------ nodes

    def _config(self, node_id: int) -> BrokerConfig:
        settings = dict(self.settings)
        settings["node.id"] = str(node_id)
        settings["log.dirs"] = str(self.root / f"node-{node_id}")
        port = self.ports.get(node_id, 0)
        settings["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        return BrokerConfig.load([], {}, list(settings.items()))

    def start_node(self, node_id: int) -> Broker:
        async def start() -> Broker:
            broker = Broker(self._config(node_id), metadata_store=self.store, shutdown_grace_seconds=2)
            await broker.start()
            return broker

        broker = self.run(start())
        self.brokers[node_id] = broker
        self.ports[node_id] = broker.bound_addresses()["PLAINTEXT"][1]
        return broker

    def start(self) -> InProcessCluster:
        for node_id in range(1, self.count + 1):
            self.start_node(node_id)
        self.wait_for(
            lambda image: len(image.nodes) == self.count and image.controller is not None,
            what="every node registered",
        )
        self.wait_for(
            offsets_topic_created([("127.0.0.1", port) for port in self.ports.values()]),
            what="__consumer_offsets created",
        )
        self.wait_for(
            lambda image: (
                len(image.nodes) == self.count
                and image.controller is not None
                and "__consumer_offsets" in image.topics
                and all(s is not None and s.leader >= 0 for _, _, s in image.all_partitions())
            ),
            what="every node registered and __consumer_offsets led",
        )
        return self

    def stop_node(self, node_id: int) -> None:
        """A clean, controlled shutdown (as SIGTERM)."""
        self.run(self.brokers.pop(node_id).stop())

    def crash_node(self, node_id: int) -> None:
        """Stop without a controlled shutdown and leave the session to expire, as a crash looks."""
        self.run(self.brokers.pop(node_id).stop(leave_cluster=False))

    def close(self) -> None:
        for node_id in list(self.brokers):
            with contextlib.suppress(Exception):
                self.stop_node(node_id)
        with contextlib.suppress(Exception):
            self.run(self.store.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()

    # ------------------------------------------------------------------------------------ observing

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in sorted(self.brokers))

    def image(self, node_id: int | None = None) -> ClusterImage:
        broker = self.brokers[node_id if node_id is not None else min(self.brokers)]
        assert broker.cluster is not None
        return broker.cluster.node.image

    def wait_for(
        self,
        predicate: Callable[[ClusterImage], bool],
        *,
        node_id: int | None = None,
        timeout: float = 60.0,
        what: str = "the cluster state",
    ) -> ClusterImage:
        deadline = time.monotonic() + timeout
        while True:
            image = self.call(lambda: self.image(node_id))
            if predicate(image):
                return image
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not reached within {timeout} s")
            time.sleep(0.05)

    def wait_until(self, check: Callable[[], bool], *, timeout: float = 60.0, what: str = "it") -> None:
        deadline = time.monotonic() + timeout
        while not self.call(check):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not reached within {timeout} s")
            time.sleep(0.05)


@contextlib.contextmanager
def in_process_cluster(root: Path, nodes: int = 3, **overrides: object) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(root, nodes, **overrides)
    try:
        yield cluster.start()
    finally:
        cluster.close()
