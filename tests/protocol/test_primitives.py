"""Wire primitives: varints and zig-zag against known encodings, strings/bytes/arrays with their null
markers, uuids and tagged-field sections; every malformed input is a ``DecodeError``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol import primitives as p
from regroup.protocol.primitives import DecodeError, EncodeError

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

# ------------------------------------------------------------------------------------------- varints

UVARINTS = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (300, b"\xac\x02"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (2**21 - 1, b"\xff\xff\x7f"),
    (2**28, b"\x80\x80\x80\x80\x01"),
    (2**31 - 1, b"\xff\xff\xff\xff\x07"),
    (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), UVARINTS)
def test_uvarint_known_encodings(value: int, encoded: bytes) -> None:
    assert p.uvarint_bytes(value) == encoded
    buf = bytearray(b"!")
    p.write_uvarint(buf, value)
    assert bytes(buf) == b"!" + encoded
    assert p.varint_size(value) == len(encoded)
    assert p.read_uvarint(encoded, 0) == (value, len(encoded))
    assert p.read_uvarint(b"xx" + encoded + b"yy", 2) == (value, 2 + len(encoded))
    assert p.read_uvarlong(encoded, 0) == (value, len(encoded))


def test_uvarint_rejects_negative() -> None:
    with pytest.raises(EncodeError):
        p.uvarint_bytes(-1)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # nothing
        b"\x80",  # truncated
        b"\xff\xff\xff\xff",  # truncated at 4 bytes
        b"\x80\x80\x80\x80\x80\x00",  # 6 bytes: over-long even though the value is 0
        b"\xff\xff\xff\xff\xff",  # 5 continuation bytes
        b"\xff\xff\xff\xff\x1f",  # 5 bytes but 35 bits: overflows uint32
        b"\xff\xff\xff\xff\x10",  # 2**32: overflows uint32
        b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    ],
)
def test_read_uvarint_rejects(data: bytes) -> None:
    with pytest.raises(DecodeError):
        p.read_uvarint(data, 0)
    with pytest.raises(DecodeError):
        p.read_varint(data, 0)


def test_read_uvarint_past_end() -> None:
    with pytest.raises(DecodeError):
        p.read_uvarint(b"\x01", 1)


def test_uvarlong_limits() -> None:
    top = b"\xff" * 9 + b"\x01"
    assert p.read_uvarlong(top, 0) == (2**64 - 1, 10)
    assert p.read_uvarlong(b"\x80" * 9 + b"\x00", 0) == (0, 10)  # padded but within 10 bytes: accepted
    for bad in (b"\xff" * 9 + b"\x02", b"\x80" * 10 + b"\x00", b"\xff" * 10, b"\xff" * 5):
        with pytest.raises(DecodeError):
            p.read_uvarlong(bad, 0)
        with pytest.raises(DecodeError):
            p.read_varlong(bad, 0)


ZIGZAG = [
    (0, 0),
    (-1, 1),
    (1, 2),
    (-2, 3),
    (2, 4),
    (63, 126),
    (-64, 127),
    (64, 128),
    (2**31 - 1, 2**32 - 2),
    (-(2**31), 2**32 - 1),
]


@pytest.mark.parametrize(("value", "zz"), ZIGZAG)
def test_zigzag_known_values(value: int, zz: int) -> None:
    assert p.zigzag_encode(value) == zz
    assert p.zigzag_decode(zz) == value
    buf = bytearray()
    p.write_varint(buf, value)
    assert bytes(buf) == p.uvarint_bytes(zz)
    assert p.read_varint(bytes(buf), 0) == (value, len(buf))
    buf = bytearray()
    p.write_varlong(buf, value)
    assert bytes(buf) == p.uvarint_bytes(zz)
    assert p.read_varlong(bytes(buf), 0) == (value, len(buf))


def test_varint_known_bytes() -> None:
    cases = {-1: b"\x01", 1: b"\x02", -64: b"\x7f", 64: b"\x80\x01", 150: b"\xac\x02"}
    for value, encoded in cases.items():
        buf = bytearray()
        p.write_varint(buf, value)
        assert bytes(buf) == encoded, value
    buf = bytearray()
    p.write_varlong(buf, INT64[0])
    assert bytes(buf) == b"\xff" * 9 + b"\x01"
    buf = bytearray()
    p.write_varlong(buf, INT64[1])
    assert bytes(buf) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert p.zigzag_encode(INT64[0]) == 2**64 - 1


@pytest.mark.parametrize("value", [INT32[0] - 1, INT32[1] + 1, 2**40])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(EncodeError):
        p.write_varint(bytearray(), value)


@pytest.mark.parametrize("value", [INT64[0] - 1, INT64[1] + 1])
def test_varlong_out_of_range(value: int) -> None:
    with pytest.raises(EncodeError):
        p.write_varlong(bytearray(), value)


@given(st.integers(*INT32))
def test_varint_roundtrip(value: int) -> None:
    buf = bytearray()
    p.write_varint(buf, value)
    assert len(buf) <= 5
    assert p.read_varint(bytes(buf), 0) == (value, len(buf))


@given(st.integers(*INT64))
def test_varlong_roundtrip(value: int) -> None:
    buf = bytearray()
    p.write_varlong(buf, value)
    assert len(buf) <= 10
    assert p.read_varlong(bytes(buf), 0) == (value, len(buf))
    assert p.zigzag_decode(p.zigzag_encode(value)) == value


@given(st.integers(0, 2**32 - 1))
def test_uvarint_roundtrip(value: int) -> None:
    data = p.uvarint_bytes(value)
    assert p.varint_size(value) == len(data)
    assert p.read_uvarint(data, 0) == (value, len(data))


# ------------------------------------------------------------------------------------------- strings


def _w(fn: Callable[[bytearray, Any], None], value: Any) -> bytes:
    buf = bytearray()
    fn(buf, value)
    return bytes(buf)


def test_string_encodings() -> None:
    assert _w(p.write_string, "") == b"\x00\x00"
    assert _w(p.write_string, "abc") == b"\x00\x03abc"
    assert _w(p.write_string, "é") == b"\x00\x02\xc3\xa9"
    assert _w(p.write_nullable_string, None) == b"\xff\xff"
    assert _w(p.write_compact_string, "") == b"\x01"
    assert _w(p.write_compact_string, "abc") == b"\x04abc"
    assert _w(p.write_compact_nullable_string, None) == b"\x00"
    assert _w(p.write_compact_string, "x" * 200) == b"\xc9\x01" + b"x" * 200


def test_string_reads() -> None:
    assert p.read_string(b"\x00\x03abcZ", 0) == ("abc", 5)
    assert p.read_nullable_string(b"\xff\xff", 0) == (None, 2)
    assert p.read_compact_string(b"\x04abc", 0) == ("abc", 4)
    assert p.read_compact_nullable_string(b"\x00", 0) == (None, 1)
    assert p.read_compact_string(b"\x01", 0) == ("", 1)


@pytest.mark.parametrize(
    ("reader", "data"),
    [
        (p.read_string, b"\xff\xff"),  # null where not nullable
        (p.read_string, b"\xff\xfe"),  # -2
        (p.read_nullable_string, b"\xff\xfe"),  # -2 is not the null marker
        (p.read_nullable_string, b"\x80\x00"),  # -32768
        (p.read_nullable_string, b"\x00\x05abc"),  # longer than the data
        (p.read_nullable_string, b"\x7f\xff"),  # 32767 with nothing behind
        (p.read_nullable_string, b"\x00"),  # truncated length
        (p.read_nullable_string, b""),
        (p.read_nullable_string, b"\x00\x02\xc3\x28"),  # invalid UTF-8
        (p.read_compact_string, b"\x00"),  # null where not nullable
        (p.read_compact_nullable_string, b"\x05abc"),
        (p.read_compact_nullable_string, b"\xff\xff\xff\xff\x0f"),  # 2**32-2 bytes claimed
        (p.read_compact_nullable_string, b"\xff\xff\xff\xff\xff"),  # over-long length varint
        (p.read_compact_nullable_string, b"\x03\xff\xfe"),  # invalid UTF-8
        (p.read_compact_nullable_string, b""),
    ],
)
def test_string_rejects(reader: Callable[[bytes, int], Any], data: bytes) -> None:
    with pytest.raises(DecodeError):
        reader(data, 0)


def test_string_too_long_for_int16() -> None:
    with pytest.raises(EncodeError):
        p.write_string(bytearray(), "x" * 0x8000)
    assert len(_w(p.write_string, "x" * 0x7FFF)) == 0x7FFF + 2


@given(st.one_of(st.none(), st.text(max_size=50)))
def test_string_roundtrips(value: str | None) -> None:
    data = _w(p.write_nullable_string, value)
    assert p.read_nullable_string(data, 0) == (value, len(data))
    data = _w(p.write_compact_nullable_string, value)
    assert p.read_compact_nullable_string(data, 0) == (value, len(data))


# ------------------------------------------------------------------------------------------- bytes


def test_bytes_encodings() -> None:
    assert _w(p.write_bytes, b"") == b"\x00\x00\x00\x00"
    assert _w(p.write_bytes, b"ab") == b"\x00\x00\x00\x02ab"
    assert _w(p.write_nullable_bytes, None) == b"\xff\xff\xff\xff"
    assert _w(p.write_compact_bytes, b"ab") == b"\x03ab"
    assert _w(p.write_compact_nullable_bytes, None) == b"\x00"
    assert p.read_nullable_bytes(b"\xff\xff\xff\xff", 0) == (None, 4)
    assert p.read_compact_nullable_bytes(b"\x00", 0) == (None, 1)
    assert p.read_bytes(b"\x00\x00\x00\x01zq", 0) == (b"z", 5)
    assert p.read_compact_bytes(memoryview(b"\x02z"), 0) == (b"z", 2)
    assert isinstance(p.read_compact_bytes(memoryview(b"\x02z"), 0)[0], bytes)


@pytest.mark.parametrize(
    ("reader", "data"),
    [
        (p.read_bytes, b"\xff\xff\xff\xff"),
        (p.read_nullable_bytes, b"\xff\xff\xff\xfe"),  # -2
        (p.read_nullable_bytes, b"\x80\x00\x00\x00"),  # int32 min
        (p.read_nullable_bytes, b"\x7f\xff\xff\xff"),  # 2 GiB claimed
        (p.read_nullable_bytes, b"\x00\x00\x01"),
        (p.read_compact_bytes, b"\x00"),
        (p.read_compact_nullable_bytes, b"\xff\xff\xff\xff\x0f"),
        (p.read_compact_nullable_bytes, b"\x80\x80\x80\x80\x80\x01"),  # over-long
    ],
)
def test_bytes_rejects(reader: Callable[[bytes, int], Any], data: bytes) -> None:
    with pytest.raises(DecodeError):
        reader(data, 0)


@given(st.one_of(st.none(), st.binary(max_size=300)))
def test_bytes_roundtrips(value: bytes | None) -> None:
    data = _w(p.write_nullable_bytes, value)
    assert p.read_nullable_bytes(data, 0) == (value, len(data))
    data = _w(p.write_compact_nullable_bytes, value)
    assert p.read_compact_nullable_bytes(data, 0) == (value, len(data))


# ------------------------------------------------------------------------------------------- arrays


def test_array_lengths() -> None:
    assert p.read_array_len(b"\x00\x00\x00\x02ab", 0, False) == (2, 4)
    assert p.read_array_len(b"\xff\xff\xff\xff", 0, True) == (-1, 4)
    assert p.read_array_len(b"\x00\x00\x00\x00", 0, False) == (0, 4)
    assert p.read_compact_array_len(b"\x00", 0, True) == (-1, 1)
    assert p.read_compact_array_len(b"\x01", 0, False) == (0, 1)
    assert p.read_compact_array_len(b"\x03ab", 0, False) == (2, 1)


@pytest.mark.parametrize(
    ("data", "nullable"),
    [
        (b"\xff\xff\xff\xff", False),  # null, not nullable
        (b"\xff\xff\xff\xfe", True),  # -2
        (b"\x80\x00\x00\x00", True),
        (b"\x7f\xff\xff\xff", True),  # hostile count, nothing behind
        (b"\x00\x00\x00\x03ab", False),  # count larger than the bytes left
        (b"\x00\x00\x00", True),
    ],
)
def test_array_len_rejects(data: bytes, nullable: bool) -> None:
    with pytest.raises(DecodeError):
        p.read_array_len(data, 0, nullable)


@pytest.mark.parametrize(
    ("data", "nullable"),
    [
        (b"\x00", False),
        (b"\xff\xff\xff\xff\x0f", True),
        (b"\xff\xff\xff\xff\xff", True),
        (b"\x04ab", True),
        (b"", True),
    ],
)
def test_compact_array_len_rejects(data: bytes, nullable: bool) -> None:
    with pytest.raises(DecodeError):
        p.read_compact_array_len(data, 0, nullable)


# ------------------------------------------------------------------------------------------- uuid & fixed


def test_uuid() -> None:
    u = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    assert _w(p.write_uuid, u) == bytes.fromhex("0123456789abcdef0123456789abcdef")
    assert p.read_uuid(b"!" + u.bytes, 1) == (u, 17)
    assert p.ZERO_UUID.bytes == b"\x00" * 16
    with pytest.raises(DecodeError):
        p.read_uuid(u.bytes[:15], 0)


def test_fixed_width_structs() -> None:
    assert p.I8.pack(-1) == b"\xff"
    assert p.I16.pack(-2) == b"\xff\xfe"
    assert p.I32.pack(1) == b"\x00\x00\x00\x01"
    assert p.I64.pack(-1) == b"\xff" * 8
    assert p.U16.pack(65535) == b"\xff\xff"
    assert p.U32.pack(2**32 - 1) == b"\xff" * 4
    assert p.F64.pack(1.0) == b"\x3f\xf0" + b"\x00" * 6
    assert p.BOOL.unpack(b"\x02") == (True,)  # any non-zero byte reads as true, as in Kafka


# ------------------------------------------------------------------------------------------- tagged fields


def test_skip_tagged_fields() -> None:
    assert p.skip_tagged_fields(b"\x00", 0) == 1
    assert p.skip_tagged_fields(b"xx\x00yy", 2) == 3
    section = b"\x02" + b"\x00\x02ab" + b"\x05\x00"
    assert p.skip_tagged_fields(section + b"rest", 0) == len(section)
    big = b"\x01" + b"\x80\x01" + b"\x81\x01" + b"z" * 129  # tag 128, size 129
    assert p.skip_tagged_fields(big, 0) == len(big)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",  # one field announced, nothing follows
        b"\x01\x00",  # tag, no size
        b"\x01\x00\x05ab",  # size overruns
        b"\x02\x00\x00",  # second field missing
        b"\xff\xff\xff\xff\x0f",  # hostile count
        b"\xff\xff\xff\xff\xff",  # over-long count
        b"\x01\xff\xff\xff\xff\xff\x00",  # over-long tag
        b"\x01\x00\xff\xff\xff\xff\x0f",  # hostile size
    ],
)
def test_skip_tagged_fields_rejects(data: bytes) -> None:
    with pytest.raises(DecodeError):
        p.skip_tagged_fields(data, 0)


# ------------------------------------------------------------------------------------------- any input

READERS: list[Callable[[bytes, int], Any]] = [
    p.read_uvarint,
    p.read_uvarlong,
    p.read_varint,
    p.read_varlong,
    p.read_string,
    p.read_nullable_string,
    p.read_compact_string,
    p.read_compact_nullable_string,
    p.read_bytes,
    p.read_nullable_bytes,
    p.read_compact_bytes,
    p.read_compact_nullable_bytes,
    p.read_uuid,
    lambda d, pos: p.read_array_len(d, pos, True),
    lambda d, pos: p.read_array_len(d, pos, False),
    lambda d, pos: p.read_compact_array_len(d, pos, True),
    lambda d, pos: p.read_compact_array_len(d, pos, False),
    p.skip_tagged_fields,
]


@given(st.binary(max_size=40), st.integers(0, 45))
@settings(max_examples=300)
def test_readers_raise_only_decode_error(data: bytes, pos: int) -> None:
    for reader in READERS:
        try:
            result = reader(data, pos)
        except DecodeError:
            continue
        end = result if isinstance(result, int) else result[1]
        assert pos < end <= len(data)
