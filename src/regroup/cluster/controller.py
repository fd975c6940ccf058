"""The controller's work: keep every partition's leadership and ISR right for the nodes alive now.

Every node runs :class:`Controller`; only the holder of ``P/controller`` acts. It campaigns whenever the
image shows no controller, and after every image change it **reconciles**: for each partition it computes
the state :func:`~regroup.cluster.partition_change.reconcile` asks for given the registered and
shutting-down nodes (a node gone leaves every ISR and its leaderships move to the next ISR member; a node
back leads leaderless partitions whose ISR holds it; a shutting-down node hands its leaderships over), and
writes each change fenced by the controller epoch with a compare-and-set on the partition. The logic is
level-triggered — computed from the current image only — so a new controller needs nothing the previous one
saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from regroup.cluster.model import ClusterImage, TopicRecord
from regroup.cluster.node import ClusterNode
from regroup.cluster.partition_change import node_liveness, reconcile

__all__ = ["Controller"]

log = logging.getLogger("regroup.cluster.controller")


class Controller:
    """Campaigns for the controller role and, while holding it, reconciles partition states."""

    def __init__(self, node: ClusterNode, unclean_election: Callable[[TopicRecord], bool]) -> None:
        self._node = node
        self._unclean = unclean_election
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.reconciliations = 0
        node.add_image_listener(self._on_image)

    def start(self) -> None:
        self._changed.set()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"regroup node {self._node.node_id} controller"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_image(self, _old: ClusterImage, _new: ClusterImage) -> None:
        self._changed.set()

    async def _run(self) -> None:
        node = self._node
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                if node.image.controller is None and not node.self_fenced:
                    await node.campaign()
                    continue  # the watch brings the controller key back as a new image
                if node.is_controller:
                    await self.reconcile(node.image)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("The controller's reconciliation failed; retrying")
                await asyncio.sleep(0.5)
                self._changed.set()

    async def reconcile(self, image: ClusterImage) -> int:
        """Write every partition change the image calls for; returns how many were written."""
        controller = image.controller
        if controller is None:
            return 0
        registered, not_running = node_liveness(image.nodes)
        written = 0
        retry = False
        for topic, partition, state in image.all_partitions():
            if state is None:
                continue
            new = reconcile(
                topic.replicas[partition],
                state,
                registered.keys(),
                not_running,
                unclean=self._unclean(topic),
            )
            if new is None:
                continue
            if new.leader != state.leader:
                log.info(
                    "Partition %s-%d: leader %d -> %d (leader epoch %d), ISR %s",
                    topic.name,
                    partition,
                    state.leader,
                    new.leader,
                    new.leader_epoch,
                    list(new.isr),
                )
            if await self._node.write_partition(controller.controller_epoch, topic, partition, new):
                written += 1
            else:
                retry = True  # changed meanwhile (or deposed): the next image decides again
        self.reconciliations += 1
        if retry:
            self._changed.set()
        return written
