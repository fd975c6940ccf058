"""The metadata store on etcd: :class:`EtcdStore` speaks etcd's v3 gRPC API through aetcd, and
:func:`parse_endpoints` reads the ``cluster.metadata.endpoints`` setting
(``etcd://host:port[,host:port...][/prefix]``).

aetcd supplies the channel and etcd's generated gRPC stubs and messages; the requests are built from those
directly, because aetcd's helpers drop two things the cluster relies on: a transaction's response header
(its revision) and the boundaries of watch responses (etcd sends whole revisions per response, which is
what keeps one transaction in one :class:`~regroup.cluster.store.WatchBatch`).

Connections: the store uses the first endpoint (in order) that answers a linearizable read; a call that
cannot reach it or times out raises :class:`~regroup.cluster.store.StoreUnavailable`, closes that
connection (its open watches raise the same) and the next call starts from the next endpoint. Every call
carries etcd's "require leader" metadata, so a member cut off from its cluster fails fast instead of
serving stale reads or stalled watches.

aetcd and grpc (untyped; everything from them is ``Any``) are imported on first use only, so single-node
regroup never loads them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from regroup.cluster.store import (
    Compare,
    CompareTarget,
    Delete,
    EventKind,
    Get,
    InvalidRequest,
    KeyValue,
    LeaseNotFound,
    Op,
    OpResult,
    Put,
    StoreError,
    StoreUnavailable,
    TxnResult,
    WatchBatch,
    WatchCompacted,
    WatchEvent,
    check_start_revision,
    check_ttl,
    prefix_end,
)

__all__ = ["DEFAULT_PREFIX", "EtcdStore", "parse_endpoints"]

DEFAULT_PREFIX: Final = "/regroup"
_SCHEME: Final = "etcd://"
_FORMAT: Final = "etcd://host:port[,host:port...][/prefix]"

_REQUIRE_LEADER: Final = (("hasleader", "true"),)
_CHANNEL_OPTIONS: Final = {
    # A whole-prefix read of a large cluster's metadata outgrows gRPC's 4 MiB default.
    "grpc.max_receive_message_length": 128 * 1024 * 1024,
    # Pings notice a silently dead etcd connection under a watch that has nothing to deliver; etcd
    # accepts pings every 5 s or slower (--grpc-keepalive-min-time).
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.http2.max_pings_without_data": 0,
}


def parse_endpoints(value: str) -> tuple[list[tuple[str, int]], str]:
    """The ``(host, port)`` endpoints and the key prefix (default ``/regroup``, no trailing slash) of a
    ``cluster.metadata.endpoints`` value. IPv6 addresses go in brackets: ``etcd://[::1]:2379``."""
    text = value.strip()
    if not text.startswith(_SCHEME):
        raise ValueError(f"expected {_FORMAT}, got {value!r}")
    hosts, slash, path = text[len(_SCHEME) :].partition("/")
    prefix = DEFAULT_PREFIX
    if slash:
        prefix = "/" + path.rstrip("/")
        if prefix == "/":
            raise ValueError(f"empty key prefix in {value!r} (leave out the '/' for {DEFAULT_PREFIX})")
    if not hosts:
        raise ValueError(f"no etcd endpoint in {value!r}, expected {_FORMAT}")
    return [_parse_endpoint(item.strip(), value) for item in hosts.split(",")], prefix


def _parse_endpoint(item: str, value: str) -> tuple[str, int]:
    if not item:
        raise ValueError(f"empty endpoint in {value!r}, expected {_FORMAT}")
    if item.startswith("["):
        host, bracket, rest = item[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"endpoint {item!r} in {value!r}: expected [IPv6 address]:port")
        port = rest[1:]
    else:
        host, colon, port = item.rpartition(":")
        if not colon:
            raise ValueError(f"endpoint {item!r} in {value!r} has no port, expected host:port")
        if ":" in host:
            raise ValueError(f"endpoint {item!r} in {value!r}: write an IPv6 address as [address]:port")
    if not host:
        raise ValueError(f"endpoint {item!r} in {value!r} has no host")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint {item!r} in {value!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def _rpc() -> Any:
    import aetcd.rpc

    return aetcd.rpc


@dataclass(eq=False)
class _EtcdConnection:
    endpoint: tuple[str, int]
    index: int
    client: Any
    watches: set[Any] = field(default_factory=set)
    dropped: bool = False

    @property
    def name(self) -> str:
        host, port = self.endpoint
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class EtcdStore:
    """A :class:`~regroup.cluster.store.MetadataStore` on an etcd cluster reachable at ``endpoints``.
    ``timeout_s`` bounds every call (and each endpoint's connection attempt)."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], *, timeout_s: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = list(endpoints)
        self._timeout_s = timeout_s
        self._conn: _EtcdConnection | None = None
        self._next = 0
        self._connecting = asyncio.Lock()
        self._closed = False

    @property
    def endpoint(self) -> tuple[str, int] | None:
        """The endpoint the store is connected to, if any."""
        return None if self._conn is None else self._conn.endpoint

    # -- MetadataStore --------------------------------------------------------------------------------

    async def range(self, key: bytes, prefix: bool = False) -> tuple[int, list[KeyValue]]:
        request = _range_request(_rpc(), key, prefix)
        response = await self._call(lambda kv, _lease: kv.Range(request, **self._opts()))
        return response.header.revision, [_kv(kv) for kv in response.kvs]

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        rpc = _rpc()
        request = rpc.TxnRequest(
            compare=[_compare(rpc, c) for c in compares],
            success=[_op(rpc, op) for op in success],
            failure=[_op(rpc, op) for op in failure],
        )
        lease = next((op.lease for op in (*success, *failure) if isinstance(op, Put) and op.lease), 0)
        response = await self._call(lambda kv, _lease: kv.Txn(request, **self._opts()), lease)
        results: list[OpResult] = []
        for item in response.responses:
            kind = item.WhichOneof("response")
            if kind == "response_range":
                results.append(OpResult(kvs=tuple(_kv(kv) for kv in item.response_range.kvs)))
            elif kind == "response_delete_range":
                results.append(OpResult(deleted=item.response_delete_range.deleted))
            else:
                results.append(OpResult())
        return TxnResult(bool(response.succeeded), response.header.revision, tuple(results))

    async def grant(self, ttl_s: int) -> int:
        check_ttl(ttl_s)
        request = _rpc().LeaseGrantRequest(TTL=ttl_s, ID=0)
        response = await self._call(lambda _kv, lease: lease.LeaseGrant(request, **self._opts()))
        if response.error:
            raise StoreError(f"etcd refused a lease: {response.error}")
        return int(response.ID)

    async def keep_alive(self, lease_id: int) -> int:
        rpc = _rpc()

        async def refresh(_kv: Any, lease: Any) -> Any:
            stream = lease.LeaseKeepAlive(**self._opts())
            try:
                await stream.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
                return await stream.read()
            finally:
                stream.cancel()

        response = await self._call(refresh, lease_id)
        # etcd answers a keep-alive of an unknown lease with TTL 0 rather than an error.
        if not isinstance(response, rpc.LeaseKeepAliveResponse) or response.TTL <= 0:
            raise LeaseNotFound(lease_id)
        return int(response.TTL)

    async def revoke(self, lease_id: int) -> None:
        request = _rpc().LeaseRevokeRequest(ID=lease_id)
        await self._call(lambda _kv, lease: lease.LeaseRevoke(request, **self._opts()), lease_id)

    async def watch(self, prefix: bytes, start_revision: int) -> AsyncGenerator[WatchBatch, None]:
        check_start_revision(start_revision)
        rpc = _rpc()
        conn = await self._connection()
        create = rpc.WatchCreateRequest(
            key=prefix or b"\0", range_end=prefix_end(prefix), start_revision=start_revision
        )
        call = rpc.WatchStub(conn.client.channel).Watch(metadata=_REQUIRE_LEADER)
        conn.watches.add(call)
        try:
            await call.write(rpc.WatchRequest(create_request=create))
            while True:
                response = await call.read()
                if not isinstance(response, rpc.WatchResponse):
                    raise await self._unavailable(conn, "etcd ended the watch stream")
                if response.compact_revision:
                    raise WatchCompacted(response.compact_revision)
                if response.canceled:
                    raise await self._unavailable(conn, f"etcd cancelled the watch: {response.cancel_reason}")
                for batch in _batches(rpc, response.events):
                    yield batch
        except rpc.AioRpcError as exc:
            if self._closed:
                return
            raise await self._failed(conn, exc, 0) from exc
        except asyncio.CancelledError:
            if _cancelling():
                raise
            if self._closed:
                return
            raise await self._unavailable(conn, "connection closed") from None
        finally:
            conn.watches.discard(call)
            call.cancel()

    async def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            await self._drop(self._conn)

    # -- beyond the protocol ----------------------------------------------------------------------------

    async def compact(self, revision: int) -> None:
        """Discard etcd's history before ``revision`` (no-op if already compacted that far); waits until
        the compaction is applied."""
        rpc = _rpc()
        request = rpc.CompactionRequest(revision=revision, physical=True)
        try:
            await self._call(lambda kv, _lease: kv.Compact(request, **self._opts()))
        except InvalidRequest as exc:
            if "compacted" not in str(exc):
                raise

    # -- internals ------------------------------------------------------------------------------------

    def _opts(self) -> dict[str, Any]:
        return {"timeout": self._timeout_s, "metadata": _REQUIRE_LEADER}

    async def _call(self, call: Callable[[Any, Any], Awaitable[Any]], lease_id: int = 0) -> Any:
        """Run ``call(kv_stub, lease_stub)`` on the current connection, mapping gRPC errors to store ones."""
        rpc = _rpc()
        conn = await self._connection()
        try:
            return await call(conn.client.kvstub, conn.client.leasestub)
        except rpc.AioRpcError as exc:
            raise await self._failed(conn, exc, lease_id) from exc
        except asyncio.CancelledError:
            # Closing a channel cancels the calls on it: only the caller's own cancellation propagates.
            if _cancelling() or not conn.dropped:
                raise
            raise await self._unavailable(conn, "connection closed") from None

    async def _connection(self) -> _EtcdConnection:
        if self._closed:
            raise StoreError("the metadata store is closed")
        if self._conn is not None:
            return self._conn
        async with self._connecting:
            if self._conn is None:
                self._conn = await self._connect()
            return self._conn

    async def _connect(self) -> _EtcdConnection:
        import aetcd

        rpc = aetcd.rpc
        failures: list[str] = []
        for step in range(len(self.endpoints)):
            index = (self._next + step) % len(self.endpoints)
            conn = _EtcdConnection(self.endpoints[index], index, None)
            host, port = conn.endpoint
            conn.client = aetcd.Client(
                f"[{host}]" if ":" in host else host,
                port,
                timeout=self._timeout_s,
                options=dict(_CHANNEL_OPTIONS),
            )
            try:
                await conn.client.connect()
                # A linearizable read: answers only from a member that is part of a working cluster.
                probe = rpc.RangeRequest(key=b"\0", count_only=True)
                await conn.client.kvstub.Range(probe, **self._opts())
            except (rpc.AioRpcError, aetcd.ClientError, OSError, TimeoutError) as exc:
                failures.append(f"{conn.name} ({_describe(exc)})")
                await _close_client(conn.client)
                continue
            self._next = index
            return conn
        raise StoreUnavailable(f"no etcd endpoint answered: {'; '.join(failures)}")

    async def _failed(self, conn: _EtcdConnection, exc: Any, lease_id: int) -> StoreError:
        rpc = _rpc()
        code, details = exc.code(), exc.details() or ""
        if code in (rpc.StatusCode.UNAVAILABLE, rpc.StatusCode.DEADLINE_EXCEEDED):
            return await self._unavailable(conn, details or code.name)
        if code is rpc.StatusCode.CANCELLED and conn.dropped:
            return await self._unavailable(conn, "connection closed")
        if code is rpc.StatusCode.NOT_FOUND and "lease not found" in details:
            return LeaseNotFound(lease_id)
        if code in (rpc.StatusCode.INVALID_ARGUMENT, rpc.StatusCode.OUT_OF_RANGE):
            return InvalidRequest(f"etcd {conn.name}: {details}")
        return StoreError(f"etcd {conn.name}: {code.name}: {details}")

    async def _unavailable(self, conn: _EtcdConnection, reason: str) -> StoreUnavailable:
        await self._drop(conn)
        return StoreUnavailable(f"etcd {conn.name}: {reason}")

    async def _drop(self, conn: _EtcdConnection) -> None:
        if conn.dropped:
            return
        conn.dropped = True
        if self._conn is conn:
            self._conn = None
            self._next = (conn.index + 1) % len(self.endpoints)
        for call in list(conn.watches):
            call.cancel()
        await _close_client(conn.client)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _close_client(client: Any) -> None:
    with contextlib.suppress(Exception):
        await client.close()


def _describe(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    text = details() if callable(details) else str(exc)
    return text or type(exc).__name__


def _kv(kv: Any) -> KeyValue:
    return KeyValue(
        key=kv.key,
        value=kv.value,
        create_revision=kv.create_revision,
        mod_revision=kv.mod_revision,
        version=kv.version,
        lease=kv.lease,
    )


def _range_request(rpc: Any, key: bytes, prefix: bool) -> Any:
    if prefix:
        return rpc.RangeRequest(key=key or b"\0", range_end=prefix_end(key))
    return rpc.RangeRequest(key=key)


_TARGETS: Final = {
    CompareTarget.CREATE_REVISION: ("CREATE", "create_revision"),
    CompareTarget.MOD_REVISION: ("MOD", "mod_revision"),
    CompareTarget.VERSION: ("VERSION", "version"),
    CompareTarget.VALUE: ("VALUE", "value"),
}


def _compare(rpc: Any, compare: Compare) -> Any:
    target, field_name = _TARGETS[compare.target]
    return rpc.Compare(
        key=compare.key,
        target=getattr(rpc.Compare, target),
        result=getattr(rpc.Compare, compare.op.name),  # etcd's names: EQUAL, NOT_EQUAL, LESS, GREATER
        **{field_name: compare.operand},
    )


def _op(rpc: Any, op: Op) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(request_put=rpc.PutRequest(key=op.key, value=op.value, lease=op.lease))
    if isinstance(op, Get):
        return rpc.RequestOp(request_range=_range_request(rpc, op.key, op.prefix))
    assert isinstance(op, Delete)
    request = (
        rpc.DeleteRangeRequest(key=op.key or b"\0", range_end=prefix_end(op.key))
        if op.prefix
        else rpc.DeleteRangeRequest(key=op.key)
    )
    return rpc.RequestOp(request_delete_range=request)


def _batches(rpc: Any, events: Any) -> list[WatchBatch]:
    """One batch per revision (a response holds whole revisions; a DELETE's mod_revision is its own)."""
    grouped: list[tuple[int, list[WatchEvent]]] = []
    for event in events:
        revision = event.kv.mod_revision
        if not grouped or grouped[-1][0] != revision:
            grouped.append((revision, []))
        kind = EventKind.DELETE if event.type == rpc.Event.DELETE else EventKind.PUT
        grouped[-1][1].append(WatchEvent(kind, _kv(event.kv)))
    return [WatchBatch(revision, tuple(items)) for revision, items in grouped]
