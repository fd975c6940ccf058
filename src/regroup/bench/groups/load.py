"""Load shapes and the instruments around them: fixed-rate (open loop) and saturating (closed loop) request
drivers, CPU meters for the generator and the broker, percentiles, and progress lines on stderr."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from regroup.bench.groups.brokers import BenchTarget, LoopLag, cpu_seconds

__all__ = [
    "Done",
    "PhaseMeter",
    "PhaseStats",
    "Progress",
    "SendFn",
    "closed_loop",
    "open_loop",
    "percentile",
]

Done = Callable[[bool, float], None]
"""Completion of one request: (succeeded, round-trip seconds)."""
SendFn = Callable[[int, Done], None]
"""Send one request on behalf of member slot ``i``; call ``done`` when its response arrives."""

_TICK = 0.001
_DRAIN_TIMEOUT = 30.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1) of ``values``, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class PhaseMeter:
    """CPU used by this process (the load generator, all threads) and by the broker's processes, as a
    percentage of one core over the measured interval, and the broker's event-loop lag meanwhile (regroup
    brokers only)."""

    def __init__(self, broker: BenchTarget | None) -> None:
        self._broker_target = broker
        self._pids = [] if broker is None else broker.pids
        self._lag_before: LoopLag | None = None
        self.loop_lag: LoopLag | None = None
        self._wall = 0.0
        self._own = 0.0
        self._broker: float | None = None
        self.wall = 0.0
        self.generator_seconds = 0.0
        self.broker_seconds: float | None = None
        self.generator_pct: float | None = None
        self.broker_pct: float | None = None

    def __enter__(self) -> PhaseMeter:
        if self._broker_target is not None:
            self._lag_before = self._broker_target.loop_lag()
        self._wall = time.perf_counter()
        self._own = time.process_time()
        self._broker = cpu_seconds(self._pids)
        return self

    def __exit__(self, *exc: object) -> None:
        wall = self.wall = time.perf_counter() - self._wall
        if wall <= 0:
            return
        self.generator_seconds = time.process_time() - self._own
        self.generator_pct = 100 * self.generator_seconds / wall
        broker = cpu_seconds(self._pids)
        if broker is not None and self._broker is not None:
            self.broker_seconds = broker - self._broker
            self.broker_pct = 100 * self.broker_seconds / wall
        if self._broker_target is not None and self._lag_before is not None:
            after = self._broker_target.loop_lag()
            self.loop_lag = None if after is None else after.since(self._lag_before)

    def record(self, stats: PhaseStats) -> None:
        """Copy the readings into a phase's stats."""
        stats.generator_cpu_pct, stats.broker_cpu_pct = self.generator_pct, self.broker_pct
        stats.generator_cpu_seconds, stats.broker_cpu_seconds = self.generator_seconds, self.broker_seconds
        stats.loop_lag = self.loop_lag


class Progress:
    """Progress lines on stderr for runs longer than a couple of seconds (at most one per second)."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled

    def note(self, text: str) -> None:
        if self.enabled:
            print(f"[{self.label}] {text}", file=sys.stderr, flush=True)

    @contextlib.asynccontextmanager
    async def watch(self, status: Callable[[], str], after: float = 2.0) -> AsyncIterator[None]:
        """Print ``status()`` every second while the block runs, starting ``after`` seconds in."""
        if not self.enabled:
            yield
            return
        started = time.monotonic()

        async def ticker() -> None:
            await asyncio.sleep(after)
            while True:
                self.note(f"{status()} ({time.monotonic() - started:.0f} s)")
                await asyncio.sleep(1.0)

        task = asyncio.get_running_loop().create_task(ticker())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@dataclass(slots=True)
class PhaseStats:
    duration: float = 0.0
    sent: int = 0
    completed: int = 0
    failed: int = 0
    skipped: int = 0
    latencies: list[float] = field(default_factory=list)
    generator_cpu_pct: float | None = None
    broker_cpu_pct: float | None = None
    generator_cpu_seconds: float | None = None
    broker_cpu_seconds: float | None = None
    loop_lag: LoopLag | None = None

    @property
    def rate(self) -> float:
        return self.completed / self.duration if self.duration > 0 else 0.0

    def cpu_us_per_request(self, seconds: float | None) -> float | None:
        if seconds is None or not self.completed:
            return None
        return seconds / self.completed * 1e6

    def latency_ms(self, q: float) -> float | None:
        p = percentile(self.latencies, q)
        return None if p is None else p * 1000


async def _drain(busy: bytearray) -> None:
    deadline = time.monotonic() + _DRAIN_TIMEOUT
    while any(busy) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


async def open_loop(
    slots: int, rate: float, duration: float, send: SendFn, broker: BenchTarget | None = None
) -> PhaseStats:
    """Offer ``rate`` requests/s for ``duration`` s, cycling through the member slots. Like a real member,
    a slot whose previous request is still outstanding skips its turn (counted as ``skipped``), so an
    overloaded broker shows up as an achieved rate below the offered one. Latency is per request, from
    its write to its response."""
    stats = PhaseStats()
    busy = bytearray(slots)

    def make_done(i: int) -> Done:
        def done(ok: bool, rtt: float) -> None:
            busy[i] = 0
            if ok:
                stats.completed += 1
                stats.latencies.append(rtt)
            else:
                stats.failed += 1

        return done

    callbacks = [make_done(i) for i in range(slots)]
    issued = 0
    nxt = 0
    with PhaseMeter(broker) as cpu:
        start = time.perf_counter()
        while True:
            elapsed = time.perf_counter() - start
            if elapsed >= duration:
                break
            due = int(elapsed * rate) - issued
            for _ in range(due):
                i = nxt
                nxt = (nxt + 1) % slots
                issued += 1
                if busy[i]:
                    stats.skipped += 1
                    continue
                busy[i] = 1
                stats.sent += 1
                send(i, callbacks[i])
            # Sleep until the next request is due (at least one tick: event-loop timers have ms resolution).
            await asyncio.sleep(max(_TICK, (issued + 1) / rate - (time.perf_counter() - start)))
        stats.duration = time.perf_counter() - start
        await _drain(busy)
    cpu.record(stats)
    return stats


async def closed_loop(
    slots: int, duration: float, send: SendFn, broker: BenchTarget | None = None
) -> PhaseStats:
    """Saturation: every member slot sends its next request as soon as its previous one is answered.
    Counts the responses that arrive within ``duration``."""
    stats = PhaseStats()
    busy = bytearray(slots)
    end = math.inf

    def make_done(i: int) -> Done:
        def done(ok: bool, rtt: float) -> None:
            busy[i] = 0
            if time.perf_counter() > end:
                return
            if ok:
                stats.completed += 1
                stats.latencies.append(rtt)
            else:
                stats.failed += 1
            busy[i] = 1
            stats.sent += 1
            send(i, callbacks[i])

        return done

    callbacks = [make_done(i) for i in range(slots)]
    with PhaseMeter(broker) as cpu:
        start = time.perf_counter()
        end = start + duration
        for i in range(slots):
            busy[i] = 1
            stats.sent += 1
            send(i, callbacks[i])
        await asyncio.sleep(duration)
        stats.duration = time.perf_counter() - start
    cpu.record(stats)
    await _drain(busy)
    return stats
