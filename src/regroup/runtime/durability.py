"""Ordering coordinator appends against fsyncs that run in worker threads.

``PartitionLog.flush`` may run in a thread only while nothing mutates the partition. A :class:`WriteGate`
serialises the two: a mutation takes a turn (``reserve`` / ``wait`` / ``release``), ``request_flush`` returns
a future completed once everything appended before the call is on disk, and flush requests made while one
runs are coalesced into the next (group commit). Inside a broker the runner uses the broker's gate of the
partition, so coordinator appends, the periodic flusher, retention and compaction share one queue;
:class:`FlushGate` is the same discipline for a runtime used on its own (tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

__all__ = ["FlushGate", "Flushable", "WriteGate"]

log = logging.getLogger("regroup.runtime.durability")


class Flushable(Protocol):
    def flush(self, now_ms: int | None = None) -> None: ...


class WriteGate(Protocol):
    """What the shard runner needs from a partition's gate."""

    def reserve(self) -> asyncio.Future[None]:
        """A place in line, granted (the future done) at once when the partition is idle."""
        ...

    async def wait(self, fut: asyncio.Future[None]) -> None: ...

    def release(self) -> None: ...

    def request_flush(self) -> asyncio.Future[None]: ...


class FlushGate:
    """Mutations in arrival order; thread flushes between them, each covering every request made before it
    started. A flush waits only for the mutations reserved before it was requested."""

    def __init__(self, target: Flushable, now_ms: Callable[[], int]) -> None:
        self._target = target
        self._now_ms = now_ms
        self._seq = itertools.count()
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._holder = False
        self._flushing = False

    @property
    def busy(self) -> bool:
        return self._holder or self._flushing or bool(self._queue) or bool(self._flush_waiters)

    def reserve(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((next(self._seq), fut))
        self._pump()
        return fut

    async def wait(self, fut: asyncio.Future[None]) -> None:
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()
            else:
                fut.cancel()
                self._pump()
            raise

    def release(self) -> None:
        self._holder = False
        self._pump()

    def request_flush(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((next(self._seq), fut))
        self._pump()
        return fut

    def _pump(self) -> None:
        if self._flushing or self._holder:
            return
        queue = self._queue
        while queue and queue[0][1].done():
            queue.popleft()
        first_flush = self._flush_waiters[0][0] if self._flush_waiters else None
        if queue and (first_flush is None or queue[0][0] < first_flush):
            self._holder = True
            queue.popleft()[1].set_result(None)
        elif first_flush is not None:
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
                log.error("fsync failed", exc_info=exc)
            for waiter in batch:
                if waiter.done():
                    continue
                if exc is not None:
                    waiter.set_exception(exc)
                elif t.cancelled():
                    waiter.cancel()
                else:
                    waiter.set_result(None)
            self._pump()

        task.add_done_callback(done)
