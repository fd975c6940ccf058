"""Kafka wire primitives: fixed-width ints, (unsigned/zig-zag) varints, strings, bytes, arrays, uuids
and tagged-field sections, in the classic and the compact ("flexible") encodings.

Every reader takes ``(data, pos)`` and returns ``(value, new_pos)``. Decoding untrusted bytes raises only
:class:`DecodeError`: a declared length or count larger than the bytes left, a negative size other than the
null marker, a varint longer than its type, or invalid UTF-8. Readers never allocate more than the bytes
they were given. The generated message codecs inline the same logic for speed; these functions are the
reference used by hand-written code (framing, record batches) and by the generated code's slow paths.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

__all__ = [
    "BOOL",
    "F64",
    "I8",
    "I16",
    "I32",
    "I64",
    "U16",
    "U32",
    "ZERO_UUID",
    "DecodeError",
    "EncodeError",
    "UnsupportedVersionError",
    "Uuid",
    "read_array_len",
    "read_bytes",
    "read_compact_array_len",
    "read_compact_bytes",
    "read_compact_nullable_bytes",
    "read_compact_nullable_string",
    "read_compact_string",
    "read_nullable_bytes",
    "read_nullable_string",
    "read_string",
    "read_uuid",
    "read_uvarint",
    "read_uvarlong",
    "read_varint",
    "read_varlong",
    "skip_tagged_fields",
    "uvarint_bytes",
    "varint_size",
    "write_bytes",
    "write_compact_bytes",
    "write_compact_nullable_bytes",
    "write_compact_nullable_string",
    "write_compact_string",
    "write_nullable_bytes",
    "write_nullable_string",
    "write_string",
    "write_uuid",
    "write_uvarint",
    "write_varint",
    "write_varlong",
    "zigzag_decode",
    "zigzag_encode",
]


class DecodeError(ValueError):
    """The one error raised for bytes that are not a valid encoding of what was asked for.

    Covers truncated input, lengths or counts larger than the remaining bytes, negative sizes other than
    the null marker, over-long varints, invalid UTF-8 and trailing bytes after a complete message.
    """


class EncodeError(ValueError):
    """A value cannot be written at the requested version (null in a non-nullable field, a non-default
    value in a non-ignorable field the version lacks, a number out of range)."""


class UnsupportedVersionError(ValueError):
    """The message has no schema for the requested version."""


I8: Final = struct.Struct(">b")
I16: Final = struct.Struct(">h")
I32: Final = struct.Struct(">i")
I64: Final = struct.Struct(">q")
U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")
F64: Final = struct.Struct(">d")
BOOL: Final = struct.Struct(">?")

ZERO_UUID: Final = uuid.UUID(int=0)
Uuid = uuid.UUID
"""Kafka's ``uuid`` field type (topic ids), for layers that must not import :mod:`uuid` themselves."""

# Single-byte unsigned varints are by far the most common (lengths and counts below 128).
_SMALL_UVARINT: Final = tuple(bytes((i,)) for i in range(128))


# ---------------------------------------------------------------------------------------------- varints


def uvarint_bytes(value: int) -> bytes:
    """Encode a non-negative int as an unsigned LEB128 varint."""
    if 0 <= value < 128:
        return _SMALL_UVARINT[value]
    if value < 0:
        raise EncodeError(f"unsigned varint cannot encode negative value {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_uvarint(buf: bytearray, value: int) -> None:
    buf += uvarint_bytes(value)


def varint_size(value: int) -> int:
    """Bytes needed for ``value`` as an unsigned varint."""
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _read_uvar(data: bytes, pos: int, max_bytes: int, limit: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(data)
    for _ in range(max_bytes):
        if pos >= end:
            raise DecodeError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > limit:
                raise DecodeError("varint overflows its type")
            return result, pos
        shift += 7
    raise DecodeError(f"varint longer than {max_bytes} bytes")


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Unsigned 32-bit varint (at most 5 bytes)."""
    if pos < len(data):
        b = data[pos]
        if b < 0x80:
            return b, pos + 1
    return _read_uvar(data, pos, 5, 0xFFFFFFFF)


def read_uvarlong(data: bytes, pos: int) -> tuple[int, int]:
    """Unsigned 64-bit varint (at most 10 bytes)."""
    return _read_uvar(data, pos, 10, 0xFFFFFFFFFFFFFFFF)


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed 32-bit varint."""
    value, pos = read_uvarint(data, pos)
    return (value >> 1) ^ -(value & 1), pos


def read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed 64-bit varint."""
    value, pos = _read_uvar(data, pos, 10, 0xFFFFFFFFFFFFFFFF)
    return (value >> 1) ^ -(value & 1), pos


def write_varint(buf: bytearray, value: int) -> None:
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise EncodeError(f"varint out of int32 range: {value}")
    buf += uvarint_bytes(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(buf: bytearray, value: int) -> None:
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise EncodeError(f"varlong out of int64 range: {value}")
    buf += uvarint_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------------------------------------- lengths


def _take(data: bytes, pos: int, n: int) -> int:
    end = pos + n
    if end > len(data):
        raise DecodeError(f"declared length {n} exceeds the {len(data) - pos} bytes left")
    return end


def read_array_len(data: bytes, pos: int, nullable: bool) -> tuple[int, int]:
    """Classic array: int32 count, -1 = null (returned as -1). The count is checked against the bytes
    left, so a hostile count cannot make a caller allocate a huge list."""
    if pos + 4 > len(data):
        raise DecodeError("truncated array length")
    (n,) = I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise DecodeError(f"invalid array length {n}")
    if n > len(data) - pos:
        raise DecodeError(f"array count {n} exceeds the {len(data) - pos} bytes left")
    return n, pos


def read_compact_array_len(data: bytes, pos: int, nullable: bool) -> tuple[int, int]:
    """Compact array: uvarint count+1, 0 = null (returned as -1)."""
    n, pos = read_uvarint(data, pos)
    if n == 0:
        if nullable:
            return -1, pos
        raise DecodeError("null compact array in a non-nullable field")
    n -= 1
    if n > len(data) - pos:
        raise DecodeError(f"array count {n} exceeds the {len(data) - pos} bytes left")
    return n, pos


# ---------------------------------------------------------------------------------------------- strings


def read_string(data: bytes, pos: int) -> tuple[str, int]:
    s, pos = read_nullable_string(data, pos)
    if s is None:
        raise DecodeError("null string in a non-nullable field")
    return s, pos


def read_nullable_string(data: bytes, pos: int) -> tuple[str | None, int]:
    if pos + 2 > len(data):
        raise DecodeError("truncated string length")
    (n,) = I16.unpack_from(data, pos)
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"invalid string length {n}")
    end = _take(data, pos, n)
    try:
        return bytes(data[pos:end]).decode(), end
    except UnicodeDecodeError as exc:
        raise DecodeError("string is not valid UTF-8") from exc


def read_compact_string(data: bytes, pos: int) -> tuple[str, int]:
    s, pos = read_compact_nullable_string(data, pos)
    if s is None:
        raise DecodeError("null compact string in a non-nullable field")
    return s, pos


def read_compact_nullable_string(data: bytes, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = _take(data, pos, n - 1)
    try:
        return bytes(data[pos:end]).decode(), end
    except UnicodeDecodeError as exc:
        raise DecodeError("string is not valid UTF-8") from exc


def write_string(buf: bytearray, value: str) -> None:
    b = value.encode()
    if len(b) > 0x7FFF:
        raise EncodeError(f"string of {len(b)} bytes exceeds int16 length")
    buf += I16.pack(len(b))
    buf += b


def write_nullable_string(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf += b"\xff\xff"
    else:
        write_string(buf, value)


def write_compact_string(buf: bytearray, value: str) -> None:
    b = value.encode()
    buf += uvarint_bytes(len(b) + 1)
    buf += b


def write_compact_nullable_string(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf.append(0)
    else:
        write_compact_string(buf, value)


# ---------------------------------------------------------------------------------------------- bytes


def read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    b, pos = read_nullable_bytes(data, pos)
    if b is None:
        raise DecodeError("null bytes in a non-nullable field")
    return b, pos


def read_nullable_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(data):
        raise DecodeError("truncated bytes length")
    (n,) = I32.unpack_from(data, pos)
    pos += 4
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"invalid bytes length {n}")
    end = _take(data, pos, n)
    return bytes(data[pos:end]), end


def read_compact_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    b, pos = read_compact_nullable_bytes(data, pos)
    if b is None:
        raise DecodeError("null compact bytes in a non-nullable field")
    return b, pos


def read_compact_nullable_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = _take(data, pos, n - 1)
    return bytes(data[pos:end]), end


def write_bytes(buf: bytearray, value: bytes) -> None:
    buf += I32.pack(len(value))
    buf += value


def write_nullable_bytes(buf: bytearray, value: bytes | None) -> None:
    if value is None:
        buf += b"\xff\xff\xff\xff"
    else:
        write_bytes(buf, value)


def write_compact_bytes(buf: bytearray, value: bytes) -> None:
    buf += uvarint_bytes(len(value) + 1)
    buf += value


def write_compact_nullable_bytes(buf: bytearray, value: bytes | None) -> None:
    if value is None:
        buf.append(0)
    else:
        write_compact_bytes(buf, value)


# ---------------------------------------------------------------------------------------------- uuid


_UUIDS: dict[bytes, uuid.UUID] = {}
_UUIDS_MAX: Final = 4096


def uuid_from_bytes(raw: bytes | memoryview) -> uuid.UUID:
    """The :class:`uuid.UUID` of 16 bytes, one shared object per value: a broker sees few distinct topic ids
    but decodes them millions of times (every offset record replayed from ``__consumer_offsets`` carries
    one), and each ``UUID`` built costs more than the rest of such a record. The table is bounded: it is
    emptied when full, so random ids in hostile input cost no more than building them."""
    key = bytes(raw)
    value = _UUIDS.get(key)
    if value is None:
        if len(_UUIDS) >= _UUIDS_MAX:
            _UUIDS.clear()
        value = _UUIDS[key] = uuid.UUID(bytes=key)
    return value


def read_uuid(data: bytes, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(data):
        raise DecodeError("truncated uuid")
    return uuid_from_bytes(data[pos:end]), end


def write_uuid(buf: bytearray, value: uuid.UUID) -> None:
    buf += value.bytes


# ---------------------------------------------------------------------------------------------- tagged fields


def skip_tagged_fields(data: bytes, pos: int) -> int:
    """Skip a whole tagged-field section whose fields are all unknown to the reader."""
    count, pos = read_uvarint(data, pos)
    if count > len(data) - pos:
        raise DecodeError(f"tagged field count {count} exceeds the bytes left")
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos = _take(data, pos, size)
    return pos
