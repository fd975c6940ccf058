"""Vectorised RecordBatch decoding (regroup_pipeline.logformat) against regroup's reference decoder."""

from __future__ import annotations

import random

import numpy as np
import pytest

from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import Record, build_batch, decode_batches, end_txn_marker

pa = pytest.importorskip("pyarrow")

from regroup_pipeline.logformat import (  # noqa: E402  # after the importorskip
    RAW_ARROW_SCHEMA,
    decode_records,
    index_batches,
    records_to_arrow,
    slice_binary,
)

pytestmark = pytest.mark.spark


def _random_log(seed: int, batches: int = 120) -> tuple[bytes, list[Record]]:
    rng = random.Random(seed)
    out = bytearray()
    expected: list[Record] = []
    offset = 0
    for _ in range(batches):
        if rng.random() < 0.1:
            marker = end_txn_marker(rng.random() < 0.5, 0, offset=offset, timestamp=1_700_000_000_000)
            out += build_batch(
                [marker], base_offset=offset, is_control=True, is_transactional=True, producer_id=7
            )
            offset += 1
            continue
        n = rng.randint(1, 30)
        recs = []
        for i in range(n):
            key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 300))
            value = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 5, 200, 9000]))
            headers = [
                (f"h{j}-é", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 50)))
                for j in range(rng.choice([0, 0, 0, 1, 4]))
            ]
            # Gaps in offsets, as compaction leaves them.
            recs.append(
                Record(
                    offset + i * 2, 1_700_000_000_000 + rng.randint(-5_000, 5_000_000), key, value, headers
                )
            )
        ts_type = rng.choice([0, 0, 1])
        out += build_batch(
            recs,
            base_offset=offset,
            compression=rng.choice([0, 0, 1, 2, 3, 4]),
            timestamp_type=ts_type,
            max_timestamp=1_800_000_000_000 if ts_type else None,
        )
        decoded = decode_batches(
            build_batch(
                recs,
                base_offset=offset,
                timestamp_type=ts_type,
                max_timestamp=1_800_000_000_000 if ts_type else None,
            )
        )
        expected.extend(decoded[0].records)
        offset = recs[-1].offset + 1
    return bytes(out), expected


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_decoding_matches_the_reference_decoder(seed: int) -> None:
    data, expected = _random_log(seed)
    idx = index_batches(data)
    assert idx.end == len(data)
    batch = records_to_arrow(decode_records(data, idx), "t", 4)
    assert batch.schema == RAW_ARROW_SCHEMA
    got = batch.to_pylist()
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g["offset"], g["key"], g["value"]) == (e.offset, e.key, e.value)
        assert int(g["timestamp"].timestamp() * 1000) == e.timestamp
        if e.headers:
            assert [(h["key"], h["value"]) for h in g["headers"]] == list(e.headers)
        else:
            assert g["headers"] is None
        assert (g["topic"], g["partition"]) == ("t", 4)


def test_log_end_counts_control_batches_and_a_torn_tail_is_ignored() -> None:
    good = build_batch([Record(0, 1, b"k", b"v")], base_offset=0)
    marker = build_batch(
        [end_txn_marker(True, 0, offset=1, timestamp=2)],
        base_offset=1,
        is_control=True,
        is_transactional=True,
        producer_id=1,
    )
    torn = build_batch([Record(2, 3, b"k", b"v" * 100)], base_offset=2)[:-10]
    idx = index_batches(good + marker + torn)
    assert idx.positions.tolist() == [0, len(good)]
    assert idx.end == len(good) + len(marker)
    assert idx.next_offset == 2
    records = decode_records(good + marker, idx)
    assert records.offset.tolist() == [0]


def test_a_corrupt_record_length_is_a_decode_error() -> None:
    batch = bytearray(build_batch([Record(0, 1, b"key", b"value")], base_offset=0))
    batch[61] = 0x7F  # the record's length varint now claims more bytes than the batch holds
    with pytest.raises(DecodeError):
        decode_records(bytes(batch), index_batches(bytes(batch)))


def test_select_keeps_headers_aligned() -> None:
    recs = [Record(i, 10 + i, b"k%d" % i, b"v", [("a", b"%d" % i)] * (i % 3)) for i in range(9)]
    data = build_batch(recs, base_offset=0)
    records = decode_records(data, index_batches(data))
    keep = records.offset % 2 == 0
    got = records_to_arrow(records.select(keep), "t", 0).to_pylist()
    assert [r["offset"] for r in got] == [0, 2, 4, 6, 8]
    assert [[h["value"] for h in r["headers"] or []] for r in got] == [
        [b"%d" % i] * (i % 3) for i in (0, 2, 4, 6, 8)
    ]
    assert [r["headers"] is None for r in got] == [i % 3 == 0 for i in (0, 2, 4, 6, 8)]


def test_slice_binary_handles_nulls_and_empty_values() -> None:
    data = np.frombuffer(b"abcdefghij", np.uint8)
    arr = slice_binary(data, np.array([0, 2, 2, 5]), np.array([2, -1, 0, 5]))
    assert arr.to_pylist() == [b"ab", None, b"", b"fghij"]
    assert slice_binary(data, np.array([], np.int64), np.array([], np.int64)).to_pylist() == []
