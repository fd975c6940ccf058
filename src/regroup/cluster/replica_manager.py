"""This node's replicas: the metadata image applied to the local logs, the leader's bookkeeping of its
followers, and acks=all waits (Kafka's ``ReplicaManager`` and ``Partition``, driven by metadata images as
KRaft's ``BrokerMetadataPublisher`` / ``ReplicaManager.applyDelta`` drive them).

For every image the node sees:

- **Topics** the cluster has are created here (with the cluster's topic id and configs; every partition of
  a topic gets a local log, whether or not this node is one of its replicas), topics it no longer has are
  deleted, added partitions and changed configs follow.
- **Become leader** at epoch *e* (the partition names this node leader at a newer epoch than it leads at):
  the log stamps *e* on new batches and records (*e*, LEO) in its epoch cache, the follower bookkeeping
  (:class:`~regroup.cluster.high_watermark.LeaderPartitionState`) starts, fetching from the old leader
  stops. While leading, metadata changes (an ISR change this node made, a follower gone) update the
  bookkeeping.
- **Become follower** of leader *l* at epoch *e*: leadership (if any) ends — waiting acks=all produces get
  NOT_LEADER_OR_FOLLOWER — and the partition is handed to the fetcher for *l*, which first truncates the
  log where it diverges from *l*'s (OffsetForLeaderEpoch) and then fetches. A partition without a leader is
  not fetched.

The **high watermark** of a led partition advances as followers fetch (the minimum log end over the ISR,
never while the ISR is smaller than ``min.insync.replicas``) and after the leader's own appends; each
advance completes acks=all produces waiting for it and wakes consumer long polls (the log's listeners).
The leader proposes ISR changes itself — a follower that caught up joins, one that has not been caught up
for ``replica.lag.time.max.ms`` leaves — written to the metadata store as a compare-and-set on the
partition guarded by this node's own registration (:meth:`ClusterNode.change_isr`).

``on_leader``/``on_resigned`` callbacks tell the group coordinator about ``__consumer_offsets`` partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from regroup.cluster.high_watermark import LeaderPartitionState
from regroup.cluster.model import ClusterImage, PartitionRecord, TopicRecord
from regroup.cluster.node import ClusterNode
from regroup.cluster.partition_change import node_liveness
from regroup.log import LogManager, PartitionLog
from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = ["LeadershipListener", "ReplicaManager", "ReplicationSettings"]

log = logging.getLogger("regroup.cluster.replicas")

LeadershipListener = Callable[[str, int, int], None]
"""``(topic, partition, leader_epoch)``."""

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """Kafka's replication settings (broker-level; ``min.insync.replicas`` may be overridden per topic)."""

    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_backoff_ms: int = 1000
    high_watermark_checkpoint_interval_ms: int = 5000
    listener: str = "PLAINTEXT"


@dataclass(slots=True)
class _Waiter:
    offset: int  # acks=all: completes once the high watermark passes this offset
    future: asyncio.Future[ErrorCode]


@dataclass(slots=True)
class _Leading:
    topic: TopicRecord
    partition: int
    plog: PartitionLog
    state: LeaderPartitionState
    waiters: list[_Waiter] = field(default_factory=list)
    isr_change: asyncio.Task[None] | None = None
    on_append: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class Following:
    """A partition this node follows: whom, at which leader epoch."""

    topic: TopicRecord
    partition: int
    leader: int
    leader_epoch: int


class ReplicaManager:
    """Applies metadata images to this node's replicas and keeps its led partitions' high watermarks."""

    def __init__(
        self,
        node: ClusterNode,
        logs: LogManager,
        settings: ReplicationSettings,
        now_ms: Callable[[], int],
        *,
        on_leader: LeadershipListener | None = None,
        on_resigned: LeadershipListener | None = None,
        delete_topic: Callable[[str], None] | None = None,
    ) -> None:
        """``delete_topic(name)`` removes a topic the cluster deleted from the local logs (the broker waits
        for running fsyncs first); by default at once."""
        self.node = node
        self.node_id = node.node_id
        self.logs = logs
        self.settings = settings
        self._now_ms = now_ms
        self._on_leader = on_leader
        self._on_resigned = on_resigned
        self._delete_topic = delete_topic
        self._leading: dict[TopicPartition, _Leading] = {}
        # Bumped whenever a partition's leadership here starts or ends (what ``leading_epoch`` answers).
        self.leadership_changes = 0
        self._following: dict[TopicPartition, Following] = {}
        self._follow_listeners: list[Callable[[dict[TopicPartition, Following]], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Apply the current image and start the ISR-shrink and HW-checkpoint loops."""
        self.node.add_image_listener(self._on_image)
        self._apply(ClusterImage(), self.node.image)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._shrink_loop(), name="regroup ISR shrink"),
            loop.create_task(self._checkpoint_loop(), name="regroup high watermark checkpoint"),
        ]

    async def stop(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for key in list(self._leading):
            self._resign(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._following.clear()

    def add_follow_listener(self, listener: Callable[[dict[TopicPartition, Following]], None]) -> None:
        """Told the partitions this node follows after every change (the fetchers)."""
        self._follow_listeners.append(listener)

    # ------------------------------------------------------------------------------------ queries

    def leading_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch this node leads ``topic``-``partition`` at, None when it does not lead it."""
        leading = self._leading.get((topic, partition))
        return None if leading is None else leading.state.leader_epoch

    def following(self) -> dict[TopicPartition, Following]:
        return dict(self._following)

    def leader_state(self, topic: str, partition: int) -> LeaderPartitionState | None:
        leading = self._leading.get((topic, partition))
        return None if leading is None else leading.state

    # ------------------------------------------------------------------------------------ images

    def _on_image(self, old: ClusterImage, new: ClusterImage) -> None:
        if not self._stopped:
            self._apply(old, new)

    def _apply(self, old: ClusterImage, new: ClusterImage) -> None:
        self._sync_topics(old, new)
        broker_epochs, not_running = node_liveness(new.nodes)
        follow_changed = False
        for topic, partition, state in new.all_partitions():
            key = (topic.name, partition)
            replicas = topic.replicas[partition]
            if state is None or self.node_id not in replicas:
                follow_changed |= self._following.pop(key, None) is not None
                if key in self._leading:
                    self._resign(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            if state.leader == self.node_id:
                follow_changed |= self._following.pop(key, None) is not None
                self._lead(topic, partition, state, broker_epochs, not_running)
            else:
                if key in self._leading:
                    self._resign(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                follow_changed |= self._follow(topic, partition, state)
        for key in [k for k in self._leading if new.partition(*k) is None]:
            self._resign(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for key in [k for k in self._following if new.partition(*k) is None]:
            del self._following[key]
            follow_changed = True
        if follow_changed:
            following = dict(self._following)
            for listener in list(self._follow_listeners):
                listener(following)

    def _sync_topics(self, old: ClusterImage, new: ClusterImage) -> None:
        logs = self.logs
        now = self._now_ms()
        for name, topic in new.topics.items():
            info = logs.topic(name)
            if info is not None and info.topic_id != topic.topic_id:
                log.info("Topic %s was recreated in the cluster; deleting the local copy", name)
                self._delete_local(name)
                info = None
            try:
                if info is None:
                    logs.create_topic(
                        name,
                        topic.partitions,
                        dict(topic.configs),
                        internal=topic.internal,
                        topic_id=topic.topic_id,
                        now_ms=now,
                    )
                    continue
                if info.partitions < topic.partitions:
                    logs.create_partitions(name, topic.partitions, now_ms=now)
                if dict(info.overrides) != dict(topic.configs):
                    logs.alter_topic_configs(name, dict(topic.configs))
            except KafkaError as exc:
                log.error("Cannot mirror topic %s locally: %s", name, exc)
        for info in logs.topics():
            if info.name not in new.topics and (old.revision or new.revision):
                self._delete_local(info.name, deferred=True)

    def _delete_local(self, name: str, *, deferred: bool = False) -> None:
        for key in [k for k in self._leading if k[0] == name]:
            self._resign(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for key in [k for k in self._following if k[0] == name]:
            del self._following[key]
        if deferred and self._delete_topic is not None:
            self._delete_topic(name)
            return
        with contextlib.suppress(KafkaError):
            self.logs.delete_topic(name)

    # ------------------------------------------------------------------------------------ leadership

    def _lead(
        self,
        topic: TopicRecord,
        partition: int,
        state: PartitionRecord,
        broker_epochs: dict[int, int],
        not_running: frozenset[int],
    ) -> None:
        key = (topic.name, partition)
        leading = self._leading.get(key)
        plog = self.logs.partition(topic.name, partition)
        if plog is None:
            return
        now = self._now_ms()
        if leading is not None and leading.state.leader_epoch == state.leader_epoch:
            leading.topic = topic
            leading.state.update_nodes(broker_epochs, not_running)
            if leading.state.pending_isr is not None and tuple(state.isr) == leading.state.pending_isr:
                advanced = leading.state.alter_partition_succeeded(
                    isr=state.isr,
                    leader_epoch=state.leader_epoch,
                    partition_epoch=state.partition_epoch,
                    leader_log_end_offset=plog.log_end_offset,
                    now_ms=now,
                )
            else:
                advanced = leading.state.update_leadership(
                    replicas=topic.replicas[partition],
                    isr=state.isr,
                    leader_epoch=state.leader_epoch,
                    partition_epoch=state.partition_epoch,
                    log_end_offset=plog.log_end_offset,
                    now_ms=now,
                )
            if advanced:
                self._high_watermark_moved(leading)
            return
        if leading is not None:
            self._resign(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        plog.replicated = True
        plog.become_leader(state.leader_epoch)
        leader_state = LeaderPartitionState(
            local_id=self.node_id,
            replicas=topic.replicas[partition],
            isr=state.isr,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            log_end_offset=plog.log_end_offset,
            high_watermark=plog.high_watermark,
            now_ms=now,
            min_insync_replicas=self._min_isr(topic),
            replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
            broker_epochs=broker_epochs,
            shutting_down=not_running,
            label=f"{topic.name}-{partition}",
        )
        leading = _Leading(topic, partition, plog, leader_state)
        self._leading[key] = leading
        self.leadership_changes += 1
        leading.on_append = self._append_listener(leading)
        plog.append_listeners.append(leading.on_append)
        log.info(
            "Leading %s-%d at leader epoch %d (ISR %s, log end %d, high watermark %d)",
            topic.name,
            partition,
            state.leader_epoch,
            list(state.isr),
            plog.log_end_offset,
            plog.high_watermark,
        )
        self._high_watermark_moved(leading)
        if self._on_leader is not None:
            self._on_leader(topic.name, partition, state.leader_epoch)

    def _append_listener(self, leading: _Leading) -> Callable[[], None]:
        def appended() -> None:
            if self._leading.get((leading.topic.name, leading.partition)) is not leading:
                return
            if leading.state.maybe_increment_high_watermark(leading.plog.log_end_offset, self._now_ms()):
                self._high_watermark_moved(leading)

        return appended

    def _resign(self, key: TopicPartition, error: ErrorCode) -> None:
        leading = self._leading.pop(key, None)
        if leading is None:
            return
        self.leadership_changes += 1
        plog = leading.plog
        if leading.on_append in plog.append_listeners:
            plog.append_listeners.remove(leading.on_append)
        plog.leader_epoch = None
        for waiter in leading.waiters:
            if not waiter.future.done():
                waiter.future.set_result(error)
        leading.waiters.clear()
        if leading.isr_change is not None:
            leading.isr_change.cancel()
        log.info("No longer leading %s-%d (leader epoch %d)", key[0], key[1], leading.state.leader_epoch)
        if self._on_resigned is not None:
            self._on_resigned(key[0], key[1], leading.state.leader_epoch)

    def _follow(self, topic: TopicRecord, partition: int, state: PartitionRecord) -> bool:
        key = (topic.name, partition)
        plog = self.logs.partition(topic.name, partition)
        if plog is not None:
            plog.replicated = True
            plog.leader_epoch = None
        current = self._following.get(key)
        wanted = Following(topic, partition, state.leader, state.leader_epoch)
        if current == wanted:
            return False
        self._following[key] = wanted
        if current is None or current.leader_epoch != wanted.leader_epoch:
            log.info(
                "Following %s-%d: leader %d at leader epoch %d",
                topic.name,
                partition,
                state.leader,
                state.leader_epoch,
            )
        return True

    def _min_isr(self, topic: TopicRecord) -> int:
        value = topic.configs.get("min.insync.replicas")
        return int(value) if value is not None else self.settings.min_insync_replicas

    # ------------------------------------------------------------------------------------ the leader's side

    def check_enough_replicas(self, topic: str, partition: int) -> ErrorCode:
        """Before an acks=all append (``Partition.appendRecordsToLeader``): NOT_ENOUGH_REPLICAS when the
        ISR is smaller than min(``min.insync.replicas``, replication factor)."""
        leading = self._leading.get((topic, partition))
        if leading is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NOT_ENOUGH_REPLICAS if leading.state.under_min_isr else ErrorCode.NONE

    def wait_replicated(self, topic: str, partition: int, last_offset: int) -> asyncio.Future[ErrorCode]:
        """Completes when the high watermark passes ``last_offset`` (NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
        when the ISR shrank under the minimum meanwhile), or NOT_LEADER_OR_FOLLOWER when this node stops
        leading. The caller bounds the wait (REQUEST_TIMED_OUT)."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        leading = self._leading.get((topic, partition))
        if leading is None:
            future.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif leading.plog.high_watermark > last_offset:
            future.set_result(self._after_append_error(leading))
        else:
            leading.waiters.append(_Waiter(last_offset, future))
        return future

    def _after_append_error(self, leading: _Leading) -> ErrorCode:
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if leading.state.under_min_isr else ErrorCode.NONE

    def follower_fetched(
        self,
        topic: str,
        partition: int,
        replica_id: int,
        *,
        fetch_offset: int,
        log_start_offset: int,
        broker_epoch: int,
    ) -> ErrorCode:
        """A follower's fetch reached this leader (``Partition.updateFollowerFetchState``)."""
        leading = self._leading.get((topic, partition))
        if leading is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            outcome = leading.state.update_follower_fetch_state(
                replica_id,
                fetch_offset=fetch_offset,
                log_start_offset=log_start_offset,
                fetch_time_ms=self._now_ms(),
                leader_log_end_offset=leading.plog.log_end_offset,
                broker_epoch=broker_epoch,
            )
        except KafkaError as exc:
            return exc.code
        if outcome.high_watermark_advanced:
            self._high_watermark_moved(leading)
        if outcome.proposed_isr is not None:
            self._propose_isr(leading, outcome.proposed_isr)
        return ErrorCode.NONE

    def _high_watermark_moved(self, leading: _Leading) -> None:
        hw = leading.state.high_watermark
        leading.plog.set_high_watermark(hw)
        if not leading.waiters:
            return
        error = self._after_append_error(leading)
        still: list[_Waiter] = []
        for waiter in leading.waiters:
            if waiter.future.done():
                continue
            if hw > waiter.offset:
                waiter.future.set_result(error)
            else:
                still.append(waiter)
        leading.waiters = still

    def _propose_isr(self, leading: _Leading, isr: tuple[int, ...]) -> None:
        seen = self.node.image.partitions.get((leading.topic.topic_id, leading.partition))
        if seen is None:
            return

        async def change() -> None:
            changed = await self.node.change_isr(leading.topic, leading.partition, seen, isr)
            if not changed and leading.state.pending_isr == isr:
                # The partition moved on meanwhile (or this node lost its session): take back the proposal;
                # the next image decides again.
                leading.state.alter_partition_failed(ErrorCode.INELIGIBLE_REPLICA)

        leading.isr_change = asyncio.get_running_loop().create_task(change())

    async def _shrink_loop(self) -> None:
        interval = max(self.settings.replica_lag_time_max_ms / 2, 100) / 1000
        while True:
            await asyncio.sleep(interval)
            now = self._now_ms()
            for leading in list(self._leading.values()):
                proposed = leading.state.maybe_shrink_isr(leading.plog.log_end_offset, now)
                if proposed is not None:
                    self._propose_isr(leading, proposed)

    async def _checkpoint_loop(self) -> None:
        interval = self.settings.high_watermark_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.logs.checkpoint_high_watermarks()
            except OSError as exc:
                log.error("Writing the high watermark checkpoint failed: %s", exc)
