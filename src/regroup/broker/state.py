"""The broker: configuration, storage, identity, the group coordinator, listeners and background
maintenance, with a lifecycle.

:class:`Broker` creates its parts in one place (``__init__``): the partition logs (:attr:`Broker.logs`), the
group coordinator (:attr:`Broker.group_coordinator`), the listeners (:attr:`Broker.server`) and the admin
port. ``start()`` resolves the cluster id (``meta.properties``), loads the logs, starts the coordinator
(which loads ``__consumer_offsets``) and binds the listeners; ``stop()`` stops accepting, lets in-flight
requests finish (bounded), stops the coordinator, waits for running fsyncs, flushes every log and closes
them (clean-shutdown markers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

from regroup import __version__
from regroup.broker.config import BROKER_CONFIGS, BrokerConfig, ConfigError, render
from regroup.broker.fetch_sessions import FetchSessionCache
from regroup.broker.handlers import HandlerRegistry, default_registry
from regroup.broker.meta import ProducerIdAllocator, generate_cluster_id, load_identity, stored_cluster_id
from regroup.broker.ops.http import AdminServer
from regroup.broker.server import BrokerServer
from regroup.cluster.etcd import DEFAULT_PREFIX, EtcdStore, parse_endpoints
from regroup.cluster.member import ClusterMember
from regroup.cluster.model import ClusterImage, Keys
from regroup.cluster.node import NodeSettings
from regroup.cluster.replica_manager import ReplicationSettings
from regroup.cluster.store import MetadataStore
from regroup.cluster.topology import LocalTopology, Topology
from regroup.group.config import GroupConfig
from regroup.log import LogDefaults, LogManager, PartitionLog
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.group_events import GROUP_EVENTS_TOPIC
from regroup.runtime.clock import Clock, SystemClock
from regroup.runtime.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator
from regroup.runtime.durability import (
    GateRegistry,
    PartitionGate,
    ReplicatedGate,
    WriteGate,
    compact_off_loop,
)
from regroup.runtime.events import GroupEventsConfig
from regroup.runtime.shard_runner import OffsetsLog, ReplicatedOffsetsLog, WriteBehind
from regroup.runtime.topics_image import TopicsImageSource

__all__ = ["Broker"]

log = logging.getLogger("regroup.broker")

# asyncio cannot sleep for Kafka's "never" (Long.MAX_VALUE ms); anything beyond this is treated as never.
_NEVER_MS: Final = 10**12


class Broker:
    """One regroup node."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        registry: HandlerRegistry | None = None,
        clock: Clock | None = None,
        coordinator_clock: Clock | None = None,
        shutdown_grace_seconds: float = 10.0,
        metadata_store: MetadataStore | None = None,
    ) -> None:
        """``metadata_store``: the cluster's store, for in-process clusters; by default a node whose
        ``cluster.metadata.endpoints`` is set connects to that etcd."""
        self.config = config
        self.version = __version__
        self.node_id = config.node_id
        self.data_dir = Path(config.log_dir)
        self.clock: Clock = clock or SystemClock()
        # The group coordinator's time (its timers, commit timestamps); regroup.testing makes it virtual
        # while the network and the logs keep real time.
        self.coordinator_clock: Clock = coordinator_clock or self.clock
        self.registry = registry or default_registry(config)
        self.cluster_id = ""
        self.gates = GateRegistry(self.clock.now_ms)
        try:
            log_defaults = LogDefaults.from_properties(_log_properties(config))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.logs = LogManager(self.data_dir, log_defaults)
        """Every partition log of this node (loaded by :meth:`start`)."""
        self.cluster = _cluster_member(config, self.logs, self.clock, metadata_store, self)
        """This node's part in a cluster; None for a single node."""
        self.group_coordinator = GroupCoordinator(
            self.logs,
            coordinator_config(config),
            clock=self.coordinator_clock,
            gate_for=self.gate if self.cluster is None else self._replicated_gate,
            wrap_log=None if self.cluster is None else _replicated_offsets_log,
            write_behind=WriteBehind(),
            write_behind_for=None if self.cluster is None else self._sole_replica,
        )
        """Classic groups and committed offsets, one shard per ``__consumer_offsets`` partition."""
        self.topology: Topology = (
            LocalTopology(self.node_id, self.logs) if self.cluster is None else self.cluster.topology
        )
        """Who leads what: this node alone, or the cluster's metadata image."""
        if self.cluster is not None:
            # Consumer groups assign from the cluster's topics, not from the replicas this node hosts; the
            # metadata image replaces its topic map when a topic changes.
            member = self.cluster
            self.group_coordinator.topics_image = TopicsImageSource(
                lambda: member.node.image.topics,
                lambda: ((t.name, t.topic_id, t.partitions, t.internal) for t in member.topology.topics()),
            )
        self.server = BrokerServer(self, self.registry)
        self.admin = AdminServer(self, self.server)
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.fetch_max_bytes = config.get_int("fetch.max.bytes")
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        self._advertised = config.advertised_listeners()
        self._producer_ids: ProducerIdAllocator | None = None
        self._logs_loaded = False
        self._creating_offsets: asyncio.Task[None] | None = None
        self._deletions: set[asyncio.Task[None]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------------------------ accessors

    @property
    def producer_ids(self) -> ProducerIdAllocator:
        if self._producer_ids is None:
            raise RuntimeError("the broker has not been started")
        return self._producer_ids

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this cluster (or by this single node)."""
        if self.cluster is not None:
            return await self.cluster.node.allocate_producer_id()
        return self.producer_ids.next_id()

    @property
    def stopping(self) -> asyncio.Future[None]:
        """Completed when shutdown begins (long polls return early)."""
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_future()
        return self._stopping

    def advertised_endpoint(self, listener: str, local_host: str, local_port: int) -> tuple[str, int]:
        adv = self._advertised.get(listener)
        if adv is None:
            return local_host, local_port
        host = adv.host
        if host in ("", "0.0.0.0", "::"):
            host = local_host
        return host, adv.port or local_port

    def gate(self, plog: PartitionLog) -> PartitionGate:
        return self.gates.gate(plog)

    # ------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        config = self.config
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster = self.cluster
        configured = config.get("cluster.id")
        if cluster is not None:
            # The cluster's id wins for a new data directory; a directory of another cluster is refused.
            candidate = configured or stored_cluster_id(self.data_dir) or generate_cluster_id()
            configured = await cluster.join(candidate)
        self.cluster_id = load_identity(self.data_dir, self.node_id, configured)
        self._producer_ids = ProducerIdAllocator(self.data_dir)
        await asyncio.to_thread(self.logs.load, self.clock.now_ms())
        self._logs_loaded = True
        if cluster is not None:
            self.group_coordinator.events_leader = self._leads_events_partition
        await self.group_coordinator.start(load_all=cluster is None)
        self.stopping.add_done_callback(self._resign_coordinator)
        await self.server.start(config.listeners())
        if cluster is not None:
            cluster.node.settings.listeners = self._registered_listeners()
            await cluster.start()
            cluster.node.add_image_listener(self._image_changed)
            cluster.node.add_session_listener(self._session_changed)
            self._image_changed(cluster.node.image, cluster.node.image)
        await self.admin.start()
        # Kafka checks flush.ms only every log.flush.scheduler.interval.ms (default: never); a configured
        # log.flush.interval.ms is honoured on its own here, so the two need not be set together.
        flush_check = min(config.get_int("log.flush.scheduler.interval.ms"), config.flush_interval_ms)
        self._schedule("log flusher", flush_check, self._flush_due)
        self._schedule("log retention", config.get_int("log.retention.check.interval.ms"), self._retention)
        if config.get("log.cleaner.enable"):
            self._schedule("log cleaner", config.get_int("log.cleaner.backoff.ms"), self._compaction)

    def _resign_coordinator(self, _stopping: asyncio.Future[None]) -> None:
        # Resign at once when shutdown begins, so parked JoinGroup/SyncGroup requests are answered
        # (NOT_COORDINATOR) while the server waits for in-flight requests, instead of holding the shutdown
        # for its grace period.
        self.group_coordinator.begin_shutdown()

    def bound_addresses(self) -> dict[str, tuple[str, int]]:
        return dict(self.server.bound)

    @property
    def admin_address(self) -> tuple[str, int] | None:
        """The admin HTTP port's bound (host, port); None when it is disabled or not started."""
        return self.admin.address

    async def stop(self, *, leave_cluster: bool = True) -> None:
        """Shut down. ``leave_cluster`` False (tests): no controlled shutdown and the session is left to
        expire, as the cluster sees a crash."""
        cluster = self.cluster
        config = self.config
        if (
            cluster is not None
            and leave_cluster
            and self._logs_loaded
            and not self.stopping.done()
            and config.get("controlled.shutdown.enable")
        ):
            # Leaderships move to in-sync peers first, so clients see one NOT_LEADER_OR_FOLLOWER /
            # NOT_COORDINATOR and carry on, instead of a session-long gap.
            await cluster.controlled_shutdown(config.get_int("controlled.shutdown.max.wait.ms") / 1000)
        if not self.stopping.done():
            self.stopping.set_result(None)
        log.info("Shutting down: no new connections; finishing in-flight requests")
        await self.server.stop(self.shutdown_grace_seconds)
        await self.admin.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        try:
            await self.group_coordinator.stop()
        except Exception:
            log.exception("Error stopping the group coordinator")
        if cluster is not None:
            try:
                await cluster.stop(end_session=leave_cluster)
            except Exception:
                log.exception("Error leaving the cluster")
        if self._logs_loaded:
            self._logs_loaded = False
            await self.gates.quiesce()
            await asyncio.to_thread(self.logs.flush_all, self.clock.now_ms())
            self.logs.close()
            log.info("Logs flushed and closed")

    # ------------------------------------------------------------------------------------ cluster

    def _registered_listeners(self) -> dict[str, tuple[str, int]]:
        """The endpoint of each listener other nodes and clients are told (advertised, else bound)."""
        out: dict[str, tuple[str, int]] = {}
        for name, (bound_host, port) in self.server.bound.items():
            host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bound_host, bound_host)
            out[name] = self.advertised_endpoint(name, host, port)
        return out

    def _replicated_gate(self, plog: PartitionLog) -> WriteGate:
        return ReplicatedGate(self.gate(plog), plog, self.clock.now_ms)

    def _on_leader(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        cluster = self.cluster
        plog = self.logs.partition(topic, partition)
        if cluster is None or plog is None or cluster.node.self_fenced:
            return
        self.group_coordinator.on_election(partition, leader_epoch, ready=lambda: _replicated_to_end(plog))

    def _on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic == OFFSETS_TOPIC:
            self.group_coordinator.on_resignation(partition, leader_epoch)

    def _delete_local_topic(self, name: str) -> None:
        """The cluster deleted ``name``: remove this node's copy once no fsync of it runs."""
        from regroup.broker.handlers.delete_topics import delete_local_topic

        task = asyncio.get_running_loop().create_task(delete_local_topic(self, name))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    def _leads_events_partition(self, partition: int) -> bool:
        cluster = self.cluster
        return (
            cluster is not None and cluster.replicas.leading_epoch(GROUP_EVENTS_TOPIC, partition) is not None
        )

    def _session_changed(self, fenced: bool) -> None:
        """Coordinators self-fence while the session may be lost: another node may own their groups."""
        cluster = self.cluster
        if cluster is None:
            return
        for topic, partition in cluster.node.image.led_by(self.node_id):
            epoch = cluster.replicas.leading_epoch(topic, partition)
            if epoch is None:
                continue
            if fenced:
                self._on_resigned(topic, partition, epoch)
            else:
                self._on_leader(topic, partition, epoch)

    def _sole_replica(self, partition: int) -> bool:
        """Whether this node is the only replica of ``__consumer_offsets`` ``partition`` (replication
        factor 1): its appends are at the high watermark at once, so the coordinator may write behind a
        read as on one node. Replicas never change once placed (there is no reassignment)."""
        cluster = self.cluster
        topic = None if cluster is None else cluster.node.image.topics.get(OFFSETS_TOPIC)
        return topic is not None and tuple(topic.replicas[partition]) == (self.node_id,)

    def _image_changed(self, _old: ClusterImage, new: ClusterImage) -> None:
        """``__group_events`` missing beside an existing ``__consumer_offsets`` (its creation failed half
        way, or the timeline was enabled later) is created at once, with the same replicas."""
        if OFFSETS_TOPIC in new.topics and self._internal_topics_missing(new):
            self.request_internal_topics()

    def request_internal_topics(self) -> None:
        """Create ``__consumer_offsets`` (and ``__group_events`` beside it) when a client first looks for a
        group coordinator, as Kafka creates it on the first FindCoordinator: its replicas are then placed
        over the nodes running by then, not only over the first few to register. Nothing happens while
        fewer nodes run than its replication factor (the client asks again). Any node may create it; the
        store lets exactly one succeed."""
        cluster = self.cluster
        if cluster is None or self._creating_offsets is not None:
            return
        image = cluster.node.image
        if not self._internal_topics_missing(image):
            return
        rf = self.config.get_int("offsets.topic.replication.factor")
        if len(image.running_nodes()) < rf:
            return
        self._creating_offsets = asyncio.get_running_loop().create_task(self._create_internal_topics(rf))

    def _internal_topics_missing(self, image: ClusterImage) -> bool:
        events = self.group_coordinator.config.group_events.enabled
        return OFFSETS_TOPIC not in image.topics or (events and GROUP_EVENTS_TOPIC not in image.topics)

    async def _create_internal_topics(self, replication_factor: int) -> None:
        cluster = self.cluster
        assert cluster is not None
        coordinator = self.group_coordinator.config
        partitions = self.config.get_int("offsets.topic.num.partitions")
        try:
            offsets = cluster.node.image.topic(OFFSETS_TOPIC)
            if offsets is None:
                offsets = await cluster.node.create_topic(
                    OFFSETS_TOPIC, partitions, replication_factor, coordinator.topic_configs(), internal=True
                )
                log.info(
                    "Created %s (%d partitions, replication factor %d)",
                    OFFSETS_TOPIC,
                    partitions,
                    replication_factor,
                )
            if coordinator.group_events.enabled and GROUP_EVENTS_TOPIC not in cluster.node.image.topics:
                # The replicas of __consumer_offsets, so a group's timeline is led where the group is.
                await cluster.node.create_topic(
                    GROUP_EVENTS_TOPIC,
                    offsets.partitions,
                    offsets.replication_factor,
                    coordinator.group_events.topic_configs(),
                    internal=True,
                    assignment=offsets.replicas,
                )
        except KafkaError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("Cannot create the internal topics yet: %s", exc)
        except Exception as exc:
            log.warning("Cannot create the internal topics yet: %s", exc)
        finally:
            self._creating_offsets = None

    # ------------------------------------------------------------------------------------ maintenance

    def _schedule(self, name: str, interval_ms: int, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if interval_ms <= 0 or interval_ms >= _NEVER_MS:
            return

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await job()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("Error in the %s", name)

        self._tasks.append(asyncio.create_task(loop(), name=f"regroup {name}"))

    async def _flush_due(self) -> None:
        now = self.clock.now_ms()
        waiters = [self.gate(plog).request_flush() for plog in self.logs.flush_due(now)]
        if waiters:
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _mutate_each(
        self, partitions: list[PartitionLog], mutate: Callable[[PartitionLog], bool]
    ) -> int:
        """Run ``mutate`` on each partition in its gate's turn; returns how many reported a change."""
        changed = 0
        for plog in partitions:
            gate = self.gate(plog)
            if not gate.try_acquire():
                await gate.turn()
            try:
                if not plog.closed and mutate(plog):  # closed: its topic was deleted meanwhile
                    changed += 1
            finally:
                gate.release()
            await asyncio.sleep(0)  # keep the loop responsive between partitions
        return changed

    async def _retention(self) -> None:
        now = self.clock.now_ms()
        plogs = [plog for _, _, plog in self.logs.partitions()]
        if await self._mutate_each(plogs, lambda plog: plog.apply_retention(now) > 0):
            self.logs.checkpoint()

    async def _compaction(self) -> None:
        now = self.clock.now_ms()
        compacted = 0
        for plog in [plog for _, _, plog in self.logs.partitions() if plog.config.compact]:
            if plog.closed:  # its topic was deleted meanwhile
                continue
            try:
                if await compact_off_loop(plog, self.gate(plog), now) is not None:
                    compacted += 1
            except (OSError, KafkaError):
                log.exception("Compaction of %s failed", plog.name)
            await asyncio.sleep(0)  # keep the loop responsive between partitions
        if compacted:
            self.logs.checkpoint()


def _cluster_member(
    config: BrokerConfig,
    logs: LogManager,
    clock: Clock,
    store: MetadataStore | None,
    broker: Broker,
) -> ClusterMember | None:
    endpoints = config.get("cluster.metadata.endpoints")
    if not endpoints and store is None:
        return None
    prefix = DEFAULT_PREFIX
    shared = store is not None
    if store is None:
        try:
            hosts, prefix = parse_endpoints(str(endpoints))
        except ValueError as exc:
            raise ConfigError(
                f"Invalid value {endpoints} for configuration cluster.metadata.endpoints: {exc}"
            ) from None
        store = EtcdStore(hosts)
    listeners = config.listeners()
    inter_broker = config.get("inter.broker.listener.name") or (
        listeners[0].name if listeners else "PLAINTEXT"
    )
    return ClusterMember(
        store,
        Keys(prefix),
        NodeSettings(
            config.node_id,
            {},
            rack=config.get("broker.rack"),
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
            heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
        ),
        ReplicationSettings(
            min_insync_replicas=config.get_int("min.insync.replicas"),
            replica_lag_time_max_ms=config.get_int("replica.lag.time.max.ms"),
            replica_fetch_wait_max_ms=config.get_int("replica.fetch.wait.max.ms"),
            replica_fetch_min_bytes=config.get_int("replica.fetch.min.bytes"),
            replica_fetch_max_bytes=config.get_int("replica.fetch.max.bytes"),
            replica_fetch_response_max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            replica_fetch_backoff_ms=config.get_int("replica.fetch.backoff.ms"),
            high_watermark_checkpoint_interval_ms=config.get_int(
                "replica.high.watermark.checkpoint.interval.ms"
            ),
            listener=str(inter_broker),
        ),
        logs,
        clock.now_ms,
        unclean_leader_election=bool(config.get("unclean.leader.election.enable")),
        on_leader=broker._on_leader,
        on_resigned=broker._on_resigned,
        delete_topic=broker._delete_local_topic,
        close_store=not shared,
    )


def _replicated_offsets_log(_partition: int, plog: PartitionLog) -> OffsetsLog:
    return ReplicatedOffsetsLog(plog)


def _replicated_to_end(plog: PartitionLog) -> asyncio.Future[None]:
    """Completes once the high watermark reaches the log end as it is now (every in-sync replica has it).
    Its listener goes once the future is done, also when it is cancelled (the load it gated was dropped)."""
    target = plog.log_end_offset
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def check() -> None:
        if not done.done() and plog.high_watermark >= target:
            done.set_result(None)

    def forget(_: object) -> None:
        with contextlib.suppress(ValueError):
            plog.high_watermark_listeners.remove(check)

    plog.high_watermark_listeners.append(check)
    done.add_done_callback(forget)
    check()
    return done


def coordinator_config(config: BrokerConfig) -> CoordinatorConfig:
    """The group coordinator's settings from the broker's (Kafka's names)."""
    return CoordinatorConfig(
        group=GroupConfig(
            group_min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
            group_initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            group_max_size=config.get_int("group.max.size"),
            offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=config.get_int("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=config.get_int("offset.metadata.max.bytes"),
            offsets_topic_num_partitions=config.get_int("offsets.topic.num.partitions"),
            offsets_commit_value_version=config.get_int("offsets.commit.value.version"),
            consumer_session_timeout_ms=config.get_int("group.consumer.session.timeout.ms"),
            consumer_heartbeat_interval_ms=config.get_int("group.consumer.heartbeat.interval.ms"),
            consumer_max_size=config.get_int("group.consumer.max.size"),
            consumer_assignors=tuple(config.get("group.consumer.assignors")),
            consumer_assignment_interval_ms=config.get_int("group.consumer.assignment.interval.ms"),
            consumer_migration_policy=str(config.get("group.consumer.migration.policy")).lower(),
        ),
        offsets_topic_segment_bytes=config.get_int("offsets.topic.segment.bytes"),
        offsets_topic_compression_codec=config.get_int("offsets.topic.compression.codec"),
        offsets_load_buffer_size=config.get_int("offsets.load.buffer.size"),
        offsets_commit_timeout_ms=config.get_int("offsets.commit.timeout.ms"),
        # The broker's log cleaner compacts every cleanup.policy=compact partition, this one included.
        group_events=GroupEventsConfig(
            enabled=bool(config.get("group.events.enable")),
            retention_ms=config.get_int("group.events.retention.ms"),
            retention_bytes=config.get_int("group.events.retention.bytes"),
        ),
    )


def _log_properties(config: BrokerConfig) -> dict[str, str]:
    """Broker settings the log layer reads, rendered as Kafka property strings."""
    props: dict[str, str] = {}
    for name in BROKER_CONFIGS:
        value = render(config.get(name))
        if value is not None:
            props[name] = value
    if config.get("log.retention.ms") is None:
        props["log.retention.ms"] = str(config.retention_ms)
    if config.get("log.flush.interval.ms") is None:
        props["log.flush.interval.ms"] = str(config.flush_interval_ms)
    return props
