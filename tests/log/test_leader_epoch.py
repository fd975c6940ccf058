"""The leader-epoch cache: the cases Kafka's LeaderEpochFileCacheTest checks (assignment rules, end offsets
for OffsetForLeaderEpoch, truncation at either end), the leader-epoch-checkpoint file, and properties."""

from __future__ import annotations

import itertools
import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.log.leader_epoch import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    CheckpointCorruptError,
    EpochEntry,
    LeaderEpochCache,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)

UNDEFINED = (-1, -1)
E = EpochEntry


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


# ------------------------------------------------------------------------------------------------ assignment


def test_assigned_epoch_is_latest_and_ends_at_the_log_end() -> None:
    cache = cache_of((2, 10))
    assert cache.latest_epoch == 2
    assert cache.entries == (E(2, 10),)
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_an_epoch_keeps_its_first_start_offset() -> None:
    cache = LeaderEpochCache()
    assert cache.assign(2, 6)
    assert not cache.assign(2, 10)
    assert not cache.assign(2, 6)
    assert cache.entries == (E(2, 6),)


def test_latest_epoch_at_a_later_offset_still_ends_at_the_log_end() -> None:
    assert cache_of((2, 11), (2, 12)).end_offset_for(2, 14) == (2, 14)


def test_new_epoch_at_the_same_start_offset_replaces_the_empty_one(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "regroup.log"):
        cache = cache_of((2, 9), (3, 9))
    assert cache.entries == (E(3, 9),)
    assert not caplog.records  # nothing was written in epoch 2: no data lost, no warning


def test_same_epoch_at_an_earlier_offset_truncates_what_follows() -> None:
    cache = cache_of((5, 11), (6, 12), (7, 13))
    assert cache.assign(7, 12)
    assert cache.entries == (E(5, 11), E(7, 12))
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_lower_epoch_drops_the_higher_ones_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    cache = cache_of((1, 5), (2, 6))
    cache.label = "t-0"
    with caplog.at_level(logging.WARNING, "regroup.log"):
        assert cache.assign(1, 7)
    assert cache.entries == (E(1, 7),)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert "[LeaderEpochCache t-0]" in caplog.text
    assert "caused truncation of conflicting entries [(1, 5), (2, 6)]" in caplog.text


def test_higher_epoch_at_a_lower_offset_drops_the_entries_at_or_after_it() -> None:
    assert cache_of((2, 6), (3, 5)).entries == (E(3, 5),)


def test_negative_epoch_or_offset_is_refused() -> None:
    cache = LeaderEpochCache()
    with pytest.raises(ValueError, match="invalid partition leader epoch entry"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match="invalid partition leader epoch entry"):
        cache.assign(0, -1)


def test_epochs_as_leaders_change_many_times() -> None:
    cache = cache_of((0, 0), (1, 0))  # epoch 0 wrote nothing
    assert cache.latest_epoch == 1
    assert cache.entries == (E(1, 0),)
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)  # below the first epoch: where the log's epochs start
    assert cache.end_offset_for(1, 5) == (1, 5)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_epochs_as_a_follower_receives_many_batches() -> None:
    cache = LeaderEpochCache()
    for epoch, offsets in ((0, (0, 1, 2)), (1, (3, 4, 5)), (2, (6, 7, 8))):
        for offset in offsets:
            cache.assign(epoch, offset)
        assert cache.latest_epoch == epoch
        assert cache.end_offset_for(epoch, offsets[-1] + 1) == (epoch, offsets[-1] + 1)
    assert cache.entries == (E(0, 0), E(1, 3), E(2, 6))
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


# ----------------------------------------------------------------------------------------------- end offsets


def test_undefined_epoch_requested() -> None:
    assert cache_of((2, 11), (3, 12)).end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_empty_cache_knows_no_epoch() -> None:
    assert LeaderEpochCache().end_offset_for(0, 0) == UNDEFINED
    assert LeaderEpochCache().end_offset_for(7, 0) == UNDEFINED
    assert LeaderEpochCache().latest_epoch is None


def test_epoch_below_the_first_ends_where_the_first_starts() -> None:
    assert cache_of((5, 11), (6, 12), (7, 13)).end_offset_for(4, 0) == (4, 11)


def test_previous_epoch_ends_where_the_next_one_starts() -> None:
    cache = cache_of((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_unknown_epoch_answers_the_largest_known_below_it() -> None:
    cache = cache_of((0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_epoch_above_every_known_one_is_undefined() -> None:
    assert cache_of((2, 100)).end_offset_for(3, 100) == UNDEFINED


def test_epochs_need_not_start_at_zero() -> None:
    cache = cache_of((2, 6))
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert cache.entries == (E(2, 6),)


def test_epoch_for_offset() -> None:
    cache = cache_of((0, 10), (1, 20), (5, 30))
    assert cache.epoch_for_offset(25) == 1
    assert cache.epoch_for_offset(20) == 1
    assert cache.epoch_for_offset(30) == 5
    assert cache.epoch_for_offset(50) == 5
    assert cache.epoch_for_offset(5) is None


def test_previous_epoch() -> None:
    cache = LeaderEpochCache()
    assert cache.previous_epoch(2) is None
    cache.assign(2, 10)
    assert cache.previous_epoch(2) is None
    cache.assign(4, 15)
    assert cache.previous_epoch(4) == 2
    cache.assign(10, 20)
    assert cache.previous_epoch(10) == 4
    cache.truncate_from_end(18)
    assert cache.previous_epoch(4) == 2


# ------------------------------------------------------------------------------------------------ truncation


def three() -> LeaderEpochCache:
    return cache_of((2, 6), (3, 8), (4, 11))


@pytest.mark.parametrize(
    ("end", "left"),
    [
        (8, [E(2, 6)]),  # an epoch starting exactly at the end goes
        (9, [E(2, 6), E(3, 8)]),
        (11, [E(2, 6), E(3, 8)]),
        (12, [E(2, 6), E(3, 8), E(4, 11)]),
        (UNDEFINED_EPOCH, [E(2, 6), E(3, 8), E(4, 11)]),
        (0, []),
    ],
)
def test_truncate_from_end(end: int, left: list[EpochEntry]) -> None:
    cache = three()
    cache.truncate_from_end(end)
    assert list(cache.entries) == left


@pytest.mark.parametrize(
    ("start", "left"),
    [
        (8, [E(3, 8), E(4, 11)]),
        (1, [E(2, 6), E(3, 8), E(4, 11)]),  # before the first epoch: nothing to clear
        (6, [E(2, 6), E(3, 8), E(4, 11)]),  # at the first epoch's start: nothing to clear
        (9, [E(3, 9), E(4, 11)]),  # inside an epoch: it now starts at the new log start
        (11, [E(4, 11)]),
        (15, [E(4, 15)]),  # the latest epoch is kept even past all entries
        (UNDEFINED_EPOCH, [E(2, 6), E(3, 8), E(4, 11)]),
    ],
)
def test_truncate_from_start(start: int, left: list[EpochEntry]) -> None:
    cache = three()
    cache.truncate_from_start(start)
    assert list(cache.entries) == left


def test_truncate_from_start_between_the_first_two_epochs() -> None:
    cache = cache_of((0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert cache.entries == (E(0, 5), E(1, 7), E(2, 10))


def test_truncating_an_empty_cache_is_harmless() -> None:
    cache = LeaderEpochCache()
    assert cache.truncate_from_start(7) == []
    assert cache.truncate_from_end(7) == []


def test_clear() -> None:
    cache = three()
    cache.clear()
    assert cache.entries == ()
    assert len(cache) == 0


# --------------------------------------------------------------------------------------- the checkpoint file


def test_checkpoint_file_format(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    cache = LeaderEpochCache(path)
    assert not path.exists()  # nothing written until something is assigned
    cache.assign(2, 6)
    cache.assign(3, 8)
    assert path.read_bytes() == b"0\n2\n2 6\n3 8\n"


def test_epochs_persist_between_instances(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    LeaderEpochCache(path).assign(2, 6)
    assert LeaderEpochCache(path).entries == (E(2, 6),)


def test_checkpoint_is_written_on_truncation_and_clear(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    cache = LeaderEpochCache(path)
    for epoch, offset in ((2, 6), (3, 8), (4, 11)):
        cache.assign(epoch, offset)
    cache.truncate_from_end(11)
    cache.truncate_from_start(8)
    assert read_checkpoint(path) == [E(3, 8)]
    cache.clear()
    assert path.read_bytes() == b"0\n0\n"


def test_every_write_is_synced(tmp_path: Path, fsyncs: list[str]) -> None:
    path = tmp_path / CHECKPOINT_FILE
    LeaderEpochCache(path).assign(1, 0)
    assert str(path) + ".tmp" in fsyncs  # the new content, before the rename
    assert str(tmp_path) in fsyncs  # the rename
    assert not (tmp_path / (CHECKPOINT_FILE + ".tmp")).exists()


def test_unsynced_cache(tmp_path: Path, fsyncs: list[str]) -> None:
    LeaderEpochCache(tmp_path / CHECKPOINT_FILE, sync=False).assign(1, 0)
    assert fsyncs == []


def test_truncation_after_the_partition_directory_is_gone(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    cache = LeaderEpochCache(directory / CHECKPOINT_FILE)
    cache.assign(1, 0)
    cache.assign(2, 5)
    (directory / CHECKPOINT_FILE).unlink()
    directory.rmdir()
    assert cache.truncate_from_end(5) == [E(2, 5)]  # no error: the write is skipped
    assert not directory.exists()


@pytest.mark.parametrize("content", [b"", b"0\n", b"0\n0\n"])
def test_empty_checkpoints(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(content)
    assert LeaderEpochCache(path).entries == ()


def test_checkpoint_with_crlf_and_extra_spaces_is_read() -> None:
    assert decode_checkpoint(b"0\r\n2\r\n1 0\r\n3   9\r\n") == [E(1, 0), E(3, 9)]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"1\n0\n", "unrecognised version 1"),
        (b"x\n", "malformed line 'x'"),
        (b"0\n2\n1 0\n", "expected 2 entries but found 1"),
        (b"0\n1\n1 0\n2 5\n", "expected 1 entries but found 2"),
        (b"0\n1\n1 0 7\n", "malformed line '1 0 7'"),
        (b"0\n1\n1 x\n", "malformed line 'x'"),
        (b"0\n2\n1 0\n\n", "malformed line ''"),
        (b"0\n1\n\xff\xfe\n", "not text"),
    ],
)
def test_corrupt_checkpoints(content: bytes, problem: str, tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(content)
    with pytest.raises(CheckpointCorruptError, match=problem):
        LeaderEpochCache(path)


def test_checkpoint_with_a_negative_entry_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(b"0\n1\n-3 0\n")
    with pytest.raises(CheckpointCorruptError, match="invalid partition leader epoch entry"):
        LeaderEpochCache(path)


def test_checkpoint_entries_are_loaded_by_the_assignment_rules(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    write_checkpoint(path, [E(1, 0), E(3, 10), E(2, 12)])
    assert LeaderEpochCache(path).entries == (E(1, 0), E(2, 12))


# ------------------------------------------------------------------------------------------------ properties

entries_st = st.lists(
    st.builds(EpochEntry, st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)), max_size=20
)


@given(entries_st)
def test_checkpoint_content_round_trips(entries: list[EpochEntry]) -> None:
    assert decode_checkpoint(encode_checkpoint(entries)) == entries


@given(entries_st)
def test_checkpoint_file_round_trips(entries: list[EpochEntry]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / CHECKPOINT_FILE
        write_checkpoint(path, entries, sync=False)
        assert read_checkpoint(path) == entries


def _reference_end_offset(entries: tuple[EpochEntry, ...], requested: int, leo: int) -> tuple[int, int]:
    """OffsetForLeaderEpoch's answer, spelled out case by case over a plain list."""
    if requested == UNDEFINED_EPOCH or not entries or requested > entries[-1].epoch:
        return UNDEFINED
    if requested == entries[-1].epoch:
        return requested, leo
    later = [e for e in entries if e.epoch > requested]
    earlier = [e for e in entries if e.epoch <= requested]
    return (earlier[-1].epoch if earlier else requested), later[0].start_offset


ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 60), st.just(0)),
        st.tuples(st.just("start"), st.integers(-1, 60), st.just(0)),
    ),
    max_size=40,
)


@given(ops_st, st.integers(-1, 14))
def test_cache_stays_monotonic_persisted_and_answers_like_the_reference(
    ops: list[tuple[str, int, int]], requested: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / CHECKPOINT_FILE
        cache = LeaderEpochCache(path, sync=False)
        for op, a, b in ops:
            if op == "assign":
                cache.assign(a, b)
                assert cache.latest_entry is not None
                assert cache.latest_entry.epoch == a  # the newest assignment always ends up latest
            elif op == "end":
                cache.truncate_from_end(a)
                assert all(e.start_offset < a for e in cache.entries) or a < 0
            else:
                cache.truncate_from_start(a)
                assert all(e.start_offset >= a for e in cache.entries)
            entries = cache.entries
            assert all(
                x.epoch < y.epoch and x.start_offset < y.start_offset for x, y in itertools.pairwise(entries)
            )
            assert LeaderEpochCache(path).entries == entries or (not path.exists() and not entries)
        leo = (cache.latest_entry.start_offset if cache.latest_entry else 0) + 3
        assert cache.end_offset_for(requested, leo) == _reference_end_offset(cache.entries, requested, leo)
