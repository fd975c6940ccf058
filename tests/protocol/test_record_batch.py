"""Tests for regroup.protocol.record_batch: round trips, kafka-python interop, rewrites, scanning, fuzzing."""

from __future__ import annotations

import contextlib
import gzip
import struct
from collections.abc import Callable
from typing import Any

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.protocol.primitives import DecodeError, EncodeError
from regroup.protocol.record_batch import (
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    Compression,
    ControlType,
    CorruptRecordError,
    Record,
    RecordBatch,
    TimestampType,
    TruncatedBatchError,
    build_batch,
    build_keyed_batch,
    compress,
    decode_batch,
    decode_batches,
    decompress,
    encode_batch,
    end_txn_marker,
    iter_batches,
    parse_control_key,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_crc,
)

kafka_default_records = pytest.importorskip("kafka.record.default_records")
DefaultRecordBatch = kafka_default_records.DefaultRecordBatch
DefaultRecordBatchBuilder = kafka_default_records.DefaultRecordBatchBuilder

INT16 = (-(2**15), 2**15 - 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
CODECS = list(Compression)
TS = 1_700_000_000_000


# ---------------------------------------------------------------------------------------------- helpers


def rebody(batch: bytes, codec: int, body: bytes, *, count: int | None = None) -> bytes:
    """Replace a batch's records section (and optionally its count), fixing codec, length and CRC: how
    other producers' encodings (raw snappy, LZ4 with checksums, ...) are reproduced here."""
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    (attrs,) = struct.unpack_from(">h", head, 21)
    struct.pack_into(">h", head, 21, (attrs & ~7) | codec)
    if count is not None:
        struct.pack_into(">i", head, 57, count)
    out = bytearray(head + body)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def kafka_build(
    records: list[Record], codec: int = 0, producer: tuple[int, int, int] = (-1, -1, -1), txn: bool = False
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, txn, *producer, 2**30)
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


def kafka_decode(data: bytes) -> list[tuple[Any, ...]]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


def as_tuples(records: list[Record]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def sample_records(n: int = 10, start: int = 0) -> list[Record]:
    return [Record(start + i, TS + i, b"k%09d" % i, b"v" * 100, [("h", b"x"), ("n", None)]) for i in range(n)]


# ---------------------------------------------------------------------------------------------- strategies

nullable_bytes = st.none() | st.binary(max_size=300)
headers_st = st.lists(st.tuples(st.text(max_size=20), nullable_bytes), max_size=4)


@st.composite
def record_lists(draw: st.DrawFn, base_offset: int = 0, base_ts: int = TS) -> list[Record]:
    deltas = draw(
        st.lists(st.integers(0, 2**31 - 1) | st.integers(0, 300), max_size=12, unique=True).map(sorted)
    )
    return [
        Record(
            base_offset + d,
            draw(st.integers(base_ts - 2**40, base_ts + 2**40) | st.just(base_ts)),
            draw(nullable_bytes),
            draw(nullable_bytes),
            draw(headers_st),
        )
        for d in deltas
    ]


@st.composite
def batches(draw: st.DrawFn) -> RecordBatch:
    base_offset = draw(st.integers(0, 2**62))
    base_ts = draw(st.integers(-(2**62), 2**62))
    timestamp_type = draw(st.sampled_from(TimestampType))
    max_ts = draw(st.integers(*INT64))
    records = draw(record_lists(base_offset, base_ts))
    if timestamp_type == LOG_APPEND_TIME:
        # Kafka reports the batch's max timestamp as every record's timestamp for LogAppendTime; records
        # are still written as deltas from the base timestamp, so keep it within int64 of it.
        max_ts = draw(st.integers(base_ts - 2**40, base_ts + 2**40))
        for r in records:
            r.timestamp = max_ts
    return RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=draw(st.integers(*INT32)),
        compression=draw(st.sampled_from(CODECS)),
        timestamp_type=timestamp_type,
        is_transactional=draw(st.booleans()),
        is_control=draw(st.booleans()),
        has_delete_horizon=draw(st.booleans()),
        last_offset_delta=draw(st.integers(*INT32)),
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=draw(st.integers(*INT64)),
        producer_epoch=draw(st.integers(*INT16)),
        base_sequence=draw(st.integers(*INT32)),
        records=records,
    )


# ---------------------------------------------------------------------------------------------- round trips


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_round_trip(batch: RecordBatch) -> None:
    data = encode_batch(batch)
    decoded, end = decode_batch(data)
    assert end == len(data)
    assert decoded == batch
    h = verify_crc(data)
    assert h.size == len(data)
    assert h.record_count == len(batch.records)
    assert h.attributes == batch.attributes


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None)
@given(records=record_lists())
def test_build_batch_round_trip_every_codec(codec: Compression, records: list[Record]) -> None:
    data = build_batch(records, compression=codec, producer_id=7, producer_epoch=1, base_sequence=5)
    batch, _ = decode_batch(data)
    assert batch.records == records
    assert batch.compression == codec
    assert batch.base_timestamp == (records[0].timestamp if records else -1)
    assert batch.max_timestamp == (max(r.timestamp for r in records) if records else -1)
    assert batch.last_offset_delta == (records[-1].offset if records else 0)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 5)


def test_large_fields_take_the_multi_byte_varint_paths() -> None:
    records = [
        Record(0, TS, b"k" * 9000, b"v" * 70_000, [("h" * 9000, b"x" * 20_000)]),
        Record(2**31 - 1, TS - 2**60, None, b"", [("", None)]),
        Record(100_000, 2**62, b"", None, []),
    ]
    for codec in CODECS:
        data = build_batch(records, compression=codec)
        assert decode_batch(data)[0].records == records


def test_header_keys_with_invalid_utf8_round_trip_bytewise() -> None:
    raw = kafka_build([Record(0, TS, None, b"v", [])])
    body = b"\x18\x00\x00\x00\x01\x02v\x02\x04\xff\xfe\x02x"  # one header, key bytes ff fe
    data = rebody(raw, 0, body)
    batch, _ = decode_batch(data)
    ((key, value),) = batch.records[0].headers
    assert key.encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert value == b"x"
    assert build_batch(batch.records, partition_leader_epoch=0) == data


# ---------------------------------------------------------------------------------------------- kafka-python

interop_records = st.lists(
    st.tuples(
        st.integers(0, 2**40),
        nullable_bytes,
        nullable_bytes,
        st.lists(st.tuples(st.text(max_size=10), nullable_bytes), max_size=3),
    ),
    min_size=1,
    max_size=10,
).map(lambda rows: [Record(i, TS + ts, k, v, h) for i, (ts, k, v, h) in enumerate(rows)])


@settings(max_examples=150, deadline=None)
@given(
    records=interop_records,
    producer=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1))
    | st.just((-1, -1, -1)),
    txn=st.booleans(),
)
def test_uncompressed_bytes_equal_kafka_python(
    records: list[Record], producer: tuple[int, int, int], txn: bool
) -> None:
    pid, epoch, seq = producer
    txn = txn and pid >= 0
    ours = build_batch(
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=0,  # kafka-python writes 0 where the Java producer writes -1
    )
    assert ours == kafka_build(records, 0, producer, txn)
    assert kafka_decode(ours) == as_tuples(records)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
@settings(max_examples=25, deadline=None)
@given(records=interop_records, repeat=st.integers(300, 3000))
def test_compressed_interop_with_kafka_python(codec: Compression, records: list[Record], repeat: int) -> None:
    # Repetitive values keep kafka-python from falling back to an uncompressed batch.
    records = [Record(r.offset, r.timestamp, r.key, b"abc" * repeat, r.headers) for r in records]
    theirs = kafka_build(records, codec)
    batch, _ = decode_batch(theirs)
    assert batch.compression == codec
    assert batch.records == records
    ours = build_batch(records, compression=codec)
    assert kafka_decode(ours) == as_tuples(records)


def test_header_fields_match_kafka_python() -> None:
    records = sample_records(5)
    data = kafka_build(records, 0, (123, 4, 56), txn=True)
    h = BatchHeader.parse(data, 0)
    theirs = DefaultRecordBatch(data)
    assert h.base_offset == theirs.base_offset
    assert h.size == theirs.size_in_bytes == len(data)
    assert h.crc == theirs.crc
    assert h.last_offset_delta == theirs.last_offset_delta == 4
    assert h.base_timestamp == theirs.first_timestamp
    assert h.max_timestamp == theirs.max_timestamp
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (123, 4, 56)
    assert h.is_transactional
    assert not h.is_control
    assert h.record_count == theirs.records_count == 5
    assert h.last_sequence == theirs.last_sequence == 60


def test_last_sequence_wraps_like_kafka() -> None:
    h = BatchHeader.parse(
        build_batch(sample_records(5), producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    )
    assert h.last_sequence == 2


# ---------------------------------------------------------------------------------------------- other codecs


def _payload() -> tuple[bytes, list[Record]]:
    records = [Record(i, TS + i, None, b"payload %d " % i * 200, []) for i in range(300)]
    plain = build_batch(records)
    return plain, records


def _xerial(body: bytes, block: int) -> bytes:
    out = [b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1)]  # little-endian version words, as redpanda writes
    for i in range(0, len(body), block):
        raw = bytes(cramjam.snappy.compress_raw(body[i : i + block]))
        out.append(struct.pack(">i", len(raw)) + raw)
    return b"".join(out)


def _lz4_frames() -> list[Callable[[bytes], bytes]]:
    lz4_frame = pytest.importorskip("lz4.frame")
    return [
        lambda b: lz4_frame.compress(b, block_linked=False),  # kafka-python: content size present
        lambda b: lz4_frame.compress(b, block_linked=False, content_checksum=True, block_checksum=True),
        lambda b: lz4_frame.compress(b, block_linked=True, block_size=lz4_frame.BLOCKSIZE_MAX4MB),
        lambda b: lz4_frame.compress(b, store_size=False, compression_level=9),
        lambda b: bytes(cramjam.lz4.compress(b)),
    ]


def _zstd_frames() -> list[Callable[[bytes], bytes]]:
    zstandard = pytest.importorskip("zstandard")

    def streamed(b: bytes) -> bytes:  # like zstd-jni's ZstdOutputStream: no content size in the header
        return bytes(zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(b))

    def two_frames(b: bytes) -> bytes:
        half = len(b) // 2
        return bytes(cramjam.zstd.compress(b[:half])) + streamed(b[half:])

    return [streamed, two_frames, lambda b: bytes(cramjam.zstd.compress(b, level=19))]


def test_foreign_encodings_decode() -> None:
    plain, records = _payload()
    body = plain[HEADER_SIZE:]
    variants: list[tuple[int, bytes]] = [
        (Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(body))),  # librdkafka: one raw block
        (Compression.SNAPPY, _xerial(body, 32 * 1024)),
        (Compression.SNAPPY, _xerial(body, 1000)),
        (Compression.GZIP, gzip.compress(body[:1000]) + gzip.compress(body[1000:])),  # two members
        (Compression.GZIP, gzip.compress(body, compresslevel=1)),
    ]
    variants += [(Compression.LZ4, f(body)) for f in _lz4_frames()]
    variants += [(Compression.ZSTD, f(body)) for f in _zstd_frames()]
    for codec, compressed in variants:
        batch, _ = decode_batch(rebody(plain, codec, compressed))
        assert batch.records == records, codec


def test_lz4_output_is_kafka_java_framing() -> None:
    body = bytes(range(256)) * 1000 + b"\x00" * 100_000
    out = compress(Compression.LZ4, body)
    assert out[:7] == b"\x04\x22\x4d\x18\x60\x40\x82"  # independent 64 KiB blocks, no checksums
    lz4_frame = pytest.importorskip("lz4.frame")
    assert lz4_frame.decompress(out) == body
    assert decompress(Compression.LZ4, out) == body
    incompressible = bytes(cramjam.zstd.compress(body))  # stored as an uncompressed LZ4 block
    assert decompress(Compression.LZ4, compress(Compression.LZ4, incompressible)) == incompressible


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
@pytest.mark.parametrize("level", [1, 9])
def test_compression_levels(codec: Compression, level: int) -> None:
    records = sample_records(50)
    data = build_batch(records, compression=codec, compression_level=level)
    assert decode_batch(data)[0].records == records
    assert kafka_decode(data) == as_tuples(records)


def test_snappy_output_is_xerial_framing() -> None:
    body = b"hello snappy " * 10_000
    out = compress(Compression.SNAPPY, body)
    assert out[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    snappy = pytest.importorskip("kafka.codec")
    assert snappy.snappy_decode(out) == body


# ---------------------------------------------------------------------------------------------- limits


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_decompression_bomb_is_bounded(codec: Compression) -> None:
    data = build_batch([Record(0, TS, None, bytes(8 * 1024 * 1024), [])], compression=codec)
    assert len(data) < 1024 * 1024
    with pytest.raises(DecodeError, match=r"than|larger"):
        decode_batch(data, max_decompressed=1024 * 1024)
    batch, _ = decode_batch(data, max_decompressed=9 * 1024 * 1024)
    assert batch.records[0].value == bytes(8 * 1024 * 1024)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD, Compression.SNAPPY])
def test_lying_size_headers_are_rejected_before_allocating(codec: Compression) -> None:
    plain, _ = _payload()
    if codec == Compression.LZ4:
        # A frame that claims a thousand 4 MiB blocks.
        body = b"\x04\x22\x4d\x18\x60\x70\x00" + b"\x02\x00\x00\x00\x00\x00" * 1000 + b"\x00" * 4
    elif codec == Compression.ZSTD:
        # RLE blocks claim (1 << 21) - 1 bytes each for four input bytes.
        block = (((1 << 21) - 1) << 3 | 1 << 1).to_bytes(3, "little") + b"\x00"
        body = b"\x28\xb5\x2f\xfd\x00\x58" + block * 100 + (((1 << 21) - 1) << 3 | 3).to_bytes(3, "little")
    else:
        body = b"\xff\xff\xff\xff\x0f" + b"\x00" * 20  # raw snappy claiming 4 GiB
    with pytest.raises(DecodeError):
        decode_batch(rebody(plain, codec, body), max_decompressed=1024 * 1024)


def test_record_count_larger_than_the_bytes_allow() -> None:
    plain, _ = _payload()
    for count in (301, 2**31 - 1, -1):
        with pytest.raises(DecodeError):
            decode_batch(rebody(plain, 0, plain[HEADER_SIZE:], count=count))
    with pytest.raises(DecodeError):  # fewer records than the bytes hold: trailing bytes
        decode_batch(rebody(plain, 0, plain[HEADER_SIZE:], count=299))


def test_unknown_codec_and_magic() -> None:
    plain, _ = _payload()
    with pytest.raises(DecodeError, match="codec"):
        decode_batch(rebody(plain, 5, plain[HEADER_SIZE:]))
    legacy = bytearray(plain)
    legacy[16] = 1
    with pytest.raises(DecodeError, match="magic"):
        BatchHeader.parse(legacy)


def test_encode_errors() -> None:
    with pytest.raises(EncodeError):
        build_batch([Record(5, TS, None, None, [])], base_offset=10)
    with pytest.raises(EncodeError):
        build_batch([Record(2**31, TS, None, None, [])])
    with pytest.raises(EncodeError):
        build_batch(sample_records(1), producer_epoch=2**15)
    with pytest.raises(EncodeError):
        build_batch(sample_records(1), compression=6)
    with pytest.raises(EncodeError):
        build_batch([Record(0, -(2**63), None, None, []), Record(1, 2**63 - 1, None, None, [])])


# ---------------------------------------------------------------------------------------------- crc, rewrites


def test_crc_corruption_is_corrupt_record_error() -> None:
    data = build_batch(sample_records(), compression=Compression.GZIP)
    for i in range(17, len(data)):  # crc itself and everything it covers
        corrupt = bytearray(data)
        corrupt[i] ^= 0x01
        with pytest.raises(CorruptRecordError):
            verify_crc(corrupt)
        with pytest.raises(CorruptRecordError):
            decode_batch(bytes(corrupt))
    uncovered = bytearray(data)
    uncovered[3] ^= 0xFF  # base offset and leader epoch are outside the CRC
    uncovered[14] ^= 0xFF
    verify_crc(uncovered)


@pytest.mark.parametrize("codec", CODECS)
def test_set_base_offset_and_leader_epoch_keep_crc_and_records(codec: Compression) -> None:
    records = sample_records()
    data = build_batch(records, compression=codec)
    buf = bytearray(b"junk" + data)
    set_base_offset(buf, 4, 1_000_000)
    set_partition_leader_epoch(memoryview(buf), 4, 7)
    h = verify_crc(buf, 4)
    assert h.base_offset == 1_000_000
    assert h.partition_leader_epoch == 7
    assert bytes(buf[4 + 21 :]) == data[21:]  # the CRC-covered part is untouched
    batch, end = decode_batch(buf, 4)
    assert end == len(buf)
    assert as_tuples(batch.records) == [(r.offset + 1_000_000, *as_tuples([r])[0][1:]) for r in records]
    assert kafka_decode(bytes(buf[4:]))[0][0] == 1_000_000


@pytest.mark.parametrize("codec", CODECS)
def test_set_log_append_time_updates_crc(codec: Compression) -> None:
    data = build_batch(sample_records(), compression=codec)
    buf = bytearray(data)
    set_log_append_time(memoryview(buf), 0, TS + 10_000)
    h = verify_crc(buf)
    assert h.crc != BatchHeader.parse(data).crc
    assert h.timestamp_type == LOG_APPEND_TIME
    assert h.max_timestamp == TS + 10_000
    assert buf[HEADER_SIZE:] == data[HEADER_SIZE:]  # records untouched
    batch, _ = decode_batch(buf)
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert batch.compression == codec
    assert {r.timestamp for r in batch.records} == {TS + 10_000}
    assert {t for _, t, *_ in kafka_decode(bytes(buf))} == {TS + 10_000}
    before = bytes(buf)
    set_log_append_time(buf, 0, TS + 10_000)  # unchanged: a no-op, like Java's setMaxTimestamp
    assert bytes(buf) == before


# ---------------------------------------------------------------------------------------------- scanning


def test_iter_batches_and_torn_tail() -> None:
    batches = [
        build_batch(sample_records(3), base_offset=0),
        build_batch(sample_records(2, start=3), base_offset=3, compression=Compression.ZSTD),
        build_batch([], base_offset=5),
    ]
    log = b"".join(batches)
    scan = iter_batches(log, check_crc=True)
    got = [(pos, h.base_offset, h.record_count) for pos, h in scan]
    assert got == [(0, 0, 3), (len(batches[0]), 3, 2), (len(batches[0]) + len(batches[1]), 5, 0)]
    assert scan.end == len(log)
    assert scan.error is None
    assert [b.base_offset for b in decode_batches(log)] == [0, 3, 5]

    good = len(batches[0]) + len(batches[1])
    for cut in range(good + 1, len(log)):
        scan = iter_batches(log[:cut])
        assert len(list(scan)) == 2
        assert scan.end == good
        assert isinstance(scan.error, TruncatedBatchError)
        assert list(scan) == []
        with pytest.raises(TruncatedBatchError):
            decode_batches(log[:cut])
        assert len(decode_batches(log[:cut], allow_partial_tail=True)) == 2

    garbage = bytearray(log)
    garbage[good + 30] ^= 0x55
    scan = iter_batches(garbage, check_crc=True)
    assert len(list(scan)) == 2
    assert scan.end == good
    assert isinstance(scan.error, CorruptRecordError)
    assert len(list(iter_batches(garbage))) == 3  # without the CRC check only the header is looked at


# ---------------------------------------------------------------------------------------------- control


def test_transaction_marker_batch() -> None:
    marker = end_txn_marker(True, coordinator_epoch=3, offset=42, timestamp=TS)
    data = build_batch(
        [marker], base_offset=42, producer_id=9, producer_epoch=2, is_transactional=True, is_control=True
    )
    batch, _ = decode_batch(data)
    assert batch.is_control
    assert batch.is_transactional
    (record,) = batch.records
    assert parse_control_key(record.key) == (0, ControlType.COMMIT)
    assert record.value == b"\x00\x00\x00\x00\x00\x03"
    (theirs,) = DefaultRecordBatch(data)
    assert theirs.commit
    assert theirs.offset == 42
    with pytest.raises(DecodeError):
        parse_control_key(b"\x00")
    abort = end_txn_marker(False, coordinator_epoch=1, timestamp=TS)
    assert parse_control_key(abort.key)[1] == ControlType.ABORT


def test_empty_batch_like_compaction_leaves() -> None:
    data = build_batch([], base_offset=100, last_offset_delta=9, producer_id=5, producer_epoch=0)
    batch, _ = decode_batch(data)
    assert batch.records == []
    assert batch.next_offset == 110
    assert batch.timestamp_type == CREATE_TIME
    assert batch.base_timestamp == batch.max_timestamp == -1
    horizon = build_batch(sample_records(2), delete_horizon_ms=TS - 5)
    decoded, _ = decode_batch(horizon)
    assert decoded.has_delete_horizon
    assert decoded.delete_horizon_ms == TS - 5
    assert decoded.records == sample_records(2)


# ---------------------------------------------------------------------------------------------- fuzzing


def _seed_batches() -> list[bytes]:
    records = [
        Record(0, TS, b"key", b"value" * 20, [("a", b"1"), ("b", None)]),
        Record(1, TS + 5, None, None, []),
        Record(3, TS - 5, b"", b"x" * 200, [("c", b"")]),
    ]
    return [build_batch(records, compression=c) for c in CODECS] + [
        build_batch(
            [end_txn_marker(False, 1, timestamp=TS)], is_control=True, producer_id=1, producer_epoch=0
        )
    ]


SEEDS = _seed_batches()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if action == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif action == "truncate":
            del data[i:]
        elif action == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[i : i + draw(st.integers(1, 8))]
    # Keep the length field honest half of the time so mutations reach the record decoder.
    if len(data) >= HEADER_SIZE and draw(st.booleans()):
        struct.pack_into(">i", data, 8, len(data) - 12)
    return bytes(data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(), check_crc=st.booleans())
def test_fuzz_mutated_batches_raise_only_decode_error(data: bytes, check_crc: bool) -> None:
    with contextlib.suppress(DecodeError):
        decode_batch(data, check_crc=check_crc, max_decompressed=1 << 20)
    list(iter_batches(data, check_crc=check_crc))  # reports errors in .error, never raises


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(CODECS[1:]), body=st.binary(max_size=200), seed=st.sampled_from(SEEDS))
def test_fuzz_random_compressed_bodies(codec: Compression, body: bytes, seed: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_batch(rebody(seed, codec, body), max_decompressed=1 << 16)


@given(
    pairs=st.lists(
        st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=9000)),
        min_size=1,
        max_size=9,
    ),
    timestamp=st.integers(0, 2**62),
    compression=st.sampled_from([0, 1, 2, 3, 4]),
)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
def test_keyed_batch_is_the_batch_build_batch_makes(
    pairs: list[tuple[bytes | None, bytes | None]], timestamp: int, compression: int
) -> None:
    keyed = [Record(offset=0, timestamp=0, key=k, value=v) for k, v in pairs]  # only key/value are read
    expected = build_batch(
        [Record(offset=i, timestamp=timestamp, key=k, value=v) for i, (k, v) in enumerate(pairs)],
        compression=compression,
    )
    assert build_keyed_batch(keyed, timestamp, compression=compression) == expected
