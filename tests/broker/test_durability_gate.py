"""PartitionGate: mutations in arrival order, coalesced thread flushes, no starvation, abandoned turns."""

from __future__ import annotations

import asyncio
import threading
import time

from regroup.runtime.durability import GateRegistry, PartitionGate


class SlowLog:
    """Records what happened; ``flush`` runs in a worker thread and takes a while."""

    def __init__(self, delay: float = 0.02) -> None:
        self.events: list[str] = []
        self.delay = delay
        self.flushes = 0
        self.lock = threading.Lock()
        self.appended = 0
        self.flushed_upto = 0

    def flush(self, now_ms: int | None = None) -> None:
        upto = self.appended
        with self.lock:
            self.events.append("flush-start")
        time.sleep(self.delay)
        with self.lock:
            self.flushes += 1
            self.flushed_upto = upto
            self.events.append("flush-end")

    def append(self, name: str) -> None:
        with self.lock:
            assert not self.events or self.events[-1] != "flush-start", "append during a flush"
            self.events.append(name)
        self.appended += 1


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_appends_queue_in_order_behind_a_flush_and_share_the_next_one() -> None:
    async def main() -> None:
        target = SlowLog()
        gate = PartitionGate(target, lambda: 0)
        assert gate.idle
        target.append("a0")
        first = gate.request_flush()
        turns = [gate.reserve() for _ in range(5)]
        assert not gate.idle
        assert not turns[0].done()  # reserved after the flush request: waits for it
        done: list[int] = []

        async def writer(i: int) -> None:
            await gate.wait(turns[i])
            try:
                target.append(f"a{i + 1}")
            finally:
                gate.release()
            await gate.request_flush()
            done.append(i)

        await asyncio.gather(first, *(writer(i) for i in range(5)))
        assert [e for e in target.events if e.startswith("a")] == [f"a{i}" for i in range(6)]
        assert target.flushes == 2  # one flush for a0, one group commit for a1..a5
        assert target.flushed_upto == 6
        assert gate.idle
        assert not gate.busy

    run(main())


def test_flush_is_not_starved_by_later_reservations() -> None:
    async def main() -> None:
        target = SlowLog(delay=0.001)
        gate = PartitionGate(target, lambda: 0)
        held = gate.reserve()
        await gate.wait(held)
        flushed = gate.request_flush()
        later = gate.reserve()  # reserved after the flush request: must wait for the flush
        gate.release()
        await asyncio.sleep(0)
        assert not later.done()
        await flushed
        await gate.wait(later)
        gate.release()
        assert target.flushes == 1

    run(main())


def test_abandoned_turns_are_passed_on() -> None:
    async def main() -> None:
        target = SlowLog()
        gate = PartitionGate(target, lambda: 0)
        a = gate.reserve()  # granted at once
        b = gate.reserve()
        c = gate.reserve()
        assert a.done()
        assert not b.done()
        gate.abandon(b)  # not granted yet: just leaves the line
        gate.abandon(a)  # granted: releasing hands the turn to c
        assert c.done()
        gate.release()
        assert gate.idle

        waiter = asyncio.ensure_future(gate.turn())
        blocker = gate.reserve()
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert blocker.done()  # the cancelled waiter's turn was passed on
        gate.release()

    run(main())


def test_flush_errors_reach_every_waiter() -> None:
    class Broken:
        def flush(self, now_ms: int | None = None) -> None:
            raise OSError("disk on fire")

    async def main() -> None:
        gate = PartitionGate(Broken(), lambda: 0)
        waiters = [gate.request_flush() for _ in range(3)]
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, OSError) for r in results)
        assert gate.idle

    run(main())


def test_registry_keys_by_object_and_quiesces() -> None:
    async def main() -> None:
        registry = GateRegistry(lambda: 0)
        one, two = SlowLog(), SlowLog()
        assert registry.gate(one) is registry.gate(one)
        assert registry.gate(one) is not registry.gate(two)
        pending = registry.gate(one).request_flush()
        await registry.quiesce()
        assert pending.done()
        registry.forget(one)

    run(main())
