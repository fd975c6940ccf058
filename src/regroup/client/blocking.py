"""A blocking connection to one Kafka broker, for code without an event loop: the Spark pipeline's driver,
scripts, and tests that drive a broker's wire one request at a time.

It negotiates versions like the asyncio :class:`~regroup.client.connection.Connection` (the logic is
shared in :mod:`regroup.client.versions`) and reads frames with the same size-checked
:class:`~regroup.protocol.framing.FrameReader`. Requests may be pipelined: :meth:`BlockingConnection.send`
returns at once and :meth:`BlockingConnection.receive` returns the responses in request order (a Kafka
broker answers one connection's requests in order), which is how a caller parks a JoinGroup on one
connection while other connections keep talking. A ``receive`` that times out leaves its request in
flight, since the broker may still answer it (a parked JoinGroup does, later); :meth:`request` — one
request, one answer — instead closes the connection on a timeout, as Java's ``NetworkClient`` and the
asyncio connection do, because a late answer could no longer be matched.

The asyncio connection cannot be reused here: it needs a running loop, and the pipeline's driver calls
from Spark listener threads and plain functions where none runs.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar

from regroup.client.connection import DEFAULT_MAX_FRAME_BYTES
from regroup.client.errors import ConnectionClosedError, KafkaConnectionError, RequestTimedOutError
from regroup.client.versions import NegotiatedVersions, decode_reply
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.framing import FrameReader, encode_request
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersionsResponse
from regroup.protocol.messages.produce import ProduceRequest
from regroup.protocol.primitives import DecodeError

__all__ = ["BlockingConnection", "Pending", "connect", "expects_response"]

R = TypeVar("R", bound=Message)

_READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Pending:
    """A request that was sent and whose response has not been read yet."""

    correlation_id: int
    api_key: int
    version: int


def expects_response(message: Message) -> bool:
    """Every request is answered except a Produce with acks=0 (Kafka's ``expectResponse``)."""
    return not (isinstance(message, ProduceRequest) and message.acks == 0)


class BlockingConnection(NegotiatedVersions):
    """One TCP connection to a broker; not thread-safe. Raises :class:`KafkaConnectionError` when the
    broker cannot be reached; call :meth:`negotiate` (or use :func:`connect`) before sending at the
    negotiated versions."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        client_id: str | None = "regroup",
        timeout: float = 30.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__()
        self.host, self.port = address
        self.address = address
        self.client_id = client_id
        self.timeout = timeout
        try:
            self._sock = socket.create_connection(address, timeout=timeout)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._frames = FrameReader(max_frame_bytes)
        self._unread: deque[bytes] = deque()
        self._correlation = itertools.count(1)
        self._in_flight: deque[Pending] = deque()
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._in_flight)} in flight"
        return f"<BlockingConnection {self.host}:{self.port} {state}>"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._in_flight.clear()
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def negotiate(self) -> None:
        """The ApiVersions handshake (see :mod:`regroup.client.versions`)."""
        version: int | None = self.first_handshake_version()
        while version is not None:
            reply = self.request(self.api_versions_request(), ApiVersionsResponse, version=version)
            version = self.accept(reply, version)

    # ------------------------------------------------------------------------------------ requests

    def send(self, message: Message, version: int | None = None) -> Pending | None:
        """Write ``message`` (at the negotiated version unless given); its response is collected later
        with :meth:`receive`. Returns None for a request the broker does not answer (acks=0 Produce)."""
        if self._closed:
            raise ConnectionClosedError(f"connection to {self.host}:{self.port} is closed")
        api_key = message.API_KEY
        if version is None:
            version = self.version(ApiKey(api_key))
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        self.send_raw(encode_request(message, version, correlation_id, self.client_id))
        if not expects_response(message):
            return None
        pending = Pending(correlation_id, api_key, version)
        self._in_flight.append(pending)
        return pending

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (a test's malformed frame, say); nothing is expected back."""
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.close()
            raise ConnectionClosedError(f"write to {self.host}:{self.port} failed: {exc}") from exc

    @property
    def local_address(self) -> tuple[str, int]:
        """This end's (host, port): what the broker sees as the connection's peer."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def receive(self, timeout: float | None = None) -> Message:
        """The response to the oldest request in flight. Raises the builtin :class:`TimeoutError` after
        ``timeout`` seconds (default: the connection's) with the request still in flight, and
        :class:`ConnectionClosedError` when the broker closed the connection or answered out of order."""
        if not self._in_flight:
            raise RuntimeError("no request in flight")
        pending = self._in_flight[0]
        frame = self.read_frame(timeout)
        self._in_flight.popleft()
        try:
            correlation_id, message = decode_reply(frame, pending.api_key, pending.version)
        except DecodeError as exc:
            self.close()
            raise ConnectionClosedError(f"undecodable response from {self.host}:{self.port}: {exc}") from exc
        if correlation_id != pending.correlation_id:
            self.close()
            raise ConnectionClosedError(
                f"{self.host}:{self.port} answered correlation id {correlation_id} where "
                f"{pending.correlation_id} was due"
            )
        return message

    def request(
        self,
        message: Message,
        response_type: type[R],
        *,
        version: int | None = None,
        timeout: float | None = None,
    ) -> R:
        """Send ``message`` and wait for its response. Raises :class:`RequestTimedOutError` (closing the
        connection) when none comes within ``timeout`` seconds."""
        if self._in_flight:
            raise RuntimeError("a pipelined request is still in flight on this connection")
        if not expects_response(message):
            raise ValueError("the broker does not answer a Produce with acks=0; send() it instead")
        pending = self.send(message, version)
        assert pending is not None
        try:
            response = self.receive(timeout)
        except TimeoutError:
            self.close()
            wait = self.timeout if timeout is None else timeout
            raise RequestTimedOutError(
                f"{API_INFO[ApiKey(pending.api_key)].name} v{pending.version} to {self.host}:{self.port} "
                f"got no response within {wait:g}s"
            ) from None
        if not isinstance(response, response_type):
            raise TypeError(f"expected {response_type.__name__}, got {type(response).__name__}")
        return response

    # ------------------------------------------------------------------------------------ reading

    def read_frame(self, timeout: float | None = None) -> bytes:
        """The next response frame (without its size prefix), undecoded."""
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while not self._unread:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response from {self.host}:{self.port} within {wait:g}s")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(_READ_CHUNK)
            except TimeoutError:
                continue
            except OSError as exc:
                self.close()
                raise ConnectionClosedError(f"connection to {self.host}:{self.port} failed: {exc}") from exc
            if not chunk:
                self.close()
                raise ConnectionClosedError(f"{self.host}:{self.port} closed the connection")
            try:
                self._unread.extend(self._frames.feed(chunk))
            except DecodeError as exc:
                self.close()
                raise ConnectionClosedError(f"bad frame from {self.host}:{self.port}: {exc}") from exc
        return self._unread.popleft()

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True once the broker has closed the connection (end of stream or reset) within ``timeout``
        seconds; False when it is still open then. Bytes the broker sends meanwhile are discarded."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._sock.settimeout(remaining)
            try:
                if self._sock.recv(_READ_CHUNK) == b"":
                    return True
            except TimeoutError:
                return False
            except OSError:
                return True


def connect(
    address: tuple[str, int], *, client_id: str | None = "regroup", timeout: float = 30.0
) -> BlockingConnection:
    """A connection to ``address`` with versions negotiated."""
    conn = BlockingConnection(address, client_id=client_id, timeout=timeout)
    try:
        conn.negotiate()
    except BaseException:
        conn.close()
        raise
    return conn
