"""A minimal in-memory ZooKeeper stand-in on loopback, enough for Burrow 1.2.1's own bookkeeping.

Burrow needs a ZooKeeper even when it monitors Kafka only: it creates its root path there and takes a
notifier lock. This server speaks just the jute messages its go-zookeeper client sends — connect, ping,
create (including the sequential flag), exists, getChildren/getChildren2, delete, close — and answers
anything else with ZUNIMPLEMENTED. It runs an asyncio loop on a daemon thread.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
from typing import Final

__all__ = ["FakeZooKeeper"]

ZOK: Final = 0
ZNONODE: Final = -101
ZNODEEXISTS: Final = -110
ZUNIMPLEMENTED: Final = -6

OP_CREATE: Final = 1
OP_DELETE: Final = 2
OP_EXISTS: Final = 3
OP_GET_CHILDREN: Final = 8
OP_PING: Final = 11
OP_GET_CHILDREN2: Final = 12
OP_CLOSE: Final = -11
FLAG_SEQUENTIAL: Final = 2

# czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength, numChildren, pzxid
_STAT: Final = struct.pack(">qqqqiiiqiiq", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1)


def _read_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    return buf[pos : pos + n].decode(), pos + n


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">i", len(data)) + data


class FakeZooKeeper:
    """``with FakeZooKeeper() as zk:`` — listening on ``127.0.0.1:zk.port`` until the block ends."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {"/": b""}
        self.port = 0
        self._sequence = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-zookeeper", daemon=True)

    def start(self) -> FakeZooKeeper:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(10)
        return self

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._session, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FakeZooKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session_id = 0x1000 + next(self._sequence)
        try:
            (n,) = struct.unpack(">i", await reader.readexactly(4))
            body = await reader.readexactly(n)
            _protocol, _last_zxid, timeout = struct.unpack_from(">iqi", body, 0)
            answer = struct.pack(">iiq", 0, timeout, session_id) + struct.pack(">i", 16) + b"\0" * 16
            writer.write(struct.pack(">i", len(answer)) + answer)
            await writer.drain()
            zxid = 1
            while True:
                (n,) = struct.unpack(">i", await reader.readexactly(4))
                request = await reader.readexactly(n)
                xid, op = struct.unpack_from(">ii", request, 0)
                zxid += 1
                if op == OP_CLOSE:
                    writer.write(struct.pack(">iiqi", 16, xid, zxid, ZOK))
                    await writer.drain()
                    return
                error, payload = self._apply(op, request, 8)
                reply = struct.pack(">iqi", xid, zxid, error) + (payload if error == ZOK else b"")
                writer.write(struct.pack(">i", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _apply(self, op: int, request: bytes, pos: int) -> tuple[int, bytes]:
        if op == OP_PING:
            return ZOK, b""
        if op == OP_CREATE:
            path, pos = _read_string(request, pos)
            (data_len,) = struct.unpack_from(">i", request, pos)
            pos += 4 + max(data_len, 0)
            (acl_count,) = struct.unpack_from(">i", request, pos)
            pos += 4
            for _ in range(acl_count):
                pos += 4  # permissions
                _, pos = _read_string(request, pos)  # scheme
                _, pos = _read_string(request, pos)  # id
            (flags,) = struct.unpack_from(">i", request, pos)
            assert path is not None
            if flags & FLAG_SEQUENTIAL:
                path = f"{path}{next(self._sequence):010d}"
            parent = path.rsplit("/", 1)[0] or "/"
            if parent not in self.nodes:
                return ZNONODE, b""
            if path in self.nodes:
                return ZNODEEXISTS, b""
            self.nodes[path] = b""
            return ZOK, _string(path)
        if op == OP_EXISTS:
            path, _ = _read_string(request, pos)
            return (ZOK, _STAT) if path in self.nodes else (ZNONODE, b"")
        if op in (OP_GET_CHILDREN, OP_GET_CHILDREN2):
            path, _ = _read_string(request, pos)
            if path is None or path not in self.nodes:
                return ZNONODE, b""
            prefix = path.rstrip("/") + "/"
            children = [
                k[len(prefix) :] for k in self.nodes if k.startswith(prefix) and "/" not in k[len(prefix) :]
            ]
            payload = struct.pack(">i", len(children)) + b"".join(_string(c) for c in children)
            return ZOK, payload + (_STAT if op == OP_GET_CHILDREN2 else b"")
        if op == OP_DELETE:
            path, _ = _read_string(request, pos)
            if path is not None:
                self.nodes.pop(path, None)
            return ZOK, b""
        return ZUNIMPLEMENTED, b""
