"""Kafka record batches (magic v2): decoding, encoding, in-place header rewrites and batch scanning.

Wire layout (``DefaultRecordBatch`` in the Java client)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

The CRC-32C covers everything from ``attributes`` to the end of the batch, so the broker can assign the base
offset and the partition leader epoch without recomputing it. Compressed batches compress the record bytes
only. Decoding untrusted bytes raises only :class:`DecodeError` (:class:`CorruptRecordError` for a CRC
mismatch, :class:`TruncatedBatchError` for a batch cut short) and never allocates more than the input plus
``max_decompressed``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, NamedTuple, Protocol

import cramjam
from crc32c import crc32c
from mypy_extensions import mypyc_attr

from regroup.protocol.primitives import DecodeError, EncodeError, read_uvarint, read_uvarlong

__all__ = [
    "CREATE_TIME",
    "DEFAULT_MAX_DECOMPRESSED",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "BatchScan",
    "Compression",
    "ControlType",
    "CorruptRecordError",
    "KeyedRecord",
    "Record",
    "RecordBatch",
    "TimestampType",
    "TruncatedBatchError",
    "build_batch",
    "build_keyed_batch",
    "compress",
    "decode_batch",
    "decode_batches",
    "decompress",
    "encode_batch",
    "end_txn_marker",
    "iter_batches",
    "parse_control_key",
    "set_base_offset",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "verify_crc",
]

Buffer = bytes | bytearray | memoryview


@mypyc_attr(native_class=False)  # compiled, an exception class stays a Python class
class CorruptRecordError(DecodeError):
    """The batch's CRC-32C does not match its contents (Kafka answers CORRUPT_MESSAGE)."""


@mypyc_attr(native_class=False)  # compiled, an exception class stays a Python class
class TruncatedBatchError(DecodeError):
    """The buffer ends before the batch does: a torn write, or the partial last batch of a fetch."""


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Type field of a control record's key (``ControlRecordType`` in the Java client)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4


CREATE_TIME: Final = TimestampType.CREATE_TIME
LOG_APPEND_TIME: Final = TimestampType.LOG_APPEND_TIME

MAGIC: Final = 2
HEADER_SIZE: Final = 61  # batch header up to and including the record count
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the part batchLength does not count
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1
DEFAULT_MAX_DECOMPRESSED: Final = 64 * 1024 * 1024

_MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
_PLE_OFFSET: Final = 12
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21
_MAX_TIMESTAMP_OFFSET: Final = 35
_MIN_RECORD_SIZE: Final = 7  # length, attributes, timestampDelta, offsetDelta, key, value, header count

_CODEC_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_DELETE_HORIZON_BIT: Final = 0x40

_INT32_MAX: Final = 0x7FFFFFFF

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_HEAD: Final = struct.Struct(">qiibI")  # up to and including the crc
_TAIL: Final = struct.Struct(">hiqqqhii")  # attributes .. record count: the CRC-covered header part
_I64: Final = struct.Struct(">q")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_I16: Final = struct.Struct(">h")
_CONTROL_KEY: Final = struct.Struct(">hh")
_END_TXN_VALUE: Final = struct.Struct(">hi")

_CODECS: Final = (
    Compression.NONE,
    Compression.GZIP,
    Compression.SNAPPY,
    Compression.LZ4,
    Compression.ZSTD,
    None,
    None,
    None,
)

# Unsigned varints of 0..16383 (every one- and two-byte encoding), indexed by the zig-zagged value: record
# lengths, small deltas and key/value sizes below 8 KiB then cost one tuple lookup.
_UVT: Final = tuple(bytes((z,)) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(1 << 14))
_UVT_LIMIT: Final = 1 << 14
_ZIGZAG1: Final = tuple((z >> 1) ^ -(z & 1) for z in range(0x80))  # one-byte varints, decoded


def _uvarint(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _varint32(v: int) -> bytes:
    if not -0x80000000 <= v <= _INT32_MAX:
        raise EncodeError(f"varint out of int32 range: {v}")
    z = ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF
    return _UVT[z] if z < _UVT_LIMIT else _uvarint(z)


def _varint64(v: int) -> bytes:
    if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        raise EncodeError(f"varlong out of int64 range: {v}")
    z = ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF
    return _UVT[z] if z < _UVT_LIMIT else _uvarint(z)


# ---------------------------------------------------------------------------------------------- model


@dataclass(slots=True)
class Record:
    """One record with its absolute offset and timestamp. Decoded headers are lists of ``(key, value)``;
    values may be null; keys are UTF-8 with undecodable bytes kept as surrogate escapes (Java would
    substitute U+FFFD), so every header key round-trips byte for byte."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class RecordBatch:
    """A decoded batch. ``records`` carry absolute offsets/timestamps; for LogAppendTime batches every
    record's timestamp is the batch's ``max_timestamp`` (as Kafka's ``DefaultRecordBatch`` reports it)."""

    base_offset: int = 0
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    compression: Compression = Compression.NONE
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    is_transactional: bool = False
    is_control: bool = False
    has_delete_horizon: bool = False
    last_offset_delta: int = 0
    base_timestamp: int = NO_TIMESTAMP
    max_timestamp: int = NO_TIMESTAMP
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    records: list[Record] = field(default_factory=list)

    @property
    def attributes(self) -> int:
        return _attributes(
            self.compression,
            self.timestamp_type,
            self.is_transactional,
            self.is_control,
            self.has_delete_horizon,
        )

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        return _last_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None


def _attributes(
    compression: int, timestamp_type: int, transactional: bool, control: bool, delete_horizon: bool
) -> int:
    return (
        (compression & _CODEC_MASK)
        | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
        | (_TRANSACTIONAL_BIT if transactional else 0)
        | (_CONTROL_BIT if control else 0)
        | (_DELETE_HORIZON_BIT if delete_horizon else 0)
    )


def _last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    # Sequences wrap from Int32.MAX to 0 (DefaultRecordBatch.incrementSequence).
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


class BatchHeader(NamedTuple):
    """The 61-byte batch header, parsed without touching the records."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(cls, data: Buffer, pos: int = 0) -> BatchHeader:
        """Parse and sanity-check the header at ``pos``; the whole batch must be present in ``data``."""
        if pos < 0 or len(data) - pos < HEADER_SIZE:
            raise TruncatedBatchError(f"record batch header needs {HEADER_SIZE} bytes")
        h = _HEADER.unpack_from(data, pos)
        if h[3] != MAGIC:
            raise DecodeError(f"unsupported record batch magic {h[3]}")
        if h[1] < _MIN_BATCH_LENGTH:
            raise DecodeError(f"record batch length {h[1]} is below the minimum {_MIN_BATCH_LENGTH}")
        if pos + LOG_OVERHEAD + h[1] > len(data):
            raise TruncatedBatchError(
                f"record batch of {h[1] + LOG_OVERHEAD} bytes but only {len(data) - pos} left"
            )
        if h[12] < 0:
            raise DecodeError(f"invalid record count {h[12]}")
        return tuple.__new__(cls, h)

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        return _last_sequence(self.base_sequence, self.last_offset_delta)


# ---------------------------------------------------------------------------------------------- crc, rewrites


def _crc(data: Buffer, pos: int, end: int) -> int:
    return int(crc32c(memoryview(data)[pos + _ATTRIBUTES_OFFSET : end]))


def verify_crc(data: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` and check the CRC; raises :class:`CorruptRecordError` on mismatch."""
    h = BatchHeader.parse(data, pos)
    actual = _crc(data, pos, pos + LOG_OVERHEAD + h.batch_length)
    if actual != h.crc:
        raise CorruptRecordError(f"record batch CRC {h.crc:#010x} does not match computed {actual:#010x}")
    return h


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's base offset in place (not covered by the CRC)."""
    _I64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch in place (deliberately outside the CRC in Kafka's format)."""
    _I32.pack_into(buf, pos + _PLE_OFFSET, epoch)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, timestamp_type: int, max_timestamp: int) -> None:
    """Set the timestamp type and max timestamp in place and recompute the CRC, without touching the
    records (Java's ``DefaultRecordBatch.setMaxTimestamp``; a no-op when nothing changes)."""
    h = BatchHeader.parse(buf, pos)
    attrs = h.attributes
    if bool(attrs & _TIMESTAMP_TYPE_BIT) == bool(timestamp_type) and h.max_timestamp == max_timestamp:
        return
    attrs = (attrs | _TIMESTAMP_TYPE_BIT) if timestamp_type else (attrs & ~_TIMESTAMP_TYPE_BIT)
    _I16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, attrs)
    _I64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, max_timestamp)
    _U32.pack_into(buf, pos + _CRC_OFFSET, _crc(buf, pos, pos + LOG_OVERHEAD + h.batch_length))


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp`` as its max timestamp (what a broker does for
    ``message.timestamp.type=LogAppendTime`` topics); records keep their create-time deltas."""
    set_max_timestamp(buf, pos, LOG_APPEND_TIME, timestamp)


# ---------------------------------------------------------------------------------------------- scanning


@mypyc_attr(native_class=False)  # compiled, a native __next__ returning a tuple misbehaves (mypyc 2.4)
class BatchScan:
    """Iterator of ``(pos, header)`` over consecutive batches. It stops at the end of the data or at the
    first batch that is truncated, malformed or (with ``check_crc``) corrupt; ``end`` is then the offset just
    past the last good batch and ``error`` the reason it stopped early (``None`` after a clean end)."""

    __slots__ = ("_check_crc", "_data", "_limit", "end", "error")

    def __init__(self, data: Buffer, pos: int, check_crc: bool) -> None:
        self._data = data
        self._limit = len(data)
        self._check_crc = check_crc
        self.end = pos
        self.error: DecodeError | None = None

    def __iter__(self) -> BatchScan:
        return self

    def __next__(self) -> tuple[int, BatchHeader]:
        pos = self.end
        if pos >= self._limit:
            raise StopIteration
        try:
            h = verify_crc(self._data, pos) if self._check_crc else BatchHeader.parse(self._data, pos)
        except DecodeError as exc:
            self.error = exc
            self._limit = pos
            raise StopIteration from None
        self.end = pos + LOG_OVERHEAD + h.batch_length
        return pos, h


def iter_batches(data: Buffer, pos: int = 0, *, check_crc: bool = False) -> BatchScan:
    """Scan the batches in ``data`` from ``pos`` without decoding records (log recovery, produce checks)."""
    return BatchScan(data, pos, check_crc)


# ---------------------------------------------------------------------------------------------- decoding


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    z, pos = read_uvarint(buf, pos)
    return (z >> 1) ^ -(z & 1), pos


def _read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    z, pos = read_uvarlong(buf, pos)
    return (z >> 1) ^ -(z & 1), pos


def _decode_records(
    buf: bytes, pos: int, end: int, *, count: int, base_offset: int, base_ts: int, lat: int | None
) -> list[Record]:
    """Decode ``count`` records occupying exactly ``buf[pos:end]``.

    One- and two-byte varints (every length below 8 KiB, every delta below 8192) are decoded inline; the
    function-call fallback costs as much as the rest of a record.
    """
    if count * _MIN_RECORD_SIZE > end - pos:
        raise DecodeError(f"record count {count} cannot fit in {end - pos} bytes")
    records: list[Record] = []
    append = records.append
    rv = _read_varint
    zz = _ZIGZAG1
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = rv(buf, pos)
            rec_end = pos + length
            if length < _MIN_RECORD_SIZE - 1 or rec_end > end:
                raise DecodeError(f"invalid record length {length}")
            # pos is at the record attributes byte: unused by Kafka, skipped as the Java client does.
            b = buf[pos + 1]
            if b < 0x80:
                ts_delta = zz[b]
                pos += 2
            elif (c := buf[pos + 2]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                ts_delta = (z >> 1) ^ -(z & 1)
                pos += 3
            else:
                ts_delta, pos = _read_varlong(buf, pos + 1)
            b = buf[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                offset_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                offset_delta, pos = rv(buf, pos)
            b = buf[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                n = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                n, pos = rv(buf, pos)
            # Like the Java client, any negative length means null.
            if n >= 0:
                e = pos + n
                if e > rec_end:
                    raise DecodeError(f"key of {n} bytes overruns its record")
                key: bytes | None = buf[pos:e]
                pos = e
            else:
                key = None
            b = buf[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                n = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                n, pos = rv(buf, pos)
            if n >= 0:
                e = pos + n
                if e > rec_end:
                    raise DecodeError(f"value of {n} bytes overruns its record")
                value: bytes | None = buf[pos:e]
                pos = e
            else:
                value = None
            b = buf[pos]
            if b < 0x80:
                header_count = zz[b]
                pos += 1
            else:
                header_count, pos = rv(buf, pos)
            headers: list[tuple[str, bytes | None]] = []
            if header_count:
                if header_count < 0 or header_count * 2 > rec_end - pos:
                    raise DecodeError(f"invalid header count {header_count}")
                # The loop's bound is its own variable: mypyc (2.4) reads a range's bound again on every
                # iteration, so reusing ``n`` for the lengths inside cut the loop short when compiled.
                for _ in range(header_count):
                    b = buf[pos]
                    if b < 0x80:
                        n = zz[b]
                        pos += 1
                    else:
                        n, pos = rv(buf, pos)
                    e = pos + n
                    if n < 0 or e > rec_end:
                        raise DecodeError(f"invalid header key size {n}")
                    hk = buf[pos:e].decode("utf-8", "surrogateescape")
                    b = buf[e]
                    if b < 0x80:
                        n = zz[b]
                        pos = e + 1
                    else:
                        n, pos = rv(buf, e)
                    if n >= 0:
                        e = pos + n
                        if e > rec_end:
                            raise DecodeError(f"header value of {n} bytes overruns its record")
                        headers.append((hk, buf[pos:e]))
                        pos = e
                    else:
                        headers.append((hk, None))
            if pos != rec_end:
                raise DecodeError(
                    f"record declared {length} bytes but its fields span {pos - rec_end + length}"
                )
            append(
                Record(
                    base_offset + offset_delta,
                    base_ts + ts_delta if lat is None else lat,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError:
        raise DecodeError("record extends past the end of the batch") from None
    if pos != end:
        raise DecodeError(f"{end - pos} bytes left after the last of {count} records")
    return records


def decode_batch(
    data: Buffer,
    pos: int = 0,
    *,
    check_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> tuple[RecordBatch, int]:
    """Decode the batch at ``pos``; returns it and the position just past it."""
    h = verify_crc(data, pos) if check_crc else BatchHeader.parse(data, pos)
    start = pos + HEADER_SIZE
    end = pos + LOG_OVERHEAD + h.batch_length
    attrs = h.attributes
    codec = _CODECS[attrs & _CODEC_MASK]
    if codec is None:
        raise DecodeError(f"unknown compression codec {attrs & _CODEC_MASK}")
    if codec is Compression.NONE:
        if type(data) is bytes:
            buf, p, e = data, start, end
        else:
            buf = bytes(memoryview(data)[start:end])
            p, e = 0, len(buf)
    else:
        buf = decompress(codec, memoryview(data)[start:end], max_decompressed)
        p, e = 0, len(buf)
    lat_ts = h.max_timestamp if attrs & _TIMESTAMP_TYPE_BIT else None
    records = _decode_records(
        buf, p, e, count=h.record_count, base_offset=h.base_offset, base_ts=h.base_timestamp, lat=lat_ts
    )
    batch = RecordBatch(
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        compression=codec,
        timestamp_type=LOG_APPEND_TIME if lat_ts is not None else CREATE_TIME,
        is_transactional=bool(attrs & _TRANSACTIONAL_BIT),
        is_control=bool(attrs & _CONTROL_BIT),
        has_delete_horizon=bool(attrs & _DELETE_HORIZON_BIT),
        last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        records=records,
    )
    return batch, end


def decode_batches(
    data: Buffer,
    *,
    check_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    allow_partial_tail: bool = False,
) -> list[RecordBatch]:
    """Decode every batch in ``data``. A trailing partial batch raises :class:`TruncatedBatchError`
    unless ``allow_partial_tail`` (fetch responses may legitimately end in one)."""
    batches: list[RecordBatch] = []
    pos = 0
    while pos < len(data):
        try:
            batch, pos = decode_batch(data, pos, check_crc=check_crc, max_decompressed=max_decompressed)
        except TruncatedBatchError:
            if allow_partial_tail:
                break
            raise
        batches.append(batch)
    return batches


# ---------------------------------------------------------------------------------------------- control


def parse_control_key(key: bytes | None) -> tuple[int, int]:
    """``(version, type)`` of a control record key; compare ``type`` with :class:`ControlType`."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise DecodeError("control record key shorter than 4 bytes")
    version, ctype = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise DecodeError(f"invalid control record key version {version}")
    return version, ctype


def end_txn_marker(commit: bool, coordinator_epoch: int, *, offset: int = 0, timestamp: int) -> Record:
    """The single record of a transaction marker batch; build it with ``is_control=True,
    is_transactional=True`` and the producer's id and epoch."""
    return Record(
        offset,
        timestamp,
        _CONTROL_KEY.pack(0, ControlType.COMMIT if commit else ControlType.ABORT),
        _END_TXN_VALUE.pack(0, coordinator_epoch),
        [],
    )


# ---------------------------------------------------------------------------------------------- encoding


def _encode_records(records: Sequence[Record], base_offset: int, base_ts: int) -> tuple[bytes, int]:
    """The records section and the largest record timestamp (``NO_TIMESTAMP`` if there are none)."""
    uvt = _UVT
    join = b"".join
    parts: list[bytes] = []
    append = parts.append
    max_ts = NO_TIMESTAMP
    first = True
    for r in records:
        od = r.offset - base_offset
        if not 0 <= od <= _INT32_MAX:
            raise EncodeError(f"record offset {r.offset} is not within int32 of base offset {base_offset}")
        ts = r.timestamp
        if first or ts > max_ts:
            max_ts = ts
            first = False
        td = ts - base_ts
        z = (td << 1) ^ (td >> 63)
        tdv = uvt[z] if 0 <= z < _UVT_LIMIT else _varint64(td)
        odv = uvt[od << 1] if od < 8192 else _varint32(od)
        key = r.key
        if key is None:
            klv = b"\x01"
            key = b""
        else:
            n = len(key)
            klv = uvt[n << 1] if n < 8192 else _varint32(n)
        value = r.value
        if value is None:
            vlv = b"\x01"
            value = b""
        else:
            n = len(value)
            vlv = uvt[n << 1] if n < 8192 else _varint32(n)
        hs = r.headers
        if hs:
            n = len(hs)
            rec = [b"\x00", tdv, odv, klv, key, vlv, value, uvt[n << 1] if n < 8192 else _varint32(n)]
            for hk, hv in hs:
                kb = hk.encode("utf-8", "surrogateescape")
                n = len(kb)
                if hv is None:
                    rec += (uvt[n << 1] if n < 8192 else _varint32(n), kb, b"\x01")
                else:
                    m = len(hv)
                    rec += (
                        uvt[n << 1] if n < 8192 else _varint32(n),
                        kb,
                        uvt[m << 1] if m < 8192 else _varint32(m),
                        hv,
                    )
            body = join(rec)
        else:
            body = join((b"\x00", tdv, odv, klv, key, vlv, value, b"\x00"))
        n = len(body)
        append(uvt[n << 1] if n < 8192 else _varint32(n))
        append(body)
    return join(parts), max_ts


def _assemble(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    body: bytes,
) -> bytes:
    try:
        tail = _TAIL.pack(
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
        head = _HEAD.pack(
            base_offset, batch_length, partition_leader_epoch, MAGIC, crc32c(body, crc32c(tail))
        )
    except struct.error as exc:
        raise EncodeError(f"record batch header field out of range: {exc}") from None
    return b"".join((head, tail, body))


def encode_batch(batch: RecordBatch, *, compression_level: int | None = None) -> bytes:
    """Encode ``batch`` with its header fields exactly as given (record deltas are taken relative to
    ``base_offset`` and ``base_timestamp``)."""
    body, _ = _encode_records(batch.records, batch.base_offset, batch.base_timestamp)
    if batch.compression:
        body = compress(batch.compression, body, compression_level)
    return _assemble(
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=batch.attributes,
        last_offset_delta=batch.last_offset_delta,
        base_ts=batch.base_timestamp,
        max_ts=batch.max_timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        count=len(batch.records),
        body=body,
    )


class KeyedRecord(Protocol):
    """A record known only by its key and value (the group coordinator's ``__consumer_offsets`` records)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


def build_keyed_batch(
    records: Sequence[KeyedRecord], timestamp: int, *, compression: Compression | int = Compression.NONE
) -> bytes:
    """The batch :func:`build_batch` builds for these keys and values at offsets 0, 1, … all stamped
    ``timestamp``, without headers — without building a :class:`Record` for each (the coordinator appends
    one such batch per commit)."""
    if not records:
        return build_batch([], compression=compression)
    uvt = _UVT
    join = b"".join
    parts: list[bytes] = []
    append = parts.append
    for od, r in enumerate(records):
        key = r.key
        if key is None:
            klv = b"\x01"
            key = b""
        else:
            n = len(key)
            klv = uvt[n << 1] if n < 8192 else _varint32(n)
        value = r.value
        if value is None:
            vlv = b"\x01"
            value = b""
        else:
            n = len(value)
            vlv = uvt[n << 1] if n < 8192 else _varint32(n)
        # attributes 0, timestamp delta 0, then the offset delta
        body = join(
            (b"\x00\x00", uvt[od << 1] if od < 8192 else _varint32(od), klv, key, vlv, value, b"\x00")
        )
        n = len(body)
        append(uvt[n << 1] if n < 8192 else _varint32(n))
        append(body)
    data = join(parts)
    if compression not in (0, 1, 2, 3, 4):
        raise EncodeError(f"unknown compression codec {compression}")
    if compression:
        data = compress(compression, data)
    return _assemble(
        base_offset=0,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        attributes=_attributes(compression, CREATE_TIME, False, False, False),
        last_offset_delta=len(records) - 1,
        base_ts=timestamp,
        max_ts=timestamp,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        count=len(records),
        body=data,
    )


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType | int = CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Build a batch the way a producer (or Kafka's ``MemoryRecordsBuilder``) does: the base timestamp
    is the first record's (or ``delete_horizon_ms``), the max timestamp the largest record timestamp (or
    ``max_timestamp``, e.g. the broker time for LogAppendTime), the last offset delta the last record's
    (or ``last_offset_delta``, for compacted batches). Each record's offset must be within int32 above
    ``base_offset``."""
    if compression not in (0, 1, 2, 3, 4):
        raise EncodeError(f"unknown compression codec {compression}")
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    else:
        base_ts = records[0].timestamp if records else NO_TIMESTAMP
    body, max_ts = _encode_records(records, base_offset, base_ts)
    if max_timestamp is not None:
        max_ts = max_timestamp
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    if compression:
        body = compress(compression, body, compression_level)
    attrs = _attributes(
        compression, timestamp_type, is_transactional, is_control, delete_horizon_ms is not None
    )
    return _assemble(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attrs,
        last_offset_delta=last_offset_delta,
        base_ts=base_ts,
        max_ts=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=len(records),
        body=body,
    )


# ---------------------------------------------------------------------------------------------- compression

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024  # snappy-java's SnappyOutputStream default block size
# LZ4 frame header as Kafka's KafkaLZ4BlockOutputStream writes it: version 1, independent blocks, no
# checksums, no content size, 64 KiB blocks; 0x82 is the xxh32-derived header checksum of (0x60, 0x40).
_LZ4_FRAME_HEADER: Final = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK: Final = 64 * 1024
_LZ4_MAGIC: Final = 0x184D2204
_ZSTD_MAGIC: Final = 0xFD2FB528
_SKIPPABLE_MASK: Final = 0xFFFFFFF0
_SKIPPABLE_MAGIC: Final = 0x184D2A50
_ZSTD_BLOCK_MAX: Final = 128 * 1024
_LE32: Final = struct.Struct("<I")


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress a records section the way the Java producer does (gzip level 6, snappy-java xerial
    framing, Kafka-style LZ4 frames with independent blocks, zstd level 3 unless ``level`` is given)."""
    if codec == Compression.GZIP:
        return zlib.compress(data, 6 if level is None else level, wbits=31)
    if codec == Compression.SNAPPY:
        mv = memoryview(data)
        parts = [_XERIAL_HEADER]
        for i in range(0, len(mv), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(mv[i : i + _XERIAL_BLOCK]))
            parts.append(_I32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        if level is not None:
            # Like Java, an explicit level means LZ4HC. cramjam's frame compressor (liblz4) is the only
            # path that honours levels; its frames add block checksums, which every Kafka client verifies.
            compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
            compressor.compress(data if isinstance(data, bytes) else bytes(data))
            return bytes(compressor.finish())
        mv = memoryview(data)
        parts = [_LZ4_FRAME_HEADER]
        for i in range(0, len(mv), _LZ4_BLOCK):
            chunk = mv[i : i + _LZ4_BLOCK]
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            if len(block) >= len(chunk):
                parts.append(_LE32.pack(len(chunk) | 0x80000000))  # stored uncompressed
                parts.append(bytes(chunk))
            else:
                parts.append(_LE32.pack(len(block)))
                parts.append(block)
        parts.append(b"\x00\x00\x00\x00")
        return b"".join(parts)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    if codec == Compression.NONE:
        return bytes(data)
    raise EncodeError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress a records section; output above ``max_size`` bytes, like any invalid input, raises
    :class:`DecodeError` before more than ``max_size`` bytes are produced."""
    if codec == Compression.GZIP:
        return _gunzip(data, max_size)
    if codec == Compression.SNAPPY:
        return _unsnappy(bytes(data), max_size)
    if codec == Compression.LZ4:
        raw = bytes(data)
        return _bounded_into(cramjam.lz4.decompress_into, raw, _lz4_bound(raw), max_size, "lz4")
    if codec == Compression.ZSTD:
        raw = bytes(data)
        return _bounded_into(cramjam.zstd.decompress_into, raw, _zstd_bound(raw), max_size, "zstd")
    if codec == Compression.NONE:
        return bytes(data)
    raise DecodeError(f"unknown compression codec {codec}")


def _gunzip(data: Buffer, max_size: int) -> bytes:
    # Streaming zlib honours max_length, so a gzip bomb stops at max_size + 1 bytes. Concatenated members
    # are accepted, as by Java's GZIPInputStream.
    out: list[bytes] = []
    total = 0
    rest: Buffer = data
    try:
        while True:
            d = zlib.decompressobj(wbits=31)
            chunk = d.decompress(rest, max_size - total + 1)
            total += len(chunk)
            if total > max_size:
                raise DecodeError(f"gzip records decompress to more than {max_size} bytes")
            out.append(chunk)
            if not d.eof:
                raise DecodeError("truncated gzip records")
            rest = d.unused_data
            if not rest:
                return b"".join(out)
    except zlib.error as exc:
        raise DecodeError(f"invalid gzip records: {exc}") from None


def _unsnappy(data: bytes, max_size: int) -> bytes:
    # Java producers write snappy-java's xerial framing; librdkafka writes one raw snappy block. Every raw
    # block states its uncompressed length up front, which is checked before anything is allocated.
    try:
        if len(data) >= len(_XERIAL_HEADER) and data.startswith(_XERIAL_MAGIC):
            # The version/compat words are ignored, as kafka-python does (some producers write them
            # little-endian).
            out: list[bytes] = []
            total = 0
            pos = len(_XERIAL_HEADER)
            n = len(data)
            while pos < n:
                if pos + 4 > n:
                    raise DecodeError("truncated xerial snappy block length")
                (size,) = _I32.unpack_from(data, pos)
                pos += 4
                if size < 0 or pos + size > n:
                    raise DecodeError(f"invalid xerial snappy block length {size}")
                block = data[pos : pos + size]
                pos += size
                total += cramjam.snappy.decompress_raw_len(block)
                if total > max_size:
                    raise DecodeError(f"snappy records decompress to more than {max_size} bytes")
                out.append(bytes(cramjam.snappy.decompress_raw(block)))
            return b"".join(out)
        if cramjam.snappy.decompress_raw_len(data) > max_size:
            raise DecodeError(f"snappy records decompress to more than {max_size} bytes")
        return bytes(cramjam.snappy.decompress_raw(data))
    except DecodeError:
        raise
    except Exception as exc:  # cramjam reports bad input with assorted exception types
        raise DecodeError(f"invalid snappy records: {exc}") from None


def _bounded_into(
    fn: Callable[[bytes, bytearray], int], data: bytes, bound: int, max_size: int, name: str
) -> bytes:
    # ``bound`` is an upper limit read off the frame and block headers, so the output buffer is sized
    # without decompressing twice; cramjam stops with an error once the buffer is full.
    out = bytearray(min(bound, max_size))
    try:
        n = fn(data, out)
    except Exception as exc:  # cramjam.DecompressionError, or a ValueError for odd inputs
        if bound > max_size:
            raise DecodeError(f"{name} records invalid or larger than {max_size} bytes") from None
        raise DecodeError(f"invalid {name} records: {exc}") from None
    del out[n:]
    return bytes(out)


def _lz4_bound(data: bytes) -> int:
    """Upper bound of an LZ4 frame sequence's decompressed size: stored blocks count exactly, compressed
    ones as the frame's maximum block size."""
    n = len(data)
    pos = 0
    total = 0
    try:
        while pos < n:
            (magic,) = _LE32.unpack_from(data, pos)
            if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
                pos += 8 + _LE32.unpack_from(data, pos + 4)[0]
                continue
            if magic != _LZ4_MAGIC:
                raise DecodeError("not an LZ4 frame")
            flg = data[pos + 4]
            block_id = (data[pos + 5] >> 4) & 7
            if flg >> 6 != 1 or block_id < 4:
                raise DecodeError("unsupported LZ4 frame descriptor")
            block_max = 1 << (8 + 2 * block_id)
            pos += 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
            block_checksum = 4 if flg & 0x10 else 0
            while True:
                (size,) = _LE32.unpack_from(data, pos)
                pos += 4
                if size == 0:
                    break
                stored = size & 0x7FFFFFFF
                total += stored if size & 0x80000000 else block_max
                pos += stored + block_checksum
            pos += 4 if flg & 0x04 else 0
    except (struct.error, IndexError):
        raise DecodeError("truncated LZ4 frame") from None
    if pos > n:
        raise DecodeError("truncated LZ4 frame")
    return total


_ZSTD_DID_SIZE: Final = (0, 1, 2, 4)
_ZSTD_FCS_SIZE: Final = (0, 2, 4, 8)


def _zstd_bound(data: bytes) -> int:
    """Upper bound of a zstd frame sequence's decompressed size, from the frame content sizes where
    present and otherwise from the block headers (frames from streaming writers such as zstd-jni omit it)."""
    n = len(data)
    pos = 0
    total = 0
    try:
        while pos < n:
            (magic,) = _LE32.unpack_from(data, pos)
            if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
                pos += 8 + _LE32.unpack_from(data, pos + 4)[0]
                continue
            if magic != _ZSTD_MAGIC:
                raise DecodeError("not a zstd frame")
            fhd = data[pos + 4]
            pos += 5
            if fhd & 0x08:
                raise DecodeError("zstd frame header reserved bit set")
            single_segment = fhd & 0x20
            window = 0
            if not single_segment:
                wd = data[pos]
                pos += 1
                window_base = 1 << (10 + (wd >> 3))
                window = window_base + (window_base >> 3) * (wd & 7)
            pos += _ZSTD_DID_SIZE[fhd & 3]
            fcs_size = _ZSTD_FCS_SIZE[fhd >> 6] or (1 if single_segment else 0)
            content_size = -1
            if fcs_size:
                if pos + fcs_size > n:
                    raise DecodeError("truncated zstd frame header")
                content_size = int.from_bytes(data[pos : pos + fcs_size], "little")
                if fcs_size == 2:
                    content_size += 256
                pos += fcs_size
            if single_segment:
                window = content_size
            block_max = min(window, _ZSTD_BLOCK_MAX)
            frame_total = 0
            while True:
                bh = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
                pos += 3
                block_type = (bh >> 1) & 3
                size = bh >> 3
                if block_type == 0:  # raw
                    frame_total += size
                    pos += size
                elif block_type == 1:  # RLE: one byte repeated `size` times
                    frame_total += size
                    pos += 1
                elif block_type == 2:
                    frame_total += block_max
                    pos += size
                else:
                    raise DecodeError("reserved zstd block type")
                if bh & 1:
                    break
            pos += 4 if fhd & 0x04 else 0
            total += frame_total if content_size < 0 else min(content_size, frame_total)
    except (struct.error, IndexError):
        raise DecodeError("truncated zstd frame") from None
    if pos > n:
        raise DecodeError("truncated zstd frame")
    return total
