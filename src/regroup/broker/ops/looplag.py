"""How late the broker's event loop runs: a timer due every few milliseconds notes how much later than due
it ran. Everything the broker does runs on that loop, so this lag is the queueing delay every request saw on
top of its own work — the number that says whether a latency spike came from the broker's CPU or elsewhere.
Exported as the ``regroup_event_loop_lag_seconds`` histogram on the admin port; ``regroup bench`` reads it
per phase."""

from __future__ import annotations

import asyncio
import bisect
from typing import Final

__all__ = ["LAG_BUCKETS", "LoopLagMonitor"]

# Upper bounds (seconds): a quiet loop is late by tens of microseconds; a stalled one by seconds.
LAG_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class LoopLagMonitor:
    """Samples the running loop's lag every ``interval`` seconds until :meth:`stop`."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.counts = [0] * (len(LAG_BUCKETS) + 1)  # per bucket, the last one above every bound
        self.total = 0.0
        self.samples = 0
        self.max = 0.0
        self._loop = asyncio.get_running_loop()
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if self._handle is None:
            self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        self._due = self._loop.time() + self.interval
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        self.record(max(0.0, self._loop.time() - self._due))
        self._schedule()

    def record(self, lag: float) -> None:
        self.counts[bisect.bisect_left(LAG_BUCKETS, lag)] += 1
        self.total += lag
        self.samples += 1
        self.max = max(self.max, lag)
