"""What replication needs of a partition log: a high watermark apart from the log end (consumers read below
it), the leader's epoch stamped and recorded, batches appended as the leader wrote them, truncation of a
divergent tail with producer state and epochs following, and the high watermark checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from regroup.log import LogManager
from regroup.log.partition import PartitionLog
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.record_batch import decode_batches

from .helpers import batch, open_log, read_all


def leader_with(directory: Path, epochs: list[tuple[int, int]]) -> PartitionLog:
    """A replicated leader log: for each (epoch, batches), lead at that epoch and append that many batches."""
    plog = open_log(directory)
    plog.replicated = True
    for epoch, batches in epochs:
        plog.become_leader(epoch)
        for i in range(batches):
            plog.append(batch(2, tag=epoch * 10 + i), now_ms=0)
    return plog


def copy_all(leader: PartitionLog, follower: PartitionLog, *, from_offset: int | None = None) -> None:
    offset = follower.log_end_offset if from_offset is None else from_offset
    while offset < leader.log_end_offset:
        data = leader.read(offset, 1 << 20, to_log_end=True).data
        info = follower.append_as_follower(data, now_ms=0)
        offset = info.last_offset + 1


def test_consumers_read_below_the_high_watermark_and_followers_to_the_log_end(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(3, 5)])
    assert plog.log_end_offset == 10
    assert plog.high_watermark == 0
    assert plog.read(0, 1 << 20).data == b""
    assert plog.read(0, 1 << 20, to_log_end=True).data != b""
    plog.set_high_watermark(4)
    offsets = [r.offset for b in decode_batches(plog.read(0, 1 << 20).data) for r in b.records]
    assert offsets == [0, 1, 2, 3]
    assert plog.read(4, 1 << 20).data == b""  # between the high watermark and the log end: nothing yet
    with pytest.raises(KafkaError) as info:
        plog.read(11, 1 << 20)
    assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert not plog.set_high_watermark(4)
    plog.set_high_watermark(99)
    assert plog.high_watermark == 10  # never past the log end
    plog.close()


def test_high_watermark_listeners_hear_every_move(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(0, 2)])
    moves: list[int] = []
    plog.high_watermark_listeners.append(lambda: moves.append(plog.high_watermark))
    plog.set_high_watermark(2)
    plog.set_high_watermark(2)
    plog.set_high_watermark(4)
    assert moves == [2, 4]
    plog.close()


def test_a_listener_removing_itself_does_not_hide_the_move_from_the_next(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(0, 2)])
    heard: list[str] = []

    def once() -> None:
        heard.append("once")
        plog.high_watermark_listeners.remove(once)
        plog.append_listeners.remove(once)

    for listeners in (plog.high_watermark_listeners, plog.append_listeners):
        listeners.append(once)
        listeners.append(lambda: heard.append("next"))
    plog.set_high_watermark(2)
    assert heard == ["once", "next"]
    plog.append(batch(1, tag=9), now_ms=0)
    assert heard == ["once", "next", "next"]
    plog.close()


def test_a_leader_stamps_its_epoch_and_records_where_it_starts(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(1, 2), (4, 1)])
    assert [tuple(e) for e in plog.epochs.entries] == [(1, 0), (4, 4)]
    epochs = [b.partition_leader_epoch for b in decode_batches(plog.read(0, 1 << 20, to_log_end=True).data)]
    assert epochs[:2] == [1, 1]
    plog.close()
    reopened = open_log(tmp_path / "t-0")
    assert [tuple(e) for e in reopened.epochs.entries] == [(1, 0), (4, 4)]  # leader-epoch-checkpoint
    reopened.close()


def test_a_follower_appends_the_leaders_batches_unchanged(tmp_path: Path) -> None:
    leader = leader_with(tmp_path / "l-0", [(0, 3), (2, 2)])
    follower = open_log(tmp_path / "f-0")
    follower.replicated = True
    copy_all(leader, follower)
    assert follower.log_end_offset == leader.log_end_offset == 10
    assert follower.read(0, 1 << 20, to_log_end=True).data == leader.read(0, 1 << 20, to_log_end=True).data
    assert follower.epochs.entries == leader.epochs.entries
    with pytest.raises(KafkaError):
        follower.append_as_follower(leader.read(0, 1 << 20, to_log_end=True).data, now_ms=0)  # not at its end
    leader.close()
    follower.close()


def test_truncation_drops_the_divergent_tail_with_its_epochs(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(0, 2), (1, 3)])
    plog.set_high_watermark(4)
    assert plog.truncate_to(4) == 4
    assert plog.log_end_offset == 4
    assert [r.offset for r in read_all(plog)] == [0, 1, 2, 3]
    assert [tuple(e) for e in plog.epochs.entries] == [(0, 0)]
    assert plog.high_watermark == 4
    plog.become_leader(2)
    info = plog.append(batch(1), now_ms=0)
    assert info.base_offset == 4
    plog.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_end_offset == 5
    assert [tuple(e) for e in reopened.epochs.entries] == [(0, 0), (2, 4)]
    reopened.close()


def test_truncation_across_segments(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(0, 60)])
    segments = plog.segment_count
    assert segments > 3
    plog.truncate_to(10)
    assert plog.log_end_offset == 10
    assert plog.segment_count < segments
    plog.append(batch(2), now_ms=0)
    plog.set_high_watermark(12)
    assert [r.offset for r in read_all(plog)] == list(range(12))
    plog.close()


def test_truncation_rewinds_idempotent_producer_state(tmp_path: Path) -> None:
    plog = leader_with(tmp_path / "t-0", [(0, 0)])
    for seq in range(0, 10, 2):
        plog.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=seq), now_ms=0)
    plog.truncate_to(6)
    # The batch at sequence 6 was lost with the tail: resending it is in sequence again, not a duplicate.
    info = plog.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=6), now_ms=0)
    assert info.base_offset == 6
    assert not info.duplicate
    # ...and the one before it is still known as a duplicate.
    dup = plog.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=4), now_ms=0)
    assert dup.duplicate
    assert dup.base_offset == 4
    plog.close()


def test_a_follower_keeps_producer_state_so_a_new_leader_rejects_duplicates(tmp_path: Path) -> None:
    leader = leader_with(tmp_path / "l-0", [(0, 0)])
    leader.append(batch(3, producer_id=9, producer_epoch=1, base_sequence=0), now_ms=0)
    follower = open_log(tmp_path / "f-0")
    follower.replicated = True
    copy_all(leader, follower)
    follower.become_leader(1)
    dup = follower.append(batch(3, producer_id=9, producer_epoch=1, base_sequence=0), now_ms=0)
    assert dup.duplicate
    assert dup.base_offset == 0
    leader.close()
    follower.close()


def test_the_high_watermark_survives_a_restart(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    logs.load()
    logs.create_topic("t", 1)
    plog = logs.partition("t", 0)
    assert plog is not None
    plog.replicated = True
    plog.become_leader(0)
    for _ in range(3):
        plog.append(batch(2), now_ms=0)
    plog.set_high_watermark(4)
    logs.close()
    again = LogManager(tmp_path)
    again.load()
    plog = again.partition("t", 0)
    assert plog is not None
    plog.replicated = True
    assert plog.log_end_offset == 6
    assert plog.high_watermark == 4
    again.close()
