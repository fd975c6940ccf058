"""The group coordinator's virtual clock, as a test drives it.

Coordinator time stands still until :meth:`VirtualClock.advance` moves it; the network, the logs and every
client keep real time. Advancing walks from timer to timer in deadline order — each fired timer is handled
at its own deadline and its consequences (appends, replies to parked JoinGroup/SyncGroup requests, new
timers) settle before the next one — so one large jump behaves like the same time passing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from regroup.runtime.clock import ManualClock
from regroup.runtime.coordinator import GroupCoordinator
from regroup.testing._runner import BrokerRunner

__all__ = ["VirtualClock"]

_MAX_STEPS = 100_000


class VirtualClock:
    """``b.clock``: read and advance the coordinator's time."""

    def __init__(self, runner: Callable[[], BrokerRunner], clock: ManualClock | None) -> None:
        """``runner()`` gives the broker's current runner (a restart replaces it)."""
        self._runner = runner
        self._clock = clock

    @property
    def virtual(self) -> bool:
        """False when the broker was started with ``virtual_clock=False`` (coordinator on real time)."""
        return self._clock is not None

    def now_ms(self) -> int:
        """The coordinator's current time (epoch milliseconds)."""
        if self._clock is None:
            runner = self._runner()
            return runner.call(runner.broker.coordinator_clock.now_ms)
        return self._clock.now_ms()

    def advance(self, ms: int) -> None:
        """Move coordinator time forward by ``ms`` and return once every timer due meanwhile has fired and
        its effects are applied (records appended, parked requests answered)."""
        if ms < 0:
            raise ValueError("the clock cannot go backwards")
        clock = self._manual()
        runner = self._runner()
        runner.run(_advance(clock, runner.broker.group_coordinator, ms), timeout=60.0)

    def _manual(self) -> ManualClock:
        if self._clock is None:
            raise RuntimeError("this broker's coordinator runs on real time (virtual_clock=False)")
        return self._clock


async def _advance(clock: ManualClock, coord: GroupCoordinator, ms: int) -> None:
    target = clock.now_ms() + ms
    for _ in range(_MAX_STEPS):
        await coord.idle()
        due = _next_deadline(coord)
        if due is None or due > target:
            break
        # Move to the deadline: the TimerServices hand the due timers to their lanes.
        clock.set(max(due, clock.now_ms()))
    else:  # pragma: no cover - a timer re-arming itself at the same instant forever
        raise RuntimeError(f"coordinator timers did not settle within {_MAX_STEPS} steps")
    if clock.now_ms() < target:
        clock.set(target)
    await coord.idle()
    # Let released replies reach their connections' transports.
    for _ in range(3):
        await asyncio.sleep(0)


def _next_deadline(coord: GroupCoordinator) -> int | None:
    deadlines = []
    for partition in range(coord.num_partitions):
        runner = coord.runner(partition)
        if runner is not None:
            deadline = runner.timers.next_deadline()
            if deadline is not None:
                deadlines.append(deadline)
    return min(deadlines, default=None)
