"""MemoryStore beyond the shared contract: lease time on the injected clock, expiry by its own background
task, and its limits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from regroup.cluster.memory import MemoryStore
from regroup.cluster.store import EventKind, InvalidRequest, LeaseNotFound, Put, WatchBatch

WAIT_S = 30.0


class Clock:
    def __init__(self) -> None:
        self.ms = 5_000

    def now_ms(self) -> int:
        return self.ms


def run(body: Callable[[MemoryStore, Clock], Awaitable[None]], **options: int) -> None:
    clock = Clock()

    async def main() -> None:
        store = MemoryStore(clock.now_ms, **options)
        try:
            async with asyncio.timeout(60):
                await body(store, clock)
        finally:
            await store.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def test_leases_live_ttl_past_their_last_keep_alive_on_the_clock() -> None:
    async def body(store: MemoryStore, clock: Clock) -> None:
        lease = await store.grant(5)
        await store.txn([], [Put(b"/n/1", b"", lease)])
        clock.ms += 4_999
        assert store.expire_leases() == []
        assert await store.keep_alive(lease) == 5
        clock.ms += 4_999
        assert store.expire_leases() == []
        clock.ms += 1
        assert store.expire_leases() == [lease]
        assert await store.range(b"/n/1") == (store.revision, [])
        with pytest.raises(LeaseNotFound):
            await store.keep_alive(lease)

    run(body)


def test_a_lapsed_lease_is_gone_for_the_next_operation() -> None:
    async def body(store: MemoryStore, clock: Clock) -> None:
        lease = await store.grant(1)
        await store.txn([], [Put(b"/n/1", b"", lease)])
        clock.ms += 1_000
        assert (await store.range(b"/n/1"))[1] == []
        with pytest.raises(LeaseNotFound):
            await store.txn([], [Put(b"/n/2", b"", lease)])

    run(body)


def test_expiry_reaches_watchers_without_any_call_to_the_store() -> None:
    async def body(store: MemoryStore, clock: Clock) -> None:
        lease = await store.grant(2)
        written = await store.txn([], [Put(b"/n/1", b"a", lease), Put(b"/n/2", b"b", lease)])
        batches: asyncio.Queue[WatchBatch] = asyncio.Queue()

        async def follow() -> None:
            async for batch in store.watch(b"/n/", 1):
                batches.put_nowait(batch)

        follower = asyncio.create_task(follow())
        async with asyncio.timeout(WAIT_S):
            assert (await batches.get()).revision == written.revision  # the watcher is following
            clock.ms += 2_000
            expiry = await batches.get()
        assert [(e.kind, e.kv.key) for e in expiry.events] == [
            (EventKind.DELETE, b"/n/1"),
            (EventKind.DELETE, b"/n/2"),
        ]
        assert expiry.revision == written.revision + 1
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower

    run(body)


def test_each_expired_lease_is_its_own_revision() -> None:
    async def body(store: MemoryStore, clock: Clock) -> None:
        leases = [await store.grant(1), await store.grant(1), await store.grant(1)]
        await store.txn([], [Put(b"/n/1", b"", leases[0]), Put(b"/n/2", b"", leases[1])])
        before = store.revision
        clock.ms += 1_000
        assert store.expire_leases() == sorted(leases)
        assert store.revision == before + 2  # the lease without keys deletes nothing

    run(body)


def test_max_txn_ops_is_configurable() -> None:
    async def body(store: MemoryStore, clock: Clock) -> None:
        await store.txn([], [Put(b"/a", b""), Put(b"/b", b"")])
        with pytest.raises(InvalidRequest, match="too many operations"):
            await store.txn([], [Put(b"/a", b""), Put(b"/b", b""), Put(b"/c", b"")])

    run(body, max_txn_ops=2)
