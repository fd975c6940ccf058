"""The broker's event-loop lag: the admin port's histogram as ``regroup bench`` reads it per phase."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.support import running_broker
from regroup.bench.groups.brokers import BenchTarget, LoopLag, read_loop_lag
from regroup.bench.groups.load import PhaseMeter
from regroup.broker.ops.looplag import LAG_BUCKETS, LoopLagMonitor
from support.kafka_wire import wait_for


def test_a_phase_gets_its_own_share_of_the_histogram() -> None:
    bounds = (0.001, 0.01, float("inf"))
    before = LoopLag(bounds, (10, 10, 10), 0.005)
    after = LoopLag(bounds, (10, 108, 110), 0.905)
    phase = after.since(before)
    assert phase.samples == 100
    assert phase.quantile_ms(0.5) == pytest.approx(10.0)
    assert phase.quantile_ms(0.99) == pytest.approx(10.0)  # the 99th sample lies in (1, 10] ms
    assert phase.quantile_ms(1.0) == pytest.approx(10.0)  # above every bound: the highest finite one
    assert phase.mean_ms == pytest.approx(9.0)
    assert (before + before).samples == 20
    assert LoopLag(bounds, (0, 0, 0), 0.0).quantile_ms(0.99) is None


def test_the_monitor_sees_a_blocked_loop() -> None:
    async def scenario() -> LoopLagMonitor:
        monitor = LoopLagMonitor(interval=0.005)
        monitor.start()
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # a handler that hogs the loop
        await asyncio.sleep(0.02)
        monitor.stop()
        return monitor

    monitor = asyncio.run(scenario())
    assert monitor.samples == sum(monitor.counts) >= 3
    assert monitor.max >= 0.15
    assert monitor.counts[-1] + sum(monitor.counts[LAG_BUCKETS.index(0.1) + 1 : -1]) >= 1


class _Admin(BenchTarget):
    def __init__(self, admin: tuple[str, int]) -> None:
        super().__init__()
        self.admin = admin

    def loop_lag(self) -> LoopLag | None:
        return read_loop_lag(self.admin)


def test_the_admin_port_exports_it_and_a_phase_meter_reads_it(tmp_path: Path) -> None:
    with running_broker(tmp_path, admin_listener="127.0.0.1:0") as broker:
        address = broker.broker.admin_address
        assert address is not None
        target = _Admin(address)
        first = wait_for(target.loop_lag, 10, "the loop-lag histogram")
        assert first.bounds[-1] == float("inf")
        with PhaseMeter(target) as meter:
            wait_for(lambda: (target.loop_lag() or first).samples > first.samples + 5, 10, "more samples")
        assert meter.loop_lag is not None
        assert meter.loop_lag.samples > 0
        assert meter.loop_lag.quantile_ms(0.99) is not None
