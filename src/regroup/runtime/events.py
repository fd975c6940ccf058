"""The rebalance timeline of every group: appended to ``__group_events``, replayed at start, served as JSON.

The coordinator hands every ``Notify`` event of its shards to :meth:`GroupEventLog.observe`, which turns the
timeline ones (rebalance started, generation completed / stable, static member swapped; a consumer group's
epoch bump with its cause and the reconciliation of the members it changed) into the versioned
records of :mod:`regroup.protocol.group_events`, keeps them in a bounded per-group memory and queues them
for a background writer. The writer appends them to the group's ``__group_events`` partition through the
partition's write gate; it never holds up a shard's lane, a full queue drops events (logged), and a failed
append is logged and skipped: the timeline is at-least-once observability, not state. At start the topic
is created when missing (internal, ``cleanup.policy=delete``, bounded retention) and replayed up to its end
at that moment, so the timeline of the previous run stays visible.

``GroupCoordinator.history_view(group_id)`` assembles a group's timeline from this memory and replaces the
persisted in-progress rebalance by the live one from the shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from regroup.group.consumer_group_events import ConsumerGroupEpochBumped
from regroup.group.history import (
    GenerationCompleted,
    GenerationRecord,
    GenerationStable,
    RebalanceCause,
    RebalanceStarted,
    StaticMemberSwapped,
    membership_reasons,
)
from regroup.log import LogManager, PartitionLog
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.group_events import (
    GROUP_EVENTS_TOPIC,
    EventFormatError,
    decode_event,
    encode_event,
    events_partition,
)
from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import Record as BatchRecord
from regroup.protocol.record_batch import build_batch, decode_batches
from regroup.runtime.clock import Clock
from regroup.runtime.durability import WriteGate

__all__ = [
    "GroupEventLog",
    "GroupEventsConfig",
    "cause_json",
    "epoch_bumped_event",
    "event_from_notify",
    "started_event",
]

log = logging.getLogger("regroup.coordinator.events")

Event = dict[str, Any]

_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class GroupEventsConfig:
    """Settings of the ``__group_events`` timeline (regroup-only)."""

    enabled: bool = True
    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = 16 * 1024 * 1024
    """Per partition; retention deletes whole segments, hence the small segments below."""
    segment_bytes: int = 4 * 1024 * 1024
    segment_ms: int = _DAY_MS
    queue_size: int = 10_000
    """Events waiting for the writer; beyond this new events are dropped (and logged)."""
    max_groups: int = 10_000
    """Groups whose timeline is kept in memory (least recently changed ones are forgotten first)."""
    events_per_group: int = 128

    def topic_configs(self) -> dict[str, str]:
        return {
            "cleanup.policy": "delete",
            "retention.ms": str(self.retention_ms),
            "retention.bytes": str(self.retention_bytes),
            "segment.bytes": str(self.segment_bytes),
            "segment.ms": str(self.segment_ms),
        }


# ------------------------------------------------------------------------------------ conversions


def _kind(cause: RebalanceCause) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(cause).__name__).lower()


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def cause_json(cause: RebalanceCause) -> Event:
    """``{"kind", "description", ...the cause's fields}``."""
    return {"kind": _kind(cause), "description": cause.describe(), **_plain(cause)}


def _members(record: GenerationRecord) -> dict[str, str | None]:
    return dict(record.members)


def _completed_event(record: GenerationRecord) -> Event:
    causes = (record.cause, *record.events)
    joined_reasons, left_reasons = membership_reasons(causes)
    instances = _members(record)
    left_instances: dict[str, str | None] = {}
    for cause in causes:
        for m in getattr(cause, "members", ()):
            left_instances[m.member_id] = m.group_instance_id
    return {
        "type": "generation_completed",
        "group_id": record.group_id,
        "time_ms": record.join_completed_ms,
        "generation_id": record.generation_id,
        "protocol_type": record.protocol_type,
        "protocol_name": record.protocol_name,
        "leader_id": record.leader_id,
        "members": [{"member_id": m, "group_instance_id": i} for m, i in record.members],
        "cause": cause_json(record.cause),
        "events": [cause_json(e) for e in record.events],
        "waited_for": list(record.waited_for),
        "joined": [
            {
                "member_id": m,
                "group_instance_id": instances.get(m),
                "reason": joined_reasons.get(m, "new member"),
            }
            for m in record.joined
        ],
        "left": [
            {
                "member_id": m,
                "group_instance_id": left_instances.get(m),
                "reason": left_reasons.get(m, "not in the new generation"),
            }
            for m in record.left
        ],
        "rebalance_started_ms": record.rebalance_started_ms,
        "join_completed_ms": record.join_completed_ms,
        "join_phase_ms": record.join_phase_ms,
    }


def started_event(started: RebalanceStarted) -> Event:
    """The ``rebalance_started`` event of a rebalance that waits for members."""
    return {
        "type": "rebalance_started",
        "group_id": started.group_id,
        "time_ms": started.rebalance_started_ms,
        "generation_id": started.generation_id,
        "cause": cause_json(started.cause),
        "events": [cause_json(e) for e in started.events],
        "rebalance_started_ms": started.rebalance_started_ms,
        "join_deadline_ms": started.join_deadline_ms,
        "awaiting": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "deadline_ms": m.deadline_ms,
                "evicted_by": m.evicted_by,
            }
            for m in started.awaiting
        ],
    }


def epoch_bumped_event(event: ConsumerGroupEpochBumped, now_ms: int) -> Event:
    """The ``consumer_epoch_bumped`` event of a consumer group's epoch bump (``now_ms`` when the runtime
    did not stamp it)."""
    causes = [c.to_json() for c in event.causes()]
    if not causes:
        causes = [{"kind": "unknown", "description": "no change the coordinator could name"}]
    left_kinds = ("member_left", "member_fenced_session_timeout", "member_fenced_rebalance_timeout")
    time_ms = event.time_ms if event.time_ms is not None else now_ms
    return {
        "type": "consumer_epoch_bumped",
        "group_id": event.group_id,
        "time_ms": time_ms,
        "generation_id": event.group_epoch,
        "group_type": "consumer",
        "group_epoch": event.group_epoch,
        "previous_group_epoch": event.previous_group_epoch,
        "assignment_epoch": event.assignment_epoch,
        "state": event.state,
        "assignor": event.assignor,
        "cause": causes[0],
        "events": causes[1:],
        # Only the members the bumping operation changed (see regroup.group.consumer_group_events), and the
        # group's totals: an event's size does not grow with the group.
        "members": [m.to_json() for m in event.members],
        "members_listed": "changed",
        "member_count": event.member_count,
        "waiting_count": event.waiting_count,
        "joined": [
            {
                "member_id": c["member_id"],
                "group_instance_id": c["group_instance_id"],
                "reason": c["description"],
            }
            for c in causes
            if c["kind"] in ("member_joined", "static_member_replaced")
        ],
        "left": [
            {
                "member_id": c.get("old_member_id", c["member_id"]),
                "group_instance_id": c["group_instance_id"],
                "reason": c["description"],
            }
            for c in causes
            if c["kind"] in left_kinds or c["kind"] == "static_member_replaced"
        ],
    }


def event_from_notify(event: object, now_ms: int = 0) -> Event | None:
    """The ``__group_events`` event of a shard's Notify event, or None when it is not part of a timeline."""
    if isinstance(event, ConsumerGroupEpochBumped):
        return epoch_bumped_event(event, now_ms)
    if isinstance(event, GenerationCompleted):
        return _completed_event(event.record)
    if isinstance(event, GenerationStable):
        record = event.record
        assert record.stable_ms is not None
        return {
            "type": "generation_stable",
            "group_id": record.group_id,
            "time_ms": record.stable_ms,
            "generation_id": record.generation_id,
            "join_completed_ms": record.join_completed_ms,
            "stable_ms": record.stable_ms,
            "sync_phase_ms": record.sync_phase_ms,
        }
    if isinstance(event, RebalanceStarted):
        return started_event(event)
    if isinstance(event, StaticMemberSwapped):
        replaced = event.replaced
        return {
            "type": "static_member_replaced",
            "group_id": event.group_id,
            "time_ms": event.time_ms,
            "generation_id": event.generation_id,
            "group_instance_id": replaced.group_instance_id,
            "old_member_id": replaced.old_member_id,
            "new_member_id": replaced.new_member_id,
            "reason": replaced.reason,
        }
    return None


# ------------------------------------------------------------------------------------ the log


class _Deflated(bytes):
    """A remembered event's record value, deflated (zlib)."""

    __slots__ = ()


# A generation's event names every member, several times over (members, joined, waited for): deflated,
# a 1,000-member event takes a third of its JSON's memory, for ~2 ms once per generation.
_DEFLATE_ABOVE = 1024


def _packed(value: bytes) -> bytes:
    return _Deflated(zlib.compress(value, 1)) if len(value) > _DEFLATE_ABOVE else value


def _unpacked(value: bytes) -> bytes:
    return zlib.decompress(value) if isinstance(value, _Deflated) else value


@dataclass(slots=True)
class _Timeline:
    """A group's remembered events, as their encoded record values (deflated when large): a generation of
    N members is one JSON document naming them all, several times smaller encoded than as Python objects."""

    replayed: deque[bytes]
    live: deque[bytes]


@dataclass(slots=True)
class EventLogStats:
    written: int = 0
    dropped: int = 0
    failed: int = 0
    replayed: int = 0
    skipped: int = 0


class GroupEventLog:
    """Writes, replays and remembers the ``__group_events`` timeline."""

    def __init__(
        self,
        logs: LogManager,
        config: GroupEventsConfig,
        clock: Clock,
        gate_for: Callable[[PartitionLog], WriteGate],
        *,
        may_append: Callable[[int], bool] | None = None,
    ) -> None:
        """``may_append(partition)``: whether this node may append to that partition now (in a cluster: it
        leads it); by default always."""
        self.config = config
        self._may_append = may_append
        self.stats = EventLogStats()
        self._logs = logs
        self._clock = clock
        self._gate_for = gate_for
        self._gates: dict[int, WriteGate] = {}
        self._partitions = 0
        self._timelines: OrderedDict[str, _Timeline] = OrderedDict()
        self._queue: asyncio.Queue[tuple[int, bytes, bytes]] = asyncio.Queue(config.queue_size)
        self._writer: asyncio.Task[None] | None = None
        self._replay: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def partitions(self) -> int:
        return self._partitions

    def start(self, partitions: int) -> None:
        """Create ``__group_events`` (``partitions`` partitions) unless it exists, start the writer and
        replay what the topic holds now."""
        info = self._logs.topic(GROUP_EVENTS_TOPIC)
        if info is None:
            info = self._logs.create_topic(
                GROUP_EVENTS_TOPIC,
                partitions,
                self.config.topic_configs(),
                internal=True,
                now_ms=self._clock.now_ms(),
            )
            log.info("Created %s with %d partitions", GROUP_EVENTS_TOPIC, info.partitions)
        self._partitions = info.partitions
        ends: dict[int, int] = {}
        for partition in range(self._partitions):
            plog = self._logs.partition(GROUP_EVENTS_TOPIC, partition)
            if plog is not None:
                ends[partition] = plog.log_end_offset
        self._replay = asyncio.create_task(self._replay_all(ends), name="regroup group events replay")
        self._writer = asyncio.create_task(self._write_loop(), name="regroup group events writer")

    def start_replicated(self) -> None:
        """A cluster node: the topic is the cluster's (created with ``__consumer_offsets``, replicated like
        any topic); start the writer, and replay a partition when this node becomes the coordinator of its
        groups (:meth:`replay_partition`)."""
        self._writer = asyncio.create_task(self._write_loop(), name="regroup group events writer")

    async def replay_partition(self, partition: int) -> None:
        """Read this node's copy of one partition (a coordinator just elected for its groups)."""
        info = self._logs.topic(GROUP_EVENTS_TOPIC)
        if info is None:
            return
        self._partitions = info.partitions
        plog = self._logs.partition(GROUP_EVENTS_TOPIC, partition)
        if plog is None:
            return
        # The log holds everything remembered of these groups (what this node appended when it led them
        # before included): read afresh.
        for group_id in [g for g in self._timelines if events_partition(g, self._partitions) == partition]:
            del self._timelines[group_id]
        try:
            await self._replay_partition(partition, plog.log_end_offset, to_log_end=True)
        except (KafkaError, OSError, DecodeError) as exc:
            log.warning("Replaying %s-%d stopped: %s", GROUP_EVENTS_TOPIC, partition, exc)

    async def wait_replayed(self) -> None:
        if self._replay is not None:
            await asyncio.shield(self._replay)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Write what is queued (bounded by ``timeout_s``), then stop."""
        self._closed = True
        if self._writer is not None and not self._writer.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout_s)
        for task in (self._writer, self._replay):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # -------------------------------------------------------------------------------- reading

    def events(self, group_id: str) -> list[Event]:
        """``group_id``'s remembered events in log order (replayed ones first)."""
        timeline = self._timelines.get(group_id)
        if timeline is None:
            return []
        events = (decode_event(None, _unpacked(value)) for value in (*timeline.replayed, *timeline.live))
        return [event for event in events if event is not None]

    def _remember(self, group_id: str, value: bytes, replayed: bool) -> None:
        timeline = self._timelines.get(group_id)
        if timeline is None:
            size = self.config.events_per_group
            timeline = self._timelines[group_id] = _Timeline(deque(maxlen=size), deque(maxlen=size))
            while len(self._timelines) > self.config.max_groups:
                self._timelines.popitem(last=False)
        elif not replayed:
            self._timelines.move_to_end(group_id)
        (timeline.replayed if replayed else timeline.live).append(_packed(value))

    # -------------------------------------------------------------------------------- writing

    def observe(self, event: object) -> None:
        """Take a shard's Notify event (on the shard's lane: must not block)."""
        doc = event_from_notify(event, self._clock.now_ms())
        if doc is None:
            return
        try:
            key, value = encode_event(doc)
        except (EventFormatError, TypeError, ValueError):
            log.exception("Cannot encode a group event of %s", doc.get("group_id"))
            return
        self._remember(doc["group_id"], value, replayed=False)
        if not self._partitions:
            info = self._logs.topic(GROUP_EVENTS_TOPIC)
            self._partitions = 0 if info is None else info.partitions
        if self._closed or self._writer is None or not self._partitions:
            return
        partition = events_partition(doc["group_id"], self._partitions)
        try:
            self._queue.put_nowait((partition, key, value))
        except asyncio.QueueFull:
            self.stats.dropped += 1
            if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                log.warning(
                    "The %s queue is full (%d events); %d events dropped so far",
                    GROUP_EVENTS_TOPIC,
                    self.config.queue_size,
                    self.stats.dropped,
                )

    async def _write_loop(self) -> None:
        while True:
            item = await self._queue.get()
            items = [item]
            while not self._queue.empty() and len(items) < 512:
                items.append(self._queue.get_nowait())
            by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
            for partition, key, value in items:
                by_partition.setdefault(partition, []).append((key, value))
            try:
                for partition, records in by_partition.items():
                    await self._append(partition, records)
            finally:
                for _ in items:
                    self._queue.task_done()

    async def _append(self, partition: int, records: list[tuple[bytes, bytes]]) -> None:
        plog = self._logs.partition(GROUP_EVENTS_TOPIC, partition)
        if self._may_append is not None and not self._may_append(partition):
            # Another node leads this partition now (the timeline is observability: counted, not retried).
            self.stats.dropped += len(records)
            return
        if plog is None or plog.closed:
            self.stats.failed += len(records)
            log.warning("%s-%d is gone; %d events lost", GROUP_EVENTS_TOPIC, partition, len(records))
            return
        gate = self._gates.get(partition)
        if gate is None:
            gate = self._gates[partition] = self._gate_for(plog)
        now = self._clock.now_ms()
        data = build_batch(
            [BatchRecord(offset=i, timestamp=now, key=k, value=v) for i, (k, v) in enumerate(records)]
        )
        turn = gate.reserve()
        if not turn.done():
            await gate.wait(turn)
        try:
            if plog.closed:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the partition was closed")
            plog.append(data, now_ms=now, validate=False)
        except (KafkaError, OSError) as exc:
            self.stats.failed += len(records)
            log.warning(
                "Appending %d events to %s-%d failed: %s", len(records), GROUP_EVENTS_TOPIC, partition, exc
            )
            return
        finally:
            gate.release()
        self.stats.written += len(records)
        if plog.needs_flush(now):
            gate.request_flush().add_done_callback(_flushed)

    # -------------------------------------------------------------------------------- replay

    async def _replay_all(self, ends: dict[int, int]) -> None:
        started = asyncio.get_running_loop().time()
        for partition, end in ends.items():
            try:
                await self._replay_partition(partition, end)
            except (KafkaError, OSError, DecodeError) as exc:
                log.warning("Replaying %s-%d stopped: %s", GROUP_EVENTS_TOPIC, partition, exc)
        log.info(
            "Replayed %d events of %s (%d skipped) in %.3f s",
            self.stats.replayed,
            GROUP_EVENTS_TOPIC,
            self.stats.skipped,
            asyncio.get_running_loop().time() - started,
        )

    async def _replay_partition(self, partition: int, end: int, *, to_log_end: bool = False) -> None:
        plog = self._logs.partition(GROUP_EVENTS_TOPIC, partition)
        if plog is None:
            return
        offset = plog.log_start_offset
        while offset < end and not plog.closed:
            try:
                data = plog.read(offset, 1 << 20, to_log_end=to_log_end).data
            except KafkaError as exc:
                if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                offset = plog.log_start_offset  # retention moved the start meanwhile
                continue
            if not data:
                break
            for batch in decode_batches(data, check_crc=False):
                if batch.next_offset <= offset or batch.is_control:
                    offset = max(offset, batch.next_offset)
                    continue
                for rec in batch.records:
                    if not offset <= rec.offset < end:
                        continue
                    try:
                        event = decode_event(rec.key, rec.value)
                    except EventFormatError as exc:
                        self.stats.skipped += 1
                        log.debug("Skipping %s-%d@%d: %s", GROUP_EVENTS_TOPIC, partition, rec.offset, exc)
                        continue
                    if event is None or rec.value is None:  # (decode_event refuses a record without a value)
                        self.stats.skipped += 1
                        continue
                    self.stats.replayed += 1
                    self._remember(event["group_id"], rec.value, replayed=True)
                offset = batch.next_offset
            await asyncio.sleep(0)


def _flushed(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("Flushing %s failed: %s", GROUP_EVENTS_TOPIC, fut.exception())
