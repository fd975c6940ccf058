"""Listeners and connections: framing, dispatch, and responses in request order per connection.

Each connection is an :class:`asyncio.Protocol` (cheaper per request than streams). Requests are decoded
and dispatched as soon as their bytes arrive, so a slow request (a long-polling Fetch) never delays the
decoding of the ones behind it; responses are still written in request order, as Kafka clients require.
A handler that answers synchronously costs no task. Reading pauses while ``queued.max.requests`` requests
are in flight or the socket's write buffer is full.

Connection-level rules mirror Kafka's ``SocketServer`` / ``RequestContext``: a size prefix above
``socket.request.max.bytes`` closes the connection before allocating; an unknown API key, an unsupported
version or an undecodable request closes the connection, except an ApiVersions request of an unsupported
version, which is answered in v0 with UNSUPPORTED_VERSION and the supported ranges; a connection idle for
``connections.max.idle.ms`` is closed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, cast

from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.handlers import Handler, HandlerRegistry, HandlerResult, HandlerSpec
from regroup.broker.wire import Chunk, encode_response_chunks
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import FrameReader, FrameTooLargeError, request_header_version
from regroup.protocol.message import DECODE_FAILURES, Message
from regroup.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from regroup.protocol.messages.headers import RequestHeader
from regroup.protocol.primitives import DecodeError, EncodeError

if TYPE_CHECKING:
    from regroup.broker.config import Listener

__all__ = ["BrokerServer", "Interceptor", "RequestObserver", "ServerConnection"]

Interceptor = Callable[[RequestContext, Message, Handler], HandlerResult]
"""Called instead of a request's handler: ``(ctx, request, handler)`` → what the handler would return."""

RequestObserver = Callable[[int, int, float, "Message | None"], None]
"""``(api key, api version, loop time at dispatch, response or None)`` for every handled request."""

log = logging.getLogger("regroup.broker.server")

_KEY_VERSION: Final = struct.Struct(">hh")
_CORRELATION: Final = struct.Struct(">i")
_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_HEADER_READERS: Final = {v: RequestHeader.reader(v) for v in range(3)}


class _Slot:
    """A response that is not written yet because an earlier one is still pending."""

    __slots__ = ("data", "task")

    def __init__(self, data: list[Chunk] | None, task: asyncio.Future[Message | None] | None) -> None:
        self.data = data
        self.task = task


class ServerConnection(asyncio.Protocol):
    """One client connection, as the broker serves it (the client's side is
    :class:`regroup.client.connection.Connection`). Kept small — a broker holds one per client — so no
    ``__dict__``, no queue until a response must wait, and no timer of its own (the server sweeps idle
    connections)."""

    __slots__ = (
        "_broker",
        "_close_when_released",
        "_closing",
        "_corked",
        "_held",
        "_last_active",
        "_listener",
        "_loop",
        "_output",
        "_pending",
        "_reader",
        "_reading_paused",
        "_registry",
        "_server",
        "_stopped",
        "_transport",
        "_writing_paused",
        "idle_drained",
        "local",
        "peer",
    )

    def __init__(self, server: BrokerServer, listener: str) -> None:
        self._server = server
        self._broker = server.broker
        self._registry = server.registry
        self._listener = listener
        self._loop = asyncio.get_running_loop()
        self._reader = FrameReader(server.max_request_bytes)
        self._transport: asyncio.Transport | None = None
        self._pending: deque[_Slot] | None = None  # responses in order behind one still being computed
        self._output: list[Chunk] | None = None  # encoded responses not yet handed to the transport
        self._corked = False
        self._held = False  # output waits for the loop step's appends behind it (WriteBehind.hold)
        self._close_when_released: str | None = None  # a close asked for while held (its reason)
        self._closing = False
        self._reading_paused = False
        self._writing_paused = False
        self._stopped = False  # no more requests (shutdown)
        self._last_active = self._loop.time()
        self.peer = ("?", 0)
        self.local = ("?", 0)
        self.idle_drained: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        # (TCP_NODELAY: uvloop and asyncio set it on every TCP transport.) Hosts are interned: the
        # connections from one client machine share one string.
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if peer:
            self.peer = (sys.intern(str(peer[0])), int(peer[1]))
        if local:
            self.local = self._server.local_address(str(local[0]), int(local[1]))
        refusal = self._server.accept(self)
        if refusal is not None:
            log.warning("Closing connection from %s: %s", self._describe(), refusal)
            self._closing = True
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        for slot in self._pending or ():
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
        self._pending = None
        self._server.forget(self)
        self._notify_drained()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def close(self, reason: str | None = None, *, abort: bool = False) -> None:
        if self._closing:
            return
        if self._held and not abort:
            # Replies held for the loop step's appends behind them leave first (_release_held).
            self._close_when_released = reason or ""
            self._stopped = True
            return
        self._closing = True
        if reason:
            log.info("Closing connection from %s: %s", self._describe(), reason)
        if self._transport is not None:
            if abort:
                self._transport.abort()
            else:
                self._transport.close()

    def stop_reading(self) -> None:
        """Shutdown: take no more requests; pending ones finish."""
        self._stopped = True
        self._update_reading()

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def _describe(self) -> str:
        return f"{self.peer[0]}:{self.peer[1]} on listener {self._listener}"

    def idle_since(self) -> float | None:
        """Loop time of the last request or response, or None while a request is in flight (never idle)."""
        return None if self._pending else self._last_active

    # ------------------------------------------------------------------------------------ reading

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._last_active = self._loop.time()
        try:
            frames = self._reader.feed(data)
        except FrameTooLargeError as exc:
            log.warning("Closing connection from %s: %s (socket.request.max.bytes)", self._describe(), exc)
            self.close(abort=True)
            return
        # Responses produced while this batch of frames is dispatched go out in one writev — at the end of
        # the loop step if the coordinator wrote records behind this step's reads (WriteBehind).
        behind = self._server.write_behind
        if behind is not None:
            behind.begin()
        self._corked = True
        try:
            for frame in frames:
                if self.closed:
                    return
                self._dispatch(frame)
        finally:
            self._corked = False
            if behind is not None:
                behind.end()
                if behind.holding:
                    if not self._held:
                        self._held = True
                        behind.hold(self._release_held)
                else:
                    self._flush_output()
            else:
                self._flush_output()
        self._update_reading()

    def _release_held(self, ok: bool) -> None:
        self._held = False
        if not ok:
            self.close("an append behind its replies failed", abort=True)
            return
        self._flush_output()
        reason = self._close_when_released
        if reason is not None:
            self._close_when_released = None
            self.close(reason or None)

    def eof_received(self) -> bool | None:
        # The client half-closed: finish what is in flight, then close (as Kafka does on a clean EOF).
        if not self._pending:
            self.close()
        else:
            self._stopped = True
        return True

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        want_pause = (
            self._stopped
            or self._writing_paused
            or (self._pending is not None and len(self._pending) >= self._server.max_in_flight)
        )
        if want_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not want_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _dispatch(self, frame: bytes) -> None:
        """Decode one request frame and hand it to its handler; a synchronous answer is written at once, an
        awaitable one takes its place in the response order."""
        if len(frame) < 8:
            self.close("request shorter than its header")
            return
        api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
        spec = self._registry.get(api_key)
        read = None if spec is None else spec.readers.get(api_version)
        if spec is None or read is None:
            self._refuse(frame, api_key, api_version, spec)
            return
        try:
            header, body = _HEADER_READERS[request_header_version(api_key, api_version)](frame, 0)
            # Bytes after the body are ignored, as Kafka's request parser does: librdkafka 2.x sends
            # Metadata v12 with a field that version no longer has.
            request, _ = read(frame, body)
        except (DecodeError, *DECODE_FAILURES) as exc:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("Undecodable request frame (%d bytes): %s", len(frame), frame[:256].hex())
            self.close(f"malformed {spec.request_class.NAME} v{api_version}: {exc}")
            return
        started = self._loop.time()
        ctx = RequestContext(
            self._broker,
            api_key,
            api_version,
            header.correlation_id,
            header.client_id,
            self.peer[0],
            self.peer[1],
            self._listener,
            self.local[0],
            self.local[1],
        )
        try:
            interceptor = self._server.interceptor
            if interceptor is None:
                result = spec.handler(ctx, request)
            else:
                result = interceptor(ctx, request, spec.handler)
        except Exception:
            log.exception(
                "Error handling %s v%d from %s; closing the connection",
                spec.request_class.NAME,
                api_version,
                self._describe(),
            )
            self.close()
            return
        if result is None or isinstance(result, Message):
            observer = self._server.request_observer
            if observer is not None:
                observer(api_key, api_version, started, result)
            if result is not None:
                self._send(self._encode(result, api_version, header.correlation_id))
            elif ctx.close_connection:
                self.close(f"{spec.request_class.NAME} failed and the client expects no response")
            return
        self._answer_later(spec, ctx, started, result)

    def _refuse(self, frame: bytes, api_key: int, api_version: int, spec: HandlerSpec | None) -> None:
        """A request of an API or version this broker does not serve: ApiVersions is answered in v0 with
        UNSUPPORTED_VERSION and the supported ranges (as Kafka does), anything else closes the connection."""
        if api_key == _API_VERSIONS:
            (correlation_id,) = _CORRELATION.unpack_from(frame, 4)
            self._respond_unsupported_api_versions(correlation_id)
            return
        try:
            name = API_INFO[ApiKey(api_key)].name
        except ValueError:
            name = None
        if name is None:
            self.close(f"unknown API key {api_key}")
        elif spec is None:
            self.close(f"unsupported API {name} (key {api_key})")
        else:
            self.close(
                f"unsupported {name} version {api_version} (supported {spec.min_version}-{spec.max_version})"
            )

    def _answer_later(
        self,
        spec: HandlerSpec,
        ctx: RequestContext,
        started: float,
        result: Awaitable[Message | None],
    ) -> None:
        """Hold this request's place in the response order until its handler's awaitable completes."""
        # A coroutine becomes a task of its own (no wrapper coroutine per request); a future is used as is.
        task = asyncio.ensure_future(result)
        slot = _Slot(None, task)
        if self._pending is None:
            self._pending = deque()
        self._pending.append(slot)
        api_version = ctx.api_version

        def done(fut: asyncio.Future[Message | None], slot: _Slot = slot) -> None:
            if fut.cancelled() or self._closing:
                return
            exc = fut.exception()
            if exc is not None:
                log.error(
                    "Error handling %s v%d from %s; closing the connection",
                    spec.request_class.NAME,
                    api_version,
                    self._describe(),
                    exc_info=exc,
                )
                self.close()
                return
            response = fut.result()
            observer = self._server.request_observer
            if observer is not None:
                observer(ctx.api_key, api_version, started, response)
            if response is None:
                if ctx.close_connection:
                    self.close(f"{spec.request_class.NAME} failed and the client expects no response")
                    return
                slot.data = []
            else:
                slot.data = self._encode(response, api_version, ctx.correlation_id)
            slot.task = None
            if not self._corked:
                # Replies released together (a coordinator batch, a fetch wake-up) leave in one write at
                # the end of this loop step instead of one each.
                self._corked = True
                self._loop.call_soon(self._uncork)
            self._drain()

        task.add_done_callback(done)

    # ------------------------------------------------------------------------------------ writing

    def _encode(self, response: Message, version: int, correlation_id: int) -> list[Chunk] | None:
        try:
            return encode_response_chunks(response, version, correlation_id)
        except EncodeError:
            log.exception("Cannot encode %s v%d; closing the connection", response.NAME, version)
            self.close()
            return None

    def _send(self, data: list[Chunk] | None) -> None:
        if data is None or self._closing:
            return
        if self._pending:
            self._pending.append(_Slot(data, None))
            return
        assert self._transport is not None
        self._write(data)

    def _write(self, data: list[Chunk]) -> None:
        if self._output is None:
            self._output = data
        else:
            self._output.extend(data)
        if not self._corked:
            self._flush_output()

    def _uncork(self) -> None:
        self._corked = False
        self._flush_output()

    def _flush_output(self) -> None:
        if self._held:
            return  # (released at the loop step's end, after the appends behind it)
        output, self._output = self._output, None
        if not output or self._closing:
            return
        assert self._transport is not None
        if len(output) == 1:
            self._transport.write(output[0])
        else:
            self._transport.writelines(output)
        self._last_active = self._loop.time()

    def _drain(self) -> None:
        pending = self._pending
        while pending and pending[0].task is None:
            data = pending.popleft().data
            if data:
                self._write(data)
        if not pending:
            self._pending = None
            self._notify_drained()
            if self._stopped and not self._server.stopping:
                self.close()
        self._update_reading()

    def _notify_drained(self) -> None:
        waiter = self.idle_drained
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _respond_unsupported_api_versions(self, correlation_id: int) -> None:
        response = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersion(k, lo, hi) for k, lo, hi in self._registry.ranges()],
        )
        self._send(self._encode(response, 0, correlation_id))


_HOST_ANY: Final = re.compile(r"^(0\.0\.0\.0|::|)$")


class BrokerServer:
    """All listeners of a broker and their connections."""

    def __init__(self, broker: BrokerPort, registry: HandlerRegistry) -> None:
        self.broker = broker
        self.registry = registry
        config = broker.config
        self.max_request_bytes = config.get_int("socket.request.max.bytes")
        self.idle_seconds = config.get_int("connections.max.idle.ms") / 1000
        self.max_in_flight = config.get_int("queued.max.requests")
        self.max_connections = config.get_int("max.connections")
        self.connections: set[ServerConnection] = set()
        # Wraps every handler call when set (regroup.testing's fault injection); None costs one check.
        self.interceptor: Interceptor | None = None
        self.bound: dict[str, tuple[str, int]] = {}
        # Told of every handled request when set (the admin port's request metrics).
        self.request_observer: RequestObserver | None = None
        self.write_behind = broker.group_coordinator.write_behind
        """Opened around each read's requests (``None``: every append happens at once)."""
        self.stopping = False
        self._servers: list[asyncio.Server] = []
        self._idle_sweep: asyncio.TimerHandle | None = None
        self._local_addresses: dict[tuple[str, int], tuple[str, int]] = {}

    async def start(self, listeners: list[Listener]) -> None:
        loop = asyncio.get_running_loop()
        for listener in listeners:
            host = None if _HOST_ANY.match(listener.host) else listener.host
            name = listener.name
            server = await loop.create_server(
                lambda name=name: ServerConnection(self, name),
                host,
                listener.port,
                reuse_address=True,
                backlog=1024,
            )
            self._servers.append(server)
            sockname = server.sockets[0].getsockname()
            self.bound[name] = (str(sockname[0]), int(sockname[1]))
        if self.idle_seconds > 0 and self._idle_sweep is None:
            self._idle_sweep = loop.call_later(self._idle_sweep_interval(), self._close_idle)

    def _idle_sweep_interval(self) -> float:
        # A tenth of the limit (at most 30 s): a connection goes between 1 and 1.1 times
        # connections.max.idle.ms after its last request, for one timer per broker instead of one each.
        return min(max(self.idle_seconds / 10, 0.01), 30.0)

    def _close_idle(self) -> None:
        loop = asyncio.get_running_loop()
        oldest = loop.time() - self.idle_seconds
        for conn in [
            c for c in self.connections if (since := c.idle_since()) is not None and since <= oldest
        ]:
            conn.close(f"idle for more than connections.max.idle.ms={int(self.idle_seconds * 1000)}")
        self._idle_sweep = loop.call_later(self._idle_sweep_interval(), self._close_idle)

    def local_address(self, host: str, port: int) -> tuple[str, int]:
        """One ``(host, port)`` tuple per listening address, shared by its connections."""
        key = (host, port)
        return self._local_addresses.setdefault(key, key)

    def accept(self, conn: ServerConnection) -> str | None:
        """Track a new connection, or say why it is refused."""
        if self.stopping:
            return "the broker is shutting down"
        if len(self.connections) >= self.max_connections:
            return f"max.connections={self.max_connections} reached"
        self.connections.add(conn)
        return None

    def forget(self, conn: ServerConnection) -> None:
        self.connections.discard(conn)

    async def stop(self, grace_seconds: float) -> None:
        """Stop accepting, let in-flight requests finish (bounded), then close every connection."""
        self.stopping = True
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
            self._idle_sweep = None
        for server in self._servers:
            server.close()
        loop = asyncio.get_running_loop()
        waiters: list[asyncio.Future[None]] = []
        for conn in list(self.connections):
            conn.stop_reading()
            if conn.busy:
                conn.idle_drained = loop.create_future()
                waiters.append(conn.idle_drained)
        if waiters:
            _, still = await asyncio.wait(waiters, timeout=grace_seconds)
            if still:
                log.warning("%d connections still had requests in flight at shutdown", len(still))
        for conn in list(self.connections):
            conn.close()
        for server in self._servers:
            await server.wait_closed()
        # Give transports a moment to flush what they were asked to write.
        await asyncio.sleep(0)
