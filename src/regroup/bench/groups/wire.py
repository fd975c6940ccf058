"""Pipelined Kafka connections for the load generator.

A :class:`Wire` is an ``asyncio.Protocol`` rather than a stream pair with a reader task, so idle
connections cost no task and a busy one no per-request awaits: requests issued during one event-loop
iteration leave in a single write, and each response is decoded in ``data_received`` and handed to its
callback. Brokers answer the requests of one connection in order (Kafka even reads the next request only
after answering the previous one), so responses are matched to a FIFO of pending requests.

Because of that ordering, a request the coordinator parks (JoinGroup, a follower's SyncGroup) holds up
everything queued behind it on its connection. :class:`JoinLanes` therefore hands out connections that
carry one such request at a time, while heartbeats, commits and leaves share a few pipelined connections.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast

from regroup.protocol.api_keys import ApiKey, response_class
from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import FrameReader, request_header_version, response_header_version
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.messages.headers import RequestHeader, ResponseHeader
from regroup.protocol.primitives import I32, DecodeError
from regroup.protocol.versions import highest_common_versions

__all__ = ["BrokerGoneError", "Callback", "JoinLanes", "Template", "Versions", "Wire", "connect", "negotiate"]

R = TypeVar("R", bound=Message)
Callback = Callable[[Message | BaseException, float], None]
"""Called with the response (or the error that ended the connection) and its round-trip time in seconds."""

# The codecs' highest versions are used, except where a newer version changes the request's shape in a way
# the benchmark does not build (OffsetCommit/OffsetFetch v10 identify topics by id only).
_CAPS: Mapping[ApiKey, int] = {ApiKey.OFFSET_COMMIT: 9, ApiKey.OFFSET_FETCH: 9}
_MAX_FRAME = 64 * 1024 * 1024


class BrokerGoneError(ConnectionError):
    """The connection closed with requests outstanding."""


class Versions:
    """The version each API is sent at: the highest both the broker and the codecs support."""

    def __init__(self, ranges: Mapping[int, tuple[int, int]] | None = None) -> None:
        common = highest_common_versions(ranges or {}, _CAPS)
        self._versions: dict[int, int] = {int(key): version for key, version in common.items()}

    def __getitem__(self, api_key: int) -> int:
        try:
            return self._versions[api_key]
        except KeyError:
            raise ValueError(f"the broker serves no usable version of {ApiKey(api_key).name}") from None

    def get(self, api_key: int) -> int | None:
        return self._versions.get(api_key)


@dataclass(frozen=True, slots=True)
class _ApiCodec:
    """Per (API, version, client id): the request header around the correlation id, pre-encoded, and how
    to read the response (the generic framing helpers redo this work for every request)."""

    version: int
    head: bytes
    tail: bytes
    response: type[Message]
    flexible_response_header: bool

    def encode(self, message: Message, correlation_id: int) -> bytes:
        buf = bytearray(b"\0\0\0\0")
        buf += self.head
        buf += I32.pack(correlation_id)
        buf += self.tail
        message.write(buf, self.version)
        I32.pack_into(buf, 0, len(buf) - 4)
        return bytes(buf)

    def decode(self, frame: bytes) -> Message:
        pos = ResponseHeader.read(frame, 0, 1)[1] if self.flexible_response_header else 4
        message, end = self.response.read(frame, pos, self.version)
        if end != len(frame):
            raise DecodeError(f"{len(frame) - end} trailing bytes after {self.response.NAME} v{self.version}")
        return message


@functools.cache
def _api_codec(api_key: int, version: int, client_id: str) -> _ApiCodec:
    header = bytearray()
    RequestHeader(api_key, version, 0, client_id).write(header, request_header_version(api_key, version))
    return _ApiCodec(
        version,
        bytes(header[:4]),
        bytes(header[8:]),
        response_class(ApiKey(api_key)),
        response_header_version(api_key, version) >= 1,
    )


class Template:
    """A request sent over and over with only some int64 fields changing (a committer's offsets): its body
    is encoded once and each send patches those fields in place (:meth:`set`); and since the answers of
    such a request are mostly byte for byte the same, an answer whose bytes equal the previous one's is
    handed back as that decoded response again instead of being decoded anew. Fewer of the load
    generator's own cycles per request leave more of a shared machine to the broker under test."""

    __slots__ = ("_body", "_last", "_last_bytes", "api_key", "version")

    def __init__(self, message: Message, version: int) -> None:
        self.api_key = message.API_KEY
        self.version = version
        body = bytearray()
        message.write(body, version)
        self._body = body
        self._last_bytes: bytes | None = None
        self._last: Message | None = None

    def find(self, value: int) -> int:
        """The position of the int64 field holding ``value`` (a sentinel the message was built with)."""
        encoded = _I64.pack(value)
        at = self._body.find(encoded)
        if at < 0 or self._body.find(encoded, at + 1) >= 0:
            raise ValueError(f"{value:#x} is not in the request exactly once")
        return at

    def set(self, positions: list[int], value: int) -> None:
        packed = _I64.pack(value)
        body = self._body
        for at in positions:
            body[at : at + 8] = packed

    def frame(self, codec: _ApiCodec, correlation_id: int) -> bytes:
        """The request as it stands, framed as ``codec.encode`` frames a message."""
        body = self._body
        size = len(codec.head) + 4 + len(codec.tail) + len(body)
        return b"".join((I32.pack(size), codec.head, I32.pack(correlation_id), codec.tail, body))

    def answer(self, codec: _ApiCodec, frame: bytes) -> Message:
        rest = frame[4:]  # everything after the correlation id
        if rest == self._last_bytes and self._last is not None:
            return self._last
        message = codec.decode(frame)
        self._last_bytes, self._last = rest, message
        return message


_I64 = struct.Struct(">q")


@dataclass(slots=True)
class _Pending:
    correlation_id: int
    codec: _ApiCodec
    callback: Callback
    sent: float
    template: Template | None = None


class Wire(asyncio.Protocol):
    """One pipelined connection; see the module docstring."""

    def __init__(self, versions: Versions, client_id: str = "bench") -> None:
        self.versions = versions
        self.client_id = client_id
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader(_MAX_FRAME)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._correlation = itertools.count(1)
        self._closed: BaseException | None = None
        self._loop = asyncio.get_running_loop()

    # ------------------------------------------------------------------------------- asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        try:
            frames = self._reader.feed(data)
        except DecodeError as exc:
            self._fail(exc)
            return
        pending = self._pending
        for frame in frames:
            if not pending:
                self._fail(DecodeError("response without a request"))
                return
            p = pending.popleft()
            (correlation_id,) = I32.unpack_from(frame, 0)
            if correlation_id != p.correlation_id:
                self._fail(
                    DecodeError(f"response {correlation_id} out of order, expected {p.correlation_id}")
                )
                return
            result: Message | BaseException
            try:
                result = p.codec.decode(frame) if p.template is None else p.template.answer(p.codec, frame)
            except DecodeError as exc:
                result = exc
            p.callback(result, now - p.sent)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or BrokerGoneError("the broker closed the connection"))

    # ------------------------------------------------------------------------------------ requests

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def send(self, message: Message, callback: Callback, version: int | None = None) -> None:
        """Queue ``message``; ``callback`` gets the response. Requests queued in the same loop iteration
        are written together."""
        if self._closed is not None:
            callback(BrokerGoneError(f"connection closed: {self._closed}"), 0.0)
            return
        api_key = message.API_KEY
        if version is None:
            version = self.versions[api_key]
        codec = _api_codec(api_key, version, self.client_id)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        self._out.append(codec.encode(message, correlation_id))
        self._pending.append(_Pending(correlation_id, codec, callback, time.perf_counter()))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def send_template(self, template: Template, callback: Callback) -> None:
        """Queue ``template``'s request as it stands (see :class:`Template`); like :meth:`send`."""
        if self._closed is not None:
            callback(BrokerGoneError(f"connection closed: {self._closed}"), 0.0)
            return
        codec = _api_codec(template.api_key, template.version, self.client_id)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        self._out.append(template.frame(codec, correlation_id))
        self._pending.append(_Pending(correlation_id, codec, callback, time.perf_counter(), template))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self._transport is not None and out and self._closed is None:
            self._transport.write(b"".join(out))

    async def call(self, message: Message, response_type: type[R], version: int | None = None) -> R:
        """Send ``message`` and await its response (raises what ended the connection)."""
        future: asyncio.Future[Message] = self._loop.create_future()

        def done(result: Message | BaseException, _rtt: float) -> None:
            if future.done():
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        self.send(message, done, version)
        response = await future
        if not isinstance(response, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
        return response

    def _fail(self, exc: BaseException) -> None:
        if self._closed is None:
            self._closed = exc
        pending, self._pending = self._pending, collections.deque()
        error = exc if isinstance(exc, ConnectionError) else BrokerGoneError(str(exc))
        for p in pending:
            p.callback(error, 0.0)
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        self._fail(BrokerGoneError("closed by the benchmark"))


async def connect(
    host: str, port: int, versions: Versions | None = None, client_id: str = "bench", timeout: float = 10.0
) -> Wire:
    """Open a connection; without ``versions`` negotiate them with ApiVersions first."""
    loop = asyncio.get_running_loop()
    factory_versions = versions or Versions()
    wire: Wire | None = None
    try:
        async with asyncio.timeout(timeout):
            _, wire = await loop.create_connection(lambda: Wire(factory_versions, client_id), host, port)
            if versions is None:
                wire.versions = await negotiate(wire)
    except BaseException:
        if wire is not None:
            wire.close()
        raise
    return wire


async def negotiate(wire: Wire) -> Versions:
    request = ApiVersionsRequest(client_software_name="regroup-bench", client_software_version="1")
    for version in (3, 0):
        try:
            resp = await wire.call(request, ApiVersionsResponse, version=version)
        except DecodeError:
            continue
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
            continue
        if resp.error_code != ErrorCode.NONE:
            raise ConnectionError(f"ApiVersions failed: {ErrorCode.from_code(resp.error_code).name}")
        return Versions({k.api_key: (k.min_version, k.max_version) for k in resp.api_keys})
    raise ConnectionError("the broker answered no ApiVersions version")


class JoinLanes:
    """Connections lent for one JoinGroup/SyncGroup at a time (see the module docstring).

    A group's join phase completes only once all of its members have a JoinGroup at the coordinator, so a
    group of K members needs K lanes at once; ``size`` should cover every member that may rebalance
    concurrently. Idle lanes cost a socket each and nothing else.
    """

    def __init__(self, host: str, port: int, versions: Versions) -> None:
        self._host = host
        self._port = port
        self._versions = versions
        self._idle: list[Wire] = []
        self._all: set[Wire] = set()
        self._waiters: collections.deque[asyncio.Future[Wire]] = collections.deque()
        self._closed = False
        self.size = 0

    async def grow(self, size: int, parallel: int = 200) -> None:
        """Open lanes until there are ``size`` of them."""
        missing = size - self.size
        if missing <= 0:
            return
        self.size = size
        sem = asyncio.Semaphore(parallel)

        async def one(i: int) -> None:
            async with sem:
                wire = await connect(self._host, self._port, self._versions, client_id=f"j{i}")
            self._all.add(wire)
            self._release(wire)

        await asyncio.gather(*(one(i) for i in range(missing)))

    def _release(self, wire: Wire) -> None:
        if self._closed:
            wire.close()
            return
        if wire.closed:
            self._all.discard(wire)
            self.size -= 1
            asyncio.get_running_loop().create_task(self._replace())
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(wire)
                return
        self._idle.append(wire)

    async def _replace(self) -> None:
        try:
            wire = await connect(self._host, self._port, self._versions, client_id="j")
        except (OSError, TimeoutError):
            return
        self.size += 1
        self._all.add(wire)
        self._release(wire)

    async def call(self, message: Message, response_type: type[R]) -> R:
        """Send ``message`` on a lane of its own and await the response."""
        if self._idle:
            wire = self._idle.pop()
        else:
            waiter: asyncio.Future[Wire] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                wire = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._release(waiter.result())
                raise
        try:
            return await wire.call(message, response_type)
        finally:
            self._release(wire)

    def close(self) -> None:
        self._closed = True
        for wire in self._all:
            wire.close()
        self._all.clear()
        self._idle.clear()
