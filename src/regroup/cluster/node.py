"""One node's membership of the cluster: its session (an etcd lease and the registration bound to it), the
metadata image it keeps current from a watch, the controller campaign, and the metadata writes a node may
make itself.

The **session** is a lease of ``ceil(broker.session.timeout.ms / 1000)`` seconds, kept alive every
``broker.heartbeat.interval.ms``. The registration ``P/nodes/<id>`` is created on it (put-if-absent: a
registration still held by an earlier process with the same ``node.id`` — a restart before its session
expired — is waited out); its create revision is the node's **broker epoch**. When the store says the lease
is gone, the node is fenced: listeners hear of it, and the node registers again under a new lease and a new
broker epoch, and acts again only once its image holds that registration (and so everything that changed
meanwhile). When no keep-alive has been acknowledged for 90% of the session timeout (counted from the
*send* time of the last acknowledged one, on the monotonic clock), the node reports itself
:attr:`ClusterNode.self_fenced` before the store can expire the lease: it acknowledges no write as a
partition leader and its group coordinator resigns, so an isolated node cannot go on acknowledging what
another leader or coordinator has taken over.

The **image** (:class:`~regroup.cluster.model.ClusterImage`) is one range read of the prefix, then a watch
from the next revision; each batch of events (one store transaction) gives a new image, and subscribers
get ``(old, new)`` in revision order. A broken watch resumes from the last revision seen; a compacted one
is replaced by a fresh read.

The **controller** is whoever holds ``P/controller`` (put-if-absent on the holder's lease, as ZooKeeper's
ephemeral ``/controller``); its epoch is that key's create revision, and every controller write compares
it, so a deposed controller's writes fail (:mod:`regroup.cluster.controller`).

Writes any node may make, each a compare-and-set transaction: creating a topic (put-if-absent on its key,
with its partitions' initial state), deleting one, adding partitions, changing a partition's ISR as its
leader (guarded by the partition's mod revision and the leader's own registration, as Kafka's ZooKeeper-era
leaders changed the ISR with a conditional write), allocating producer-id blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Final

from regroup.cluster.image import ImageBuilder, StoredEntry
from regroup.cluster.model import (
    NO_LEADER,
    ClusterImage,
    ControllerRecord,
    Keys,
    NodeRegistration,
    NodeState,
    PartitionRecord,
    TopicRecord,
    decode_cluster_id,
    encode_cluster_id,
)
from regroup.cluster.placement import assign_replicas
from regroup.cluster.store import (
    Compare,
    Delete,
    EventKind,
    Get,
    KeyValue,
    LeaseNotFound,
    MetadataStore,
    Op,
    Put,
    StoreError,
    StoreUnavailable,
    WatchCompacted,
)
from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = ["ClusterNode", "ImageListener", "NodeSettings", "SessionListener"]

log = logging.getLogger("regroup.cluster")

ImageListener = Callable[[ClusterImage, ClusterImage], None]
"""``(old, new)`` after every image change, in revision order, on the event loop."""

SessionListener = Callable[[bool], None]
"""Called with True when the node loses its session (fenced, or self-fenced), False when it has one again."""

_MAX_TXN_OPS: Final = 128
_PRODUCER_ID_BLOCK: Final = 1000
_RETRY_S: Final = 0.2


class NodeSettings:
    """What a node needs to join the cluster (Kafka's names where there is one)."""

    def __init__(
        self,
        node_id: int,
        listeners: Mapping[str, tuple[str, int]],
        *,
        rack: str | None = None,
        session_timeout_ms: int = 9000,
        heartbeat_interval_ms: int = 2000,
    ) -> None:
        self.node_id = node_id
        self.listeners = dict(listeners)
        self.rack = rack
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms

    @property
    def lease_ttl_s(self) -> int:
        return max(1, math.ceil(self.session_timeout_ms / 1000))


class ClusterNode:
    """One node's view of, and membership in, the cluster."""

    def __init__(
        self,
        store: MetadataStore,
        keys: Keys,
        settings: NodeSettings,
        *,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.keys = keys
        self.settings = settings
        self.node_id = settings.node_id
        self.incarnation = str(uuid.uuid4())
        self._rng = rng or random.Random()
        self._monotonic = monotonic
        self._builder = ImageBuilder(keys)
        self.image = ClusterImage()
        self._revisions: dict[bytes, int] = {}  # key -> mod revision, for compare-and-set writes
        self.cluster_id = ""
        self.lease_id = 0
        self.broker_epoch = -1
        self.state = NodeState.RUNNING
        self._image_listeners: list[ImageListener] = []
        self._session_listeners: list[SessionListener] = []
        self._image_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._self_fenced = False
        self._last_ack_sent = 0.0
        self._producer_ids: tuple[int, int] = (0, 0)  # next, end (exclusive) of the current block

    # ------------------------------------------------------------------------------------ lifecycle

    def add_image_listener(self, listener: ImageListener) -> None:
        self._image_listeners.append(listener)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._session_listeners.append(listener)

    async def join(self, cluster_id: str) -> str:
        """Agree on the cluster id: ``cluster_id`` when the cluster has none yet, else the stored one."""
        self.cluster_id = await self._agree_cluster_id(cluster_id)
        return self.cluster_id

    async def start(self, cluster_id: str | None = None) -> str:
        """Register, load the image and start the session and watch loops (after :meth:`join`, or joining
        with ``cluster_id`` now); returns the cluster id."""
        if cluster_id is not None:
            await self.join(cluster_id)
        await self._register()
        revision, kvs = await self.store.range(self.keys.root, prefix=True)
        self._install(self._builder.build(revision, _entries(kvs)), kvs)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._watch_loop(), name=f"regroup node {self.node_id} metadata watch"),
            loop.create_task(self._session_loop(), name=f"regroup node {self.node_id} session"),
        ]
        return self.cluster_id

    async def stop(self, *, revoke: bool = True) -> None:
        """Leave: stop the loops and (``revoke``) end the session, deleting the registration at once."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if revoke and self.lease_id:
            with contextlib.suppress(StoreError):
                await self.store.revoke(self.lease_id)
        self.lease_id = 0

    @property
    def self_fenced(self) -> bool:
        """True while the session may be lost (no keep-alive acknowledged in time, or the lease is gone)."""
        return self._self_fenced

    @property
    def is_controller(self) -> bool:
        controller = self.image.controller
        return controller is not None and controller.node_id == self.node_id and not self._self_fenced

    # ------------------------------------------------------------------------------------ waiting

    async def wait_for(self, predicate: Callable[[ClusterImage], bool], timeout_s: float) -> ClusterImage:
        """The first image (this one included) satisfying ``predicate``; TimeoutError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate(self.image):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("the cluster metadata did not reach the expected state in time")
            self._image_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._image_changed.wait(), remaining)
        return self.image

    def mod_revision(self, key: bytes) -> int:
        """The last revision that changed ``key`` as this node knows it (0: absent)."""
        return self._revisions.get(key, 0)

    # ------------------------------------------------------------------------------------ cluster id

    async def _agree_cluster_id(self, cluster_id: str) -> str:
        key = self.keys.cluster
        while True:
            try:
                result = await self.store.txn(
                    [Compare.create_revision(key, "==", 0)],
                    [Put(key, encode_cluster_id(cluster_id))],
                    [Get(key)],
                )
            except StoreUnavailable as exc:
                log.warning("The metadata store is unavailable (%s); retrying", exc)
                await asyncio.sleep(_RETRY_S)
                continue
            if result.succeeded:
                log.info("Created cluster %s in the metadata store", cluster_id)
                return cluster_id
            (kv,) = result.responses[0].kvs
            return decode_cluster_id(kv.value)

    # ------------------------------------------------------------------------------------ session

    def registration(self) -> NodeRegistration:
        return NodeRegistration(
            node_id=self.node_id,
            listeners=self.settings.listeners,
            rack=self.settings.rack,
            incarnation=self.incarnation,
            state=self.state,
        )

    async def _register(self) -> None:
        """Grant a lease and register on it; waits out a registration an earlier process still holds."""
        key = self.keys.node(self.node_id)
        warned = False
        while not self._stopping:
            try:
                if not self.lease_id:
                    self.lease_id = await self.store.grant(self.settings.lease_ttl_s)
                sent = self._monotonic()
                result = await self.store.txn(
                    [Compare.create_revision(key, "==", 0)],
                    [Put(key, self.registration().encode(), lease=self.lease_id)],
                    [Get(key)],
                )
            except LeaseNotFound:
                self.lease_id = 0
                continue
            except StoreUnavailable as exc:
                log.warning("The metadata store is unavailable (%s); retrying the registration", exc)
                await asyncio.sleep(_RETRY_S)
                continue
            if result.succeeded:
                self.broker_epoch = result.revision
                self._last_ack_sent = sent
                log.info("Registered node %d (broker epoch %d)", self.node_id, self.broker_epoch)
                return
            if not warned:
                log.warning(
                    "node.id %d is still registered by an earlier process; waiting for its session to end",
                    self.node_id,
                )
                warned = True
            # Keep our own lease alive while waiting.
            with contextlib.suppress(LeaseNotFound):
                await self.store.keep_alive(self.lease_id)
            await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)

    async def _session_loop(self) -> None:
        interval = self.settings.heartbeat_interval_ms / 1000
        fence_after = self.settings.session_timeout_ms * 0.9 / 1000
        while True:
            await asyncio.sleep(min(interval, max(0.05, fence_after / 4)))
            sent = self._monotonic()
            try:
                await asyncio.wait_for(self.store.keep_alive(self.lease_id), timeout=max(interval, 0.5))
            except LeaseNotFound:
                log.warning("Node %d lost its session (the lease expired); registering again", self.node_id)
                self._set_fenced(True)
                self.lease_id = 0
                await self._register()
                await self._catch_up()
                self._set_fenced(False)
                continue
            except (StoreUnavailable, TimeoutError) as exc:
                if self._monotonic() - self._last_ack_sent >= fence_after and not self._self_fenced:
                    log.warning(
                        "Node %d has had no session keep-alive acknowledged for %.1f s (%s): fencing itself",
                        self.node_id,
                        self._monotonic() - self._last_ack_sent,
                        exc,
                    )
                    self._set_fenced(True)
                continue
            self._last_ack_sent = sent
            if self._self_fenced and self.image.nodes.get(self.node_id) is not None:
                log.info("Node %d has its session again", self.node_id)
                self._set_fenced(False)

    async def _catch_up(self) -> None:
        """Wait until the image holds this node's new registration. The watch delivers changes in revision
        order, so by then the image also holds every change made while the session was gone — the new
        leaders of partitions this node led among them — and the node may act on it again."""

        def registered(image: ClusterImage) -> bool:
            mine = image.nodes.get(self.node_id)
            return mine is not None and mine.broker_epoch == self.broker_epoch

        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await self.wait_for(registered, self.settings.session_timeout_ms / 1000)
                return

    def _set_fenced(self, fenced: bool) -> None:
        if fenced == self._self_fenced:
            return
        self._self_fenced = fenced
        for listener in list(self._session_listeners):
            try:
                listener(fenced)
            except Exception:
                log.exception("A session listener failed")

    async def set_state(self, state: NodeState) -> None:
        """Change this node's registered state (shutting_down for a controlled shutdown)."""
        self.state = state
        key = self.keys.node(self.node_id)
        result = await self.store.txn(
            [Compare.create_revision(key, "==", self.broker_epoch)],
            [Put(key, self.registration().encode(), lease=self.lease_id)],
        )
        if not result.succeeded:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, "this node's registration changed meanwhile")

    # ------------------------------------------------------------------------------------ image

    def _install(self, image: ClusterImage, kvs: Sequence[KeyValue]) -> None:
        self._revisions = {kv.key: kv.mod_revision for kv in kvs}
        self._publish(image)

    def _publish(self, image: ClusterImage) -> None:
        old, self.image = self.image, image
        for listener in list(self._image_listeners):
            try:
                listener(old, image)
            except Exception:
                log.exception("A cluster image listener failed")
        self._image_changed.set()

    async def _watch_loop(self) -> None:
        while True:
            try:
                async with contextlib.aclosing(
                    self.store.watch(self.keys.root, self.image.revision + 1)
                ) as batches:
                    async for batch in batches:
                        entries: list[StoredEntry] = []
                        for event in batch.events:
                            kv = event.kv
                            if event.kind is EventKind.PUT:
                                self._revisions[kv.key] = kv.mod_revision
                                entries.append(StoredEntry(kv.key, kv.value, kv.create_revision))
                            else:
                                self._revisions.pop(kv.key, None)
                                entries.append(StoredEntry(kv.key, None))
                        self._publish(self._builder.apply(self.image, batch.revision, entries))
                return  # the store was closed
            except WatchCompacted:
                log.info("The metadata watch fell behind a compaction; reading the whole prefix again")
                await self._reload()
            except StoreUnavailable as exc:
                log.warning("The metadata watch broke (%s); resuming", exc)
                await asyncio.sleep(_RETRY_S)

    async def _reload(self) -> None:
        while True:
            try:
                revision, kvs = await self.store.range(self.keys.root, prefix=True)
            except StoreUnavailable:
                await asyncio.sleep(_RETRY_S)
                continue
            self._install(self._builder.build(revision, _entries(kvs)), kvs)
            return

    # ------------------------------------------------------------------------------------ controller

    async def campaign(self) -> bool:
        """Try to become the controller (when nobody is); True when this node is it now."""
        key = self.keys.controller
        record = ControllerRecord(self.node_id, self.broker_epoch)
        try:
            result = await self.store.txn(
                [Compare.create_revision(key, "==", 0)], [Put(key, record.encode(), lease=self.lease_id)]
            )
        except (StoreUnavailable, LeaseNotFound):
            return False
        if result.succeeded:
            log.info("Node %d is the controller (controller epoch %d)", self.node_id, result.revision)
        return result.succeeded

    # ------------------------------------------------------------------------------------ metadata writes

    def _choose_replicas(self, partitions: int, replication_factor: int) -> tuple[tuple[int, ...], ...]:
        nodes = self.image.running_nodes()
        n = max(len(nodes), 1)
        return assign_replicas(
            partitions, replication_factor, nodes, self._rng.randrange(n), self._rng.randrange(n)
        )

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        assignment: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicRecord:
        """Create a topic: replicas placed on the running nodes (or ``assignment``), every replica in the ISR,
        the first replica leading at epoch 0. Raises KafkaError as CreateTopics answers."""
        if name in self.image.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        replicas = (
            tuple(tuple(r) for r in assignment)
            if assignment is not None
            else self._choose_replicas(partitions, replication_factor)
        )
        topic = TopicRecord(name, uuid.uuid4(), replicas, internal, dict(configs or {}))
        if validate_only:
            return topic
        states = [
            (self.keys.partition(topic.topic_id, p), PartitionRecord(r[0] if r else NO_LEADER, 0, r))
            for p, r in enumerate(replicas)
        ]
        partition_puts: list[Op] = [Put(key, state.encode()) for key, state in states]
        topic_key = self.keys.topic(name)
        # The partitions' states go in first (in chunks when there are many): nodes act on a topic once its
        # key exists.
        while len(partition_puts) > _MAX_TXN_OPS - 1:
            chunk, partition_puts = partition_puts[: _MAX_TXN_OPS - 1], partition_puts[_MAX_TXN_OPS - 1 :]
            await self.store.txn([Compare.create_revision(topic_key, "==", 0)], chunk)
        result = await self.store.txn(
            [Compare.create_revision(topic_key, "==", 0)],
            [*partition_puts, Put(topic_key, topic.encode())],
        )
        if not result.succeeded:
            with contextlib.suppress(StoreError):
                await self.store.txn([], [Delete(self.keys.partitions_of(topic.topic_id), prefix=True)])
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        await self.wait_for(lambda image: name in image.topics, 30)
        return topic

    async def delete_topic(self, name: str) -> TopicRecord:
        topic = self.image.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        key = self.keys.topic(name)
        result = await self.store.txn(
            [Compare.mod_revision(key, "==", self.mod_revision(key))],
            [Delete(key), Delete(self.keys.partitions_of(topic.topic_id), prefix=True)],
        )
        if not result.succeeded:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' changed meanwhile.")
        await self.wait_for(lambda image: name not in image.topics, 30)
        return topic

    async def update_topic(self, topic: TopicRecord, new_partitions: Mapping[int, PartitionRecord]) -> None:
        """Replace a topic's record (configs, more partitions with their initial states)."""
        key = self.keys.topic(topic.name)
        ops: list[Op] = [
            Put(self.keys.partition(topic.topic_id, p), state.encode()) for p, state in new_partitions.items()
        ]
        result = await self.store.txn(
            [Compare.mod_revision(key, "==", self.mod_revision(key))], [*ops, Put(key, topic.encode())]
        )
        if not result.succeeded:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic '{topic.name}' changed meanwhile.")
        await self.wait_for(lambda image: image.topics.get(topic.name) == topic, 30)

    async def change_isr(
        self, topic: TopicRecord, partition: int, seen: PartitionRecord, isr: Sequence[int]
    ) -> bool:
        """As the partition's leader, replace its ISR (partition epoch + 1). False when the partition changed
        since ``seen`` or this node's registration is not the one that led it (the caller re-reads)."""
        if seen.leader != self.node_id or self._self_fenced:
            return False
        if self.image.partitions.get((topic.topic_id, partition)) != seen:
            return False  # the image moved on: the caller decides again from the new state
        key = self.keys.partition(topic.topic_id, partition)
        new = replace(seen, isr=tuple(isr), partition_epoch=seen.partition_epoch + 1)
        try:
            result = await self.store.txn(
                [
                    Compare.mod_revision(key, "==", self.mod_revision(key)),
                    Compare.create_revision(self.keys.node(self.node_id), "==", self.broker_epoch),
                ],
                [Put(key, new.encode())],
            )
        except StoreError as exc:
            log.warning("Changing the ISR of %s-%d failed: %s", topic.name, partition, exc)
            return False
        return result.succeeded

    async def allocate_producer_id(self) -> int:
        """The next producer id, from blocks of 1000 reserved in the store (KIP-730)."""
        next_id, end = self._producer_ids
        if next_id < end:
            self._producer_ids = (next_id + 1, end)
            return next_id
        key = self.keys.producer_ids
        while True:
            _, kvs = await self.store.range(key)
            start = int(kvs[0].value.decode()) if kvs else 0
            seen = kvs[0].mod_revision if kvs else 0
            result = await self.store.txn(
                [Compare.mod_revision(key, "==", seen)],
                [Put(key, str(start + _PRODUCER_ID_BLOCK).encode())],
            )
            if result.succeeded:
                self._producer_ids = (start + 1, start + _PRODUCER_ID_BLOCK)
                return start

    # ------------------------------------------------------------------------------------ controller writes

    async def write_partition(
        self, controller_epoch: int, topic: TopicRecord, partition: int, new: PartitionRecord
    ) -> bool:
        """A controller's change of one partition: fenced by the controller epoch, CAS on the partition."""
        key = self.keys.partition(topic.topic_id, partition)
        try:
            result = await self.store.txn(
                [
                    Compare.create_revision(self.keys.controller, "==", controller_epoch),
                    Compare.mod_revision(key, "==", self.mod_revision(key)),
                ],
                [Put(key, new.encode())],
            )
        except StoreError as exc:
            log.warning("Writing %s-%d failed: %s", topic.name, partition, exc)
            return False
        return result.succeeded


def _entries(kvs: Sequence[KeyValue]) -> list[StoredEntry]:
    return [StoredEntry(kv.key, kv.value, kv.create_revision) for kv in kvs]
