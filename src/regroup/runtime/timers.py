"""Keyed timers for the coordinator shards.

Scheduling a key again replaces its previous deadline; cancelling forgets it. When a deadline passes the
timer does not call into the shard: it hands a :class:`Fired` event (key + the generation of that
schedule) to ``on_fire``, which enqueues it on the shard's serial lane. When the lane gets to it,
:meth:`TimerService.claim` tells whether that schedule is still the live one — a timer rescheduled or
cancelled after it fired is a stale fire and is dropped.

Deadlines are in the clock's milliseconds. With a real clock one event-loop timer is armed for the
earliest deadline; with a :class:`~regroup.runtime.clock.ManualClock` timers fire when the clock is
advanced.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr

from regroup.runtime.clock import Clock

__all__ = ["Fired", "TimerService"]

K = TypeVar("K")


@mypyc_attr(native_class=False)  # compiled, a generic dataclass stays a Python class
@dataclass(slots=True, unsafe_hash=True)
class Fired(Generic[K]):
    key: K
    seq: int
    deadline_ms: int


class TimerService(Generic[K]):
    def __init__(self, clock: Clock, on_fire: Callable[[Fired[K]], None]) -> None:
        self._clock = clock
        self._on_fire = on_fire
        # key -> (deadline, seq) while armed. The key's heap entry carries the same seq but may be for an
        # earlier deadline: moving a deadline later (every heartbeat re-arms its member's session timer)
        # only updates this map, and the entry is pushed again for the new deadline when it comes up.
        self._live: dict[K, tuple[int, int]] = {}
        self._fired: dict[K, int] = {}  # handed to on_fire, not claimed yet: key -> seq
        self._heap: list[tuple[int, int, K]] = []
        self._seq = itertools.count(1)
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: int | None = None
        self._closed = False
        clock.on_advance(self.poll)

    def __len__(self) -> int:
        return len(self._live)

    def deadline(self, key: K) -> int | None:
        live = self._live.get(key)
        return live[0] if live else None

    def schedule(self, key: K, deadline_ms: int) -> None:
        if self._fired:
            self._fired.pop(key, None)  # a fire the lane has not handled yet is now stale
        live = self._live.get(key)
        if live is not None and live[0] <= deadline_ms:
            self._live[key] = (deadline_ms, live[1])
            return
        seq = next(self._seq)
        self._live[key] = (deadline_ms, seq)
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
            # Cancelled keys and deadlines moved earlier leave dead entries behind (each joining member
            # one: its session's first deadline comes before its join timeout's), which would keep their
            # keys and deadlines until they came up; at most one dead entry per live one, and a rebuild
            # comes after at least as many pushes as it costs.
            self._heap = [(d, s, k) for k, (d, s) in self._live.items()]
            heapq.heapify(self._heap)
        if not self._clock.manual:
            self._arm()
        elif deadline_ms <= self._clock.now_ms():
            self.poll()

    def cancel(self, key: K) -> None:
        self._live.pop(key, None)
        self._fired.pop(key, None)

    def next_deadline(self) -> int | None:
        """The earliest live deadline (None when nothing is armed): how far a manual clock may jump before
        a timer is due."""
        return min((deadline for deadline, _ in self._live.values()), default=None)

    def claim(self, fired: Fired[K]) -> bool:
        """True (and the timer is consumed) when ``fired`` has not been rescheduled or cancelled since it
        fired."""
        if self._fired.get(fired.key) != fired.seq:
            return False
        del self._fired[fired.key]
        return True

    def poll(self) -> None:
        """Hand every due timer to ``on_fire`` (in deadline order)."""
        if self._closed:
            return
        now = self._clock.now_ms()
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, seq, key = heapq.heappop(heap)
            live = self._live.get(key)
            if live is None or live[1] != seq:
                continue  # replaced or cancelled
            if live[0] > deadline:
                heapq.heappush(heap, (live[0], seq, key))  # moved later since this entry was pushed
                continue
            del self._live[key]
            self._fired[key] = seq
            self._on_fire(Fired(key, seq, deadline))
        if not self._clock.manual:
            self._arm()

    def _arm(self) -> None:
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            live = self._live.get(key)
            if live is not None and live[1] == seq:
                break
            heapq.heappop(heap)
        if not heap:
            return
        # The head may be an entry whose deadline has moved later; waking for it re-pushes it.
        earliest = heap[0][0]
        if self._handle is not None and self._armed_for is not None and self._armed_for <= earliest:
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, (earliest - self._clock.now_ms()) / 1000)
        self._armed_for = earliest
        self._handle = loop.call_later(delay, self._wake)

    def _wake(self) -> None:
        self._handle = None
        self._armed_for = None
        self.poll()

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._live.clear()
        self._fired.clear()
        self._heap.clear()
