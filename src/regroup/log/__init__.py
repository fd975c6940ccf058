"""Durable, segmented partition logs: the broker's storage (imports only ``regroup.protocol`` and the stdlib).

API summary (names are stable; the broker builds Produce/Fetch/ListOffsets/CreateTopics on them)::

    defaults = LogDefaults.from_properties(props)        # Kafka broker names: log.segment.bytes, ...
    logs = LogManager(data_dir: Path, defaults)
    stats = logs.load(now_ms=None) -> LogRecoverySummary   # partitions, segments, bytes, seconds,
                                                  # recovered_segments, truncated_bytes, clean_shutdown
    logs.create_topic(name, partitions=-1, configs=None, *, internal=False, validate_only=False,
                      topic_id=None, now_ms=None) -> TopicInfo
    logs.delete_topic(name) -> TopicInfo
    logs.alter_topic_configs(name, configs) -> TopicInfo  # replaces the overrides
    logs.create_partitions(name, total, *, now_ms=None) -> TopicInfo
    logs.topics() -> list[TopicInfo]; logs.topic(name); logs.topic_by_id(uuid) -> TopicInfo | None
    logs.topics_version -> int                          # bumped when topics are added, deleted or grow
    logs.partition(topic, index) -> PartitionLog | None;  logs.partitions() -> iter of (topic, index, log)
    logs.run_retention(now_ms) -> int; logs.run_compaction(now_ms) -> int
    logs.flush_due(now_ms) -> list[PartitionLog]; logs.flush_all(); logs.checkpoint(); logs.close()

    TopicInfo: name, topic_id (uuid.UUID), topic_id_str, partitions, internal, overrides, log_config,
               config(name) -> str | None (effective value), is_override(name), effective_configs()

    PartitionLog:
        log_start_offset, log_end_offset, high_watermark, last_stable_offset   (HW = LSO = LEO)
        append(data, *, now_ms, timestamp_type_config=None, max_message_bytes=None, validate=True)
            -> AppendInfo(base_offset, last_offset, log_append_time, log_start_offset, record_count,
                          duplicate)                      # raises KafkaError(code, message)
        read(offset, max_bytes, *, isolation_committed=False)
            -> ReadResult(data, high_watermark, log_start_offset, last_stable_offset)
        offset_for_timestamp(ts) -> (offset, timestamp) | None; earliest(); latest()
        max_timestamp() -> (offset, timestamp) | None     # ListOffsets -3
        apply_retention(now_ms) -> int; delete_records_before(offset) -> int (new log start)
        compact(now_ms, *, force=False) -> CompactionStats | None
        plan_compaction(now_ms, *, force=False) -> CompactionPlan | None   # plan.prepare() in a thread, then
        finish_compaction(plan, prepared) -> CompactionStats | None        # (None: the log changed meanwhile)
        append_listeners: list[Callable[[], None]]        # called after every successful append
        leader_epoch: int | None = 0                      # stamped on appended batches
        needs_flush(now_ms) -> bool; flush(now_ms=None); recovery_point; close()
        producer_entries() -> {producer_id: ProducerEntry}; update_config(LogConfig); roll(now_ms)

Thread model: everything runs on one thread (the event loop) except ``PartitionLog.flush()``, which may run
in a worker thread as long as no append, roll, retention, compaction, DeleteRecords or close of the same
partition runs meanwhile; reads may overlap it. ``CompactionPlan.prepare()`` (a compaction pass's reading and
rewriting) may run in a worker thread too, beside appends, reads and flushes of its partition: it only reads
closed segments and writes new files, and :meth:`PartitionLog.finish_compaction` swaps them in on the loop.
"""

from regroup.log.config import FlushPolicy, LogConfig, LogDefaults, validate_topic_configs
from regroup.log.manager import (
    LogManager,
    LogRecoverySummary,
    TopicInfo,
    topic_id_to_str,
    validate_topic_name,
)
from regroup.log.partition import AppendInfo, CompactionPlan, CompactionStats, PartitionLog, ReadResult

__all__ = [
    "AppendInfo",
    "CompactionPlan",
    "CompactionStats",
    "FlushPolicy",
    "LogConfig",
    "LogDefaults",
    "LogManager",
    "LogRecoverySummary",
    "PartitionLog",
    "ReadResult",
    "TopicInfo",
    "topic_id_to_str",
    "validate_topic_configs",
    "validate_topic_name",
]
