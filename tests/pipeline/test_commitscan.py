"""The compiled pass over ``__consumer_offsets`` segment bytes (regroup_pipeline.commitscan) against the
general decoders: the same rows where it answers, None where it hands over, and no crash on any bytes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.protocol.record_batch import Record, build_batch, end_txn_marker

pa = pytest.importorskip("pyarrow")

from regroup_pipeline import decode  # noqa: E402  # after the importorskip
from regroup_pipeline.commitscan import (  # noqa: E402
    CommitColumns,
    scan_commit_pairs,
    scan_offset_commits,
    scan_records,
    whole_batches_end,
)
from regroup_pipeline.logformat import (  # noqa: E402
    COMMIT_ARROW_SCHEMA,
    decode_records,
    index_batches,
    records_to_arrow,
)
from regroup_pipeline.synthetic import (  # noqa: E402
    MemberSpec,
    group_metadata,
    group_tombstone,
    offset_commit,
    offset_tombstone,
)

pytestmark = pytest.mark.spark

TS = 1_795_000_000_000


def _random_record(rng: random.Random, i: int) -> tuple[bytes, bytes | None]:
    roll = rng.random()
    group = f"group-{rng.randint(0, 20)}" + "é" * rng.randint(0, 2)
    if roll < 0.05:
        return group_metadata(group, rng.randint(1, 9), [MemberSpec("m", ["t"], {"t": [0]})], state_ts=TS)
    if roll < 0.07:
        return group_tombstone(group)
    if roll < 0.15:
        return offset_tombstone(group, "t", i % 5)
    return offset_commit(
        group,
        rng.choice(["a", "topic", "ü" * 3]),
        rng.randint(0, 50),
        rng.randint(0, 2**40),
        commit_ts=TS + rng.randint(0, 10**6),
        key_version=rng.choice([0, 1]),
        value_version=rng.choice([0, 1, 2, 3, 4]),
        metadata="x" * rng.choice([0, 0, 3, 300]),
        leader_epoch=rng.randint(-1, 5),
        expire_ts=TS + 1,
    )


def _segment(seed: int, *, compressed: bool = False) -> bytes:
    """Coordinator-like batches (one per commit request), control batches and LogAppendTime among them."""
    rng = random.Random(seed)
    out = bytearray()
    offset = 0
    for _ in range(80):
        if rng.random() < 0.08:
            marker = end_txn_marker(True, 0, offset=offset, timestamp=TS)
            out += build_batch(
                [marker], base_offset=offset, is_control=True, is_transactional=True, producer_id=3
            )
            offset += 1
            continue
        n = rng.randint(1, 12)
        recs = [
            Record(offset + i, TS + offset + i, *_random_record(rng, offset + i), headers=[])
            for i in range(n)
        ]
        if rng.random() < 0.1:
            recs[0] = Record(recs[0].offset, recs[0].timestamp, recs[0].key, recs[0].value, [("h", b"v")])
        log_append = rng.random() < 0.2
        out += build_batch(
            recs,
            base_offset=offset,
            compression=1 if compressed else 0,
            timestamp_type=1 if log_append else 0,
            max_timestamp=TS + 10**7 if log_append else None,
        )
        offset += n
    return bytes(out)


def _general(data: bytes, **filters: Any) -> Any:
    """Raw records by the numpy decoders, filtered like the data source filters them."""
    records = decode_records(data, index_batches(data))
    keep = records.offset >= filters.get("min_offset", 0)
    if filters.get("max_offset") is not None:
        keep &= records.offset < filters["max_offset"]
    if filters.get("until_ms") is not None:
        keep &= records.timestamp <= filters["until_ms"]
    return records_to_arrow(records.select(keep), "__consumer_offsets", 4)


@pytest.mark.parametrize("seed", range(5))
def test_offset_commits_equal_the_general_decoders(seed: int) -> None:
    data = _segment(seed)
    for filters in ({}, {"min_offset": 40, "max_offset": 300, "until_ms": TS + 250}):
        fast = scan_offset_commits(data, len(data), 4, **filters)
        assert fast is not None
        expected = decode.decode_offset_commits(_general(data, **filters))
        assert fast.schema == COMMIT_ARROW_SCHEMA
        assert fast.to_pylist() == expected.to_pylist()
        assert fast.num_rows > 0


@pytest.mark.parametrize("seed", range(3))
def test_group_records_equal_the_general_decoders(seed: int) -> None:
    data = _segment(seed)
    fast = scan_records(data, len(data), "__consumer_offsets", 4, (2,))
    assert fast is not None
    general = _general(data)
    expected = general.filter(pa.array(decode.record_types(general.column("key")) == 2))
    assert fast.select(["key", "value", "offset", "timestamp", "timestampType"]).to_pylist() == (
        expected.select(["key", "value", "offset", "timestamp", "timestampType"]).to_pylist()
    )
    assert (
        decode.decode_group_metadata(fast).to_pylist() == decode.decode_group_metadata(expected).to_pylist()
    )


def test_pairs_decode_like_the_codecs() -> None:
    data = _segment(7)
    raw = _general(data)
    fast = scan_commit_pairs(raw)
    assert fast is not None
    commits = raw.filter(pa.array(decode.record_types(raw.column("key")) <= 1))
    assert fast.to_pylist() == decode._offset_commits_codec(commits).to_pylist()


def test_hands_over_what_it_does_not_handle() -> None:
    compressed = _segment(1, compressed=True)
    assert scan_offset_commits(compressed, len(compressed), 0) is None
    assert scan_records(compressed, len(compressed), "__consumer_offsets", 0, (2,)) is None
    key, value = offset_commit("g", "t", 0, 1, commit_ts=TS, value_version=3)
    for odd in (b"\x00\x09" + value[2:], value + b"\x00", value[:-3]):
        data = build_batch([Record(0, TS, key, odd, [])])
        assert scan_offset_commits(data, len(data), 0) is None
        assert scan_commit_pairs(_general(data)) is None
    # Group metadata and unknown key types are skipped, not handed over.
    other = build_batch([Record(0, TS, b"\x00\x07abc", b"x", []), Record(1, TS, key, value, [])])
    only = scan_offset_commits(other, len(other), 0)
    assert only is not None
    assert only.column("committed_offset").to_pylist() == [1]


def test_whole_batches_end_stops_at_a_torn_tail() -> None:
    data = _segment(2)
    ends = [len(b) for b in (build_batch([Record(0, TS, b"k", b"v", [])]),)]
    assert whole_batches_end(data, len(data)) == len(data)
    assert whole_batches_end(data[:-1], len(data)) < len(data) - 1
    assert whole_batches_end(data, 1) == index_batches(data, 0, 1).end
    assert ends[0] > 0


@given(st.integers(0, 10_000), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8))
def test_any_bytes_give_rows_or_none_never_a_crash(cut: int, flips: list[tuple[int, int]]) -> None:
    # Numba does not check bounds: every read must be guarded by the pass itself.
    data = bytearray(_segment(3))
    for at, byte in flips:
        data[at % len(data)] = byte
    chunk = bytes(data[: len(data) - cut % len(data)])
    for result in (
        scan_offset_commits(chunk, len(chunk), 0),
        scan_records(chunk, len(chunk), "__consumer_offsets", 0, (0, 1, 2)),
    ):
        assert result is None or result.num_rows >= 0
    assert 0 <= whole_batches_end(chunk, len(chunk)) <= len(chunk)


def test_commit_columns_gather_pieces_and_add_nothing_of_a_piece_they_hand_over() -> None:
    pieces = [_segment(seed) for seed in (4, 5, 6)]
    key, value = offset_commit("g", "t", 0, 1, commit_ts=TS, value_version=3)
    # Good commits (tombstones among them) before a record the pass does not handle: the bits it set for
    # them must not stay behind for the next piece's rows.
    bad = build_batch([Record(i, TS, *offset_tombstone("g", "t", i), []) for i in range(9)]) + build_batch(
        [Record(9, TS, key, value + b"\x00", [])], base_offset=9
    )
    columns = CommitColumns.for_piece(pieces[0], len(pieces[0]), rows=2000, nbytes=10**6)
    assert columns.add(pieces[0], len(pieces[0]), 4) is True
    assert columns.add(bad, len(bad), 4) is None
    assert columns.add(pieces[1], len(pieces[1]), 4, min_offset=40) is True
    small = CommitColumns(10, 10**6)
    assert small.add(pieces[2], len(pieces[2]), 4) is False  # no room: nothing added
    assert small.count == 0
    expected = [
        *scan_offset_commits(pieces[0], len(pieces[0]), 4).to_pylist(),
        *scan_offset_commits(pieces[1], len(pieces[1]), 4, min_offset=40).to_pylist(),
    ]
    got = columns.batch()
    assert got.schema == COMMIT_ARROW_SCHEMA
    assert got.to_pylist() == expected
    assert got.column("deleted").to_pylist() == [r["deleted"] for r in expected]
    with pytest.raises(RuntimeError):
        columns.add(pieces[2], len(pieces[2]), 4)


_GUARDED_COPIES = """
import ctypes, mmap
from regroup_pipeline.commitscan import _copy

PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded():
    # A page, then one that faults on any access: a read or write past the first page's end crashes.
    m = mmap.mmap(-1, 2 * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert libc.mprotect(base + PAGE, PAGE, 0) == 0, ctypes.get_errno()
    return m, base


source_map, source = guarded()
target_map, target = guarded()
for length in range(0, 40):
    data = bytes((7 * i + length) % 251 + 1 for i in range(length))
    # Both strings end where the guard page starts: byte by byte.
    source_map[PAGE - length : PAGE] = data
    target_map[:PAGE] = bytes(PAGE)
    _copy(target + PAGE - length, target + PAGE, source + PAGE - length, source + PAGE, length)
    assert target_map[PAGE - length : PAGE] == data, length
    assert target_map[: PAGE - length] == bytes(PAGE - length), length
    # Room for a word's spill on both sides: whole words, nothing written from the target's end on.
    source_map[:length] = data
    target_map[:PAGE] = b"\\xee" * PAGE
    _copy(target, target + length + 7, source, source + PAGE, length)
    assert target_map[:length] == data, length
    assert target_map[length + 7 : PAGE] == b"\\xee" * (PAGE - length - 7), length
print("ok")
"""


def test_string_copies_touch_nothing_past_the_ends_they_are_given() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _GUARDED_COPIES], capture_output=True, text=True, timeout=300, check=False
    )
    # A read or write past an end is a fault in the guard page: the process dies of SIGSEGV (−11).
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "ok"
