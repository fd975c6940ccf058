"""An in-process metadata store with etcd's semantics (see :mod:`regroup.cluster.store`), for several
regroup nodes on one event loop sharing one store in tests.

What it mirrors from etcd 3.4: a store revision starting at 1 and raised once per transaction that changes
something; create/mod revisions and versions; a value compare on a missing key is false; one key written
twice in a transaction, or more than ``max_txn_ops`` operations (etcd's ``--max-txn-ops``, 128), is
rejected; a put with an unknown lease fails the whole transaction; each expired or revoked lease deletes
its keys in one revision; DELETE events carry only the key and the deletion's revision; watches replay
history from their start revision; a start before the last :meth:`MemoryStore.compact` raises
:class:`WatchCompacted`. Unlike etcd it keeps all history until compacted and has no minimum TTL.

**Time.** Lease deadlines are read on the injected clock ``now_ms`` (default: the monotonic clock). Every
operation first expires the leases past their deadline, so reads never see a key of a lapsed lease.
Expiry also happens on its own: while leases exist, a background task on the running loop checks the
clock at least every ``expiry_poll_s`` and expires what is due, so watchers see the DELETE events without
anyone calling the store. With a virtual clock a test advances the clock and either waits for those
events or calls :meth:`MemoryStore.expire_leases` to expire synchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field

from regroup.cluster.store import (
    Compare,
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
    TxnResult,
    WatchBatch,
    WatchCompacted,
    WatchEvent,
    check_start_revision,
    check_ttl,
)

__all__ = ["MemoryStore"]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class _Lease:
    ttl_s: int
    deadline_ms: int
    keys: set[bytes] = field(default_factory=set)


@dataclass(slots=True, eq=False)
class _Watcher:
    prefix: bytes
    start_revision: int
    queue: asyncio.Queue[WatchBatch | None] = field(default_factory=asyncio.Queue)


class MemoryStore:
    """A :class:`~regroup.cluster.store.MetadataStore` in this process's memory."""

    def __init__(
        self,
        now_ms: Callable[[], int] = _monotonic_ms,
        *,
        max_txn_ops: int = 128,
        expiry_poll_s: float = 0.05,
    ) -> None:
        self._now_ms = now_ms
        self._max_txn_ops = max_txn_ops
        self._expiry_poll_s = expiry_poll_s
        self._revision = 1
        self._compact_revision = 0
        self._kvs: dict[bytes, KeyValue] = {}
        self._history: list[WatchBatch] = []
        self._leases: dict[int, _Lease] = {}
        self._lease_ids = itertools.count(0x1EA5E_0000_0001)  # int64-sized like etcd's, unlike any revision
        self._watchers: set[_Watcher] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def revision(self) -> int:
        return self._revision

    # -- MetadataStore --------------------------------------------------------------------------------

    async def range(self, key: bytes, prefix: bool = False) -> tuple[int, list[KeyValue]]:
        await self._enter()
        return self._revision, self._read(key, prefix)

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        await self._enter()
        for part in (compares, success, failure):
            if len(part) > self._max_txn_ops:
                raise InvalidRequest(
                    f"too many operations in txn request ({len(part)} > {self._max_txn_ops})"
                )
        for compare in compares:
            _check_key(compare.key)
        _check_branch(success)
        _check_branch(failure)
        succeeded = all(compare.holds(self._kvs.get(compare.key)) for compare in compares)
        ops = success if succeeded else failure
        for op in ops:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise LeaseNotFound(op.lease)
        revision = self._revision + 1
        events: list[WatchEvent] = []
        responses: list[OpResult] = []
        for op in ops:
            if isinstance(op, Get):
                responses.append(OpResult(kvs=tuple(self._read(op.key, op.prefix))))
            elif isinstance(op, Put):
                events.append(self._put(op, revision))
                responses.append(OpResult())
            else:
                deleted = [self._delete(kv.key, revision) for kv in self._read(op.key, op.prefix)]
                events.extend(deleted)
                responses.append(OpResult(deleted=len(deleted)))
        if events:
            self._commit(revision, events)
        return TxnResult(succeeded, self._revision, tuple(responses))

    async def grant(self, ttl_s: int) -> int:
        check_ttl(ttl_s)
        await self._enter()
        lease_id = next(self._lease_ids)
        self._leases[lease_id] = _Lease(ttl_s, self._now_ms() + ttl_s * 1000)
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap(), name="regroup-lease-expiry")
        return lease_id

    async def keep_alive(self, lease_id: int) -> int:
        await self._enter()
        lease = self._leases.get(lease_id)
        if lease is None:
            raise LeaseNotFound(lease_id)
        lease.deadline_ms = self._now_ms() + lease.ttl_s * 1000
        return lease.ttl_s

    async def revoke(self, lease_id: int) -> None:
        await self._enter()
        if lease_id not in self._leases:
            raise LeaseNotFound(lease_id)
        self._end_lease(lease_id)

    async def watch(self, prefix: bytes, start_revision: int) -> AsyncGenerator[WatchBatch, None]:
        check_start_revision(start_revision)
        await self._enter()
        if start_revision < self._compact_revision:
            raise WatchCompacted(self._compact_revision)
        watcher = _Watcher(prefix, start_revision)
        # Replay and registration happen without a suspension between them: nothing is missed or doubled.
        for past in self._history:
            self._offer(watcher, past)
        self._watchers.add(watcher)
        try:
            while (batch := await watcher.queue.get()) is not None:
                yield batch
        finally:
            self._watchers.discard(watcher)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper

    # -- beyond the protocol ----------------------------------------------------------------------------

    def expire_leases(self) -> list[int]:
        """End every lease whose deadline has passed on the clock (each in its own revision, as etcd
        revokes them one by one); their ids."""
        now = self._now_ms()
        expired = sorted(lease_id for lease_id, lease in self._leases.items() if lease.deadline_ms <= now)
        for lease_id in expired:
            self._end_lease(lease_id)
        return expired

    async def compact(self, revision: int) -> None:
        """Forget the history before ``revision``: watches starting earlier raise WatchCompacted."""
        await self._enter()
        if revision > self._revision:
            raise InvalidRequest(f"revision {revision} is a future revision (current {self._revision})")
        if revision <= self._compact_revision:
            return
        self._compact_revision = revision
        self._history = [batch for batch in self._history if batch.revision >= revision]

    # -- internals ------------------------------------------------------------------------------------

    async def _enter(self) -> None:
        if self._closed:
            raise StoreError("the metadata store is closed")
        # A round trip to a real store suspends the caller; so does this, so that in-process tests see
        # the same interleavings of tasks.
        await asyncio.sleep(0)
        if self._closed:
            raise StoreError("the metadata store is closed")
        self.expire_leases()

    def _read(self, key: bytes, prefix: bool) -> list[KeyValue]:
        if not prefix:
            kv = self._kvs.get(key)
            return [] if kv is None else [kv]
        return [self._kvs[k] for k in sorted(self._kvs) if k.startswith(key)]

    def _put(self, op: Put, revision: int) -> WatchEvent:
        old = self._kvs.get(op.key)
        if old is not None and old.lease and old.lease != op.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(op.key)
        if op.lease:
            self._leases[op.lease].keys.add(op.key)
        kv = KeyValue(
            key=op.key,
            value=op.value,
            create_revision=revision if old is None else old.create_revision,
            mod_revision=revision,
            version=1 if old is None else old.version + 1,
            lease=op.lease,
        )
        self._kvs[op.key] = kv
        return WatchEvent(EventKind.PUT, kv)

    def _delete(self, key: bytes, revision: int) -> WatchEvent:
        old = self._kvs.pop(key)
        if old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        return WatchEvent(EventKind.DELETE, KeyValue(key, b"", 0, revision, 0, 0))

    def _end_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id)
        revision = self._revision + 1
        events = [self._delete(key, revision) for key in sorted(lease.keys) if key in self._kvs]
        if events:
            self._commit(revision, events)

    def _commit(self, revision: int, events: list[WatchEvent]) -> None:
        self._revision = revision
        batch = WatchBatch(revision, tuple(events))
        self._history.append(batch)
        for watcher in self._watchers:
            self._offer(watcher, batch)

    @staticmethod
    def _offer(watcher: _Watcher, batch: WatchBatch) -> None:
        if batch.revision < watcher.start_revision:
            return
        events = tuple(e for e in batch.events if e.kv.key.startswith(watcher.prefix))
        if events:
            watcher.queue.put_nowait(WatchBatch(batch.revision, events))

    async def _reap(self) -> None:
        while self._leases and not self._closed:
            soonest = min(lease.deadline_ms for lease in self._leases.values())
            delay_s = max(0.0, (soonest - self._now_ms()) / 1000)
            await asyncio.sleep(min(delay_s, self._expiry_poll_s))
            self.expire_leases()


def _check_key(key: bytes) -> None:
    if not key:
        raise InvalidRequest("key is not provided")


def _check_branch(ops: Sequence[Op]) -> None:
    """etcd's rule: within one branch, no key is put twice and no put falls in a deleted range."""
    puts: set[bytes] = set()
    deletes: list[Delete] = []
    for op in ops:
        if isinstance(op, Put):
            _check_key(op.key)
            if op.key in puts:
                raise InvalidRequest(f"duplicate key given in txn request: {op.key!r}")
            puts.add(op.key)
        else:
            if not op.prefix:
                _check_key(op.key)
            if isinstance(op, Delete):
                deletes.append(op)
    for delete in deletes:
        for key in puts:
            if key.startswith(delete.key) if delete.prefix else key == delete.key:
                raise InvalidRequest(f"duplicate key given in txn request: {key!r}")
