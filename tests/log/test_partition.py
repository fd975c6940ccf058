"""PartitionLog: appends, reads, validation, rolls, timestamp lookups, retention, flushing."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from regroup.log.config import LogConfig
from regroup.log.partition import PartitionLog
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.record_batch import (
    LOG_APPEND_TIME,
    Record,
    build_batch,
    decode_batches,
    end_txn_marker,
)

from .helpers import batch, open_log, read_all, small_config


def test_append_assigns_contiguous_offsets_across_rolls(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    infos = [plog.append(batch(3, value_size=100, tag=i), now_ms=10) for i in range(40)]
    assert [i.base_offset for i in infos] == list(range(0, 120, 3))
    assert [i.last_offset for i in infos] == list(range(2, 120, 3))
    assert all(i.record_count == 3 and not i.duplicate and i.log_append_time == -1 for i in infos)
    assert plog.segment_count > 3
    assert plog.log_end_offset == plog.high_watermark == plog.last_stable_offset == 120
    records = read_all(plog)
    assert [r.offset for r in records] == list(range(120))
    assert records[5].value == bytes([(1 + 2) % 256]) * 100  # batch 1, record 2
    # segment files are named by their base offsets and hold whole batches
    bases = plog.segment_bases()
    assert bases[0] == 0
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [f"{b:020d}.log" for b in bases]
    plog.close()


def test_stored_bytes_are_the_appended_batch_with_its_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(batch(2), now_ms=0)
    data = batch(4, tag=7)
    plog.append(data, now_ms=0)
    got = plog.read(2, 1 << 20).data
    assert got[8:12] == data[8:12]  # length
    assert got[:8] == struct.pack(">q", 2)  # base offset rewritten in place
    assert got[12:16] == struct.pack(">i", 0)  # leader epoch stamped
    assert got[16:] == data[16:]  # CRC-covered part untouched
    plog.close()


def test_read_returns_whole_batches_and_at_least_one(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    sizes = []
    for i in range(10):
        b = batch(2, value_size=50, tag=i)
        sizes.append(len(b))
        plog.append(b, now_ms=0)
    # max_bytes smaller than one batch still returns that batch
    one = plog.read(0, 1)
    assert len(one.data) == sizes[0]
    # a middle offset returns the batch holding it
    mid = plog.read(5, sizes[0] * 2 + 10)
    assert [b.base_offset for b in decode_batches(mid.data)] == [4, 6]
    # never a partial batch
    res = plog.read(0, sizes[0] * 3 - 1)
    assert len(res.data) == sizes[0] * 2
    # reading at the log end is empty, beyond it or below the start is out of range
    end = plog.read(20, 100)
    assert end.data == b""
    assert (end.high_watermark, end.log_start_offset, end.last_stable_offset) == (20, 0, 20)
    for bad in (21, -1):
        with pytest.raises(KafkaError) as exc:
            plog.read(bad, 100)
        assert exc.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    plog.close()


def test_a_read_stays_within_one_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(30):
        plog.append(batch(1, value_size=300, tag=i), now_ms=0)
    first_roll = plog.segment_bases()[1]
    res = plog.read(0, 1 << 20)
    assert decode_batches(res.data)[-1].next_offset == first_roll
    res = plog.read(first_roll, 1 << 20)
    assert decode_batches(res.data)[0].base_offset == first_roll
    plog.close()


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda b: b[:16] + b"\x01" + b[17:], ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (lambda b: b[:16] + b"\x07" + b[17:], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), ErrorCode.CORRUPT_MESSAGE),  # CRC mismatch
        (lambda b: b[:-3], ErrorCode.CORRUPT_MESSAGE),  # truncated
        (lambda b: b"", ErrorCode.INVALID_RECORD),
        (lambda b: b + b"\x00" * 5, ErrorCode.CORRUPT_MESSAGE),  # trailing garbage
    ],
)
def test_append_rejects_malformed_data(tmp_path: Path, mutate: object, code: ErrorCode) -> None:
    plog = open_log(tmp_path / "t-0")
    assert callable(mutate)
    with pytest.raises(KafkaError) as exc:
        plog.append(mutate(batch(3)), now_ms=0)
    assert exc.value.code is code
    assert plog.log_end_offset == 0
    assert plog.size_bytes == 0
    plog.close()


def test_append_rejects_inconsistent_counts_control_batches_and_oversize(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20))
    recs = [Record(i, 5, None, b"x", []) for i in range(3)]
    with pytest.raises(KafkaError) as exc:
        plog.append(build_batch(recs, last_offset_delta=5), now_ms=0)
    assert exc.value.code is ErrorCode.INVALID_RECORD
    marker = build_batch(
        [end_txn_marker(True, 0, timestamp=5)],
        is_control=True,
        is_transactional=True,
        producer_id=1,
        producer_epoch=0,
    )
    with pytest.raises(KafkaError) as exc:
        plog.append(marker, now_ms=0)
    assert exc.value.code is ErrorCode.INVALID_RECORD
    big = batch(1, value_size=5_000)
    with pytest.raises(KafkaError) as exc:
        plog.append(big, now_ms=0, max_message_bytes=1_000)
    assert exc.value.code is ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as exc:
        plog.append(batch(1, ts=10_000_000), now_ms=0)
    assert exc.value.code is ErrorCode.INVALID_TIMESTAMP
    # the broker's own writes skip validation (but still must be well-formed batches)
    plog.append(big, now_ms=0, max_message_bytes=1_000, validate=False)
    assert plog.log_end_offset == 1
    plog.close()


def test_append_larger_than_a_segment_is_record_list_too_large(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(segment_bytes=500))
    with pytest.raises(KafkaError) as exc:
        plog.append(batch(1, value_size=600), now_ms=0)
    assert exc.value.code is ErrorCode.RECORD_LIST_TOO_LARGE
    plog.close()


def test_several_batches_in_one_append(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    info = plog.append(batch(2) + batch(3, tag=1) + batch(1, tag=2), now_ms=0)
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert [b.base_offset for b in decode_batches(plog.read(0, 1 << 20).data)] == [0, 2, 5]
    plog.close()


@pytest.mark.parametrize("leader_epoch", [None, 5])
def test_the_brokers_own_batches_are_stored_as_checked_ones(tmp_path: Path, leader_epoch: int | None) -> None:
    # A single batch without a producer, appended unchecked (the group coordinator's writes), takes a
    # shorter path than checked appends; both must leave the same log, offsets, indexes and answers.
    logs = [open_log(tmp_path / f"t-{i}", small_config(segment_bytes=4096)) for i in range(2)]
    for plog in logs:
        plog.leader_epoch = leader_epoch
    infos: list[list[object]] = [[], []]
    for i in range(60):
        data = batch(1 + i % 4, ts=10 + i, value_size=60, tag=i)
        for n, plog in enumerate(logs):
            infos[n].append(plog.append(data, now_ms=10 + i, validate=n == 0))
    assert infos[0] == infos[1]
    checked, unchecked = logs
    assert unchecked.segment_bases() == checked.segment_bases()
    assert unchecked.read(0, 1 << 20).data == checked.read(0, 1 << 20).data
    assert unchecked.log_end_offset == checked.log_end_offset
    assert unchecked.unflushed_messages == checked.unflushed_messages
    for ts in (0, 25, 40, 80):
        assert unchecked.offset_for_timestamp(ts) == checked.offset_for_timestamp(ts)
    with pytest.raises(KafkaError) as too_large:
        open_log(tmp_path / "t-2", small_config(segment_bytes=100)).append(
            batch(3, value_size=100), now_ms=0, validate=False
        )
    assert too_large.value.code is ErrorCode.RECORD_LIST_TOO_LARGE
    for plog in logs:
        plog.close()


def test_log_append_time(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    info = plog.append(batch(3, ts=5), now_ms=777)
    assert info.log_append_time == 777
    (b,) = decode_batches(plog.read(0, 1000).data)  # decoding verifies the recomputed CRC
    assert b.timestamp_type == LOG_APPEND_TIME
    assert b.max_timestamp == 777
    assert [r.timestamp for r in b.records] == [777, 777, 777]
    # the per-call override wins over the topic config
    info = plog.append(batch(1, ts=5), now_ms=800, timestamp_type_config="CreateTime")
    assert info.log_append_time == -1
    assert plog.offset_for_timestamp(778) is None
    assert plog.offset_for_timestamp(700) == (0, 777)
    plog.close()


def test_roll_by_time_uses_record_timestamps(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20, segment_ms=1_000))
    plog.append(batch(1, ts=10_000), now_ms=0)
    plog.append(batch(1, ts=10_500), now_ms=0)
    assert plog.segment_count == 1
    plog.append(batch(1, ts=11_001), now_ms=0)  # 1001 ms after the segment's first batch
    assert plog.segment_bases() == [0, 2]
    plog.close()


def test_roll_by_time_without_timestamps_uses_wall_clock(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20, segment_ms=1_000), now_ms=0)
    plog.append(batch(1, ts=-1), now_ms=100)
    plog.append(batch(1, ts=-1), now_ms=900)
    assert plog.segment_count == 1
    plog.append(batch(1, ts=-1), now_ms=1_001)
    assert plog.segment_count == 2
    plog.close()


def test_roll_when_the_index_is_full(tmp_path: Path) -> None:
    plog = open_log(
        tmp_path / "t-0", small_config(segment_bytes=1 << 20, index_interval_bytes=0, segment_index_bytes=32)
    )
    for i in range(12):
        plog.append(batch(1, tag=i), now_ms=0)
    assert plog.segment_count >= 2
    assert [r.offset for r in read_all(plog)] == list(range(12))
    plog.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    # timestamps 1000.., non-monotonic inside batches and across them
    for i in range(50):
        recs = [Record(j, 1_000 + 10 * i + (5 - j), None, b"v" * 40, []) for j in range(3)]
        plog.append(build_batch(recs), now_ms=0)
    assert plog.segment_count > 2
    assert plog.offset_for_timestamp(0) == (0, 1_005)
    assert plog.offset_for_timestamp(1_004) == (0, 1_005)
    # batch i=10 holds timestamps 1105, 1104, 1103 at offsets 30..32
    assert plog.offset_for_timestamp(1_104) == (30, 1_105)
    assert plog.offset_for_timestamp(1_105) == (30, 1_105)
    assert plog.offset_for_timestamp(1_106) == (33, 1_115)
    assert plog.offset_for_timestamp(10_000) is None
    assert plog.max_timestamp() == (147, 1_495)
    assert (plog.earliest(), plog.latest()) == (0, 150)
    plog.close()
    reopened = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert reopened.offset_for_timestamp(1_104) == (30, 1_105)
    assert reopened.max_timestamp() == (147, 1_495)
    reopened.close()


def test_max_timestamp_of_empty_log(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    assert plog.max_timestamp() is None
    assert plog.offset_for_timestamp(0) is None
    plog.close()


def test_retention_by_time_deletes_old_closed_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(retention_ms=10_000))
    for i in range(30):
        plog.append(batch(1, ts=1_000 * i, value_size=300), now_ms=0)
    bases = plog.segment_bases()
    assert len(bases) > 3
    assert plog.apply_retention(now_ms=5_000) == 0
    deleted = plog.apply_retention(now_ms=25_000)
    assert deleted > 0
    assert plog.log_start_offset == plog.segment_bases()[0] == bases[deleted]
    first = read_all(plog)[0]
    assert first.timestamp >= 25_000 - 10_000 - 5_000  # whole segments go, so some older data may stay
    # the active segment is never deleted, even when everything is expired
    plog.apply_retention(now_ms=10**9)
    assert plog.segment_count == 1
    assert plog.log_start_offset == plog.segment_bases()[0]
    with pytest.raises(KafkaError) as exc:
        plog.read(0, 100)
    assert exc.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    plog.close()


def test_retention_by_size(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(retention_bytes=3_000))
    for i in range(40):
        plog.append(batch(1, value_size=300, tag=i), now_ms=0)
    plog.apply_retention(now_ms=0)
    assert plog.size_bytes <= 3_000 + 2_000  # within one segment of the target
    assert plog.size_bytes > 3_000 - 2_000
    assert [r.offset for r in read_all(plog)] == list(range(plog.log_start_offset, 40))
    plog.close()


def test_compact_only_topics_are_not_retained_by_time(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(retention_ms=1, cleanup_policy=frozenset({"compact"})))
    for i in range(20):
        plog.append(batch(1, value_size=300, tag=i, key=b"k%d" % i), now_ms=0)
    assert plog.apply_retention(now_ms=10**9) == 0
    plog.close()


def test_delete_records_before(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(30):
        plog.append(batch(1, value_size=300, tag=i), now_ms=0)
    assert plog.delete_records_before(17) == 17
    assert plog.log_start_offset == 17
    assert plog.segment_bases()[0] <= 17
    assert read_all(plog)[0].offset == 17
    with pytest.raises(KafkaError):
        plog.read(16, 100)
    with pytest.raises(KafkaError) as exc:
        plog.delete_records_before(31)
    assert exc.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert plog.delete_records_before(-1) == 30
    assert plog.segment_count == 1
    plog.close()


def test_append_listeners_fire_after_each_append(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    seen: list[int] = []
    plog.append_listeners.append(lambda: seen.append(plog.log_end_offset))

    def broken() -> None:
        raise RuntimeError("listener bug")

    plog.append_listeners.append(broken)
    plog.append(batch(2), now_ms=0)
    plog.append(batch(1), now_ms=0)
    with pytest.raises(KafkaError):
        plog.append(b"junk", now_ms=0)
    assert seen == [2, 3]
    plog.close()


def test_flush_policy_and_recovery_point(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", small_config(flush_messages=5, flush_ms=1_000, segment_bytes=1 << 20))
    assert not plog.needs_flush(0)
    plog.append(batch(2), now_ms=100)
    assert not plog.needs_flush(200)
    assert plog.needs_flush(1_100)  # flush.ms since the first unflushed append
    plog.append(batch(3), now_ms=150)
    assert plog.unflushed_messages == 5
    assert plog.needs_flush(150)  # flush.messages
    assert plog.recovery_point == 0
    plog.flush(now_ms=160)
    assert not plog.needs_flush(1_000)
    assert plog.recovery_point == 5
    assert plog.unflushed_messages == 0
    plog.close()


def test_a_roll_makes_a_flush_due(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(10):
        plog.append(batch(1, value_size=300, tag=i), now_ms=0)
    assert plog.segment_count > 1
    assert plog.needs_flush(0)
    plog.flush()
    assert not plog.needs_flush(0)
    assert plog.recovery_point == 10
    plog.close()


def test_flush_from_a_worker_thread(tmp_path: Path) -> None:
    import threading

    plog = open_log(tmp_path / "t-0")
    for i in range(10):
        plog.append(batch(1, value_size=300, tag=i), now_ms=0)
    t = threading.Thread(target=plog.flush)
    t.start()
    while t.is_alive():
        assert read_all(plog)[0].offset == 0  # reads may overlap a flush
        t.join(0.001)
    assert plog.recovery_point == 10
    plog.close()


def test_closed_log_refuses_appends(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.close()
    with pytest.raises(KafkaError) as exc:
        plog.append(batch(1), now_ms=0)
    assert exc.value.code is ErrorCode.KAFKA_STORAGE_ERROR


def test_clean_reopen_keeps_everything_and_indexes(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(40):
        plog.append(batch(2, value_size=100, tag=i), now_ms=0)
    plog.close()
    index = tmp_path / "t-0" / "00000000000000000000.index"
    assert index.stat().st_size > 0
    assert index.stat().st_size % 8 == 0
    reopened = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert reopened.recovered_segments == 0
    assert reopened.log_end_offset == 80
    assert [r.offset for r in read_all(reopened)] == list(range(80))
    reopened.append(batch(1), now_ms=0)
    assert reopened.log_end_offset == 81
    reopened.close()


def test_open_creates_first_segment_at_log_start(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), log_start_offset=42)
    assert (plog.log_start_offset, plog.log_end_offset) == (42, 42)
    assert plog.append(batch(1), now_ms=0).base_offset == 42
    plog.close()
    assert os.path.exists(tmp_path / "t-0" / f"{42:020d}.log")


def test_flush_syncs_the_log_its_indexes_and_the_directory(tmp_path: Path, fsyncs: list[str]) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(10):
        plog.append(batch(1, value_size=300, tag=i), now_ms=0)
    fsyncs.clear()
    plog.flush()
    names = {Path(p).name for p in fsyncs}
    bases = plog.segment_bases()
    assert {f"{b:020d}.log" for b in bases} <= names  # rolled segments and the active one
    assert f"{bases[0]:020d}.index.tmp" in names or f"{bases[0]:020d}.index" in names
    assert "t-0" in names  # new segment files made durable in the directory
    fsyncs.clear()
    plog.flush()
    assert not [n for n in fsyncs if n.endswith(".log")]  # nothing new to sync
    plog.close()
