"""Size-prefixed frames and request/response headers.

A request is ``int32 size`` + request header (v1, or v2 when the API version is flexible; the header's
client id keeps its int16 length even in v2) + body. A response is ``int32 size`` + response header (v0, or
v1 when flexible — except ApiVersions, whose response header is always v0) + body. :class:`FrameReader`
is a sans-I/O frame splitter that refuses an oversized frame from its 4-byte prefix alone, before any
allocation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from regroup.protocol.api_keys import API_INFO, ApiInfo, ApiKey, request_class, response_class
from regroup.protocol.message import Message
from regroup.protocol.messages.headers import RequestHeader, ResponseHeader
from regroup.protocol.primitives import I32, DecodeError

__all__ = [
    "FrameReader",
    "FrameTooLargeError",
    "RequestHeaderInfo",
    "UnknownApiError",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "request_header_version",
    "response_header_version",
]

_SIZE = I32
_KEY_VERSION = struct.Struct(">hh")


@mypyc_attr(native_class=False)  # compiled, an exception class stays a Python class
class FrameTooLargeError(DecodeError):
    """The 4-byte size prefix announces a frame above the limit (or a negative size)."""


@mypyc_attr(native_class=False)  # compiled, an exception class stays a Python class
class UnknownApiError(DecodeError):
    """The request names an API key this codec has no schema for."""


# Looked up by plain int: converting to ApiKey first (an Enum call) would cost more than the lookup itself.
_INFO_BY_KEY: dict[int, ApiInfo] = {int(key): info for key, info in API_INFO.items()}


def _info(api_key: int) -> ApiInfo:
    info = _INFO_BY_KEY.get(api_key)
    if info is None:
        raise UnknownApiError(f"unknown API key {api_key}")
    return info


# (api key, version) -> (request header version, response header version), for the versions the spec
# defines (others are computed each time, so a client cannot grow this map).
_HEADER_VERSIONS: dict[tuple[int, int], tuple[int, int]] = {}


def _header_versions(api_key: int, api_version: int) -> tuple[int, int]:
    versions = _HEADER_VERSIONS.get((api_key, api_version))
    if versions is None:
        info = _info(api_key)
        versions = info.header_versions(api_version)
        if info.min_version <= api_version <= info.max_version:
            _HEADER_VERSIONS[api_key, api_version] = versions
    return versions


def request_header_version(api_key: int, api_version: int) -> int:
    versions = _HEADER_VERSIONS.get((api_key, api_version))
    return (versions or _header_versions(api_key, api_version))[0]


def response_header_version(api_key: int, api_version: int) -> int:
    versions = _HEADER_VERSIONS.get((api_key, api_version))
    return (versions or _header_versions(api_key, api_version))[1]


@dataclass(frozen=True, slots=True)
class RequestHeaderInfo:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    body_offset: int


def decode_request_header(frame: bytes) -> RequestHeaderInfo:
    """Parse the header of a request frame (without its size prefix).

    A version above the highest known one is parsed with the header version its flexibility implies, so
    that the broker can still answer e.g. an ApiVersions request from a newer client.
    """
    if len(frame) < 8:
        raise DecodeError("request shorter than its header")
    api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
    header_version = _header_versions(api_key, api_version)[0]
    header, pos = RequestHeader.read(frame, 0, header_version)
    return RequestHeaderInfo(
        api_key, api_version, header.correlation_id, header.client_id, header_version, pos
    )


def decode_request(frame: bytes) -> tuple[RequestHeaderInfo, Message]:
    """Parse a whole request frame (header and body) into its typed message."""
    hdr = decode_request_header(frame)
    cls = request_class(ApiKey(hdr.api_key))
    return hdr, cls.decode(memoryview(frame)[hdr.body_offset :], hdr.api_version)


def encode_request(
    message: Message, version: int, correlation_id: int, client_id: str | None = "regroup"
) -> bytes:
    """A complete size-prefixed request frame."""
    header_version = request_header_version(message.API_KEY, version)
    buf = bytearray(b"\0\0\0\0")
    RequestHeader(message.API_KEY, version, correlation_id, client_id).write(buf, header_version)
    message.write(buf, version)
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    return bytes(buf)


def encode_response(message: Message, version: int, correlation_id: int) -> bytes:
    """A complete size-prefixed response frame."""
    header_version = response_header_version(message.API_KEY, version)
    buf = bytearray(b"\0\0\0\0")
    ResponseHeader(correlation_id).write(buf, header_version)
    message.write(buf, version)
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    return bytes(buf)


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Message]:
    """Parse a response frame (without its size prefix): (correlation id, message)."""
    header_version = response_header_version(api_key, version)
    header, pos = ResponseHeader.read(frame, 0, header_version)
    cls = response_class(ApiKey(api_key))
    return header.correlation_id, cls.decode(memoryview(frame)[pos:], version)


class FrameReader:
    """Splits a byte stream into size-prefixed frames.

    ``feed`` returns the complete frames (without prefixes) now available. A prefix above ``max_size`` or
    below zero raises :class:`FrameTooLargeError` before the frame's bytes are buffered.
    """

    __slots__ = ("_buf", "_max_size")

    def __init__(self, max_size: int) -> None:
        self._buf: bytearray | None = None  # an incomplete frame's bytes, kept only while there is one
        self._max_size = max_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buf = self._buf
        if buf is None and type(data) is bytes:
            # Nothing buffered (nearly always): frames are cut from the received bytes directly.
            chunk: bytes | bytearray = data
        else:
            if buf is None:
                buf = self._buf = bytearray()
            buf += data
            chunk = buf
        frames: list[bytes] = []
        pos = 0
        n = len(chunk)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(chunk, pos)
            if size < 0 or size > self._max_size:
                raise FrameTooLargeError(f"frame of {size} bytes exceeds the limit of {self._max_size}")
            end = pos + 4 + size
            if end > n:
                break
            frames.append(bytes(chunk[pos + 4 : end]))
            pos = end
        if chunk is buf:
            del buf[:pos]
            if not buf:
                self._buf = None
        elif pos < n:
            self._buf = bytearray(memoryview(chunk)[pos:])
        return frames

    @property
    def buffered(self) -> int:
        return 0 if self._buf is None else len(self._buf)
