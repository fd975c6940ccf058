"""The metadata store contract: every case runs against :class:`MemoryStore` and against a real etcd
through :class:`EtcdStore`, so the in-process store keeps etcd's semantics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import pytest
import uvloop

from regroup.cluster.etcd import EtcdStore
from regroup.cluster.memory import MemoryStore
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
    WatchBatch,
    WatchCompacted,
)
from support.etcd import EtcdProcess

Store = MemoryStore | EtcdStore

WAIT_S = 30.0  # upper bound for anything the store does on its own (lease expiry, watch delivery)


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms


class Backend:
    """Opens the store under test on a uvloop loop and lets lease time pass: on the virtual clock of the
    memory store, in real time (by waiting for the outcome) on etcd."""

    def __init__(self, name: str, etcd: EtcdProcess | None) -> None:
        self.name = name
        self.etcd = etcd
        self.clock = FakeClock()

    def open(self) -> Store:
        if self.etcd is None:
            return MemoryStore(self.clock.now_ms)
        return EtcdStore([self.etcd.endpoint], timeout_s=10.0)

    def run(self, body: Callable[[Store], Awaitable[None]]) -> None:
        async def main() -> None:
            store = self.open()
            try:
                async with asyncio.timeout(120):
                    await body(store)
            finally:
                await store.close()

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())

    def let_time_pass(self, seconds: float) -> None:
        if self.etcd is None:
            self.clock.ms += int(seconds * 1000)


@pytest.fixture(params=["memory", "etcd"])
def backend(request: pytest.FixtureRequest) -> Backend:
    etcd = request.getfixturevalue("etcd_server") if request.param == "etcd" else None
    return Backend(request.param, etcd)


async def put(store: Store, key: bytes, value: bytes, lease: int = 0) -> int:
    return (await store.txn([], [Put(key, value, lease)])).revision


async def next_batch(batches: AsyncIterator[WatchBatch]) -> WatchBatch:
    async with asyncio.timeout(WAIT_S):
        return await anext(batches)


def summary(batch: WatchBatch) -> list[tuple[EventKind, bytes, bytes]]:
    return [(e.kind, e.kv.key, e.kv.value) for e in batch.events]


PUT, DELETE = EventKind.PUT, EventKind.DELETE


def test_revisions_versions_and_create_revisions(backend: Backend) -> None:
    async def body(store: Store) -> None:
        start, kvs = await store.range(b"/t/a")
        assert (start, kvs) == (1, [])  # a fresh store
        r1 = await put(store, b"/t/a", b"1")
        r2 = await put(store, b"/t/a", b"2")
        assert (r1, r2) == (start + 1, start + 2)
        assert await store.range(b"/t/a") == (r2, [KeyValue(b"/t/a", b"2", r1, r2, 2, 0)])

        several = await store.txn([], [Put(b"/t/b", b"x"), Put(b"/t/c", b"y"), Delete(b"/t/a")])
        assert several.succeeded
        assert several.revision == r2 + 1  # one transaction, one revision
        assert several.responses == (OpResult(), OpResult(), OpResult(deleted=1))
        _, kvs = await store.range(b"/t/", prefix=True)
        assert [(kv.key, kv.create_revision, kv.mod_revision) for kv in kvs] == [
            (b"/t/b", several.revision, several.revision),
            (b"/t/c", several.revision, several.revision),
        ]

        nothing = await store.txn([], [Delete(b"/t/missing"), Get(b"/t/missing")])
        assert nothing.revision == several.revision  # no change, no new revision
        assert nothing.responses == (OpResult(deleted=0), OpResult())

        again = await put(store, b"/t/a", b"3")
        assert await store.range(b"/t/a") == (again, [KeyValue(b"/t/a", b"3", again, again, 1, 0)])

    backend.run(body)


def test_put_if_absent_on_create_revision_zero(backend: Backend) -> None:
    async def body(store: Store) -> None:
        absent = [Compare.create_revision(b"/t/controller", "==", 0)]
        first = await store.txn(absent, [Put(b"/t/controller", b"node-1")], [Get(b"/t/controller")])
        assert first.succeeded
        assert first.responses == (OpResult(),)
        second = await store.txn(absent, [Put(b"/t/controller", b"node-2")], [Get(b"/t/controller")])
        assert not second.succeeded
        assert second.revision == first.revision
        (holder,) = second.responses[0].kvs
        assert (holder.value, holder.create_revision) == (b"node-1", first.revision)

    backend.run(body)


def test_compare_and_swap_on_mod_revision(backend: Backend) -> None:
    async def body(store: Store) -> None:
        key = b"/t/partitions/p0"
        await put(store, key, b"epoch 0")
        _, (seen,) = await store.range(key)
        theirs = await put(store, key, b"epoch 1 (another writer)")

        stale = await store.txn(
            [Compare.mod_revision(key, "==", seen.mod_revision)], [Put(key, b"mine")], [Get(key)]
        )
        assert not stale.succeeded
        (current,) = stale.responses[0].kvs  # the failure branch reads the current value
        assert (current.value, current.mod_revision, current.version) == (
            b"epoch 1 (another writer)",
            theirs,
            2,
        )

        fresh = await store.txn(
            [Compare.mod_revision(key, "==", current.mod_revision)], [Put(key, b"mine")], [Get(key)]
        )
        assert fresh.succeeded
        assert fresh.revision == theirs + 1
        assert await store.range(key) == (
            fresh.revision,
            [KeyValue(key, b"mine", seen.create_revision, fresh.revision, 3, 0)],
        )

    backend.run(body)


def test_compare_targets_and_operators(backend: Backend) -> None:
    async def body(store: Store) -> None:
        k, missing = b"/t/k", b"/t/missing"
        created = await put(store, k, b"l")
        modified = await put(store, k, b"m")
        cases = [
            (Compare.create_revision(k, "==", created), True),
            (Compare.create_revision(k, "!=", created), False),
            (Compare.create_revision(k, "<", created + 1), True),
            (Compare.create_revision(k, ">", created), False),
            (Compare.mod_revision(k, "==", modified), True),
            (Compare.mod_revision(k, ">", created), True),
            (Compare.mod_revision(k, "<", modified), False),
            (Compare.version(k, "==", 2), True),
            (Compare.version(k, ">", 1), True),
            (Compare.version(k, "<", 2), False),
            (Compare.version(k, "!=", 2), False),
            (Compare.value(k, "==", b"m"), True),
            (Compare.value(k, "!=", b"m"), False),
            (Compare.value(k, "<", b"n"), True),
            (Compare.value(k, ">", b"l"), True),
            (Compare.value(k, ">", b"m"), False),
            # A missing key has create/mod revision and version 0; a value compare on it is false.
            (Compare.create_revision(missing, "==", 0), True),
            (Compare.mod_revision(missing, "==", 0), True),
            (Compare.version(missing, "==", 0), True),
            (Compare.version(missing, ">", 0), False),
            (Compare.value(missing, "==", b""), False),
            (Compare.value(missing, "!=", b"x"), False),
            (Compare.value(missing, "<", b"z"), False),
        ]
        outcomes = [(await store.txn([compare], [])).succeeded for compare, _ in cases]
        assert outcomes == [expected for _, expected in cases]
        assert (await store.txn([c for c, holds in cases if holds], [])).succeeded
        assert not (await store.txn([c for c, _ in cases], [])).succeeded

    backend.run(body)


def test_transactions_are_all_or_nothing(backend: Backend) -> None:
    async def body(store: Store) -> None:
        base = await put(store, b"/t/x", b"0")
        one_false = [Compare.version(b"/t/x", "==", 1), Compare.version(b"/t/x", "==", 7)]
        outcome = await store.txn(one_false, [Put(b"/t/x", b"success")], [Put(b"/t/y", b"failure")])
        assert not outcome.succeeded
        _, kvs = await store.range(b"/t/", prefix=True)
        assert [(kv.key, kv.value) for kv in kvs] == [(b"/t/x", b"0"), (b"/t/y", b"failure")]

        rejected: list[list[Op]] = [
            [Put(b"/t/z", b"1"), Put(b"/t/z", b"2")],
            [Put(b"/t/d/z", b"1"), Delete(b"/t/d/", prefix=True)],
            [Put(b"/t/z", b"1"), *(Put(f"/t/many/{i}".encode(), b"") for i in range(128))],
        ]
        for ops in rejected:
            with pytest.raises(InvalidRequest):
                await store.txn([], ops)
        with pytest.raises(LeaseNotFound):
            await store.txn([], [Put(b"/t/z", b"1"), Put(b"/t/leased", b"2", lease=0x5EED)])
        revision, kvs = await store.range(b"/t/", prefix=True)
        assert revision == outcome.revision == base + 1
        assert [kv.key for kv in kvs] == [b"/t/x", b"/t/y"]

        at_limit = await store.txn([], [Put(f"/t/many/{i}".encode(), b"") for i in range(128)])
        assert at_limit.revision == revision + 1

    backend.run(body)


def test_prefix_reads_and_deletes(backend: Backend) -> None:
    async def body(store: Store) -> None:
        for key in (b"/t/p/b", b"/t/p/a", b"/t/p/c/d", b"/t/pq", b"/t/p"):
            await put(store, key, key)
        _, kvs = await store.range(b"/t/p/", prefix=True)
        assert [kv.key for kv in kvs] == [b"/t/p/a", b"/t/p/b", b"/t/p/c/d"]

        ops: list[Op] = [
            Get(b"/t/p/", prefix=True),
            Delete(b"/t/p/", prefix=True),
            Get(b"/t/p/", prefix=True),
        ]
        result = await store.txn([], ops)
        assert [len(result.responses[0].kvs), result.responses[1].deleted, len(result.responses[2].kvs)] == [
            3,
            3,
            0,
        ]
        _, kvs = await store.range(b"/t/", prefix=True)
        assert [kv.key for kv in kvs] == [b"/t/p", b"/t/pq"]

    backend.run(body)


def test_lease_expiry_deletes_its_keys_in_one_revision(backend: Backend) -> None:
    async def body(store: Store) -> None:
        lease = await store.grant(2)
        written = await store.txn(
            [],
            [
                Put(b"/t/nodes/1", b"n1", lease),
                Put(b"/t/nodes/1/extra", b"e", lease),
                Put(b"/t/cluster", b"c"),
            ],
        )
        _, (registration,) = await store.range(b"/t/nodes/1")
        assert registration.lease == lease

        async with aclosing(store.watch(b"/t/", written.revision + 1)) as batches:
            backend.let_time_pass(3)
            expiry = await next_batch(batches)
        assert summary(expiry) == [(DELETE, b"/t/nodes/1", b""), (DELETE, b"/t/nodes/1/extra", b"")]
        assert {e.kv.mod_revision for e in expiry.events} == {expiry.revision}
        revision, kvs = await store.range(b"/t/", prefix=True)
        assert (revision, [kv.key for kv in kvs]) == (expiry.revision, [b"/t/cluster"])
        with pytest.raises(LeaseNotFound):
            await store.keep_alive(lease)

    backend.run(body)


def test_keep_alive_and_revoke(backend: Backend) -> None:
    async def body(store: Store) -> None:
        lease = await store.grant(5)
        assert await store.keep_alive(lease) == 5
        put_at = await store.txn([], [Put(b"/t/a", b"1", lease), Put(b"/t/b", b"2", lease)])

        await store.revoke(lease)
        async with aclosing(store.watch(b"/t/", put_at.revision + 1)) as batches:
            revoked = await next_batch(batches)
        assert summary(revoked) == [(DELETE, b"/t/a", b""), (DELETE, b"/t/b", b"")]
        assert await store.range(b"/t/", prefix=True) == (revoked.revision, [])

        with pytest.raises(LeaseNotFound) as gone:
            await store.keep_alive(lease)
        assert gone.value.lease_id == lease
        with pytest.raises(LeaseNotFound):
            await store.revoke(lease)
        with pytest.raises(LeaseNotFound):
            await store.txn([], [Put(b"/t/a", b"again", lease)])
        with pytest.raises(InvalidRequest):
            await store.grant(0)

    backend.run(body)


def test_watch_from_a_revision_gets_one_batch_per_transaction(backend: Backend) -> None:
    async def body(store: Store) -> None:
        first = await put(store, b"/t/w/a", b"1")
        txn = await store.txn(
            [], [Put(b"/t/w/b", b"2"), Put(b"/t/elsewhere", b"x"), Delete(b"/t/w/a"), Put(b"/t/w/c", b"3")]
        )
        async with aclosing(store.watch(b"/t/w/", first)) as batches:
            replayed = [await next_batch(batches), await next_batch(batches)]
            assert [b.revision for b in replayed] == [first, txn.revision]
            assert summary(replayed[0]) == [(PUT, b"/t/w/a", b"1")]
            assert summary(replayed[1]) == [
                (PUT, b"/t/w/b", b"2"),
                (DELETE, b"/t/w/a", b""),
                (PUT, b"/t/w/c", b"3"),
            ]
            deleted, created = replayed[1].events[1].kv, replayed[1].events[2].kv
            assert deleted == KeyValue(b"/t/w/a", b"", 0, txn.revision, 0, 0)
            assert created == KeyValue(b"/t/w/c", b"3", txn.revision, txn.revision, 1, 0)

            live = await store.txn([], [Put(b"/t/w/d", b"4"), Put(b"/t/w/e", b"5")])
            await put(store, b"/t/elsewhere", b"y")
            last = await put(store, b"/t/w/d", b"6")
            streamed = [await next_batch(batches), await next_batch(batches)]
            assert [(b.revision, summary(b)) for b in streamed] == [
                (live.revision, [(PUT, b"/t/w/d", b"4"), (PUT, b"/t/w/e", b"5")]),
                (last, [(PUT, b"/t/w/d", b"6")]),
            ]

    backend.run(body)


def test_watch_from_a_compacted_revision_raises_watch_compacted(backend: Backend) -> None:
    async def body(store: Store) -> None:
        revisions = [await put(store, b"/t/c", bytes([i])) for i in range(3)]
        await store.compact(revisions[-1])
        with pytest.raises(WatchCompacted) as compacted:
            async with aclosing(store.watch(b"/t/", revisions[0])) as batches:
                await next_batch(batches)
        assert compacted.value.compact_revision == revisions[-1]

        async with aclosing(store.watch(b"/t/", revisions[-1])) as batches:
            assert summary(await next_batch(batches)) == [(PUT, b"/t/c", b"\x02")]
        await store.compact(revisions[0])  # already compacted further: nothing to do
        with pytest.raises(InvalidRequest):
            await store.compact(revisions[-1] + 10)

    backend.run(body)


def test_close_ends_open_watches(backend: Backend) -> None:
    async def body(store: Store) -> None:
        seen: list[WatchBatch] = []
        first_seen = asyncio.Event()

        async def follow() -> None:
            async for batch in store.watch(b"/t/", 1):
                seen.append(batch)
                first_seen.set()

        follower = asyncio.create_task(follow())
        await put(store, b"/t/a", b"1")
        async with asyncio.timeout(WAIT_S):
            await first_seen.wait()
        await store.close()
        async with asyncio.timeout(WAIT_S):
            await follower  # ends, without an error
        assert len(seen) == 1
        with pytest.raises(StoreError):
            await store.range(b"/t/a")

    backend.run(body)
