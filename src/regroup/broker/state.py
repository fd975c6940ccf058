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
from regroup.broker.handlers import HandlerRegistry, default_registry
from regroup.broker.meta import ProducerIdAllocator, load_identity
from regroup.broker.ops.http import AdminServer
from regroup.broker.server import BrokerServer
from regroup.group.config import GroupConfig
from regroup.log import LogDefaults, LogManager, PartitionLog
from regroup.protocol.errors import KafkaError
from regroup.runtime.clock import Clock, SystemClock
from regroup.runtime.coordinator import CoordinatorConfig, GroupCoordinator
from regroup.runtime.durability import GateRegistry, PartitionGate
from regroup.runtime.events import GroupEventsConfig

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
    ) -> None:
        self.config = config
        self.version = __version__
        self.node_id = config.node_id
        self.data_dir = Path(config.log_dir)
        self.clock: Clock = clock or SystemClock()
        # The group coordinator's time (its timers, commit timestamps); regroup.testing makes it virtual
        # while the network and the logs keep real time.
        self.coordinator_clock: Clock = coordinator_clock or self.clock
        self.registry = registry or default_registry()
        self.cluster_id = ""
        self.gates = GateRegistry(self.clock.now_ms)
        try:
            log_defaults = LogDefaults.from_properties(_log_properties(config))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.logs = LogManager(self.data_dir, log_defaults)
        """Every partition log of this node (loaded by :meth:`start`)."""
        self.group_coordinator = GroupCoordinator(
            self.logs, coordinator_config(config), clock=self.coordinator_clock, gate_for=self.gate
        )
        """Classic groups and committed offsets, one shard per ``__consumer_offsets`` partition."""
        self.server = BrokerServer(self, self.registry)
        self.admin = AdminServer(self, self.server)
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.fetch_max_bytes = config.get_int("fetch.max.bytes")
        self._advertised = config.advertised_listeners()
        self._producer_ids: ProducerIdAllocator | None = None
        self._logs_loaded = False
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------------------------ accessors

    @property
    def producer_ids(self) -> ProducerIdAllocator:
        if self._producer_ids is None:
            raise RuntimeError("the broker has not been started")
        return self._producer_ids

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
        self.cluster_id = load_identity(self.data_dir, self.node_id, config.get("cluster.id"))
        self._producer_ids = ProducerIdAllocator(self.data_dir)
        await asyncio.to_thread(self.logs.load, self.clock.now_ms())
        self._logs_loaded = True
        await self.group_coordinator.start()
        self.stopping.add_done_callback(self._resign_coordinator)
        await self.server.start(config.listeners())
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

    async def stop(self) -> None:
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
        if self._logs_loaded:
            self._logs_loaded = False
            await self.gates.quiesce()
            await asyncio.to_thread(self.logs.flush_all, self.clock.now_ms())
            self.logs.close()
            log.info("Logs flushed and closed")

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

        def compact(plog: PartitionLog) -> bool:
            try:
                return plog.compact(now) is not None
            except (OSError, KafkaError):
                log.exception("Compaction of %s failed", plog.name)
                return False

        plogs = [plog for _, _, plog in self.logs.partitions() if plog.config.compact]
        if await self._mutate_each(plogs, compact):
            self.logs.checkpoint()


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
        ),
        offsets_topic_segment_bytes=config.get_int("offsets.topic.segment.bytes"),
        offsets_topic_compression_codec=config.get_int("offsets.topic.compression.codec"),
        offsets_load_buffer_size=config.get_int("offsets.load.buffer.size"),
        offsets_commit_timeout_ms=config.get_int("offsets.commit.timeout.ms"),
        # The broker's log cleaner compacts every cleanup.policy=compact partition, this one included.
        compaction_interval_ms=None,
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
