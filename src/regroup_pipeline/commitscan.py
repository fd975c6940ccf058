"""Offset commits straight from ``__consumer_offsets`` segment bytes, in compiled passes (numba).

The data source's hot path: pieces of whole record batches go in, the columns of
:data:`~regroup_pipeline.logformat.COMMIT_ARROW_SCHEMA` come out, without an intermediate batch of raw
keys and values: one pass finds the records of a piece, a second decodes each and writes its fields
straight into the Arrow buffers (values, validity bitmaps, string offsets and bytes) that the batch then
wraps. :class:`CommitColumns` gathers the commits of several pieces into one batch, so that a reader can
take a segment in pieces small enough to stay in the CPU's cache between the read and the two passes
(:func:`regroup_pipeline.logdir.read_split` with ``reuse``) and still hand Spark batches of a useful size.

It handles what coordinators write — uncompressed RecordBatch v2 with offset-commit keys v0/v1
and values v0–v4 (v4's tagged fields skipped), tombstones, other record types skipped — and answers None for
anything else (a compressed batch, a value version it does not know, a malformed record), so that the caller
decodes that piece with the general numpy decoders, which also say what is wrong with bad input.

The passes read the bytes through their address (:func:`_u8` … :func:`_i64`: one unaligned load, and a
byte swap) rather than by indexing the array: an array handed to a helper costs two atomic reference-count
updates a call, and an index that might be negative a wrap-around test — together more than half of the
decoding's time. Numba checks no bounds either way, so every read is guarded by the pass itself.

The functions are compiled on first use and cached on disk (numba's ``cache=True``), so each Spark Python
worker pays the compilation once per installation, not per task.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information
from llvmlite import ir  # type: ignore[import-untyped,unused-ignore]  # llvmlite ships no type information
from numba import njit, types  # type: ignore[import-untyped,unused-ignore]  # numba ships no type information
from numba.extending import intrinsic  # type: ignore[import-untyped,unused-ignore]

from regroup_pipeline.logformat import COMMIT_ARROW_SCHEMA, RAW_ARROW_SCHEMA, binary_parts, repeat_string

__all__ = ["CommitColumns", "scan_commit_pairs", "scan_offset_commits", "scan_records", "whole_batches_end"]

_NO_LIMIT: Final = np.iinfo(np.int64).max
# Kafka RecordBatch v2 header: baseOffset 0, batchLength 8, magic 16, attributes 21, lastOffsetDelta 23,
# baseTimestamp 27, maxTimestamp 35, recordCount 57, records from 61.
_HEADER: Final = 61
_MIN_RECORD: Final = 7  # length, attributes, timestamp delta, offset delta, key, value, header count


def _big_endian_load(bits: int, signed: bool) -> Any:
    """A compiled ``(address, position) → int64``: the ``bits``-bit big-endian integer at
    ``address + position``, sign- or zero-extended."""

    def load(typingctx: Any, address: Any, position: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            at = builder.add(args[0], args[1])
            value = builder.load(builder.inttoptr(at, ir.IntType(bits).as_pointer()), align=1)
            if bits > 8:
                value = builder.bswap(value)
            if bits == 64:
                return value
            return (builder.sext if signed else builder.zext)(value, ir.IntType(64))

        return types.int64(types.int64, types.int64), codegen

    load.__name__ = f"load_{'i' if signed else 'u'}{bits}"
    return intrinsic(load)


_u8: Final = _big_endian_load(8, False)
_i16: Final = _big_endian_load(16, True)
_i32: Final = _big_endian_load(32, True)
_i64: Final = _big_endian_load(64, True)


def _move(bits: int) -> Any:
    """A compiled ``(to, source)``: the ``bits // 8`` bytes at address ``source`` stored at address ``to``,
    as they are (no alignment asked of either)."""

    def move(typingctx: Any, to: Any, source: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            pointer = ir.IntType(bits).as_pointer()
            value = builder.load(builder.inttoptr(args[1], pointer), align=1)
            builder.store(value, builder.inttoptr(args[0], pointer), align=1)
            return context.get_dummy_value()

        return types.none(types.int64, types.int64), codegen

    move.__name__ = f"move_{bits}"
    return intrinsic(move)


_move_byte: Final = _move(8)
_move_word: Final = _move(64)


def _address(arr: Any) -> int:
    """Where a (contiguous) numpy array's bytes start, for the passes' loads; the caller keeps ``arr``
    alive for as long as they run."""
    return int(arr.ctypes.data)


@njit(cache=True, nogil=True, inline="always")  # type: ignore[misc,unused-ignore]
def _copy(to: int, to_end: int, source: int, source_end: int, length: int) -> None:
    """``length`` bytes from address ``source`` to address ``to``: in 8-byte words, the last one spilling
    up to 7 bytes past both ends, when neither buffer ends within those 7 bytes (``source_end``,
    ``to_end``); else byte by byte. Strings in a commit are a few bytes long: a word copy takes one or two
    moves where a byte loop takes ten."""
    if source + length + 7 <= source_end and to + length + 7 <= to_end:
        for j in range(0, length, 8):
            _move_word(to + j, source + j)
    else:
        for j in range(length):
            _move_byte(to + j, source + j)


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _uvarint(a: int, pos: int, end: int) -> tuple[int, int]:
    """(value, position after) of an unsigned varint; position −1 when it is malformed or overruns."""
    value = 0
    shift = 0
    while pos < end and shift < 64:
        b = _u8(a, pos)
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _varint(a: int, pos: int, end: int) -> tuple[int, int]:
    z, pos = _uvarint(a, pos, end)
    return (z >> 1) ^ -(z & 1), pos


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _capacity(a: int, n: int, limit: int) -> int:
    """The record count of the batches starting before ``limit`` in the ``n`` bytes at ``a``."""
    capacity = 0
    pos = 0
    while pos < limit and pos + _HEADER <= n:
        length = _i32(a, pos + 8)
        if length < _HEADER - 12 or pos + 12 + length > n:
            break
        # A record takes at least 7 bytes: a corrupt count must not size the output (nor overrun it).
        capacity += min(max(_i32(a, pos + 57), 0), (length + 12 - _HEADER) // _MIN_RECORD)
        pos += 12 + length
    return capacity


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _whole_batches_end(a: int, n: int, limit: int) -> int:
    pos = 0
    while pos < limit and pos + 12 <= n:
        length = _i32(a, pos + 8)
        if length <= 0 or pos + 12 + length > n:
            break
        pos += 12 + length
    return pos


def whole_batches_end(data: bytes | bytearray | memoryview, limit: int) -> int:
    """Length of the longest prefix of ``data`` made of whole batches that start before ``limit``."""
    buf = np.frombuffer(data, np.uint8)
    return int(_whole_batches_end(_address(buf), buf.size, limit))


_UNUSUAL: Final = (-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
_OTHER: Final = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


@njit(cache=True, nogil=True, inline="always")  # type: ignore[misc,unused-ignore]
def _commit_fields(  # one record's layout, checked field by field
    ka: int, ks: int, kl: int, va: int, vs: int, vl: int
) -> tuple[int, ...]:
    """One record's key (the ``kl`` bytes at ``ka + ks``) and value (``vl`` at ``va + vs``, −1: null) decoded:
    ``(status, group at, group length, topic at, topic length, metadata at, metadata length (−1:
    tombstone), partition, leader epoch, key version, value version (−1: tombstone), committed offset,
    commit timestamp, expire timestamp (−1: none))``, status 1 for an offset commit or its tombstone, 0
    for another record type, −1 for anything this pass does not handle. A tuple rather than stores into
    an array: the values stay in registers (the loop over 10M commits ran in less than half the time)."""
    if kl < 2:
        return _OTHER
    rtype = _i16(ka, ks)
    if rtype != 0 and rtype != 1:  # noqa: PLR1714  # numba compiles comparisons, not set lookups
        return _OTHER  # group metadata and anything newer: not an offset commit
    # OffsetCommitKey: group (string), topic (string), partition (int32)
    if kl < 10:
        return _UNUSUAL
    glen = _i16(ka, ks + 2)
    tpos = ks + 4 + glen
    if glen < 0 or tpos + 6 > ks + kl:
        return _UNUSUAL
    tlen = _i16(ka, tpos)
    if tlen < 0 or tpos + 2 + tlen + 4 != ks + kl:
        return _UNUSUAL
    partition = _i32(ka, tpos + 2 + tlen)
    if vl < 0:  # tombstone
        return (1, ks + 4, glen, tpos + 2, tlen, 0, -1, partition, -1, rtype, -1, -1, -1, -1)
    # OffsetCommitValue v0–v4: offset, [v3+ leader epoch], metadata, commit timestamp, [v1 expire
    # timestamp], [v4 tagged fields]
    v_end = vs + vl
    if vl < 2:
        return _UNUSUAL
    version = _i16(va, vs)
    if version < 0 or version > 4 or vs + 12 > v_end:
        return _UNUSUAL
    r = vs + 2
    committed = _i64(va, r)
    r += 8
    epoch = -1
    if version >= 3:
        if r + 4 > v_end:
            return _UNUSUAL
        epoch = _i32(va, r)
        r += 4
    if version == 4:
        compact, r = _uvarint(va, r, v_end)
        mlen = compact - 1
    else:
        mlen = _i16(va, r) if r + 2 <= v_end else -1
        r += 2
    if r < 0 or mlen < 0 or r + mlen + 8 > v_end:
        return _UNUSUAL
    meta_at = r
    r += mlen
    commit_ts = _i64(va, r)
    r += 8
    expire_ts = -1
    if version == 1:
        if r + 8 > v_end:
            return _UNUSUAL
        expire_ts = _i64(va, r)
        r += 8
    if version == 4:
        tags, r = _uvarint(va, r, v_end)
        for _t in range(tags):
            if r < 0:
                break
            _tag, r = _uvarint(va, r, v_end)
            if r < 0:
                break
            size, r = _uvarint(va, r, v_end)
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


# Rows of the commit pass's int32 and int64 matrices, and its bitmaps.
(I_PARTITION, I_EPOCH, I_KEY_VERSION, I_VALUE_VERSION, I_RECORD_PARTITION, _INTS) = range(6)  # fmt: skip
(L_COMMITTED, L_COMMIT_TS, L_EXPIRE_TS, L_RECORD_OFFSET, L_RECORD_TS, _LONGS) = range(6)  # fmt: skip
(B_VALUE, B_EXPIRE, B_DELETED, _BITS) = range(4)  # fmt: skip


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _commit_columns(  # the arrays it fills are many; one call a piece
    ka: int, kn: int, kat: Any, klen: Any, va: int, vn: int, vat: Any, vlen: Any, record_offsets: Any,
    record_ts: Any, record_partition: int, ints: Any, longs: Any, bits: Any, offsets: Any, strings: int,
    room: int, c: int, tombstones: int, no_expire: int,
) -> tuple[int, int, int]:  # fmt: skip
    """:func:`_commit_fields` over records given by key and value positions (length −1: null) in the
    ``kn`` bytes at ``ka`` and the ``vn`` at ``va``, appended from row ``c`` to the Arrow buffers of the
    offset commits: their int32 and int64 columns (timestamps in microseconds; ``record_offsets[i]`` and
    ``record_ts[i]``, in milliseconds, as the record's offset and timestamp), their validity and boolean
    bitmaps, and the offsets and bytes of the group, topic and metadata strings (``offsets[:, c]``
    already written; the bytes at ``strings``, ``strings + room`` and ``strings + 2 * room``, ``room``
    each). Returns the row count after and the null counts (tombstones, no expire timestamp) so far; a
    count of −1 when a record is one this pass does not handle, with the bits of the rows it had written
    cleared again."""
    first = c
    k_end = ka + kn
    v_end = va + vn
    group = strings
    topic = strings + room
    meta = strings + 2 * room
    g = offsets[0, c]
    t = offsets[1, c]
    m = offsets[2, c]
    for i in range(kat.size):
        (status, group_at, group_len, topic_at, topic_len, meta_at, meta_len, partition, epoch, key_version,
         value_version, committed, commit_ts, expire_ts) = _commit_fields(
            ka, kat[i], klen[i], va, vat[i], vlen[i]
        )  # fmt: skip
        if status < 0:
            for row in range(first, c):
                for b in range(_BITS):
                    bits[b, row >> 3] &= np.uint8(0xFF ^ (1 << (row & 7)))
            return -1, 0, 0
        if status == 0:
            continue
        ints[I_PARTITION, c] = partition
        ints[I_EPOCH, c] = epoch
        ints[I_KEY_VERSION, c] = key_version
        ints[I_VALUE_VERSION, c] = value_version
        ints[I_RECORD_PARTITION, c] = record_partition
        longs[L_COMMITTED, c] = committed
        longs[L_COMMIT_TS, c] = commit_ts * 1000
        longs[L_EXPIRE_TS, c] = expire_ts * 1000
        longs[L_RECORD_OFFSET, c] = record_offsets[i]
        longs[L_RECORD_TS, c] = record_ts[i] * 1000
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
        _copy(group + g, topic, ka + group_at, k_end, group_len)
        g += group_len
        _copy(topic + t, meta, ka + topic_at, k_end, topic_len)
        t += topic_len
        meta_len = max(meta_len, 0)  # −1 for a tombstone: nothing
        _copy(meta + m, meta + room, va + meta_at, v_end, meta_len)
        m += meta_len
        c += 1
        offsets[0, c] = g
        offsets[1, c] = t
        offsets[2, c] = m
    return c, tombstones, no_expire


# Rows of the walk's output matrix: where each record kept is and what it is.
(R_OFFSET, R_TIMESTAMP, R_TIMESTAMP_TYPE, R_KEY_AT, R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN,
 _RAW_FIELDS) = range(8)  # fmt: skip


@njit(cache=True, nogil=True)  # type: ignore[misc,unused-ignore]
def _walk(  # one pass over bytes reads best as one function
    a: int, n: int, limit: int, min_offset: int, max_offset: int, until_ms: int, type_mask: int, raw: Any
) -> int:
    """Record positions of the batches starting before ``limit`` in the ``n`` bytes at ``a`` into ``raw``
    (rows ``R_*``), for records with an offset in ``[min_offset, max_offset)``, a timestamp at or before
    ``until_ms`` and a key whose int16 type ``t`` has bit ``t`` set in ``type_mask``; returns how many, −1
    when the piece holds anything this pass does not handle (a compressed batch, an old message format, a
    malformed record)."""
    count = 0
    pos = 0
    while pos < limit and pos + _HEADER <= n:
        length = _i32(a, pos + 8)
        batch_end = pos + 12 + length
        if length < _HEADER - 12 or batch_end > n:
            break
        if _u8(a, pos + 16) != 2:
            return -1
        attributes = _i16(a, pos + 21)
        if attributes & 0x20:  # control batch: consumers skip it
            pos = batch_end
            continue
        if attributes & 0x07:
            return -1
        base_offset = _i64(a, pos + 0)
        base_ts = _i64(a, pos + 27)
        log_append = (attributes & 0x08) != 0
        max_ts = _i64(a, pos + 35)
        records = _i32(a, pos + 57)
        p = pos + _HEADER
        for _ in range(records):
            rec_len, p = _varint(a, p, batch_end)
            if p < 0 or rec_len < 6 or p + rec_len > batch_end:
                return -1
            rec_end = p + rec_len
            q = p + 1  # attributes: unused, as in the Java client
            ts_delta, q = _varint(a, q, rec_end)
            if q < 0:
                return -1
            off_delta, q = _varint(a, q, rec_end)
            if q < 0:
                return -1
            kl, q = _varint(a, q, rec_end)
            if q < 0 or kl > rec_end - q:
                return -1
            ks = q
            q += max(kl, 0)
            vl, q = _varint(a, q, rec_end)
            if q < 0 or vl > rec_end - q:
                return -1
            vs = q
            q += max(vl, 0)
            headers, q = _varint(a, q, rec_end)
            if q < 0 or headers < 0:
                return -1
            for _h in range(headers):
                hk, q = _varint(a, q, rec_end)
                if q < 0 or hk < 0 or hk > rec_end - q:
                    return -1
                q += hk
                hv, q = _varint(a, q, rec_end)
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
            rtype = _i16(a, ks) if kl >= 2 else -1
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
def _gather(a: int, n: int, at: Any, lengths: Any) -> tuple[Any, Any]:
    """Arrow string buffers (int32 offsets, data) of the ``lengths[i]`` bytes at ``a + at[i]`` (null:
    −1), of the ``n`` bytes at ``a``."""
    count = at.size
    offsets = np.empty(count + 1, np.int32)
    total = 0
    offsets[0] = 0
    for i in range(count):
        total += max(lengths[i], 0)
        offsets[i + 1] = total
    data = np.empty(total, np.uint8)
    to = int(data.ctypes.data)
    for i in range(count):
        start = offsets[i]
        _copy(to + start, to + total, a + at[i], a + n, offsets[i + 1] - start)
    return offsets, data


def _binaries(buf: Any, at: Any, lengths: Any) -> Any:
    """An Arrow binary array of ``buf[at[i] : at[i] + lengths[i]]``, null where the length is −1."""
    offsets, data = _gather(_address(buf), buf.size, at, lengths)
    null = lengths < 0
    validity = pa.array(~null).buffers()[1] if null.any() else None
    return pa.Array.from_buffers(
        pa.binary(), at.size, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=-1
    )


_COMMIT_TYPES: Final = 0b011  # key types 0 and 1
_TIMESTAMP: Final = COMMIT_ARROW_SCHEMA.field("record_timestamp").type


def _walked(
    a: int,
    n: int,
    limit: int,
    rows: int,
    type_mask: int,
    min_offset: int,
    max_offset: int | None,
    until_ms: int | None,
) -> Any | None:
    """:func:`_walk` into a matrix of ``rows`` (the piece's capacity), cut to the records kept; None when
    the piece holds anything the pass does not handle."""
    raw = np.empty((_RAW_FIELDS, rows), np.int64)
    end = _NO_LIMIT
    count = _walk(
        a,
        n,
        limit,
        min_offset,
        end if max_offset is None else max_offset,
        end if until_ms is None else until_ms,
        type_mask,
        raw,
    )
    return raw[:, :count] if count >= 0 else None


class CommitColumns:
    """The Arrow buffers of one batch of offset commits (``COMMIT_ARROW_SCHEMA``), which the commits of
    pieces of segments are decoded into one piece after another until :meth:`add` finds them full;
    :meth:`batch` then wraps them, without copies, and the object is spent."""

    __slots__ = ("_bits", "_ints", "_longs", "_nulls", "_offsets", "_room", "_strings", "_taken", "count")

    def __init__(self, rows: int, nbytes: int) -> None:
        """Room for ``rows`` commits out of ``nbytes`` bytes of pieces."""
        self._ints = np.empty((_INTS, rows), np.int32)
        self._longs = np.empty((_LONGS, rows), np.int64)
        self._bits = np.zeros((_BITS, (rows + 7) // 8), np.uint8)
        self._offsets = np.empty((3, rows + 1), np.int32)
        self._offsets[:, 0] = 0
        # Group, topic and metadata bytes, a row each: upper bounds (a piece holds its strings), never
        # touched much past what is written, so the pages stay unmapped.
        self._strings = np.empty((3, nbytes), np.uint8)
        self._room = nbytes
        self._nulls = (0, 0)  # tombstones, commits without an expire timestamp
        self._taken = False
        self.count = 0

    @classmethod
    def for_piece(
        cls, data: bytes | bytearray | memoryview, limit: int, rows: int = 0, nbytes: int = 0
    ) -> CommitColumns:
        """Room for ``rows`` commits out of ``nbytes`` bytes of pieces, and at least for ``data``'s."""
        buf = np.frombuffer(data, np.uint8)
        return cls(max(rows, int(_capacity(_address(buf), buf.size, limit))), max(nbytes, buf.size))

    def add(
        self,
        data: bytes | bytearray | memoryview,
        limit: int,
        record_partition: int,
        min_offset: int = 0,
        max_offset: int | None = None,
        until_ms: int | None = None,
    ) -> bool | None:
        """Decode the offset commits (and tombstones) of ``data``'s batches starting before ``limit``,
        with offsets in ``[min_offset, max_offset)`` and timestamps at or before ``until_ms``: True when
        they were added, False when they might not fit (nothing added), None when the piece holds anything
        this pass does not handle (nothing added; see the module docstring). ``data`` is not kept."""
        buf = np.frombuffer(data, np.uint8)
        a = _address(buf)
        rows = int(_capacity(a, buf.size, limit))
        if self.count + rows > self._ints.shape[1] or buf.size > self._room:
            return False
        raw = _walked(a, buf.size, limit, rows, _COMMIT_TYPES, min_offset, max_offset, until_ms)
        if raw is None:
            return None
        at, lengths = (raw[R_KEY_AT], raw[R_VALUE_AT]), (raw[R_KEY_LEN], raw[R_VALUE_LEN])
        if not self._append(
            (a, a), (buf.size, buf.size), at, lengths, raw[R_OFFSET], raw[R_TIMESTAMP], record_partition
        ):
            return None
        self._room -= buf.size
        return True

    def _append(
        self,
        address: tuple[int, int],
        size: tuple[int, int],
        at: tuple[Any, Any],
        lengths: tuple[Any, Any],
        offsets: Any,
        ts: Any,
        partition: int,
    ) -> bool:
        """:func:`_commit_columns` over keys and values in the buffers at ``address`` (of ``size`` bytes)
        into these buffers; False (nothing added) when it hands over."""
        if self._taken:
            raise RuntimeError("these commits were already taken as a batch")
        strings = self._strings
        count, tombstones, no_expire = _commit_columns(
            address[0], size[0], at[0], lengths[0], address[1], size[1], at[1], lengths[1], offsets, ts,
            partition, self._ints, self._longs, self._bits, self._offsets, _address(strings),
            strings.shape[1], self.count, *self._nulls,
        )  # fmt: skip
        if count < 0:
            return False
        self.count = count
        self._nulls = (tombstones, no_expire)
        return True

    def batch(self, records: list[Any] | None = None) -> Any:
        """The commits added so far as a ``pyarrow.RecordBatch`` over these buffers, with ``records``
        (the record partition, offset and timestamp columns) if given, else the records' own."""
        self._taken = True
        count = self.count
        tombstones, no_expire = self._nulls
        bitmaps = [pa.py_buffer(self._bits[i, : (count + 7) // 8]) for i in range(_BITS)]
        value = bitmaps[B_VALUE] if tombstones else None
        expire = bitmaps[B_EXPIRE] if no_expire else None
        ints, longs = self._ints, self._longs

        def fixed(kind: Any, data: Any, validity: Any = None, nulls: int = 0) -> Any:
            buffers = [validity, pa.py_buffer(data[:count])]
            return pa.Array.from_buffers(kind, count, buffers, null_count=nulls)

        def text(at: int, validity: Any = None, nulls: int = 0) -> Any:
            ends = self._offsets[at, : count + 1]
            buffers = [validity, pa.py_buffer(ends), pa.py_buffer(self._strings[at][: ends[-1]])]
            return pa.Array.from_buffers(pa.string(), count, buffers, null_count=nulls)

        if records is None:
            records = [
                fixed(pa.int32(), ints[I_RECORD_PARTITION]),
                fixed(pa.int64(), longs[L_RECORD_OFFSET]),
                fixed(_TIMESTAMP, longs[L_RECORD_TS]),
            ]
        arrays = [
            text(0),
            text(1),
            fixed(pa.int32(), ints[I_PARTITION]),
            fixed(pa.int64(), longs[L_COMMITTED], value, tombstones),
            fixed(pa.int32(), ints[I_EPOCH], value, tombstones),
            text(2, value, tombstones),
            fixed(_TIMESTAMP, longs[L_COMMIT_TS], value, tombstones),
            fixed(_TIMESTAMP, longs[L_EXPIRE_TS], expire, no_expire),
            pa.Array.from_buffers(pa.bool_(), count, [None, bitmaps[B_DELETED]], null_count=0),
            fixed(pa.int32(), ints[I_KEY_VERSION]),
            fixed(pa.int32(), ints[I_VALUE_VERSION], value, tombstones),
            *records,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=COMMIT_ARROW_SCHEMA)

    def record_rows(self) -> Any:
        """For :func:`scan_commit_pairs`: the row of each commit among the pairs it was given."""
        return self._longs[L_RECORD_OFFSET, : self.count]


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
    buf = np.frombuffer(data, np.uint8)
    a = _address(buf)
    raw = _walked(
        a, buf.size, limit, int(_capacity(a, buf.size, limit)), mask, min_offset, max_offset, until_ms
    )
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
    columns = CommitColumns.for_piece(data, limit)
    if not columns.add(data, limit, record_partition, min_offset, max_offset, until_ms):
        return None
    return columns.batch()


def scan_commit_pairs(batch: Any) -> Any | None:
    """The offset commits (and tombstones) among raw ``__consumer_offsets`` records (columns ``key``,
    ``value``, ``partition``, ``offset``, ``timestamp``, as Spark's Kafka source has them), as a batch with
    ``COMMIT_ARROW_SCHEMA``; None when a record is one this pass does not handle."""
    kbuf, kstarts, klens = binary_parts(batch.column("key"))
    vbuf, vstarts, vlens = binary_parts(batch.column("value"))
    n = batch.num_rows
    columns = CommitColumns(n, max(kbuf.size, vbuf.size))
    rows = np.arange(n, dtype=np.int64)
    if not columns._append(  # the pairs' own record columns replace the walk's
        (_address(kbuf), _address(vbuf)),
        (kbuf.size, vbuf.size),
        (kstarts, vstarts),
        (klens, vlens),
        rows,
        np.zeros(n, np.int64),
        0,
    ):
        return None
    taken = pa.array(columns.record_rows())
    ts = pa.timestamp("us", tz="UTC")
    records = [
        batch.column("partition").take(taken).cast(pa.int32()),
        batch.column("offset").take(taken).cast(pa.int64()),
        batch.column("timestamp").take(taken).cast(ts),
    ]
    return columns.batch(records)
