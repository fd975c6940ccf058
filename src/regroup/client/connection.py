"""An asyncio connection to one Kafka broker.

Requests are pipelined: each is written as soon as it is issued and matched to its response by
correlation id (brokers answer in order per connection, but nothing here relies on it). On connect the
client sends ApiVersions and afterwards encodes each API at the highest version both sides support.
A request that gets no answer within its timeout closes the connection and fails every outstanding
request, as Java's ``NetworkClient`` does, since later responses could no longer be trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from regroup.client.errors import ConnectionClosedError, KafkaConnectionError, RequestTimedOutError
from regroup.client.versions import NegotiatedVersions, decode_reply
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.framing import FrameReader, encode_request
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersionsResponse
from regroup.protocol.primitives import I32, DecodeError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "Connection",
    "Connector",
    "Transport",
    "open_connection",
    "parse_bootstrap_servers",
]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
_READ_CHUNK = 64 * 1024


def parse_bootstrap_servers(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"host:port,host2:port"`` (or a list of ``host:port``) → [(host, port)]; IPv6 as ``[::1]:9092``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


class Transport(Protocol):
    """What the group member needs from a broker connection (implemented by :class:`Connection`)."""

    @property
    def closed(self) -> bool: ...

    def version(self, api_key: ApiKey) -> int: ...

    async def request(
        self, message: Message, response_type: type[R], *, timeout_ms: int | None = None
    ) -> R: ...

    async def close(self) -> None: ...


Connector = Callable[[str, int], Awaitable[Transport]]


@dataclass(slots=True)
class _Pending:
    api_key: int
    version: int
    future: asyncio.Future[Message]


class Connection(NegotiatedVersions):
    """One TCP connection to a broker; use :func:`open_connection` to get a negotiated one."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        host: str,
        port: int,
        client_id: str | None = "regroup",
        request_timeout_ms: int = 30000,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self._reader = reader
        self._writer = writer
        self._frames = FrameReader(max_frame_bytes)
        self._correlation = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._closed_error: KafkaConnectionError | None = None
        self._reader_task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"kafka-conn-reader-{host}:{port}"
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._pending)} in flight"
        return f"<Connection {self.host}:{self.port} {state}>"

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    async def negotiate(self) -> None:
        """The ApiVersions handshake (see :mod:`regroup.client.versions`)."""
        version: int | None = self.first_handshake_version()
        while version is not None:
            reply = await self.request(self.api_versions_request(), ApiVersionsResponse, version=version)
            version = self.accept(reply, version)

    # ------------------------------------------------------------------------------------ requests

    async def request(
        self,
        message: Message,
        response_type: type[R],
        *,
        version: int | None = None,
        timeout_ms: int | None = None,
    ) -> R:
        """Send ``message`` and await its response.

        Raises :class:`ConnectionClosedError` if the connection is or gets closed,
        :class:`RequestTimedOutError` after ``timeout_ms`` (default: the connection's request timeout),
        and ``EncodeError`` if the message cannot be encoded at the chosen version.
        """
        if self._closed_error is not None:
            raise ConnectionClosedError(str(self._closed_error))
        api_key = ApiKey(message.API_KEY)
        if version is None:
            version = self.version(api_key)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(message, version, correlation_id, self.client_id)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = _Pending(api_key, version, future)
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            self._fail(ConnectionClosedError(f"write to {self.host}:{self.port} failed: {exc}"))
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        try:
            async with asyncio.timeout(timeout):
                response = await asyncio.shield(future)
        except TimeoutError:
            err = RequestTimedOutError(
                f"{API_INFO[api_key].name} v{version} to {self.host}:{self.port} got no response "
                f"within {timeout:.3f}s"
            )
            self._fail(err)
            raise err from None
        if not isinstance(response, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
        return response

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    self._fail(ConnectionClosedError(f"{self.host}:{self.port} closed the connection"))
                    return
                for frame in self._frames.feed(data):
                    self._dispatch(frame)
        except asyncio.CancelledError:
            raise
        except (OSError, DecodeError) as exc:
            self._fail(ConnectionClosedError(f"connection to {self.host}:{self.port} failed: {exc}"))

    def _dispatch(self, frame: bytes) -> None:
        if len(frame) < 4:
            raise DecodeError("response shorter than its correlation id")
        (correlation_id,) = I32.unpack_from(frame, 0)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            raise DecodeError(f"response with unknown correlation id {correlation_id}")
        if pending.future.done():
            return
        try:
            _, message = decode_reply(frame, pending.api_key, pending.version)
        except DecodeError as exc:
            pending.future.set_exception(exc)
            return
        pending.future.set_result(message)

    # ------------------------------------------------------------------------------------ closing

    def _fail(self, error: KafkaConnectionError) -> None:
        if self._closed_error is None:
            self._closed_error = error
            log.debug("closing %r: %s", self, error)
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(error)
                # Nobody may be awaiting (a cancelled caller); don't warn about it.
                p.future.exception()
        self._writer.close()
        if asyncio.current_task() is not self._reader_task:
            self._reader_task.cancel()

    async def close(self) -> None:
        """Close the socket; outstanding requests fail with :class:`ConnectionClosedError`."""
        self._fail(ConnectionClosedError(f"connection to {self.host}:{self.port} closed by the client"))
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await self._reader_task
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def open_connection(
    host: str,
    port: int,
    *,
    client_id: str | None = "regroup",
    request_timeout_ms: int = 30000,
    connect_timeout_ms: int = 10000,
    negotiate: bool = True,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> Connection:
    """Connect to ``host:port`` and (by default) negotiate API versions.

    Raises :class:`KafkaConnectionError` when the broker cannot be reached or the handshake fails.
    """
    try:
        async with asyncio.timeout(connect_timeout_ms / 1000):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc or type(exc).__name__}") from exc
    conn = Connection(
        reader,
        writer,
        host=host,
        port=port,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        max_frame_bytes=max_frame_bytes,
    )
    if negotiate:
        try:
            await conn.negotiate()
        except BaseException:
            await conn.close()
            raise
    return conn
