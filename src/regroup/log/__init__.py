"""Durable, segmented partition logs: the broker's storage (imports only ``regroup.protocol`` and the stdlib).

API summary (names are stable; the broker builds Produce/Fetch/ListOffsets/CreateTopics on them)::

    defaults = LogDefaults.from_properties({"log.segment.bytes": "1073741824", ...})  # Kafka broker names
    logs = LogManager(data_dir: Path, defaults)
    stats = logs.load()                                   # LoadStats(partitions, bytes, seconds, ...)
    info = logs.create_topic(name, partitions, configs, *, internal=False,
                             validate_only=False, topic_id=None)            -> TopicInfo
    logs.delete_topic(name) -> TopicInfo;  logs.topics(); logs.topic(name); logs.topic_by_id(uuid)
    logs.alter_topic_configs(name, configs) -> TopicInfo;  logs.create_partitions(name, total) -> TopicInfo
    log = logs.partition(topic, index)                    # PartitionLog | None
    logs.run_retention(now_ms); logs.run_compaction(now_ms); logs.flush_all(); logs.close()

    TopicInfo: name, topic_id (uuid.UUID), partitions, internal, overrides, log_config (LogConfig),
               config(name) -> str | None (effective value), effective_configs() -> dict[str, str]

    PartitionLog:
        log_start_offset, log_end_offset, high_watermark, last_stable_offset   (HW = LSO = LEO)
        append(data, *, now_ms, timestamp_type_config=None, max_message_bytes=None, validate=True)
            -> AppendInfo(base_offset, last_offset, log_append_time, log_start_offset, record_count,
                          duplicate)                      # raises KafkaError(code, message)
        read(offset, max_bytes, *, isolation_committed=False)
            -> ReadResult(data, high_watermark, log_start_offset, last_stable_offset)
        offset_for_timestamp(ts) -> (offset, timestamp) | None;  earliest(); latest();
        max_timestamp() -> (offset, timestamp) | None
        apply_retention(now_ms); delete_records_before(offset); compact(now_ms)
        append_listeners: list[Callable[[], None]]        # called after every successful append
        needs_flush(now_ms) -> bool; flush()              # flush() may run in a worker thread
        close()

Thread model: everything runs on one thread (the event loop) except ``flush()``, which may run in a worker
thread as long as no append, roll, retention, compaction or close of the same partition runs meanwhile;
reads may run concurrently with it.
"""
