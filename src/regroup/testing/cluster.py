"""``regroup.testing.Cluster``: a real regroup cluster for testing how an application lives through a
coordinator failover, a leader's crash, a rolling restart.

A private etcd and N ``regroup serve`` processes on loopback (:class:`regroup.cluster.local.LocalCluster`),
with real time: nodes are killed (SIGKILL), stopped (SIGTERM, a controlled shutdown), started again on the
same ports and data, paused (SIGSTOP: frozen until resumed) and — with ``network_faults`` — cut off the
network while they keep running. The cluster's state — leaders, ISRs, the controller, each group's
coordinator and state — is read from etcd and from the nodes themselves. Sessions default to 3 s (Kafka's
``broker.session.timeout.ms`` is 9 s) so a crash is noticed quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from regroup.admin.client import AdminClient, AdminError, GroupDescription
from regroup.cluster.local import LocalCluster, LocalNode
from regroup.cluster.model import ClusterImage
from regroup.cluster.netfaults import NetworkFaults
from regroup.group.config import partition_for

__all__ = ["TEST_CLUSTER_DEFAULTS", "Cluster"]

T = TypeVar("T")

OFFSETS_TOPIC = "__consumer_offsets"

TEST_CLUSTER_DEFAULTS: Mapping[str, str] = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "controlled.shutdown.max.wait.ms": "15000",
}


class Cluster:
    """A regroup cluster for tests; ``with regroup.testing.Cluster(nodes=3) as c: ...``.

    ``config`` takes settings by their Kafka names for every node, over :data:`TEST_CLUSTER_DEFAULTS`
    (replication factor of ``__consumer_offsets``: min(3, nodes)). ``data_dir`` keeps the data there
    (default: a temporary directory removed at the end). ``network_faults`` routes every node's traffic
    through relays in this process so that :meth:`cut` can partition a node off
    (:mod:`regroup.cluster.netfaults`).
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        config: Mapping[str, object] | None = None,
        data_dir: str | Path | None = None,
        network_faults: bool = False,
    ) -> None:
        settings: dict[str, object] = dict(TEST_CLUSTER_DEFAULTS)
        settings.update(config or {})
        self._local = LocalCluster(
            nodes,
            data_dir=None if data_dir is None else Path(data_dir),
            overrides=settings,
            network_faults=network_faults,
        )

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 120.0) -> Cluster:
        self._local.start(timeout)
        return self

    def stop(self) -> None:
        """Stop every node (a controlled shutdown each) and etcd."""
        self._local.close()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ nodes

    @property
    def bootstrap_servers(self) -> str:
        """Every node's listener, for ``bootstrap.servers``."""
        return self._local.bootstrap_servers

    @property
    def metadata_endpoints(self) -> str:
        """The cluster's etcd, as ``cluster.metadata.endpoints`` names it."""
        assert self._local.etcd_url is not None
        return self._local.etcd_url

    def node(self, node_id: int) -> LocalNode:
        """A node: ``kill()`` (SIGKILL), ``stop()`` (SIGTERM: controlled shutdown), ``start()`` (same ports
        and data), ``pause()``/``resume()`` (SIGSTOP/SIGCONT), ``pid``, ``listener``."""
        return self._local.node(node_id)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._local.nodes)

    def cut(self, node_id: int, *, clients: bool = True) -> None:
        """Partition node ``node_id`` off the other nodes and etcd — and off clients, unless ``clients`` is
        False (a deposed leader that producers still reach). It keeps running; its session runs out and
        the others elect new leaders. Needs ``Cluster(network_faults=True)``."""
        self._faults().cut(node_id, clients=clients)

    def heal(self, node_id: int) -> None:
        """End :meth:`cut`: stalled connections carry on where they stopped."""
        self._faults().heal(node_id)

    @contextlib.contextmanager
    def partitioned(self, node_id: int, *, clients: bool = True) -> Iterator[None]:
        """:meth:`cut` for the duration of a ``with`` block."""
        self.cut(node_id, clients=clients)
        try:
            yield
        finally:
            self.heal(node_id)

    def _faults(self) -> NetworkFaults:
        if self._local.faults is None:
            raise RuntimeError("network cuts need regroup.testing.Cluster(..., network_faults=True)")
        return self._local.faults

    # ------------------------------------------------------------------------------------ observing

    def image(self) -> ClusterImage:
        """The cluster's metadata as etcd holds it now."""
        return self._local.image()

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader (-1: none)."""
        return self.image().leader_of(topic, partition)

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        state = self.image().partition(topic, partition)
        return () if state is None else state.isr

    def controller(self) -> int:
        controller = self.image().controller
        return -1 if controller is None else controller.node_id

    def coordinator_of(self, group_id: str) -> int:
        """The node coordinating ``group_id``: the leader of its ``__consumer_offsets`` partition."""
        image = self.image()
        offsets = image.topic(OFFSETS_TOPIC)
        if offsets is None:
            return -1
        return image.leader_of(OFFSETS_TOPIC, partition_for(group_id, offsets.partitions))

    def wait_for(
        self, predicate: Callable[[ClusterImage], bool], timeout: float = 60.0, *, what: str = "the state"
    ) -> ClusterImage:
        """Wait until ``predicate(image)`` holds; TimeoutError after ``timeout``."""
        return self._local.wait_until(predicate, timeout=timeout, what=what)

    def wait_for_leader(
        self, topic: str, partition: int, *, not_on: int | None = None, timeout: float = 60.0
    ) -> int:
        """Wait until the partition has a leader (other than ``not_on``); returns it."""
        image = self.wait_for(
            lambda i: i.leader_of(topic, partition) >= 0 and i.leader_of(topic, partition) != not_on,
            timeout,
            what=f"a leader of {topic}-{partition}" + ("" if not_on is None else f" other than {not_on}"),
        )
        return image.leader_of(topic, partition)

    def wait_for_isr(
        self, topic: str, partition: int, nodes: set[int] | None = None, timeout: float = 60.0
    ) -> None:
        """Wait until the partition's ISR is exactly ``nodes`` (default: all its replicas)."""

        def done(image: ClusterImage) -> bool:
            state = image.partition(topic, partition)
            wanted = set(image.replicas_of(topic, partition)) if nodes is None else nodes
            return state is not None and set(state.isr) == wanted and bool(wanted)

        self.wait_for(done, timeout, what=f"the ISR of {topic}-{partition}")

    def describe_group(self, group_id: str) -> GroupDescription:
        """The group as its coordinator describes it (DescribeGroups); a group that does not exist raises
        ``AdminError`` GROUP_ID_NOT_FOUND (DescribeGroups v6; older brokers describe it as Dead)."""
        described = self._admin(lambda admin: admin.describe_groups([group_id], consumer_only=False))
        found = described[group_id]
        if isinstance(found, AdminError):
            raise found
        return found

    def wait_for_stable(
        self, group_id: str, members: int | None = None, timeout: float = 60.0
    ) -> GroupDescription:
        """Wait until the group is Stable (with ``members`` members); returns its description."""
        deadline = time.monotonic() + timeout
        last = "not described"
        while time.monotonic() < deadline:
            try:
                group = self.describe_group(group_id)
            except (AdminError, OSError) as exc:
                last = str(exc)
            else:
                last = f"{group.state} with {len(group.members)} members"
                if group.state == "Stable" and (members is None or len(group.members) == members):
                    return group
            time.sleep(0.2)
        raise TimeoutError(f"group {group_id!r} not Stable within {timeout} s (last: {last})")

    def group_view(self, group_id: str) -> dict[str, Any] | None:
        """The group as its coordinator's admin port shows it (``/api/groups/<group>``: type, state,
        generation — a consumer group's group epoch — members with their assignments, lag); None when the
        coordinator does not know it."""
        coordinator = self.coordinator_of(group_id)
        node = self._local.nodes.get(coordinator)
        if node is None or not node.running:
            return None
        url = f"http://127.0.0.1:{node.admin_port}/api/groups/{urllib.parse.quote(group_id, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                view: dict[str, Any] = json.loads(reply.read())
                return view
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def generation(self, group_id: str) -> int:
        """The group's generation at its coordinator (-1: unknown there)."""
        view = self.group_view(group_id)
        return -1 if view is None else int(view["generation"])

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets, as OffsetFetch from its coordinator returns them."""
        offsets = self._admin(lambda admin: admin.committed_offsets(group_id))
        return {(tp.topic, tp.partition): o.offset for tp, o in offsets.items() if o is not None}

    def _admin(self, call: Callable[[AdminClient], Coroutine[Any, Any, T]]) -> T:
        async def run() -> T:
            running = ",".join(n.listener for n in self._local.nodes.values() if n.running)
            admin = AdminClient(running or self.bootstrap_servers, timeout_ms=30_000)
            try:
                return await call(admin)
            finally:
                await admin.close()

        return asyncio.run(run())
