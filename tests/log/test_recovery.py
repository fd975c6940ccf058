"""Recovery at open after an unclean shutdown: torn tails, bad CRCs, garbage, damaged indexes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from regroup.log.partition import PartitionLog
from regroup.log.segment import segment_name

from .helpers import batch, open_log, read_all, small_config

BATCH_SIZE = len(batch(2, value_size=100))


def crash(plog: PartitionLog) -> None:
    """Drop the log as a killed process would: no flush, no snapshot, no index files beyond what exists."""
    plog.close_handles()


def fill(directory: Path, batches: int, **config: object) -> PartitionLog:
    plog = open_log(directory, small_config(**config))
    for i in range(batches):
        plog.append(batch(2, value_size=100, tag=i), now_ms=0)
    return plog


def last_log(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "regroup.log"
    ]


@pytest.mark.parametrize(
    "damage",
    ["torn", "crc", "garbage", "zeros", "huge-length"],
)
def test_invalid_tail_is_truncated_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    d = tmp_path / "t-0"
    plog = fill(d, 10, segment_bytes=1 << 20)
    crash(plog)
    path = last_log(d)
    data = bytearray(path.read_bytes())
    assert len(data) == 10 * BATCH_SIZE
    keep_batches = 10
    if damage == "torn":  # cut the last batch in the middle
        del data[-BATCH_SIZE // 2 :]
        keep_batches = 9
    elif damage == "crc":  # flip a record byte of the 8th batch: it and everything after go
        data[7 * BATCH_SIZE + 70] ^= 0xFF
        keep_batches = 7
    elif damage == "garbage":
        data += os.urandom(300)
    elif damage == "zeros":  # a file extended by the filesystem but never written
        data += bytes(4096)
    elif damage == "huge-length":
        data += b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x00" * 60
    path.write_bytes(bytes(data))

    caplog.set_level(logging.WARNING, logger="regroup.log")
    reopened = open_log(d)
    (message,) = warnings_of(caplog)
    assert path.name in message
    assert f"byte position {keep_batches * BATCH_SIZE}" in message
    assert f"next offset {keep_batches * 2}" in message
    assert reopened.log_end_offset == keep_batches * 2
    assert path.stat().st_size == keep_batches * BATCH_SIZE
    info = reopened.append(batch(1), now_ms=0)
    assert info.base_offset == keep_batches * 2
    assert [r.offset for r in read_all(reopened)] == list(range(keep_batches * 2 + 1))
    reopened.close()


def test_clean_log_recovers_without_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = tmp_path / "t-0"
    crash(fill(d, 30))
    caplog.set_level(logging.WARNING, logger="regroup.log")
    reopened = open_log(d)
    assert warnings_of(caplog) == []
    assert reopened.recovered_segments == reopened.segment_count  # recovery point 0: everything checked
    assert reopened.log_end_offset == 60
    reopened.close()


def test_recovery_point_limits_the_segments_checked(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = fill(d, 30)
    plog.flush()
    rp = plog.recovery_point
    for i in range(3):
        plog.append(batch(2, value_size=100, tag=i), now_ms=0)
    crash(plog)
    reopened = open_log(d, recovery_point=rp)
    assert reopened.recovered_segments == 1
    assert reopened.log_end_offset == 66
    reopened.close()


def test_corruption_in_an_older_segment_drops_the_later_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "t-0"
    plog = fill(d, 30)
    bases = plog.segment_bases()
    crash(plog)
    second = d / (segment_name(bases[1]) + ".log")
    data = bytearray(second.read_bytes())
    data[BATCH_SIZE + 80] ^= 0x01  # second batch of the second segment
    second.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="regroup.log")
    reopened = open_log(d)
    assert reopened.log_end_offset == bases[1] + 2
    assert reopened.segment_bases() == bases[:2]
    assert any("follows a truncated segment" in m for m in warnings_of(caplog))
    assert reopened.append(batch(1), now_ms=0).base_offset == bases[1] + 2
    reopened.close()


def test_whole_file_of_garbage_opens_empty(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    (d / (segment_name(0) + ".log")).write_bytes(os.urandom(10_000))
    (d / (segment_name(0) + ".index")).write_bytes(os.urandom(77))
    (d / (segment_name(0) + ".timeindex")).write_bytes(os.urandom(36))
    plog = open_log(d)
    assert plog.log_end_offset == 0
    assert plog.append(batch(1), now_ms=0).base_offset == 0
    plog.close()


@pytest.mark.parametrize("index", [".index", ".timeindex"])
@pytest.mark.parametrize("how", ["missing", "garbage", "stale"])
def test_damaged_indexes_are_rebuilt_on_a_clean_open(tmp_path: Path, index: str, how: str) -> None:
    d = tmp_path / "t-0"
    plog = fill(d, 40, segment_bytes=1 << 20)
    plog.close()
    path = d / (segment_name(0) + index)
    expected = path.read_bytes()
    assert expected
    if how == "missing":
        path.unlink()
    elif how == "garbage":
        path.write_bytes(b"\xff" * (len(expected) + 3))
    else:  # entries pointing past the end of the log
        path.write_bytes(expected[: -len(expected) // 2] + b"\x7f\x00\x00\x00" * (len(expected) // 8 + 1))
    reopened = open_log(d, clean_shutdown=True)
    assert reopened.log_end_offset == 80
    assert [r.offset for r in read_all(reopened, max_bytes=300)] == list(range(80))
    assert reopened.offset_for_timestamp(1_001) == (1, 1_001)
    reopened.close()
    assert path.read_bytes() == expected


def test_stray_temporary_files_are_removed(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    fill(d, 3).close()
    (d / (segment_name(0) + ".log.deleted")).write_bytes(b"x")
    (d / (segment_name(0) + ".index.tmp")).write_bytes(b"x")
    (d / (segment_name(999) + ".index")).write_bytes(b"x")
    reopened = open_log(d, clean_shutdown=True)
    names = sorted(p.name for p in d.iterdir())
    assert not [n for n in names if n.endswith((".deleted", ".tmp"))]
    assert segment_name(999) + ".index" not in names
    assert reopened.log_end_offset == 6
    reopened.close()


def test_scan_handles_batches_larger_than_the_read_chunk(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, small_config(segment_bytes=16 << 20))
    for i in range(3):
        plog.append(batch(2, value_size=700_000, tag=i), now_ms=0, max_message_bytes=2 << 20)
    crash(plog)
    path = last_log(d)
    with open(path, "ab") as f:
        f.write(batch(2, value_size=700_000)[:-10])  # a torn big batch
    reopened = open_log(d)
    assert reopened.log_end_offset == 6
    assert [len(r.value or b"") for r in read_all(reopened)] == [700_000] * 6
    reopened.close()
