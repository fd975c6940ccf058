"""Everything a node runs to be part of a cluster, started and stopped together: its membership
(:class:`~regroup.cluster.node.ClusterNode`), the controller role, its replicas and their fetchers, and the
:class:`~regroup.cluster.topology.ClusterTopology` the broker's APIs answer from; plus the controlled
shutdown that moves its leaderships away before it leaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from regroup.cluster.controller import Controller
from regroup.cluster.fetcher import ReplicaFetchers
from regroup.cluster.model import Keys, NodeState, TopicRecord
from regroup.cluster.node import ClusterNode, NodeSettings
from regroup.cluster.replica_manager import LeadershipListener, ReplicaManager, ReplicationSettings
from regroup.cluster.store import MetadataStore, StoreError
from regroup.cluster.topology import ClusterTopology
from regroup.log import LogManager
from regroup.protocol.errors import KafkaError

__all__ = ["ClusterMember"]

log = logging.getLogger("regroup.cluster")


class ClusterMember:
    """One node's part in a cluster."""

    def __init__(
        self,
        store: MetadataStore,
        keys: Keys,
        settings: NodeSettings,
        replication: ReplicationSettings,
        logs: LogManager,
        now_ms: Callable[[], int],
        *,
        unclean_leader_election: bool = False,
        on_leader: LeadershipListener | None = None,
        on_resigned: LeadershipListener | None = None,
        delete_topic: Callable[[str], None] | None = None,
        close_store: bool = True,
    ) -> None:
        """``close_store`` False: the store is shared (in-process clusters) and outlives this member."""
        self.store = store
        self._close_store = close_store
        self.node = ClusterNode(store, keys, settings)
        self._unclean = unclean_leader_election
        self.controller = Controller(self.node, self._unclean_for)
        self.replicas = ReplicaManager(
            self.node,
            logs,
            replication,
            now_ms,
            on_leader=on_leader,
            on_resigned=on_resigned,
            delete_topic=delete_topic,
        )
        self.fetchers = ReplicaFetchers(self.node, logs, replication, now_ms)
        self.replicas.add_follow_listener(self.fetchers.update)
        self.topology = ClusterTopology(
            settings.node_id,
            lambda: self.node.image,
            lambda: self.node.self_fenced,
            self.replicas.leading_epoch,
            lambda: self.replicas.leadership_changes,
        )
        self._started = False
        self._background: dict[str, asyncio.Task[None]] = {}

    def _unclean_for(self, topic: TopicRecord) -> bool:
        value = topic.configs.get("unclean.leader.election.enable")
        return self._unclean if value is None else value.strip().lower() == "true"

    async def join(self, candidate_cluster_id: str) -> str:
        """The cluster's id (``candidate_cluster_id`` if this is the cluster's first node)."""
        return await self.node.join(candidate_cluster_id)

    async def start(self) -> None:
        """Register, load the metadata image, and start the controller role, the replicas and fetching."""
        await self.node.start()
        self.replicas.start()
        self.fetchers.update(self.replicas.following())
        self.controller.start()
        self._started = True
        log.info(
            "Node %d joined cluster %s (broker epoch %d, %d nodes registered)",
            self.node.node_id,
            self.node.cluster_id,
            self.node.broker_epoch,
            len(self.node.image.nodes),
        )

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Tell the controller this node is shutting down and wait (up to ``timeout_s``) until it leads no
        partition any more (KIP-841); True when it got there."""
        if not self._started:
            return True
        node = self.node
        try:
            await node.set_state(NodeState.SHUTTING_DOWN)
        except (StoreError, KafkaError) as exc:
            log.warning("Cannot start a controlled shutdown: %s", exc)
            return False
        try:
            await node.wait_for(lambda image: not image.led_by(node.node_id), timeout_s)
        except TimeoutError:
            log.warning(
                "Leaderships of node %d did not move away within %.0f s: %s",
                node.node_id,
                timeout_s,
                node.image.led_by(node.node_id),
            )
            return False
        log.info("Node %d leads no partition any more", node.node_id)
        return True

    async def stop(self, *, end_session: bool = True) -> None:
        """Leave: stop fetching, the controller role and the replicas, end the session (``end_session``
        False: leave it to expire, as after a crash)."""
        for task in list(self._background.values()):
            task.cancel()
        await self.fetchers.stop()
        await self.controller.stop()
        await self.replicas.stop()
        await self.node.stop(revoke=end_session)
        if self._close_store:
            await self.store.close()

    def run_once(self, key: str, work: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run ``work()`` in the background unless a run for ``key`` is under way (auto-creating a topic
        many clients ask for at once)."""
        if key in self._background:
            return

        async def run() -> None:
            try:
                await work()
            except Exception:
                log.exception("Background work %s failed", key)
            finally:
                self._background.pop(key, None)

        self._background[key] = asyncio.get_running_loop().create_task(run(), name=f"regroup {key}")

    async def wait_until(self, predicate: Callable[[ClusterTopology], bool], timeout_s: float) -> None:
        """Wait until ``predicate(topology)`` holds (checked after every image)."""
        await self.node.wait_for(lambda _image: predicate(self.topology), timeout_s)
