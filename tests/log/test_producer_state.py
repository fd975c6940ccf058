"""Idempotent producers: duplicates, sequence gaps, epochs, and state rebuilt on reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from regroup.log.partition import PartitionLog
from regroup.log.producer_state import ProducerStateManager
from regroup.protocol.errors import ErrorCode, KafkaError

from .helpers import batch, open_log, read_all

PID = 4242


def idem(seq: int, count: int = 2, *, epoch: int = 0, pid: int = PID, tag: int = 0) -> bytes:
    return batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, tag=tag)


def code_of(plog: PartitionLog, data: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as exc:
        plog.append(data, now_ms=0)
    return exc.value.code


def test_in_sequence_batches_and_duplicates(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    first = plog.append(idem(0), now_ms=0)
    second = plog.append(idem(2, 3), now_ms=0)
    assert (second.base_offset, second.last_offset) == (2, 4)
    dup = plog.append(idem(0), now_ms=0)
    assert dup.duplicate
    assert (dup.base_offset, dup.last_offset) == (first.base_offset, first.last_offset)
    dup2 = plog.append(idem(2, 3), now_ms=0)
    assert dup2.duplicate
    assert (dup2.base_offset, dup2.last_offset) == (2, 4)
    assert plog.log_end_offset == 5  # nothing appended for duplicates
    assert plog.append(idem(5), now_ms=0).base_offset == 5
    plog.close()


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(7):
        plog.append(idem(i, 1), now_ms=0)
    assert plog.append(idem(2, 1), now_ms=0).duplicate  # 2..6 are the last five
    assert code_of(plog, idem(1, 1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.close()


def test_sequence_gap_and_overlap_are_out_of_order(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(idem(0), now_ms=0)
    assert code_of(plog, idem(3)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(plog, idem(1)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps, not a duplicate
    assert plog.log_end_offset == 2
    plog.close()


def test_epochs(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(idem(0, epoch=3), now_ms=0)
    assert code_of(plog, idem(2, epoch=2)) is ErrorCode.INVALID_PRODUCER_EPOCH
    # a bumped epoch must restart at sequence 0
    assert code_of(plog, idem(2, epoch=4)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.append(idem(0, epoch=4), now_ms=0)
    assert code_of(plog, idem(2, epoch=3)) is ErrorCode.INVALID_PRODUCER_EPOCH
    # a duplicate is only a duplicate within the same epoch
    assert code_of(plog, idem(0, epoch=3)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert plog.append(idem(0, epoch=4), now_ms=0).duplicate
    plog.close()


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    # Kafka 2.5+ (KIP-360): no state for the producer id, e.g. after retention removed its batches.
    plog = open_log(tmp_path / "t-0")
    assert plog.append(idem(17), now_ms=0).base_offset == 0
    assert code_of(plog, idem(20)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.append(idem(19), now_ms=0)
    plog.close()


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(idem(2**31 - 2, 2), now_ms=0)
    plog.append(idem(0, 2), now_ms=0)
    plog.close()


def test_two_batches_of_one_producer_in_one_append(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    info = plog.append(idem(0) + idem(2, tag=1), now_ms=0)
    assert (info.base_offset, info.last_offset) == (0, 3)
    assert code_of(plog, idem(4) + idem(7)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.log_end_offset == 4
    plog.close()


def test_validate_false_skips_sequence_checks_but_not_epochs(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(idem(0, epoch=5), now_ms=0)
    plog.append(idem(9, epoch=5), now_ms=0, validate=False)
    with pytest.raises(KafkaError) as exc:
        plog.append(idem(11, epoch=4), now_ms=0, validate=False)
    assert exc.value.code is ErrorCode.INVALID_PRODUCER_EPOCH
    plog.close()


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_reopen(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path / "t-0")
    seq = 0
    for i in range(12):  # several rolls, so snapshots are taken
        if i % 2:
            plog.append(idem(seq, 2, tag=i), now_ms=0)
            seq += 2
        else:
            plog.append(batch(2, value_size=300, tag=i), now_ms=0)
    last = plog.append(idem(seq, 2), now_ms=0)
    assert plog.segment_count > 2
    if clean:
        plog.close()
    else:
        plog.flush()
        plog.close_handles()
    reopened = open_log(tmp_path / "t-0", clean_shutdown=clean)
    dup = reopened.append(idem(seq, 2), now_ms=0)
    assert dup.duplicate
    assert dup.base_offset == last.base_offset
    assert code_of(reopened, idem(seq + 5)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert reopened.append(idem(seq + 2), now_ms=0).base_offset == last.last_offset + 1
    reopened.close()


def test_state_rebuilt_from_the_log_without_snapshots(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(6):
        plog.append(idem(3 * i, 3, tag=i), now_ms=0)
    plog.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()
    reopened = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert reopened.append(idem(15, 3), now_ms=0).duplicate
    assert reopened.producer_entries()[PID].last_seq == 17
    reopened.close()


def test_damaged_snapshot_falls_back_to_the_log(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    for i in range(4):
        plog.append(idem(2 * i, tag=i), now_ms=0)
    plog.close()
    (snap,) = (tmp_path / "t-0").glob("*.snapshot")
    snap.write_bytes(snap.read_bytes()[:-3] + b"zzz")
    reopened = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert reopened.append(idem(6), now_ms=0).duplicate
    assert not snap.exists()
    reopened.close()


def test_snapshot_round_trip() -> None:
    m = ProducerStateManager("t-0")
    m.replay(1, 0, 0, 4, 10, 14, 99)
    m.replay(2, 7, 5, 5, 15, 15, 100)
    m.replay_marker(2, 8)
    entries = ProducerStateManager.decode(m.encode())
    assert entries[1].last_seq == 4
    assert entries[1].last_offset == 14
    assert entries[2].epoch == 8
    assert not entries[2].batches
    with pytest.raises(ValueError, match="CRC"):
        ProducerStateManager.decode(m.encode()[:-1] + b"\x01")


def test_idle_producers_expire_with_retention(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(idem(0), now_ms=0)  # batch timestamps 1000..1001
    plog.apply_retention(now_ms=1_001 + 86_400_000 - 1)
    assert PID in plog.producer_entries()
    plog.apply_retention(now_ms=1_001 + 86_400_000)
    assert PID not in plog.producer_entries()
    assert plog.append(idem(99), now_ms=0).base_offset == 2  # unknown again: any sequence
    assert [r.offset for r in read_all(plog)] == [0, 1, 2, 3]
    plog.close()
