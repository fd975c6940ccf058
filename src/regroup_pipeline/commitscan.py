"""Offset commits straight from ``__consumer_offsets`` segment bytes, in one compiled pass (numba).

The data source's hot path: a chunk of whole record batches goes in, the columns of
:data:`~regroup_pipeline.logformat.COMMIT_ARROW_SCHEMA` come out, without the intermediate batch of raw keys
and values: one pass finds the records, a second decodes each and writes its fields straight into the
Arrow buffers (values, validity bitmaps, string offsets and bytes) that the batch then wraps.

It handles what coordinators write — uncompressed RecordBatch v2 with offset-commit keys v0/v1
and values v0–v4 (v4's tagged fields skipped), tombstones, other record types skipped — and answers None for
anything else (a compressed batch, a value version it does not know, a malformed record), so that the caller
decodes that chunk with the general numpy decoders, which also say what is wrong with bad input.

The functions are compiled on first use and cached on disk (numba's ``cache=True``), so each Spark Python
worker pays the compilation once per installation, not per task.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
from numba import njit  # type: ignore[import-untyped,unused-ignore]  # numba ships no type information

from regroup_pipeline.logformat import COMMIT_ARROW_SCHEMA, RAW_ARROW_SCHEMA, binary_parts, repeat_string

__all__ = ["scan_commit_pairs", "scan_offset_commits", "scan_records", "whole_batches_end"]

_NO_LIMIT: Final = np.iinfo(np.int64).max
# Kafka RecordBatch v2 header: baseOffset 0, batchLength 8, magic 16, attributes 21, lastOffsetDelta 23,
# baseTimestamp 27, maxTimestamp 35, recordCount 57, records from 61.
_HEADER: Final = 61
_MIN_RECORD: Final = 7  # length, attributes, timestamp delta, offset delta, key, value, header count


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _i16(buf: Any, pos: int) -> Any:
    value = (np.int64(buf[pos]) << 8) | np.int64(buf[pos + 1])
    return value - 0x10000 if value >= 0x8000 else value


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _i32(buf: Any, pos: int) -> Any:
    value = (
        (np.int64(buf[pos]) << 24)
        | (np.int64(buf[pos + 1]) << 16)
        | (np.int64(buf[pos + 2]) << 8)
        | np.int64(buf[pos + 3])
    )
    return value - 0x100000000 if value >= 0x80000000 else value


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _i64(buf: Any, pos: int) -> Any:
    value = np.int64(0)
    for i in range(8):
        value = (value << np.int64(8)) | np.int64(buf[pos + i])  # wraps into the sign bit
    return value


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """(value, position after) of an unsigned varint; position −1 when it is malformed or overruns."""
    value = 0
    shift = 0
    while pos < end and shift < 64:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    z, pos = _uvarint(buf, pos, end)
    return (z >> 1) ^ -(z & 1), pos


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _capacity(buf: Any, limit: int) -> int:
    """The record count of the batches starting before ``limit``."""
    capacity = 0
    pos = 0
    n = buf.size
    while pos < limit and pos + _HEADER <= n:
        length = _i32(buf, pos + 8)
        if length < _HEADER - 12 or pos + 12 + length > n:
            break
        # A record takes at least 7 bytes: a corrupt count must not size the output (nor overrun it).
        capacity += min(max(_i32(buf, pos + 57), 0), (length + 12 - _HEADER) // _MIN_RECORD)
        pos += 12 + length
    return capacity


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _whole_batches_end(buf: Any, limit: int) -> int:
    pos = 0
    n = buf.size
    while pos < limit and pos + 12 <= n:
        length = _i32(buf, pos + 8)
        if length <= 0 or pos + 12 + length > n:
            break
        pos += 12 + length
    return pos


def whole_batches_end(data: bytes | bytearray | memoryview, limit: int) -> int:
    """Length of the longest prefix of ``data`` made of whole batches that start before ``limit``."""
    return int(_whole_batches_end(np.frombuffer(data, np.uint8), limit))


_UNUSUAL: Final = (-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
_OTHER: Final = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


@njit(cache=True, nogil=True, inline="always")  # type: ignore[misc,unused-ignore]
def _commit_fields(  # one record's layout, checked field by field
    kbuf: Any, ks: int, kl: int, vbuf: Any, vs: int, vl: int
) -> tuple[int, ...]:
    """One record's key ``kbuf[ks : ks + kl]`` and value ``vbuf[vs : vs + vl]`` (length −1: null) decoded:
    ``(status, group at, group length, topic at, topic length, metadata at, metadata length (−1:
    tombstone), partition, leader epoch, key version, value version (−1: tombstone), committed offset,
    commit timestamp, expire timestamp (−1: none))``, status 1 for an offset commit or its tombstone, 0
    for another record type, −1 for anything this pass does not handle. A tuple rather than stores into
    an array: the values stay in registers (the loop over 10M commits ran in less than half the time)."""
    if kl < 2:
        return _OTHER
    rtype = _i16(kbuf, ks)
    if rtype != 0 and rtype != 1:  # noqa: PLR1714  # numba compiles comparisons, not set lookups
        return _OTHER  # group metadata and anything newer: not an offset commit
    # OffsetCommitKey: group (string), topic (string), partition (int32)
    if kl < 10:
        return _UNUSUAL
    glen = _i16(kbuf, ks + 2)
    tpos = ks + 4 + glen
    if glen < 0 or tpos + 6 > ks + kl:
        return _UNUSUAL
    tlen = _i16(kbuf, tpos)
    if tlen < 0 or tpos + 2 + tlen + 4 != ks + kl:
        return _UNUSUAL
    partition = _i32(kbuf, tpos + 2 + tlen)
    if vl < 0:  # tombstone
        return (1, ks + 4, glen, tpos + 2, tlen, 0, -1, partition, -1, rtype, -1, -1, -1, -1)
    # OffsetCommitValue v0–v4: offset, [v3+ leader epoch], metadata, commit timestamp, [v1 expire
    # timestamp], [v4 tagged fields]
    v_end = vs + vl
    if vl < 2:
        return _UNUSUAL
    version = _i16(vbuf, vs)
    if version < 0 or version > 4 or vs + 12 > v_end:
        return _UNUSUAL
    r = vs + 2
    committed = _i64(vbuf, r)
    r += 8
    epoch = -1
    if version >= 3:
        if r + 4 > v_end:
            return _UNUSUAL
        epoch = _i32(vbuf, r)
        r += 4
    if version == 4:
        compact, r = _uvarint(vbuf, r, v_end)
        mlen = compact - 1
    else:
        mlen = _i16(vbuf, r) if r + 2 <= v_end else -1
        r += 2
    if r < 0 or mlen < 0 or r + mlen + 8 > v_end:
        return _UNUSUAL
    meta_at = r
    r += mlen
    commit_ts = _i64(vbuf, r)
    r += 8
    expire_ts = -1
    if version == 1:
        if r + 8 > v_end:
            return _UNUSUAL
        expire_ts = _i64(vbuf, r)
        r += 8
    if version == 4:
        tags, r = _uvarint(vbuf, r, v_end)
        for _t in range(tags):
            if r < 0:
                break
            _tag, r = _uvarint(vbuf, r, v_end)
            if r < 0:
                break
            size, r = _uvarint(vbuf, r, v_end)
            if r < 0 or size > v_end - r:
                r = -1
                break
            r += size
    if r != v_end:
        return _UNUSUAL
    return (
        1, ks + 4, glen, tpos + 2, tlen, meta_at, mlen, partition, epoch, rtype, version, committed,
        commit_ts, expire_ts,
    )  # fmt: skip


# The columns the fused pass fills: int32 rows, int64 rows, validity and boolean bitmaps.
(I_PARTITION, I_EPOCH, I_KEY_VERSION, I_VALUE_VERSION, _INTS) = range(5)  # fmt: skip
(L_COMMITTED, L_COMMIT_TS, L_EXPIRE_TS, L_ROW, _LONGS) = range(5)  # fmt: skip
(B_VALUE, B_EXPIRE, B_DELETED, _BITS) = range(4)  # fmt: skip


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _commit_columns(
    kbuf: Any, kat: Any, klen: Any, vbuf: Any, vat: Any, vlen: Any, rows: bool
) -> tuple[Any, ...]:
    """:func:`_commit_fields` over records given by key and value positions (length −1: null), written
    straight into Arrow buffers: the offset commits' int32 and int64 columns (timestamps in
    microseconds; ``L_ROW`` the record's row when ``rows``), their validity and boolean bitmaps, and
    the offsets and bytes of the group, topic and metadata strings. The first elements are how many
    commits (−1 when a record is one this pass does not handle), how many of them are tombstones and
    how many have no expire timestamp: the null counts."""
    n = kat.size
    key_bytes = 0
    value_bytes = 0
    for i in range(n):
        key_bytes += max(klen[i], 0)
        value_bytes += max(vlen[i], 0)
    ints = np.empty((_INTS, n), np.int32)
    longs = np.empty((_LONGS if rows else L_ROW, n), np.int64)
    bits = np.zeros((_BITS, (n + 7) // 8), np.uint8)
    offsets = np.empty((3, n + 1), np.int32)  # group, topic, metadata
    # Upper bounds, never touched past what is written (the pages stay unmapped).
    group = np.empty(key_bytes, np.uint8)
    topic = np.empty(key_bytes, np.uint8)
    meta = np.empty(value_bytes, np.uint8)
    offsets[:, 0] = 0
    g = 0
    t = 0
    m = 0
    c = 0
    tombstones = 0
    no_expire = 0
    for i in range(n):
        (status, group_at, group_len, topic_at, topic_len, meta_at, meta_len, partition, epoch, key_version,
         value_version, committed, commit_ts, expire_ts) = _commit_fields(
            kbuf, kat[i], klen[i], vbuf, vat[i], vlen[i]
        )  # fmt: skip
        if status < 0:
            return -1, 0, 0, ints, longs, bits, offsets, group, topic, meta
        if status == 0:
            continue
        ints[I_PARTITION, c] = partition
        ints[I_EPOCH, c] = epoch
        ints[I_KEY_VERSION, c] = key_version
        ints[I_VALUE_VERSION, c] = value_version
        longs[L_COMMITTED, c] = committed
        longs[L_COMMIT_TS, c] = commit_ts * 1000
        longs[L_EXPIRE_TS, c] = expire_ts * 1000
        if rows:
            longs[L_ROW, c] = i
        byte = c >> 3
        bit = np.uint8(1 << (c & 7))
        if meta_len < 0:
            bits[B_DELETED, byte] |= bit
            tombstones += 1
        else:
            bits[B_VALUE, byte] |= bit
        if meta_len >= 0 and expire_ts >= 0:
            bits[B_EXPIRE, byte] |= bit
        else:
            no_expire += 1
        for j in range(group_len):
            group[g + j] = kbuf[group_at + j]
        g += group_len
        for j in range(topic_len):
            topic[t + j] = kbuf[topic_at + j]
        t += topic_len
        for j in range(meta_len):  # −1 for a tombstone: nothing
            meta[m + j] = vbuf[meta_at + j]
        m += max(meta_len, 0)
        c += 1
        offsets[0, c] = g
        offsets[1, c] = t
        offsets[2, c] = m
    return c, tombstones, no_expire, ints, longs, bits, offsets, group[:g], topic[:t], meta[:m]


# Rows of the walk's output matrix: where each record kept is and what it is.
(R_OFFSET, R_TIMESTAMP, R_TIMESTAMP_TYPE, R_KEY_AT, R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN,
 _RAW_FIELDS) = range(8)  # fmt: skip


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _walk(  # one pass over bytes reads best as one function
    buf: Any, limit: int, min_offset: int, max_offset: int, until_ms: int, type_mask: int, raw: Any
) -> int:
    """Record positions of the batches starting before ``limit`` into ``raw`` (rows ``R_*``), for records
    with an offset in ``[min_offset, max_offset)``, a timestamp at or before ``until_ms`` and a key whose
    int16 type ``t`` has bit ``t`` set in ``type_mask``; returns how many, −1 when the chunk holds anything
    this pass does not handle (a compressed batch, an old message format, a malformed record)."""
    n = buf.size
    count = 0
    pos = 0
    while pos < limit and pos + _HEADER <= n:
        length = _i32(buf, pos + 8)
        batch_end = pos + 12 + length
        if length < _HEADER - 12 or batch_end > n:
            break
        if buf[pos + 16] != 2:
            return -1
        attributes = _i16(buf, pos + 21)
        if attributes & 0x20:  # control batch: consumers skip it
            pos = batch_end
            continue
        if attributes & 0x07:
            return -1
        base_offset = _i64(buf, pos + 0)
        base_ts = _i64(buf, pos + 27)
        log_append = (attributes & 0x08) != 0
        max_ts = _i64(buf, pos + 35)
        records = _i32(buf, pos + 57)
        p = pos + _HEADER
        for _ in range(records):
            rec_len, p = _varint(buf, p, batch_end)
            if p < 0 or rec_len < 6 or p + rec_len > batch_end:
                return -1
            rec_end = p + rec_len
            q = p + 1  # attributes: unused, as in the Java client
            ts_delta, q = _varint(buf, q, rec_end)
            if q < 0:
                return -1
            off_delta, q = _varint(buf, q, rec_end)
            if q < 0:
                return -1
            kl, q = _varint(buf, q, rec_end)
            if q < 0 or kl > rec_end - q:
                return -1
            ks = q
            q += max(kl, 0)
            vl, q = _varint(buf, q, rec_end)
            if q < 0 or vl > rec_end - q:
                return -1
            vs = q
            q += max(vl, 0)
            headers, q = _varint(buf, q, rec_end)
            if q < 0 or headers < 0:
                return -1
            for _h in range(headers):
                hk, q = _varint(buf, q, rec_end)
                if q < 0 or hk < 0 or hk > rec_end - q:
                    return -1
                q += hk
                hv, q = _varint(buf, q, rec_end)
                if q < 0 or hv > rec_end - q:
                    return -1
                q += max(hv, 0)
            if q != rec_end:
                return -1
            p = rec_end
            rec_offset = base_offset + off_delta
            rec_ts = max_ts if log_append else base_ts + ts_delta
            if rec_offset < min_offset or rec_offset >= max_offset or rec_ts > until_ms:
                continue
            rtype = _i16(buf, ks) if kl >= 2 else -1
            if rtype < 0 or rtype > 62 or not (type_mask >> rtype) & 1:
                continue
            raw[R_OFFSET, count] = rec_offset
            raw[R_TIMESTAMP, count] = rec_ts
            raw[R_TIMESTAMP_TYPE, count] = 1 if log_append else 0
            raw[R_KEY_AT, count] = ks
            raw[R_KEY_LEN, count] = kl
            raw[R_VALUE_AT, count] = vs
            raw[R_VALUE_LEN, count] = vl
            count += 1
        if p != batch_end:
            return -1
        pos = batch_end
    return count


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _gather(buf: Any, at: Any, lengths: Any) -> tuple[Any, Any]:
    """Arrow string buffers (int32 offsets, data) of ``buf[at[i] : at[i] + lengths[i]]`` (null: −1)."""
    count = at.size
    offsets = np.empty(count + 1, np.int32)
    total = 0
    offsets[0] = 0
    for i in range(count):
        total += max(lengths[i], 0)
        offsets[i + 1] = total
    data = np.empty(total, np.uint8)
    for i in range(count):
        start = offsets[i]
        src = at[i]
        for j in range(offsets[i + 1] - start):
            data[start + j] = buf[src + j]
    return offsets, data


def _binaries(buf: Any, at: Any, lengths: Any) -> Any:
    """An Arrow binary array of ``buf[at[i] : at[i] + lengths[i]]``, null where the length is −1."""
    offsets, data = _gather(buf, at, lengths)
    null = lengths < 0
    validity = pa.array(~null).buffers()[1] if null.any() else None
    return pa.Array.from_buffers(
        pa.binary(), at.size, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=-1
    )


def _commit_batch(columns: tuple[Any, ...], record_columns: list[Any]) -> Any:
    """A batch with ``COMMIT_ARROW_SCHEMA`` over the Arrow buffers :func:`_commit_columns` filled (no
    copies) and the record partition, offset and timestamp columns."""
    count, tombstones, no_expire, ints, longs, bits, offsets, group, topic, meta = columns
    bitmaps = [pa.py_buffer(bits[i, : (count + 7) // 8]) for i in range(_BITS)]
    value = bitmaps[B_VALUE] if tombstones else None
    expire = bitmaps[B_EXPIRE] if no_expire else None

    def fixed(kind: Any, data: Any, validity: Any = None, nulls: int = 0) -> Any:
        return pa.Array.from_buffers(kind, count, [validity, pa.py_buffer(data[:count])], null_count=nulls)

    def text(at: int, data: Any, validity: Any = None, nulls: int = 0) -> Any:
        buffers = [validity, pa.py_buffer(offsets[at, : count + 1]), pa.py_buffer(data)]
        return pa.Array.from_buffers(pa.string(), count, buffers, null_count=nulls)

    ts = COMMIT_ARROW_SCHEMA.field("commit_timestamp").type
    arrays = [
        text(0, group),
        text(1, topic),
        fixed(pa.int32(), ints[I_PARTITION]),
        fixed(pa.int64(), longs[L_COMMITTED], value, tombstones),
        fixed(pa.int32(), ints[I_EPOCH], value, tombstones),
        text(2, meta, value, tombstones),
        fixed(ts, longs[L_COMMIT_TS], value, tombstones),
        fixed(ts, longs[L_EXPIRE_TS], expire, no_expire),
        pa.Array.from_buffers(pa.bool_(), count, [None, bitmaps[B_DELETED]], null_count=0),
        fixed(pa.int32(), ints[I_KEY_VERSION]),
        fixed(pa.int32(), ints[I_VALUE_VERSION], value, tombstones),
        *record_columns,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=COMMIT_ARROW_SCHEMA)


_COMMIT_TYPES: Final = 0b011  # key types 0 and 1


def _walked(
    data: bytes | bytearray | memoryview,
    limit: int,
    type_mask: int,
    min_offset: int,
    max_offset: int | None,
    until_ms: int | None,
) -> tuple[Any, Any | None]:
    """(the chunk as uint8, the walk's positions cut to the records kept, or None)."""
    buf = np.frombuffer(data, np.uint8)
    raw = np.empty((_RAW_FIELDS, _capacity(buf, limit)), np.int64)
    end = _NO_LIMIT
    count = _walk(
        buf,
        limit,
        min_offset,
        end if max_offset is None else max_offset,
        end if until_ms is None else until_ms,
        type_mask,
        raw,
    )
    return buf, (raw[:, :count] if count >= 0 else None)


def scan_records(
    data: bytes | bytearray | memoryview,
    limit: int,
    topic: str,
    record_partition: int,
    record_types: tuple[int, ...],
    min_offset: int = 0,
    max_offset: int | None = None,
    until_ms: int | None = None,
) -> Any | None:
    """Like :func:`scan_offset_commits`, for raw records of the given key types (as
    :data:`~regroup_pipeline.logformat.RAW_ARROW_SCHEMA`, headers null); None as there."""
    mask = 0
    for t in record_types:
        if not 0 <= t <= 62:
            return None
        mask |= 1 << t
    buf, raw = _walked(data, limit, mask, min_offset, max_offset, until_ms)
    if raw is None:
        return None
    count = raw.shape[1]
    columns = [
        _binaries(buf, raw[R_KEY_AT], raw[R_KEY_LEN]),
        _binaries(buf, raw[R_VALUE_AT], raw[R_VALUE_LEN]),
        repeat_string(topic, count),
        pa.array(np.full(count, record_partition, np.int32)),
        pa.array(raw[R_OFFSET]),
        pa.array(raw[R_TIMESTAMP] * 1000, RAW_ARROW_SCHEMA.field("timestamp").type),
        pa.array(raw[R_TIMESTAMP_TYPE].astype(np.int32)),
        pa.nulls(count, RAW_ARROW_SCHEMA.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RAW_ARROW_SCHEMA)


def scan_offset_commits(
    data: bytes | bytearray | memoryview,
    limit: int,
    record_partition: int,
    min_offset: int = 0,
    max_offset: int | None = None,
    until_ms: int | None = None,
) -> Any | None:
    """The offset commits (and tombstones) of the batches starting before ``limit`` in ``data``, with
    offsets in ``[min_offset, max_offset)`` and timestamps at or before ``until_ms``, as a
    ``pyarrow.RecordBatch`` with :data:`~regroup_pipeline.logformat.COMMIT_ARROW_SCHEMA`; None when the chunk
    holds anything this pass does not handle (see the module docstring)."""
    buf, raw = _walked(data, limit, _COMMIT_TYPES, min_offset, max_offset, until_ms)
    if raw is None:
        return None
    columns = _commit_columns(
        buf, raw[R_KEY_AT], raw[R_KEY_LEN], buf, raw[R_VALUE_AT], raw[R_VALUE_LEN], False
    )
    count = columns[0]
    if count < 0 or count != raw.shape[1]:
        return None
    ts = COMMIT_ARROW_SCHEMA.field("record_timestamp").type
    records = [
        pa.array(np.full(count, record_partition, np.int32)),
        pa.array(raw[R_OFFSET]),
        pa.array(raw[R_TIMESTAMP] * 1000, ts),
    ]
    return _commit_batch(columns, records)


def scan_commit_pairs(batch: Any) -> Any | None:
    """The offset commits (and tombstones) among raw ``__consumer_offsets`` records (columns ``key``,
    ``value``, ``partition``, ``offset``, ``timestamp``, as Spark's Kafka source has them), as a batch with
    ``COMMIT_ARROW_SCHEMA``; None when a record is one this pass does not handle."""
    kbuf, kstarts, klens = binary_parts(batch.column("key"))
    vbuf, vstarts, vlens = binary_parts(batch.column("value"))
    columns = _commit_columns(kbuf, kstarts, klens, vbuf, vstarts, vlens, True)
    count, _tombstones, _no_expire, _ints, longs = columns[:5]
    if count < 0:
        return None
    rows = pa.array(longs[L_ROW, :count])
    ts = pa.timestamp("us", tz="UTC")
    records = [
        batch.column("partition").take(rows).cast(pa.int32()),
        batch.column("offset").take(rows).cast(pa.int64()),
        batch.column("timestamp").take(rows).cast(ts),
    ]
    return _commit_batch(columns, records)
