"""Smoke runs of every group-benchmark scenario against the Apache Kafka reference broker, with a handful
of members. They check that each scenario completes and reports its metrics; no assertion looks at a
measured time. The failover run restarts the shared broker, so it goes last."""

from __future__ import annotations

import pytest

from bench.support import tiny
from regroup.bench.groups.brokers import BenchTarget
from regroup.bench.groups.report import RunResult
from regroup.bench.groups.scenarios import run_scenario

pytestmark = pytest.mark.kafka


def _ok(result: RunResult) -> dict[tuple[str, str], float | None]:
    assert result.error is None, result.error
    assert result.broker == "kafka"
    assert result.settings.get("group.initial.rebalance.delay.ms") == "0"
    return {m.key: m.value for m in result.metrics}


def test_formation(kafka_broker: BenchTarget) -> None:
    metrics = _ok(run_scenario("formation", kafka_broker, tiny(members=5, groups=1)))
    assert metrics[("formation", "first JoinGroup → last SyncGroup")] is not None
    generations = metrics[("formation", "generations per group (max)")]
    assert generations is not None
    assert generations >= 1


def test_heartbeat(kafka_broker: BenchTarget) -> None:
    result = run_scenario("heartbeat", kafka_broker, tiny(members=6, groups=2))
    metrics = _ok(result)
    assert metrics[("saturation", "achieved")]
    assert ("20/s", "latency p99") in metrics
    assert not any(k.startswith("measured") for k in result.errors), result.errors


def test_commit(kafka_broker: BenchTarget) -> None:
    result = run_scenario("commit", kafka_broker, tiny(members=4, groups=2, partitions=2))
    metrics = _ok(result)
    assert metrics[("saturation", "achieved")]
    assert ("saturation", "achieved (offsets)") in metrics
    assert not any(k.startswith("measured") for k in result.errors), result.errors


def test_churn(kafka_broker: BenchTarget) -> None:
    params = tiny(members=3, groups=1, duration=0.6, churn_interval_ms=300, heartbeat_interval_ms=100)
    metrics = _ok(run_scenario("churn", kafka_broker, params))
    assert metrics[("churn", "joins")] == metrics[("churn", "leaves")] == 2
    completed = metrics[("churn", "rebalances completed")]
    assert completed is not None
    assert completed >= 1


def test_static_roll(kafka_broker: BenchTarget) -> None:
    metrics = _ok(
        run_scenario("static-roll", kafka_broker, tiny(members=3, groups=1, heartbeat_interval_ms=200))
    )
    assert metrics[("static-roll", "members restarted")] == 3
    # Kafka restarts static members without a rebalance (KIP-345): the count is a fact, not a timing.
    assert metrics[("static-roll", "rebalances caused")] == 0


def test_consumer_protocol_formation_and_join(kafka_broker: BenchTarget) -> None:
    # The shared broker keeps the reference configuration's 0.5 s consumer heartbeat interval.
    formed = _ok(run_scenario("formation", kafka_broker, tiny(members=4, groups=1, protocol="consumer")))
    assert formed[("formation", "first heartbeat → group stable")] is not None
    joined = _ok(run_scenario("join-latency", kafka_broker, tiny(members=3, rounds=1, protocol="consumer")))
    assert joined[("join", "members added")] == 1
    assert joined[("join", "join → its partitions p50")] is not None


def test_failover_restarts_the_broker_on_its_data(kafka_broker: BenchTarget) -> None:
    # One restart (no baseline) keeps the test short; the replay rate needs the baseline.
    metrics = _ok(run_scenario("failover", kafka_broker, tiny(groups=3, offsets=30, baseline=False)))
    assert metrics[("load", "offset commit records in the partition")] == 31
    assert metrics[("full restart", "launch → first OffsetFetch")] is not None
