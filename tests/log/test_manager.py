"""LogManager: topic registry, validation, reload with ids and configs, deletion, checkpoints, defaults."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from regroup.log import LogDefaults, LogManager, topic_id_to_str
from regroup.log.config import LONG_MAX
from regroup.log.manager import CLEAN_SHUTDOWN_FILE, TOPICS_FILE
from regroup.protocol.errors import ErrorCode, KafkaError

from .helpers import batch, read_all

SMALL = LogDefaults(segment_bytes=2_000, index_interval_bytes=100)


def manager(path: Path, defaults: LogDefaults = SMALL) -> LogManager:
    m = LogManager(path, defaults)
    m.load()
    return m


def kafka_error(fn: object, *args: object, **kwargs: object) -> KafkaError:
    assert callable(fn)
    with pytest.raises(KafkaError) as exc:
        fn(*args, **kwargs)
    return exc.value


def test_create_reload_preserves_ids_configs_and_data(tmp_path: Path) -> None:
    m = manager(tmp_path)
    info = m.create_topic("orders", 3, {"retention.ms": "1000", "cleanup.policy": "compact,delete"})
    assert info.partitions == 3
    assert not info.internal
    assert info.config("retention.ms") == "1000"
    assert info.is_override("retention.ms")
    assert info.config("segment.bytes") == "2000"
    assert not info.is_override("segment.bytes")
    assert info.config("max.message.bytes") == "1048588"
    assert info.config("no.such.config") is None
    assert info.log_config.retention_ms == 1000
    assert info.log_config.compact
    assert info.log_config.delete
    offsets = m.create_topic("__consumer_offsets", 2, {"cleanup.policy": "compact"}, internal=True)
    for p in range(3):
        plog = m.partition("orders", p)
        assert plog is not None
        for i in range(p + 2):
            plog.append(batch(1, tag=i), now_ms=0)
    meta = (tmp_path / "orders-1" / "partition.metadata").read_text()
    assert meta == f"version: 0\ntopic_id: {topic_id_to_str(info.topic_id)}\n"
    m.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    again = manager(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert {t.name for t in again.topics()} == {"orders", "__consumer_offsets"}
    reloaded = again.topic("orders")
    assert reloaded is not None
    assert reloaded.topic_id == info.topic_id
    assert reloaded.overrides == info.overrides
    assert again.topic_by_id(offsets.topic_id) is not None
    internal = again.topic("__consumer_offsets")
    assert internal is not None
    assert internal.internal
    for p in range(3):
        plog = again.partition("orders", p)
        assert plog is not None
        assert plog.log_end_offset == p + 2
    assert again.partition("orders", 3) is None
    assert again.partition("nope", 0) is None
    again.close()


def test_load_reports_stats_and_recovers_after_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    m = manager(tmp_path)
    m.create_topic("t", 2)
    for p in range(2):
        plog = m.partition("t", p)
        assert plog is not None
        for i in range(20):
            plog.append(batch(2, value_size=100, tag=i), now_ms=0)
    m.flush_all()
    plog = m.partition("t", 0)
    assert plog is not None
    plog.append(batch(2, value_size=100), now_ms=0)
    # crash: no close; tear the tail of partition 0
    for _, _, pl in m.partitions():
        pl.close_handles()
    last = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    last.write_bytes(last.read_bytes()[:-7])
    caplog.set_level(logging.WARNING, logger="regroup.log")
    again = LogManager(tmp_path, SMALL)
    stats = again.load()
    assert not stats.clean_shutdown
    assert stats.partitions == 2
    assert stats.truncated_bytes > 0
    assert stats.recovered_segments == 2  # only the segments past the recovery points
    assert stats.bytes > 0
    assert stats.seconds >= 0
    assert stats.segments > 2
    plog = again.partition("t", 0)
    assert plog is not None
    assert plog.log_end_offset == 40
    assert any("truncated" in r.getMessage() for r in caplog.records)
    again.close()


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "can't be empty"),
        (".", 'cannot be "." or ".."'),
        ("..", 'cannot be "." or ".."'),
        ("a" * 250, "can't be longer than 249 characters"),
        ("bad name", "contains a character other than ASCII alphanumerics"),
        ("ünïcode", "contains a character other than ASCII alphanumerics"),
    ],
)
def test_invalid_topic_names(tmp_path: Path, name: str, fragment: str) -> None:
    m = manager(tmp_path)
    err = kafka_error(m.create_topic, name, 1)
    assert err.code is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert fragment in err.message
    m.close()


def test_create_topic_errors(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("a.b", 1)
    m.create_topic("x" * 249, 1)  # the longest legal name still fits a directory name
    assert kafka_error(m.create_topic, "a.b", 1).code is ErrorCode.TOPIC_ALREADY_EXISTS
    collision = kafka_error(m.create_topic, "a_b", 1)
    assert collision.code is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides" in collision.message
    assert kafka_error(m.create_topic, "p", 0).code is ErrorCode.INVALID_PARTITIONS
    assert kafka_error(m.create_topic, "p", -5).code is ErrorCode.INVALID_PARTITIONS
    unknown = kafka_error(m.create_topic, "c", 1, {"no.such": "1"})
    assert unknown.code is ErrorCode.INVALID_CONFIG
    assert unknown.message == "Unknown topic config name: no.such"
    bad = kafka_error(m.create_topic, "c", 1, {"retention.ms": "soon"})
    assert bad.message == "Invalid value soon for configuration retention.ms: Not a number of type LONG"
    small = kafka_error(m.create_topic, "c", 1, {"segment.bytes": "1000"})
    assert (
        small.message == "Invalid value 1000 for configuration segment.bytes: Value must be at least 1048576"
    )
    policy = kafka_error(m.create_topic, "c", 1, {"cleanup.policy": "shred"})
    assert policy.code is ErrorCode.INVALID_CONFIG
    ratio = kafka_error(m.create_topic, "c", 1, {"min.cleanable.dirty.ratio": "1.5"})
    assert "no more than 1" in ratio.message
    assert m.topic("c") is None
    assert not (tmp_path / "c-0").exists()
    # -1 partitions means num.partitions; validate_only creates nothing
    info = m.create_topic("d", -1, {"min.insync.replicas": "1"}, validate_only=True)
    assert info.partitions == 1
    assert m.topic("d") is None
    assert not (tmp_path / "d-0").exists()
    # Kafka's test-only override allows tiny segments
    tiny = m.create_topic("tiny", 1, {"internal.segment.bytes": "500"})
    assert tiny.log_config.segment_bytes == 500
    m.close()


def test_delete_topic_renames_then_removes(tmp_path: Path) -> None:
    m = manager(tmp_path)
    info = m.create_topic("gone", 2)
    plog = m.partition("gone", 0)
    assert plog is not None
    plog.append(batch(3), now_ms=0)
    assert m.delete_topic("gone") == info
    assert m.topic("gone") is None
    assert m.topic_by_id(info.topic_id) is None
    assert not list(tmp_path.glob("gone-*"))
    assert kafka_error(m.delete_topic, "gone").code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # a new topic of the same name starts empty with a new id
    fresh = m.create_topic("gone", 1)
    assert fresh.topic_id != info.topic_id
    plog = m.partition("gone", 0)
    assert plog is not None
    assert plog.log_end_offset == 0
    m.close()
    again = manager(tmp_path)
    reloaded = again.topic("gone")
    assert reloaded is not None
    assert reloaded.topic_id == fresh.topic_id
    assert reloaded.partitions == 1
    again.close()


def test_directories_of_deleted_or_unknown_topics_are_cleaned_at_load(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("keep", 1)
    m.create_topic("drop", 1)
    m.close()
    # a crash after the registry no longer lists "drop" but before its directory was renamed
    doc = json.loads((tmp_path / TOPICS_FILE).read_text())
    doc["topics"] = [t for t in doc["topics"] if t["name"] != "drop"]
    (tmp_path / TOPICS_FILE).write_text(json.dumps(doc))
    (tmp_path / "old-0.0123abcd-delete").mkdir()
    (tmp_path / "not-a-partition").mkdir()
    again = manager(tmp_path)
    assert not (tmp_path / "drop-0").exists()
    assert not (tmp_path / "old-0.0123abcd-delete").exists()
    assert (tmp_path / "not-a-partition").exists()
    assert [t.name for t in again.topics()] == ["keep"]
    again.close()


def test_registry_rebuilt_from_partition_directories(tmp_path: Path) -> None:
    m = manager(tmp_path)
    info = m.create_topic("t", 2, {"retention.ms": "5"})
    m.close()
    (tmp_path / TOPICS_FILE).write_text("{not json")
    again = manager(tmp_path)
    reloaded = again.topic("t")
    assert reloaded is not None
    assert reloaded.topic_id == info.topic_id
    assert reloaded.partitions == 2
    again.close()


def test_alter_configs_and_create_partitions(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.create_topic("t", 1, {"retention.ms": "100"})
    info = m.alter_topic_configs("t", {"retention.bytes": "10"})
    assert info.config("retention.ms") == str(SMALL.retention_ms)
    assert info.config("retention.bytes") == "10"
    plog = m.partition("t", 0)
    assert plog is not None
    assert plog.config.retention_bytes == 10
    assert kafka_error(m.alter_topic_configs, "t", {"retention.bytes": "x"}).code is ErrorCode.INVALID_CONFIG
    assert m.create_partitions("t", 3).partitions == 3
    assert m.partition("t", 2) is not None
    assert kafka_error(m.create_partitions, "t", 2).code is ErrorCode.INVALID_PARTITIONS
    assert kafka_error(m.create_partitions, "t", 3).code is ErrorCode.INVALID_PARTITIONS
    m.close()
    again = manager(tmp_path)
    t = again.topic("t")
    assert t is not None
    assert t.partitions == 3
    assert t.overrides == {"retention.bytes": "10"}
    again.close()


def test_retention_compaction_and_checkpoints(tmp_path: Path) -> None:
    m = manager(tmp_path, LogDefaults(segment_bytes=1_000, index_interval_bytes=100, retention_ms=1_000))
    m.create_topic("logs", 1)
    m.create_topic("state", 1, {"cleanup.policy": "compact"})
    logs = m.partition("logs", 0)
    state = m.partition("state", 0)
    assert logs is not None
    assert state is not None
    for i in range(20):
        logs.append(batch(1, ts=i, value_size=200, tag=i), now_ms=0)
        state.append(batch(1, ts=i, value_size=200, key=b"k%d" % (i % 2), tag=i), now_ms=0)
    assert m.run_retention(now_ms=100_000) > 0
    assert m.run_compaction(now_ms=100_000) == 1
    start = logs.log_start_offset
    assert start > 0
    assert len(read_all(state)) < 20
    logs.delete_records_before(start + 1)
    m.close()
    checkpoint = (tmp_path / "log-start-offset-checkpoint").read_text().splitlines()
    assert checkpoint[:2] == ["0", "2"]
    assert f"logs 0 {start + 1}" in checkpoint
    assert "state 0" in (tmp_path / "cleaner-offset-checkpoint").read_text()
    again = manager(tmp_path)
    reopened = again.partition("logs", 0)
    assert reopened is not None
    assert reopened.log_start_offset == start + 1
    again.close()


def test_flush_due_and_flush_all(tmp_path: Path) -> None:
    m = manager(tmp_path, LogDefaults(flush_messages=2))
    m.create_topic("t", 1)
    plog = m.partition("t", 0)
    assert plog is not None
    plog.append(batch(1), now_ms=0)
    assert m.flush_due(0) == []
    plog.append(batch(1), now_ms=0)
    assert m.flush_due(0) == [plog]
    m.flush_all()
    assert m.flush_due(0) == []
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text().splitlines()[2] == "t 0 2"
    m.close()
    with pytest.raises(KafkaError):
        m.create_topic("late", 1)


def test_topic_id_injection_and_format(tmp_path: Path) -> None:
    m = manager(tmp_path)
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    info = m.create_topic("t", 1, topic_id=tid)
    assert info.topic_id_str == "EjRWeBI0VngSNFZ4EjRWeA"
    assert kafka_error(m.create_topic, "u", 1, topic_id=tid).code is ErrorCode.TOPIC_ALREADY_EXISTS
    m.close()


def test_defaults_from_broker_properties() -> None:
    d = LogDefaults.from_properties({})
    assert d == LogDefaults()
    assert d.topic_defaults()["retention.ms"] == "604800000"
    assert d.topic_defaults()["flush.ms"] == str(LONG_MAX)
    d = LogDefaults.from_properties(
        {
            "log.retention.hours": "1",
            "log.roll.hours": "2",
            "log.segment.bytes": "2097152",
            "log.cleanup.policy": "compact",
            "message.max.bytes": "5000",
            "log.flush.interval.messages": "10",
            "log.flush.interval.ms": "250",
            "log.message.timestamp.type": "LogAppendTime",
            "num.partitions": "4",
            "min.insync.replicas": "2",
        }
    )
    assert (d.retention_ms, d.segment_ms, d.segment_bytes) == (3_600_000, 7_200_000, 2_097_152)
    assert d.cleanup_policy == ("compact",)
    assert d.max_message_bytes == 5000
    assert d.num_partitions == 4
    assert (d.flush_messages, d.flush_ms, d.message_timestamp_type) == (10, 250, "LogAppendTime")
    assert d.topic_defaults()["min.insync.replicas"] == "2"
    cfg = d.log_config({"retention.ms": "-1"})
    assert cfg.retention_ms == -1
    assert cfg.flush_ms == 250
    assert not cfg.delete
    assert (
        LogDefaults.from_properties({"log.retention.ms": "5", "log.retention.hours": "9"}).retention_ms == 5
    )
    assert LogDefaults.from_properties({"log.retention.minutes": "2"}).retention_ms == 120_000
    for bad in ({"log.segment.bytes": "100"}, {"log.retention.ms": "x"}, {"log.cleanup.policy": "nope"}):
        with pytest.raises(ValueError, match="Invalid value"):
            LogDefaults.from_properties(bad)


def test_topics_cannot_change_before_load(tmp_path: Path) -> None:
    m = LogManager(tmp_path, SMALL)
    with pytest.raises(RuntimeError, match="load"):
        m.create_topic("t", 1)
    m.load()
    with pytest.raises(RuntimeError, match="already"):
        m.load()
    m.close()
