"""Hostile input for every request decoder (and the group APIs' response decoders), at every version.

Valid encodings are truncated, byte-flipped and spliced with hostile lengths/counts (int32 0x7fffffff,
-2, 0xff*5 varints, over-long varints). Decoding must either succeed or raise ``DecodeError`` — nothing
else — and must not allocate much more than the input: a small frame that claims a huge array, string or
bytes length is refused before anything of that size is built (peak < 64 KiB + 32 x frame size).
``framing.decode_request`` gets the same treatment on whole frames.
"""

from __future__ import annotations

import contextlib
import random
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.protocol.api_keys import API_INFO, ApiKey, request_class, response_class
from regroup.protocol.framing import decode_request, encode_request
from regroup.protocol.message import Message, Struct
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from regroup.protocol.messages.offset_commit import OffsetCommitRequest
from regroup.protocol.messages.sync_group import SyncGroupRequest
from regroup.protocol.primitives import I16, I32, ZERO_UUID, DecodeError, UnsupportedVersionError

from .strategies import GROUP_APIS, INT_RANGES, class_versions, values

HOSTILE = [
    b"\x7f\xff\xff\xff",  # int32 max as a count or bytes length
    b"\xff\xff\xff\xfe",  # int32 -2
    b"\x80\x00\x00\x00",  # int32 min
    b"\x7f\xff",  # int16 max as a string length
    b"\xff\xfe",  # int16 -2
    b"\xff\xff\xff\xff\x0f",  # uvarint 0xffffffff: compact length/count of 4 GiB
    b"\xff\xff\xff\xff\xff",  # 5 continuation bytes: over-long / overflowing varint
    b"\x80\x80\x80\x80\x80\x80\x01",  # over-long varint
    b"\xfe\xff\xff\xff\x07",  # uvarint 2**31-1
    b"\x00",
    b"\xff",
]

CASES: list[Any] = []
for _key in ApiKey:
    _req = request_class(_key)
    CASES.extend(pytest.param(_req, v, id=f"{_req.NAME}-v{v}") for v in class_versions(_req))
    _resp = response_class(_key)
    if _resp.NAME.removesuffix("Response") in GROUP_APIS:
        CASES.extend(pytest.param(_resp, v, id=f"{_resp.NAME}-v{v}") for v in class_versions(_resp))

_HC = [HealthCheck.too_slow, HealthCheck.data_too_large]


def test_cases_cover_every_request() -> None:
    names = {p.values[0].NAME for p in CASES}
    assert {request_class(k).NAME for k in ApiKey} <= names
    assert {
        "JoinGroupResponse",
        "SyncGroupResponse",
        "OffsetFetchResponse",
        "DescribeGroupsResponse",
    } <= names
    assert len(CASES) > 350


# ------------------------------------------------------------------------------------------- mutations


def mutations(data: bytes, rng: random.Random) -> Iterator[bytes]:
    n = len(data)
    cuts = range(n) if n <= 200 else sorted(rng.sample(range(n), 200))
    for cut in cuts:
        yield data[:cut]
    if not n:
        return
    for _ in range(24):
        i = rng.randrange(n)
        yield data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    for _ in range(8):
        i = rng.randrange(n)
        yield data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    for _ in range(40):
        pattern = rng.choice(HOSTILE)
        i = rng.randrange(n + 1)
        if rng.random() < 0.5:
            yield data[:i] + pattern + data[i:]  # insert
        else:
            yield data[:i] + pattern + data[i + len(pattern) :]  # overwrite
    yield data + b"\x00"
    yield data + rng.randbytes(rng.randrange(1, 8))


def check_decode(cls: type[Struct], version: int, data: bytes) -> None:
    """Decoding succeeds or raises DecodeError; a decoded value re-encodes to a fixed point."""
    try:
        obj = cls.decode(data, version)
    except DecodeError:
        return
    again = obj.encode(version)
    assert cls.decode(again, version).encode(version) == again


@pytest.mark.parametrize(("cls", "version"), CASES)
def test_mutated_encodings(cls: type[Message], version: int) -> None:
    @settings(max_examples=3, deadline=None, database=None, suppress_health_check=_HC)
    @given(values(cls, version), st.randoms(use_true_random=False))
    def check(obj: Message, rng: random.Random) -> None:
        data = obj.encode(version)
        for bad in mutations(data, rng):
            check_decode(cls, version, bad)
        if cls.NAME.endswith("Request"):
            frame = encode_request(obj, version, correlation_id=rng.randrange(2**31), client_id="fuzz")[4:]
            for bad in mutations(frame, rng):
                check_decode_request(bad)

    check()


def check_decode_request(frame: bytes) -> None:
    try:
        decode_request(frame)
    except UnsupportedVersionError:
        # only when the (mutated) header names a known API at a version without a schema
        (key,) = I16.unpack_from(frame, 0)
        (version,) = I16.unpack_from(frame, 2)
        assert not request_class(ApiKey(key)).supports(version)
    except DecodeError:
        pass


@given(st.binary(max_size=80))
@settings(max_examples=300, deadline=None, database=None)
def test_random_frames(frame: bytes) -> None:
    check_decode_request(frame)


@given(st.sampled_from(sorted(API_INFO)), st.integers(0, 20), st.binary(max_size=60))
@settings(max_examples=400, deadline=None, database=None)
def test_random_bodies_behind_valid_headers(key: ApiKey, version: int, body: bytes) -> None:
    info = API_INFO[key]
    head = I16.pack(key) + I16.pack(version) + I32.pack(7) + b"\x00\x01c"
    if info.header_versions(version)[0] == 2:
        head += b"\x00"
    check_decode_request(head + body)


# ------------------------------------------------------------------------------------------- memory


def filled(cls: type[Struct], version: int, depth: int = 4) -> Struct:
    """An instance with every present field set to a small non-default value: one-element arrays, short
    strings, non-null nullables, recursively — so the encoding has a length/count at every level."""
    kwargs: dict[str, Any] = {}
    for f in cls.FIELDS:
        if not f.present_in(version):
            continue
        if f.struct is not None:
            if depth <= 0:
                value: Any = [] if f.is_array else f.struct()
            else:
                elem = filled(f.struct, version, depth - 1)
                value = [elem] if f.is_array else elem
        else:
            one = _one(f.type_name)
            value = [one] if f.is_array else one
        kwargs[f.name] = value
    return cls(**kwargs)


def _one(type_name: str) -> Any:
    if type_name in INT_RANGES:
        return 1
    return {
        "bool": True,
        "float64": 1.5,
        "string": "s",
        "bytes": b"b",
        "records": b"r",
        "uuid": ZERO_UUID.__class__(int=1),
    }[type_name]


def _peak_of(cls: type[Struct], version: int, data: bytes) -> int:
    """Peak memory decoding ``data``. tracemalloc counts every thread's allocations (a client library's or
    Spark's threads left by earlier tests): a peak over budget is measured twice more and the least taken,
    since the decoder's own allocations repeat exactly and another thread's seldom coincide three times."""
    peak = _one_peak_of(cls, version, data)
    if peak >= _budget(data):
        peak = min(peak, _one_peak_of(cls, version, data), _one_peak_of(cls, version, data))
    return peak


def _one_peak_of(cls: type[Struct], version: int, data: bytes) -> int:
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    with contextlib.suppress(DecodeError):
        cls.decode(data, version)
    _, peak = tracemalloc.get_traced_memory()
    return peak - base


def _budget(data: bytes) -> int:
    return 64 * 1024 + 32 * len(data)


@pytest.mark.parametrize(("cls", "version"), CASES)
def test_hostile_lengths_do_not_allocate(cls: type[Message], version: int) -> None:
    claims = [b"\x7f\xff\xff\xff", b"\x7f\xff", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07"]
    worst = (0, b"")
    tracemalloc.start()
    try:
        for sample in (cls().encode(version), filled(cls, version).encode(version)):
            for i in range(len(sample)):
                for claim in claims:
                    data = sample[:i] + claim + sample[i + len(claim) :]
                    peak = _peak_of(cls, version, data)
                    if peak - _budget(data) > worst[0] - _budget(worst[1]):
                        worst = (peak, data)
    finally:
        tracemalloc.stop()
    peak, data = worst
    assert peak < _budget(data), f"{peak} bytes allocated decoding {len(data)} bytes: {data.hex()}"


@pytest.mark.parametrize(
    ("cls", "version", "data"),
    [
        # JoinGroup v5: group "g", timeouts, member "", null instance id, type "", protocols: 0x7fffffff
        (
            JoinGroupRequest,
            5,
            b"\x00\x01g" + b"\x00" * 8 + b"\x00\x00" + b"\xff\xff" + b"\x00\x00" + b"\x7f\xff\xff\xff",
        ),
        # JoinGroup v6 (flexible): protocols claims 2**32-2 elements
        (JoinGroupRequest, 6, b"\x02g" + b"\x00" * 8 + b"\x01" + b"\x00" + b"\x01" + b"\xff\xff\xff\xff\x0f"),
        # a string claiming 32767 bytes
        (JoinGroupRequest, 0, b"\x7f\xff" + b"g" * 10),
        # a compact string claiming 2**31 bytes
        (JoinGroupRequest, 6, b"\x80\x80\x80\x80\x08" + b"g" * 10),
        # SyncGroup v3: group, generation, member, null instance id, assignments: 1 x (member "", bytes 2 GiB)
        (
            SyncGroupRequest,
            3,
            b"\x00\x01g"
            + b"\x00\x00\x00\x01"
            + b"\x00\x01m"
            + b"\xff\xff"
            + b"\x00\x00\x00\x01"
            + b"\x00\x00"
            + b"\x7f\xff\xff\xff",
        ),
        # OffsetCommit v8 (flexible): a tagged section claiming 2**32-1 fields
        (
            OffsetCommitRequest,
            8,
            b"\x02g" + b"\xff\xff\xff\xff" + b"\x02m" + b"\x00" + b"\x01" + b"\xff\xff\xff\xff\x0f",
        ),
        # OffsetCommit v8: one tagged field claiming a size of 2**32-1
        (
            OffsetCommitRequest,
            8,
            b"\x02g" + b"\xff\xff\xff\xff" + b"\x02m" + b"\x00" + b"\x01" + b"\x01\x00\xff\xff\xff\xff\x0f",
        ),
    ],
    ids=["classic-array", "compact-array", "string", "compact-string", "bytes", "tag-count", "tag-size"],
)
def test_specific_hostile_frames(cls: type[Struct], version: int, data: bytes) -> None:
    tracemalloc.start()
    try:
        peak = _peak_of(cls, version, data)
    finally:
        tracemalloc.stop()
    with pytest.raises(DecodeError):
        cls.decode(data, version)
    assert peak < _budget(data)


def test_specific_hostile_frames_are_well_formed_otherwise() -> None:
    """The prefixes used above are right: with a sane count/length the same bytes decode."""
    ok = b"\x00\x01g" + b"\x00" * 8 + b"\x00\x00" + b"\xff\xff" + b"\x00\x00" + b"\x00\x00\x00\x00"
    assert JoinGroupRequest.decode(ok, 5) == JoinGroupRequest(group_id="g", rebalance_timeout_ms=0)
    ok6 = (
        b"\x02g" + b"\x00" * 8 + b"\x01" + b"\x00" + b"\x01" + b"\x02" + b"\x01" + b"\x01" + b"\x00" + b"\x00"
    )
    assert JoinGroupRequest.decode(ok6, 6) == JoinGroupRequest(
        group_id="g", rebalance_timeout_ms=0, protocols=[JoinGroupRequestProtocol()]
    )
    sync = (
        b"\x00\x01g"
        + b"\x00\x00\x00\x01"
        + b"\x00\x01m"
        + b"\xff\xff"
        + b"\x00\x00\x00\x01"
        + b"\x00\x00"
        + b"\x00\x00\x00\x00"
    )
    assert SyncGroupRequest.decode(sync, 3).assignments[0].assignment == b""
    commit = b"\x02g" + b"\xff\xff\xff\xff" + b"\x02m" + b"\x00" + b"\x01" + b"\x00"
    assert OffsetCommitRequest.decode(commit, 8).group_id == "g"
