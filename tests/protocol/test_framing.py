"""Frames and headers: header versions per API version, the ApiVersions response header exception, the
sans-I/O ``FrameReader`` and whole-request decoding."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.protocol.api_keys import API_INFO, ApiKey, request_class, response_class
from regroup.protocol.framing import (
    FrameReader,
    FrameTooLargeError,
    UnknownApiError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from regroup.protocol.messages.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.messages.headers import RequestHeader, ResponseHeader
from regroup.protocol.messages.heartbeat import HeartbeatRequest
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from regroup.protocol.primitives import I32, DecodeError, UnsupportedVersionError

# ------------------------------------------------------------------------------------------- headers


def test_request_header_v1_bytes() -> None:
    hdr = RequestHeader(request_api_key=11, request_api_version=5, correlation_id=7, client_id="cli")
    assert hdr.encode(1) == b"\x00\x0b\x00\x05\x00\x00\x00\x07\x00\x03cli"
    assert RequestHeader(11, 5, 7, None).encode(1) == b"\x00\x0b\x00\x05\x00\x00\x00\x07\xff\xff"
    assert RequestHeader(11, 5, 7, "").encode(1) == b"\x00\x0b\x00\x05\x00\x00\x00\x07\x00\x00"


def test_request_header_v2_keeps_int16_client_id() -> None:
    # ClientId has "flexibleVersions": "none": still an int16 length, then the (empty) tagged section
    hdr = RequestHeader(request_api_key=11, request_api_version=6, correlation_id=7, client_id="cli")
    assert hdr.encode(2) == b"\x00\x0b\x00\x06\x00\x00\x00\x07\x00\x03cli\x00"
    assert RequestHeader(11, 6, 7, None).encode(2) == b"\x00\x0b\x00\x06\x00\x00\x00\x07\xff\xff\x00"
    assert RequestHeader.decode(hdr.encode(2), 2) == hdr
    # a v2 header with an unknown tagged field is still readable
    with_tag = b"\x00\x0b\x00\x06\x00\x00\x00\x07\x00\x03cli" + b"\x01\x05\x02hi"
    assert RequestHeader.decode(with_tag, 2) == hdr


def test_request_header_v0_has_no_client_id() -> None:
    assert RequestHeader(7, 0, 1, "ignored-absent").encode(0) == b"\x00\x07\x00\x00\x00\x00\x00\x01"
    assert RequestHeader.decode(b"\x00\x07\x00\x00\x00\x00\x00\x01", 0) == RequestHeader(7, 0, 1, "")


def test_response_headers() -> None:
    assert ResponseHeader(9).encode(0) == b"\x00\x00\x00\x09"
    assert ResponseHeader(9).encode(1) == b"\x00\x00\x00\x09\x00"


def test_header_versions_follow_flexibility() -> None:
    for key, info in API_INFO.items():
        for v in range(info.min_version, info.max_version + 1):
            flexible = info.flexible_min_version is not None and v >= info.flexible_min_version
            req = request_header_version(key, v)
            resp = response_header_version(key, v)
            if key == ApiKey.CONTROLLED_SHUTDOWN and v == 0:
                assert req == 0
            else:
                assert req == (2 if flexible else 1), (key, v)
            if key == ApiKey.API_VERSIONS:
                assert resp == 0  # always, so that any client can read the version list
            else:
                assert resp == (1 if flexible else 0), (key, v)
    assert request_header_version(ApiKey.JOIN_GROUP, 5) == 1
    assert request_header_version(ApiKey.JOIN_GROUP, 6) == 2
    assert response_header_version(ApiKey.JOIN_GROUP, 6) == 1
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0


@pytest.mark.parametrize("version", range(5))
def test_api_versions_response_header_is_always_v0(version: int) -> None:
    resp = ApiVersionsResponse(api_keys=[ApiVersion(api_key=11, min_version=0, max_version=9)])
    frame = encode_response(resp, version, correlation_id=0x01020304)
    body = resp.encode(version)
    assert frame == I32.pack(4 + len(body)) + b"\x01\x02\x03\x04" + body  # no tagged byte after the id
    assert decode_response(frame[4:], ApiKey.API_VERSIONS, version) == (0x01020304, resp)


def test_flexible_response_has_header_v1() -> None:
    resp = JoinGroupResponse(generation_id=3, member_id="m")
    frame = encode_response(resp, 6, correlation_id=5)
    assert frame[4:9] == b"\x00\x00\x00\x05\x00"
    assert frame[9:] == resp.encode(6)
    assert decode_response(frame[4:], ApiKey.JOIN_GROUP, 6) == (5, resp)
    classic = encode_response(resp, 5, correlation_id=5)
    assert classic[4:8] == b"\x00\x00\x00\x05"
    assert classic[8:] == resp.encode(5)


# ------------------------------------------------------------------------------------------- requests

JOIN = JoinGroupRequest(
    group_id="group",
    session_timeout_ms=10_000,
    rebalance_timeout_ms=30_000,
    member_id="",
    group_instance_id="instance-1",
    protocol_type="consumer",
    protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\x00\x03")],
    reason="joining",
)


@pytest.mark.parametrize("version", range(5, 10))
def test_encode_request_layout(version: int) -> None:
    frame = encode_request(JOIN, version, correlation_id=99, client_id="c1")
    hdr_version = 2 if version >= 6 else 1
    header = RequestHeader(11, version, 99, "c1").encode(hdr_version)
    body = (
        JOIN.encode(version)
        if version >= 8
        else JoinGroupRequest(**{**_fields(JOIN), "reason": None}).encode(version)
    )
    assert frame == I32.pack(len(header) + len(body)) + header + body


def _fields(obj: JoinGroupRequest) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in JoinGroupRequest.FIELDS}


@pytest.mark.parametrize("version", range(5, 10))
def test_decode_request(version: int) -> None:
    req = JOIN if version >= 8 else JoinGroupRequest(**{**_fields(JOIN), "reason": None})
    frame = encode_request(req, version, correlation_id=-5, client_id=None)
    header, msg = decode_request(frame[4:])
    assert header.api_key == ApiKey.JOIN_GROUP
    assert header.api_version == version
    assert header.correlation_id == -5
    assert header.client_id is None
    assert header.header_version == (2 if version >= 6 else 1)
    assert msg == req
    assert isinstance(msg, JoinGroupRequest)


def test_decode_request_every_api_default() -> None:
    for key, info in API_INFO.items():
        cls = request_class(key)
        for v in range(info.min_version, info.max_version + 1):
            frame = encode_request(cls(), v, correlation_id=v, client_id="x")
            header, msg = decode_request(frame[4:])
            assert (header.api_key, header.api_version, header.correlation_id) == (key, v, v)
            assert msg == cls()
            resp_cls = response_class(key)
            rframe = encode_response(resp_cls(), v, correlation_id=v)
            assert decode_response(rframe[4:], key, v) == (v, resp_cls())


def test_decode_request_header_of_a_newer_version() -> None:
    # An ApiVersions request from a newer client: the header still parses (flexible => v2) so the broker
    # can answer with UNSUPPORTED_VERSION; the body is an UnsupportedVersionError, not garbage.
    body = ApiVersionsRequest(client_software_name="x", client_software_version="1").encode(4)
    frame = RequestHeader(18, 77, 3, "new").encode(2) + body
    header = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 77, 3, "new")
    assert header.header_version == 2
    assert frame[header.body_offset :] == body
    with pytest.raises(UnsupportedVersionError):
        decode_request(frame)


@pytest.mark.parametrize("api_key", [-1, 88, 1000, 32767, -32768])
def test_unknown_api_key(api_key: int) -> None:
    frame = RequestHeader(api_key, 0, 1, "c").encode(1)
    with pytest.raises(UnknownApiError):
        decode_request(frame)
    with pytest.raises(UnknownApiError):
        decode_request_header(frame)
    with pytest.raises(UnknownApiError):
        request_header_version(api_key, 0)
    assert issubclass(UnknownApiError, DecodeError)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x0c\x00\x00",  # shorter than a header
        b"\x00\x0c\x00\x00\x00\x00\x00\x01",  # no client id length
        b"\x00\x0c\x00\x00\x00\x00\x00\x01\x00\x05ab",  # client id overruns
        b"\x00\x0c\x00\x00\x00\x00\x00\x01\xff\xfe",  # client id length -2
        b"\x00\x0c\x00\x04\x00\x00\x00\x01\x00\x00",  # flexible: missing tagged section
        b"\x00\x0c\x00\x04\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff\x0f",  # hostile tagged count
        b"\x00\x0c\x00\x00\x00\x00\x00\x01\x00\x00",  # heartbeat v0 with no body
    ],
)
def test_malformed_requests(frame: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_request(frame)


def test_trailing_bytes_after_body() -> None:
    frame = encode_request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3, 1)
    with pytest.raises(DecodeError):
        decode_request(frame[4:] + b"\x00")


# ------------------------------------------------------------------------------------------- FrameReader


def _frame(payload: bytes) -> bytes:
    return I32.pack(len(payload)) + payload


def test_frame_reader_splits_pipelined_frames() -> None:
    payloads = [b"a", b"", b"bcd" * 100, encode_request(JOIN, 9, 1)[4:]]
    stream = b"".join(_frame(x) for x in payloads)
    reader = FrameReader(max_size=1 << 20)
    assert reader.feed(stream) == payloads
    assert reader.buffered == 0


def test_frame_reader_partial_input_byte_by_byte() -> None:
    payloads = [b"hello", b"", b"world!" * 50]
    stream = b"".join(_frame(x) for x in payloads)
    reader = FrameReader(max_size=1000)
    out: list[bytes] = []
    for i in range(len(stream)):
        out += reader.feed(stream[i : i + 1])
    assert out == payloads
    assert reader.buffered == 0


def test_frame_reader_keeps_partial_tail() -> None:
    reader = FrameReader(max_size=100)
    assert reader.feed(_frame(b"one") + b"\x00\x00") == [b"one"]
    assert reader.buffered == 2
    assert reader.feed(b"\x00\x03tw") == []
    assert reader.buffered == 6
    assert reader.feed(b"o" + _frame(b"3")) == [b"two", b"3"]
    assert reader.buffered == 0
    assert reader.feed(b"") == []


@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(1, 30), min_size=1, max_size=20))
@settings(max_examples=100, deadline=None, database=None)
def test_frame_reader_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(_frame(x) for x in payloads)
    reader = FrameReader(max_size=40)
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += reader.feed(stream[pos : pos + step])
        pos += step
        i += 1
    assert out == payloads
    assert reader.buffered == 0


def test_frame_at_the_limit_is_accepted() -> None:
    reader = FrameReader(max_size=10)
    assert reader.feed(_frame(b"x" * 10)) == [b"x" * 10]


@pytest.mark.parametrize("size", [11, 0x7FFFFFFF, -1, -(2**31)])
def test_frame_too_large_from_prefix_alone(size: int) -> None:
    reader = FrameReader(max_size=10)
    with pytest.raises(FrameTooLargeError):
        reader.feed(I32.pack(size))  # raised from the 4-byte prefix, before any body arrives
    assert issubclass(FrameTooLargeError, DecodeError)


def test_frame_too_large_after_good_frames_and_split_prefix() -> None:
    reader = FrameReader(max_size=10)
    assert reader.feed(_frame(b"ok") + b"\x7f\xff") == [b"ok"]
    with pytest.raises(FrameTooLargeError):
        reader.feed(b"\xff\xff")


def test_frame_too_large_does_not_buffer_the_body() -> None:
    reader = FrameReader(max_size=1 << 20)
    chunk = I32.pack(0x7FFFFFFF) + b"z" * 1000
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLargeError):
            reader.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    assert reader.buffered <= len(chunk)


def test_frame_reader_does_not_preallocate_announced_size() -> None:
    reader = FrameReader(max_size=100 << 20)
    tracemalloc.start()
    try:
        assert reader.feed(I32.pack(100 << 20) + b"abc") == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    assert reader.buffered == 7


# ------------------------------------------------------------------------------------------- fuzz


@given(st.binary(max_size=64))
@settings(max_examples=500, deadline=None, database=None)
def test_decode_request_random_frames(frame: bytes) -> None:
    try:
        decode_request(frame)
    except UnsupportedVersionError:
        # only for a known API at a version we have no schema for: the broker answers UNSUPPORTED_VERSION
        header = decode_request_header(frame)
        assert not request_class(ApiKey(header.api_key)).supports(header.api_version)
    except DecodeError:
        pass


@given(
    st.sampled_from(sorted(API_INFO)),
    st.integers(-2, 20),
    st.integers(-(2**31), 2**31 - 1),
    st.one_of(st.none(), st.text(max_size=8)),
    st.binary(max_size=48),
)
@settings(max_examples=500, deadline=None, database=None)
def test_decode_request_random_bodies(
    key: ApiKey, version: int, corr: int, client: str | None, body: bytes
) -> None:
    """Valid headers (for every API) followed by random bodies: only DecodeError or a typed message."""
    hdr_version = API_INFO[key].header_versions(version)[0]
    frame = RequestHeader(key, version, corr, client).encode(hdr_version) + body
    try:
        header, msg = decode_request(frame)
    except UnsupportedVersionError:
        assert not request_class(key).supports(version)
    except DecodeError:
        pass
    else:
        assert (header.api_key, header.api_version, header.correlation_id) == (key, version, corr)
        assert isinstance(msg, request_class(key))
        assert msg.encode(version) == body or request_class(key).decode(msg.encode(version), version) == msg


def test_frame_reader_random_garbage() -> None:
    import random

    rng = random.Random(1234)
    for _ in range(300):
        reader = FrameReader(max_size=64)
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        try:
            for frame in reader.feed(data):
                assert len(frame) <= 64
        except FrameTooLargeError:
            pass
