"""Vectorised decoding of Kafka RecordBatch v2 bytes into Arrow columns.

Batches are found by walking their length prefixes; everything else — header fields, the varint fields of
every record, keys, values and headers — is decoded with numpy over all batches of a chunk at once, and
byte strings are cut out of the chunk by Arrow's ``take`` (C++ memcpy), never one Python object per record.
Control batches are skipped, as consumers skip them. Compressed batches are decompressed one by one with
regroup's codecs and decoded together afterwards.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
from numpy.typing import NDArray

from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC, decompress

__all__ = [
    "COMMIT_ARROW_SCHEMA",
    "CONSUMER_GROUP_METADATA_TYPE",
    "CONSUMER_GROUP_RECORD_TYPES",
    "GROUP_METADATA_TYPE",
    "OFFSET_COMMIT_TYPES",
    "RAW_ARROW_SCHEMA",
    "TIMESTAMP",
    "BatchIndex",
    "Records",
    "binary_parts",
    "decode_records",
    "index_batches",
    "key_ids",
    "records_to_arrow",
    "slice_binary",
]

I64 = NDArray[np.int64]
U8 = NDArray[np.uint8]
BoolArr = NDArray[np.bool_]

_LENGTH: Final = struct.Struct(">i")
_CODEC_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_CONTROL_BIT: Final = 0x20
_MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
_INT32_LIMIT: Final = 2**31 - 1

TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
# Key types of ``__consumer_offsets`` records (the version a record's key starts with): offset commits,
# classic groups' GroupMetadata, and the KIP-848 consumer groups' records (metadata first).
OFFSET_COMMIT_TYPES: Final = (0, 1)
GROUP_METADATA_TYPE: Final = 2
CONSUMER_GROUP_METADATA_TYPE: Final = 3
CONSUMER_GROUP_RECORD_TYPES: Final = (3, 4, 5, 6, 7, 8, 16)
HEADER_TYPE: Final = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
# Same names, order and types as Spark's Kafka source with includeHeaders=true.
RAW_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADER_TYPE),
    ]
)

# One offset commit per row: what both the compiled scan and the general decoders of ``__consumer_offsets``
# produce.
COMMIT_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("committed_offset", pa.int64()),
        pa.field("leader_epoch", pa.int32()),
        pa.field("metadata", pa.string()),
        pa.field("commit_timestamp", TIMESTAMP),
        pa.field("expire_timestamp", TIMESTAMP),
        pa.field("deleted", pa.bool_()),
        pa.field("key_version", pa.int32()),
        pa.field("value_version", pa.int32()),
        pa.field("record_partition", pa.int32()),
        pa.field("record_offset", pa.int64()),
        pa.field("record_timestamp", TIMESTAMP),
    ]
)


# ----------------------------------------------------------------------------------------- big-endian gathers


def be_int(buf: U8, pos: I64, width: int) -> I64:
    """Signed big-endian integers of ``width`` bytes at each position of ``pos``: one gather from a view of
    ``buf`` whose items are the overlapping ``width``-byte windows at every byte position."""
    if pos.size == 0:
        return np.zeros(0, np.int64)
    if buf.size < width:
        raise IndexError("buffer shorter than the field")
    windows: NDArray[Any] = np.ndarray(
        (buf.size - width + 1,), np.dtype(f">i{width}"), buffer=buf, strides=(1,)
    )
    return windows[pos].astype(np.int64)


def uvarint(buf: U8, pos: I64, max_bytes: int) -> tuple[NDArray[np.uint64], I64]:
    """Unsigned LEB128 varints at each position: (values, positions just after them)."""
    byte = buf[pos].astype(np.uint64)
    value = byte & np.uint64(0x7F)
    size = np.ones(pos.size, np.int64)
    active = np.flatnonzero(byte & np.uint64(0x80))
    shift = 7
    while active.size:
        if shift >= 7 * max_bytes:
            raise DecodeError(f"varint longer than {max_bytes} bytes")
        byte = buf[pos[active] + size[active]].astype(np.uint64)
        value[active] |= (byte & np.uint64(0x7F)) << np.uint64(shift)
        size[active] += 1
        active = active[(byte & np.uint64(0x80)) != 0]
        shift += 7
    return value, pos + size


def varint(buf: U8, pos: I64, max_bytes: int = 5) -> tuple[I64, I64]:
    """Zig-zag signed varints (``max_bytes`` 5 for int32, 10 for int64)."""
    first = buf[pos]
    if not bool((first >= 0x80).any()):
        small = first.astype(np.int64)  # every value fits in one byte: the common case
        return (small >> 1) ^ -(small & 1), pos + 1
    value, end = uvarint(buf, pos, max_bytes)
    decoded = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return decoded, end


# ------------------------------------------------------------------------------------------ byte slices


def binary_parts(arr: Any) -> tuple[U8, I64, I64]:
    """(data bytes, value starts, value lengths with −1 for null) of an Arrow binary array; the data is
    cut to the bytes the array uses (a slice of a bigger array shares its whole buffer)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offset_type: Any = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    _validity, offsets_buf, data_buf = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(offsets_buf, offset_type, n + 1, arr.offset * np.dtype(offset_type).itemsize)
    offsets = offsets.astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, np.uint8, hi - lo, lo) if data_buf is not None and hi > lo else _EMPTY
    starts = offsets[:-1] - lo
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), -1, lengths)
    return data, starts, lengths


_EMPTY: Final = np.zeros(0, np.uint8)


def slice_binary(data: Any, starts: I64, lengths: I64, *, string: bool = False) -> Any:
    """An Arrow binary (or string) array of ``data[starts[i] : starts[i] + lengths[i]]``; a negative length
    gives null. ``starts`` must be ascending and the slices must not overlap, which holds for fields cut
    from records in log order.

    The slices become the even elements of one array whose offsets interleave their bounds (the odd
    elements are the gaps between them); Arrow's ``take`` then copies them into a compact array.
    """
    typ = pa.string() if string else pa.binary()
    n = int(starts.size)
    if n == 0:
        return pa.array([], type=typ)
    ends = starts + np.maximum(lengths, 0)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    large = bool(bounds[-1] > _INT32_LIMIT)
    wide_type = (pa.large_string() if string else pa.large_binary()) if large else typ
    offsets = bounds if large else bounds.astype(np.int32)
    interleaved = pa.Array.from_buffers(wide_type, 2 * n - 1, [None, pa.py_buffer(offsets), buffer])
    null = lengths < 0
    index = pa.array(np.arange(0, 2 * n, 2, dtype=np.int64), mask=null if null.any() else None)
    out = interleaved.take(index)
    return out.cast(typ) if large else out


def repeat_string(value: str, n: int) -> Any:
    """A string array holding ``value`` ``n`` times, built without a Python object per element."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if n and offsets[-1] > _INT32_LIMIT:
        return pa.array([value] * n, type=pa.string())
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw * n)]
    )


# ------------------------------------------------------------------------------------------ batches


@dataclass(frozen=True, slots=True)
class BatchIndex:
    """Header fields of the complete batches found in a buffer (one array element per batch)."""

    positions: I64
    base_offset: I64
    batch_length: I64
    attributes: I64
    last_offset_delta: I64
    base_timestamp: I64
    max_timestamp: I64
    record_count: I64
    end: int  # position just past the last complete batch

    @property
    def next_offset(self) -> int | None:
        """The offset after the last batch (the log end offset if the buffer reaches the log's end)."""
        if self.positions.size == 0:
            return None
        return int(self.base_offset[-1] + self.last_offset_delta[-1] + 1)


def index_batches(
    data: bytes | bytearray | memoryview, start: int = 0, limit: int | None = None
) -> BatchIndex:
    """Find the batches starting in ``[start, limit)`` (a batch may end past ``limit`` if ``data`` holds
    it); stop at the first truncated or malformed one, as log recovery does with a torn tail."""
    end_of_data = len(data)
    limit = end_of_data if limit is None else min(limit, end_of_data)
    unpack = _LENGTH.unpack_from
    positions: list[int] = []
    append = positions.append
    pos = start
    while pos < limit and pos + HEADER_SIZE <= end_of_data:
        (length,) = unpack(data, pos + 8)
        nxt = pos + LOG_OVERHEAD + length
        if length < _MIN_BATCH_LENGTH or nxt > end_of_data:
            break
        append(pos)
        pos = nxt
    buf = np.frombuffer(data, np.uint8)
    p = np.asarray(positions, np.int64)
    magic = buf[p + 16] if p.size else np.zeros(0, np.uint8)
    bad = np.flatnonzero(magic != MAGIC)
    if bad.size:
        # Magic v0/v1 message sets predate Kafka 0.11 and are not read; stop before them like a torn tail.
        p = p[: bad[0]]
    end = int(p[-1] + LOG_OVERHEAD + be_int(buf, p[-1:] + 8, 4)[0]) if p.size else start
    return BatchIndex(
        positions=p,
        base_offset=be_int(buf, p, 8),
        batch_length=be_int(buf, p + 8, 4),
        attributes=be_int(buf, p + 21, 2),
        last_offset_delta=be_int(buf, p + 23, 4),
        base_timestamp=be_int(buf, p + 27, 8),
        max_timestamp=be_int(buf, p + 35, 8),
        record_count=be_int(buf, p + 57, 4),
        end=end,
    )


# ------------------------------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class Records:
    """Decoded records of a chunk: parallel arrays, with keys, values and header fields as positions into
    ``buffer`` (length −1 for null)."""

    buffer: U8
    offset: I64
    timestamp: I64  # milliseconds
    timestamp_type: I64
    key_start: I64
    key_length: I64
    value_start: I64
    value_length: I64
    header_offsets: I64  # n + 1 offsets into the header arrays
    header_key_start: I64
    header_key_length: I64
    header_value_start: I64
    header_value_length: I64

    @property
    def count(self) -> int:
        return int(self.offset.size)

    def select(self, mask: BoolArr) -> Records:
        """Keep the records where ``mask`` is true."""
        if bool(mask.all()):
            return self
        counts = np.diff(self.header_offsets)[mask]
        keep_headers = np.repeat(mask, np.diff(self.header_offsets))
        offsets = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Records(
            buffer=self.buffer,
            offset=self.offset[mask],
            timestamp=self.timestamp[mask],
            timestamp_type=self.timestamp_type[mask],
            key_start=self.key_start[mask],
            key_length=self.key_length[mask],
            value_start=self.value_start[mask],
            value_length=self.value_length[mask],
            header_offsets=offsets,
            header_key_start=self.header_key_start[keep_headers],
            header_key_length=self.header_key_length[keep_headers],
            header_value_start=self.header_value_start[keep_headers],
            header_value_length=self.header_value_length[keep_headers],
        )


def _records_regions(data: bytes | bytearray | memoryview, idx: BatchIndex, keep: I64) -> tuple[U8, I64, I64]:
    """The buffer holding the records of the batches ``keep`` and where each batch's records start/end."""
    pos = idx.positions[keep]
    starts = pos + HEADER_SIZE
    ends = pos + LOG_OVERHEAD + idx.batch_length[keep]
    codecs = idx.attributes[keep] & _CODEC_MASK
    if not codecs.any():
        return np.frombuffer(data, np.uint8), starts, ends
    view = memoryview(data)
    pieces: list[bytes | memoryview] = []
    for s, e, codec in zip(starts.tolist(), ends.tolist(), codecs.tolist(), strict=True):
        pieces.append(decompress(codec, view[s:e]) if codec else view[s:e])
    sizes = np.fromiter((len(p) for p in pieces), np.int64, len(pieces))
    new_ends = np.cumsum(sizes)
    return np.frombuffer(b"".join(pieces), np.uint8), new_ends - sizes, new_ends


# zig-zag decoding of one-byte varints
_ZIGZAG1: Final = tuple((b >> 1) ^ -(b & 1) for b in range(128))


def _record_starts(
    buf: bytes, region_start: list[int], region_end: list[int], counts: list[int]
) -> list[int]:
    """Where each record starts. A record's position depends on the previous record's length, so this is
    the one sequential pass; it reads only each record's length varint (inline for one and two bytes)."""
    starts: list[int] = []
    append = starts.append
    zz = _ZIGZAG1
    for start, end, count in zip(region_start, region_end, counts, strict=True):
        pos = start
        for _ in range(count):
            append(pos)
            b = buf[pos]
            if b < 0x80:
                pos += 1 + zz[b]
            elif (c := buf[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                pos += 2 + ((z >> 1) ^ -(z & 1))
            else:
                z, shift = 0, 0
                while True:
                    b = buf[pos]
                    pos += 1
                    z |= (b & 0x7F) << shift
                    shift += 7
                    if b < 0x80 or shift > 28:
                        break
                pos += (z >> 1) ^ -(z & 1)
            if pos > end:
                raise DecodeError("record length overruns its batch")
        if pos != end:
            raise DecodeError("batch records do not fill the batch exactly")
    return starts


def _all_record_starts(
    data: bytes | bytearray | memoryview, buf: U8, region_start: I64, region_end: I64, counts: I64
) -> I64:
    """Record start positions of every batch, in order. Batches whose records all have the same size
    (typical of ``__consumer_offsets``: one commit request, one key layout) are laid out arithmetically and
    checked with numpy; the others are walked record by record."""
    first = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    total = int(first[-1])
    starts = np.empty(total, np.int64)
    nonempty = counts > 0
    safe = np.where(nonempty, region_start, 0)
    length, after = varint(buf, safe) if buf.size else (np.zeros_like(safe), safe)
    size = after - safe + length
    uniform = nonempty & (size > 0) & ((region_end - region_start) == counts * size)
    u = np.flatnonzero(uniform)
    if u.size:
        rep = np.repeat(u, counts[u])
        within = np.arange(rep.size, dtype=np.int64) - np.repeat(np.cumsum(counts[u]) - counts[u], counts[u])
        candidates = region_start[rep] + within * size[rep]
        clen, cafter = varint(buf, candidates)
        bad = np.unique(rep[(cafter - candidates + clen) != size[rep]])
        if bad.size:
            uniform[bad] = False
            keep = ~np.isin(rep, bad)
            rep, within, candidates = rep[keep], within[keep], candidates[keep]
        starts[first[rep] + within] = candidates
    rest = np.flatnonzero(nonempty & ~uniform)
    if rest.size:
        raw = data if isinstance(data, bytes) and buf.base is data else buf.tobytes()  # type: ignore[comparison-overlap]  # numpy types .base as an ndarray; for np.frombuffer it is the bytes
        walked = np.asarray(
            _record_starts(
                raw, region_start[rest].tolist(), region_end[rest].tolist(), counts[rest].tolist()
            ),
            np.int64,
        )
        rep = np.repeat(rest, counts[rest])
        within = np.arange(rep.size, dtype=np.int64) - np.repeat(
            np.cumsum(counts[rest]) - counts[rest], counts[rest]
        )
        starts[first[rep] + within] = walked
    return starts


def decode_records(data: bytes | bytearray | memoryview, idx: BatchIndex) -> Records:
    """Decode every record of the non-control batches in ``idx``: one sequential pass finds where records
    start, then every field of every record is decoded with numpy at once."""
    attributes = idx.attributes
    keep = np.flatnonzero((attributes & _CONTROL_BIT) == 0)
    buf, region_start, region_end = _records_regions(data, idx, keep)
    counts = idx.record_count[keep]
    try:
        starts = _all_record_starts(data, buf, region_start, region_end, counts)
    except IndexError:
        raise DecodeError("record extends past the end of its batch") from None
    total = int(starts.size)
    try:
        length, p = varint(buf, starts)
        end = p + length
        if bool((length < 6).any()):
            raise DecodeError("record shorter than its fixed fields")
        p = p + 1  # attributes: unused, as in the Java client
        ts_delta, p = varint(buf, p, 10)
        offset_delta, p = varint(buf, p)
        key_length, p = varint(buf, p)
        key_start = p
        p = p + np.maximum(key_length, 0)
        value_length, p = varint(buf, p)
        value_start = p
        p = p + np.maximum(value_length, 0)
        header_count, p = varint(buf, p)
        if bool(((p > end) | (header_count < 0)).any()):
            raise DecodeError("record fields overrun the record")
        header_offsets = np.zeros(total + 1, np.int64)
        np.cumsum(header_count, out=header_offsets[1:])
        n_headers = int(header_offsets[-1])
        hk_start = np.empty(n_headers, np.int64)
        hk_length = np.empty(n_headers, np.int64)
        hv_start = np.empty(n_headers, np.int64)
        hv_length = np.empty(n_headers, np.int64)
        with_headers = np.flatnonzero(header_count > 0)
        h = 0
        # One pass per header index, over the records that have that many headers.
        while with_headers.size:
            q = p[with_headers]
            klen, q = varint(buf, q)
            if bool((klen < 0).any()):
                raise DecodeError("null header key")
            kstart = q
            q = q + klen
            vlen, q = varint(buf, q)
            vstart = q
            q = q + np.maximum(vlen, 0)
            out = header_offsets[with_headers] + h
            hk_start[out] = kstart
            hk_length[out] = klen
            hv_start[out] = vstart
            hv_length[out] = vlen
            p[with_headers] = q
            h += 1
            with_headers = with_headers[header_count[with_headers] > h]
    except IndexError:
        raise DecodeError("record extends past the end of its batch") from None
    if bool((p != end).any()):
        raise DecodeError("record fields do not fill the record exactly")

    batch_of = np.repeat(np.arange(keep.size), counts)
    lat = (attributes[keep] & _TIMESTAMP_TYPE_BIT) != 0
    base_ts = idx.base_timestamp[keep][batch_of]
    timestamp = np.where(lat[batch_of], idx.max_timestamp[keep][batch_of], base_ts + ts_delta)
    return Records(
        buffer=buf,
        offset=idx.base_offset[keep][batch_of] + offset_delta,
        timestamp=timestamp,
        timestamp_type=lat[batch_of].astype(np.int64),
        key_start=key_start,
        key_length=key_length,
        value_start=value_start,
        value_length=value_length,
        header_offsets=header_offsets,
        header_key_start=hk_start,
        header_key_length=hk_length,
        header_value_start=hv_start,
        header_value_length=hv_length,
    )


def records_to_arrow(records: Records, topic: str, partition: int, *, payload: bool = True) -> Any:
    """A ``pyarrow.RecordBatch`` with :data:`RAW_ARROW_SCHEMA`; records without headers have null headers.
    Without ``payload`` keys, values and headers are null (for jobs that need only offsets and timestamps)."""
    n = records.count
    if payload:
        data = pa.py_buffer(records.buffer)
        key = slice_binary(data, records.key_start, records.key_length)
        value = slice_binary(data, records.value_start, records.value_length)
        header_struct = pa.StructArray.from_arrays(
            [
                slice_binary(data, records.header_key_start, records.header_key_length, string=True),
                slice_binary(data, records.header_value_start, records.header_value_length),
            ],
            fields=list(HEADER_TYPE.value_type),
        )
        # Spark's Kafka source gives a record without headers null headers, not an empty array.
        headers = pa.ListArray.from_arrays(
            pa.array(records.header_offsets.astype(np.int32)),
            header_struct,
            mask=pa.array(np.diff(records.header_offsets) == 0),
        )
    else:
        key = pa.nulls(n, pa.binary())
        value = pa.nulls(n, pa.binary())
        headers = pa.nulls(n, HEADER_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            key,
            value,
            repeat_string(topic, n),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(records.offset),
            pa.array(records.timestamp * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(records.timestamp_type.astype(np.int32)),
            headers,
        ],
        schema=RAW_ARROW_SCHEMA,
    )


def key_ids(parts: list[Any]) -> I64:
    """One integer per row, equal for rows with the same group, topic and partition."""

    def codes(name: str) -> tuple[I64, int]:
        # One dictionary for every chunk of a chunked array.
        encoded = pa.chunked_array([p.column(name) for p in parts]).dictionary_encode()
        ids = np.concatenate([np.asarray(c.indices, np.int64) for c in encoded.chunks])
        return ids, max(len(encoded.chunks[0].dictionary), 1)

    group, groups = codes("group")
    topic, topics = codes("topic")
    partition = np.concatenate([np.asarray(p.column("partition"), np.int64) for p in parts])
    lowest, highest = int(partition.min()), int(partition.max())
    span = highest - lowest + 1
    if groups * topics * span < 2**62:
        combined: I64 = (group * topics + topic) * span + (partition - lowest)
        return combined
    # Too many combinations for one int64: rank the (group, topic, partition) triples instead.
    triples = np.stack([group, topic, partition], axis=1)
    ranks: I64 = np.unique(triples, axis=0, return_inverse=True)[1].astype(np.int64).ravel()
    return ranks
