"""Per-partition ordering of mutations against fsyncs that run in worker threads.

A partition's ``flush()`` may run in a thread only while nothing else mutates that partition, so each
partition has a :class:`PartitionGate`. A mutation (append, retention, compaction, delete) runs at once when
the gate is idle; otherwise it reserves a turn, synchronously, so mutations keep the order in which requests
arrived (an idempotent producer's pipelined batches must reach the log in order). Flush requests are
coalesced: one thread flush covers every request made before it starts, and mutations that queued up
meanwhile are acknowledged together by the next one (group commit). A flush waits only for the mutations
reserved before it was requested, so a steady stream of appends cannot starve it.

Inside a broker every partition has one gate (from :class:`GateRegistry`), so produce appends, coordinator
appends, the periodic flusher, retention and compaction share one queue; the coordinator runtime used on
its own (tests, benchmarks) creates gates the same way.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from regroup.log import CompactionStats, PartitionLog

__all__ = [
    "Flushable",
    "GateRegistry",
    "NotReplicatedError",
    "PartitionGate",
    "ReplicatedGate",
    "ReplicatedLog",
    "WriteGate",
    "compact_off_loop",
]

log = logging.getLogger("regroup.runtime.durability")

_SEQ = itertools.count()


class Flushable(Protocol):
    def flush(self, now_ms: int | None = None) -> None: ...


class WriteGate(Protocol):
    """What the shard runner needs from a partition's gate."""

    def reserve(self) -> asyncio.Future[None]:
        """A place in line, granted (the future done) at once when the partition is idle."""
        ...

    def try_acquire(self) -> bool:
        """Take the turn at once if the partition is idle (no future: the common case costs nothing)."""
        ...

    async def wait(self, fut: asyncio.Future[None]) -> None: ...

    def release(self) -> None: ...

    def request_flush(self) -> asyncio.Future[None]: ...


class PartitionGate:
    """Serialises mutations of one partition with its thread flushes."""

    __slots__ = (
        "_flush_waiters",
        "_flushing",
        "_holder",
        "_kick_scheduled",
        "_loop",
        "_now_ms",
        "_queue",
        "_target",
    )

    def __init__(self, target: Flushable, now_ms: Callable[[], int]) -> None:
        self._target = target
        self._now_ms = now_ms
        self._loop = asyncio.get_running_loop()
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._holder = False
        self._flushing = False
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._kick_scheduled = False

    @property
    def idle(self) -> bool:
        """True when a mutation may run right now, synchronously."""
        return not (self._flushing or self._holder or self._queue)

    @property
    def busy(self) -> bool:
        """True while a flush runs or anything is queued (shutdown waits for this to clear)."""
        return not self.idle or bool(self._flush_waiters)

    def reserve(self) -> asyncio.Future[None]:
        """Take a place in line; the future completes when it is this caller's turn. The caller must then
        mutate and call :meth:`release` (or pass the future to :meth:`wait`, which handles cancellation)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._queue.append((next(_SEQ), fut))
        self._pump()
        return fut

    async def wait(self, fut: asyncio.Future[None]) -> None:
        """Await a reserved turn; if the waiter is cancelled, the turn is given up (passed on if granted)."""
        try:
            await fut
        except asyncio.CancelledError:
            self.abandon(fut)
            raise

    def abandon(self, fut: asyncio.Future[None]) -> None:
        """Give up a reserved turn that will not be used."""
        if fut.done() and not fut.cancelled():
            self.release()
        else:
            fut.cancel()
            self._pump()

    async def turn(self) -> None:
        await self.wait(self.reserve())

    def release(self) -> None:
        self._holder = False
        self._pump()

    def try_acquire(self) -> bool:
        """Take the turn at once if the partition is idle; the caller must then :meth:`release` it."""
        if not self.idle:
            return False
        self._holder = True
        return True

    def request_flush(self) -> asyncio.Future[None]:
        """A future completed once everything appended before this call is durable."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._flush_waiters.append((next(_SEQ), fut))
        self._pump()
        return fut

    def _pump(self) -> None:
        if self._flushing or self._holder:
            return
        queue = self._queue
        while queue and queue[0][1].done():  # cancelled reservations
            queue.popleft()
        first_flush = self._flush_waiters[0][0] if self._flush_waiters else None
        if queue and (first_flush is None or queue[0][0] < first_flush):
            self._holder = True
            queue.popleft()[1].set_result(None)
            return
        if first_flush is not None and not self._kick_scheduled:
            # Start at the end of this loop step, so flush requests made right after a release (the
            # releasing request's own) join this flush.
            self._kick_scheduled = True
            self._loop.call_soon(self._kick)

    def _kick(self) -> None:
        self._kick_scheduled = False
        if self._flushing or self._holder or not self._flush_waiters:
            return
        queue = self._queue
        while queue and queue[0][1].done():
            queue.popleft()
        if queue and queue[0][0] < self._flush_waiters[0][0]:
            self._pump()
            return
        self._start_flush()

    def _start_flush(self) -> None:
        batch = [fut for _, fut in self._flush_waiters]
        self._flush_waiters = []
        self._flushing = True
        task = asyncio.ensure_future(asyncio.to_thread(self._target.flush, self._now_ms()))

        def done(t: asyncio.Future[None]) -> None:
            self._flushing = False
            exc = None if t.cancelled() else t.exception()
            if exc is not None:
                log.error("Flush failed", exc_info=exc)
            for waiter in batch:
                if waiter.done():
                    continue
                if exc is not None:
                    waiter.set_exception(exc)
                    waiter.exception()  # logged above; an abandoned waiter must not log it again
                elif t.cancelled():
                    waiter.cancel()
                else:
                    waiter.set_result(None)
            self._pump()

        task.add_done_callback(done)


class GateRegistry:
    """The gate of each live partition log, keyed by the log object."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._gates: dict[int, tuple[object, PartitionGate]] = {}

    def gate(self, target: Flushable) -> PartitionGate:
        entry = self._gates.get(id(target))
        if entry is not None and entry[0] is target:
            return entry[1]
        gate = PartitionGate(target, self._now_ms)
        self._gates[id(target)] = (target, gate)
        return gate

    def forget(self, target: object) -> None:
        entry = self._gates.get(id(target))
        if entry is not None and entry[0] is target:
            del self._gates[id(target)]

    async def quiesce(self, poll_seconds: float = 0.005) -> None:
        """Wait until no flush or mutation is running or queued on any partition."""
        while any(gate.busy for _, gate in self._gates.values()):
            await asyncio.sleep(poll_seconds)


class ReplicatedLog(Protocol):
    """What :class:`ReplicatedGate` reads of a replicated partition log."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    high_watermark_listeners: list[Callable[[], None]]

    def needs_flush(self, now_ms: int) -> bool: ...


class ReplicatedGate:
    """A cluster partition's gate for the group coordinator: appends take turns through the partition's
    :class:`PartitionGate`; a write counts as durable once every in-sync replica has it — the high watermark
    passed what was appended before the request (Kafka answers coordinator writes at the HW:
    ``CoordinatorRuntime``'s ``HighWatermarkListener``) — and, when the flush policy asks for one, once it
    is fsynced. :meth:`fail_pending` fails the waiting requests when the partition stops being led here
    (their outcome is unknown: NOT_COORDINATOR, as ``CoordinatorRuntime.unload`` fails them)."""

    def __init__(self, gate: PartitionGate, plog: ReplicatedLog, now_ms: Callable[[], int]) -> None:
        self._gate = gate
        self._plog = plog
        self._now_ms = now_ms
        self._loop = asyncio.get_running_loop()
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        plog.high_watermark_listeners.append(self._moved)

    def reserve(self) -> asyncio.Future[None]:
        return self._gate.reserve()

    def try_acquire(self) -> bool:
        return self._gate.try_acquire()

    async def wait(self, fut: asyncio.Future[None]) -> None:
        await self._gate.wait(fut)

    def release(self) -> None:
        self._gate.release()

    def request_flush(self) -> asyncio.Future[None]:
        target = self._plog.log_end_offset
        replicated: asyncio.Future[None] = self._loop.create_future()
        if self._plog.high_watermark >= target:
            replicated.set_result(None)
        else:
            self._waiting.append((target, replicated))
        if not self._plog.needs_flush(self._now_ms()):
            return replicated
        flushed = self._gate.request_flush()
        both: asyncio.Future[None] = self._loop.create_future()

        def settle(_: object = None) -> None:
            if both.done():
                return
            for part in (replicated, flushed):
                if part.done():
                    failure = NotReplicatedError("cancelled") if part.cancelled() else part.exception()
                    if failure is not None:
                        both.set_exception(failure)
                        both.exception()  # reported by the waiter
                        return
            if replicated.done() and flushed.done():
                both.set_result(None)

        replicated.add_done_callback(settle)
        flushed.add_done_callback(settle)
        return both

    def _moved(self) -> None:
        hw = self._plog.high_watermark
        still: list[tuple[int, asyncio.Future[None]]] = []
        for target, fut in self._waiting:
            if fut.done():
                continue
            if hw >= target:
                fut.set_result(None)
            else:
                still.append((target, fut))
        self._waiting = still

    def fail_pending(self, reason: str) -> None:
        waiting, self._waiting = self._waiting, []
        for _, fut in waiting:
            if not fut.done():
                fut.set_exception(NotReplicatedError(reason))
                fut.exception()  # reported by the waiter; never "exception was never retrieved"

    def close(self) -> None:
        self.fail_pending("the partition is closed")
        if self._moved in self._plog.high_watermark_listeners:
            self._plog.high_watermark_listeners.remove(self._moved)


class NotReplicatedError(RuntimeError):
    """A write's replication can no longer be awaited here (leadership moved): its outcome is unknown."""


async def compact_off_loop(plog: PartitionLog, gate: WriteGate, now_ms: int) -> CompactionStats | None:
    """One compaction pass of ``plog`` that never stalls the event loop: planned and swapped in during turns
    of the partition's gate, the reading and rewriting in a worker thread meanwhile, while the partition goes
    on taking appends and serving reads (Kafka's cleaner threads work beside the request threads the same
    way). Rewriting a 100 MB ``__consumer_offsets`` segment takes seconds of CPU; on the loop it would hold
    every group's heartbeats for as long. None when nothing was due or the log changed meanwhile."""
    turn = gate.reserve()
    await gate.wait(turn)
    try:
        plan = plog.plan_compaction(now_ms)
    finally:
        gate.release()
    if plan is None:
        return None
    prepared = await asyncio.to_thread(plan.prepare)
    turn = gate.reserve()
    try:
        await gate.wait(turn)
    except asyncio.CancelledError:
        prepared.discard()
        raise
    try:
        return plog.finish_compaction(plan, prepared)
    finally:
        gate.release()
