"""Time for the coordinator runtime: the real clock, and a manual one for tests and fault injection.

The group core never reads a clock; the runtime passes it ``now_ms`` from a :class:`Clock`. With
:class:`ManualClock`, coordinator time (session expiry, rebalance timeouts, the initial delay, offset
expiry) moves only when :meth:`ManualClock.advance` is called, while sockets and I/O keep real time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Wall-clock milliseconds, as Kafka's coordinator uses (``Time.milliseconds()``)."""

    @property
    def manual(self) -> bool: ...

    def now_ms(self) -> int: ...

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Register a callback run after the clock moves by itself (manual clocks only)."""


class SystemClock:
    manual = False

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Real time advances continuously; timers are driven by the event loop instead."""


class ManualClock:
    """A clock that moves only when told to; advancing it fires due coordinator timers."""

    manual = True

    def __init__(self, start_ms: int | None = None) -> None:
        self._now = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self._callbacks: list[Callable[[], None]] = []

    def now_ms(self) -> int:
        return self._now

    def on_advance(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += ms
        for callback in list(self._callbacks):
            callback()

    def set(self, now_ms: int) -> None:
        self.advance(now_ms - self._now)
