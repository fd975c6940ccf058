"""PartitionGate: mutations in arrival order, coalesced thread flushes, no starvation, abandoned turns."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from regroup.log import LogConfig, PartitionLog, cleaner
from regroup.protocol.record_batch import Record, build_batch, decode_batches
from regroup.runtime.durability import GateRegistry, PartitionGate, compact_off_loop


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


def test_compaction_works_in_a_thread_while_the_partition_takes_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compact_off_loop holds the partition's gate only to plan and to swap: while the pass reads and
    rewrites segments (held here until the test has seen the loop go on), appends to the same partition and
    other loop work run — a heartbeat never waits behind a cleaning."""
    plog = PartitionLog.open(
        tmp_path / "__consumer_offsets-0", LogConfig(cleanup_policy=frozenset({"compact"}))
    )
    for r in range(3):
        for k in range(20):
            plog.append(_keyed(b"k%d" % k, b"v%d" % r), now_ms=0)
    plog.roll(now_ms=0)
    working = threading.Event()
    proceed = threading.Event()
    real_prepare = cleaner.prepare_clean

    def held_prepare(*args: Any, **kwargs: Any) -> cleaner.PreparedClean:
        working.set()
        assert proceed.wait(30), "the test never let the pass go on"
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(cleaner, "prepare_clean", held_prepare)

    async def main() -> None:
        gate = PartitionGate(plog, lambda: 0)
        pass_ = asyncio.create_task(compact_off_loop(plog, gate, 0))
        while not working.is_set():
            await asyncio.sleep(0.001)
        # the pass is at work in its thread: the partition still takes an append at once
        turn = gate.reserve()
        assert turn.done()
        try:
            appended = plog.append(_keyed(b"k1", b"during"), now_ms=0)
        finally:
            gate.release()
        proceed.set()
        stats = await asyncio.wait_for(pass_, 30)
        assert stats is not None
        assert stats.records_removed == 2 * 20
        latest = {r.key: (r.offset, r.value) for r in _records(plog)}
        assert latest[b"k1"] == (appended.base_offset, b"during")
        assert latest[b"k2"][1] == b"v2"

    try:
        run(main())
    finally:
        plog.close()


def _keyed(key: bytes, value: bytes) -> bytes:
    return build_batch([Record(offset=0, timestamp=0, key=key, value=value)])


def _records(plog: PartitionLog) -> list[Record]:
    records: list[Record] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        batches = decode_batches(plog.read(offset, 1 << 20).data)
        records += [r for b in batches for r in b.records if r.offset >= offset]
        offset = batches[-1].next_offset
    return records


def test_a_dropped_load_gate_leaves_no_listener_behind_to_hide_the_next_one(tmp_path: Path) -> None:
    """A new leader of ``__consumer_offsets`` loads once its high watermark reaches the log end. A load that
    was dropped (the node resigned, or its session lapsed) must not keep a listener that, removing itself,
    makes the next election's gate miss the move it waits for — its groups would answer
    COORDINATOR_LOAD_IN_PROGRESS until something else wrote to the partition, and nothing does."""
    from regroup.broker.state import _replicated_to_end

    plog = PartitionLog.open(tmp_path / "__consumer_offsets-0", LogConfig())
    plog.replicated = True
    plog.become_leader(1)
    plog.append(_keyed(b"k", b"v"), now_ms=0)

    async def scenario() -> None:
        dropped = _replicated_to_end(plog)
        dropped.cancel()
        await asyncio.sleep(0)
        assert plog.high_watermark_listeners == []
        first = _replicated_to_end(plog)
        second = _replicated_to_end(plog)
        assert not first.done()
        assert not second.done()
        plog.set_high_watermark(plog.log_end_offset)
        assert first.done()
        assert second.done()
        await asyncio.sleep(0)
        assert plog.high_watermark_listeners == []

    asyncio.run(scenario())
    plog.close()
