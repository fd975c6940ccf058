"""Network cuts inside a local cluster, without privileges: each node's listener, and each node's path to
etcd, go through a TCP relay in this process that can stop carrying bytes.

A cut node is unreachable from the other nodes and from etcd, and cannot reach them: its own replica
fetchers (which name their node in the Kafka request header's ``client_id``) stall at the other nodes'
relays, and so does everything on its etcd path. Clients are cut too unless the cut says otherwise — the
case where a deposed leader still hears from producers and must acknowledge nothing. As on a real network
partition, connections are not closed: bytes stop flowing both ways (the relay stops reading, so the sender
backs up), and they flow again, in order and complete, when the cut heals — unless a side gave up and
closed the connection meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import threading
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["NetworkFaults"]

_FETCHER_CLIENT_ID: Final = re.compile(rb"^regroup-replica-fetcher-(\d+)$")
_HEADER: Final = struct.Struct(">ihhih")  # size, api key, api version, correlation id, client id length
_CHUNK: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class _Relay:
    node_id: int
    kind: Literal["listener", "etcd"]
    upstream: tuple[str, int]


class NetworkFaults:
    """Relays on loopback, served by an event loop on a thread of its own; thread-safe."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="network faults", daemon=True)
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # node id → True when clients are cut from it too.
        self._cut: dict[int, bool] = {}
        self._changed = asyncio.Event()

    def start(self) -> NetworkFaults:
        self._thread.start()
        return self

    def relay(self, node_id: int, kind: Literal["listener", "etcd"], upstream: tuple[str, int]) -> int:
        """Start a relay to ``upstream`` on behalf of node ``node_id`` (``listener``: in front of the node;
        ``etcd``: the node's way to etcd); returns the port it listens on."""
        spec = _Relay(node_id, kind, upstream)

        async def serve() -> int:
            server = await asyncio.start_server(
                lambda r, w: self._accept(spec, r, w), "127.0.0.1", 0, reuse_address=True
            )
            self._servers.append(server)
            port: int = server.sockets[0].getsockname()[1]
            return port

        return asyncio.run_coroutine_threadsafe(serve(), self._loop).result(30)

    def cut(self, node_id: int, *, clients: bool = True) -> None:
        """Cut node ``node_id`` off from the other nodes and etcd (and from clients, with ``clients``)."""
        self._loop.call_soon_threadsafe(self._set, node_id, clients)

    def heal(self, node_id: int) -> None:
        self._loop.call_soon_threadsafe(self._set, node_id, None)

    def is_cut(self, node_id: int) -> bool:
        return node_id in self._cut

    def close(self) -> None:
        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        self._loop.close()

    # ------------------------------------------------------------------------------------ data path

    def _set(self, node_id: int, clients: bool | None) -> None:
        if clients is None:
            self._cut.pop(node_id, None)
        else:
            self._cut[node_id] = clients
        self._changed.set()
        self._changed = asyncio.Event()

    def _blocked(self, spec: _Relay, source: int | None) -> bool:
        """Whether bytes between ``source`` (a node id, None for a client) and ``spec``'s far end stop."""
        if spec.kind == "etcd":
            return spec.node_id in self._cut
        if source is not None and source in self._cut:
            return True
        cut_clients = self._cut.get(spec.node_id)
        return cut_clients is not None and (source is not None or cut_clients)

    async def _open(self, spec: _Relay, source: int | None) -> None:
        while self._blocked(spec, source):
            await self._changed.wait()

    def _accept(self, spec: _Relay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = self._loop.create_task(self._carry(spec, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _carry(self, spec: _Relay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            first, source = b"", None
            if spec.kind == "listener":
                first, source = await _identify(reader)
            await self._open(spec, source)
            up_reader, upstream = await asyncio.open_connection(*spec.upstream)
            if first:
                upstream.write(first)
            await asyncio.gather(
                self._pump(spec, source, reader, upstream), self._pump(spec, source, up_reader, writer)
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _pump(
        self, spec: _Relay, source: int | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(_CHUNK):
                await self._open(spec, source)
                writer.write(data)
                await writer.drain()
        finally:
            # One side is gone: so is the connection, as the other side will see.
            writer.close()


async def _identify(reader: asyncio.StreamReader) -> tuple[bytes, int | None]:
    """Read the start of the first request: the bytes read, and the node whose replica fetcher sent it
    (None for anyone else)."""
    head = await reader.readexactly(_HEADER.size)
    *_, client_id_length = _HEADER.unpack(head)
    if client_id_length <= 0:
        return head, None
    client_id = await reader.readexactly(min(client_id_length, 256))
    match = _FETCHER_CLIENT_ID.match(client_id)
    with contextlib.suppress(ValueError):
        if match is not None:
            return head + client_id, int(match.group(1))
    return head + client_id, None
