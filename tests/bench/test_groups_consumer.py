"""``regroup bench formation|heartbeat|join-latency --protocol consumer`` (KIP-848 members) against a regroup
broker, at a toy size: each scenario completes, the group it forms is stable by the coordinator's own
account (ConsumerGroupDescribe), and the rows are there. No assertion looks at a measured time."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import pytest

from bench.support import tiny
from regroup.bench.cli import add_scenarios
from regroup.bench.groups.brokers import BenchTarget, start_broker
from regroup.bench.groups.report import RunResult
from regroup.bench.groups.scenarios import Params, consumer_broker_config, run, run_scenario


def _params(**overrides: object) -> Params:
    # The broker decides the heartbeat interval in KIP-848: 300 ms keeps reconciliation short.
    return tiny(**{"protocol": "consumer", "heartbeat_interval_ms": 300, **overrides})


@pytest.fixture(scope="module")
def regroup_broker() -> Iterator[BenchTarget]:
    broker = start_broker("regroup", consumer_broker_config(_params()))
    try:
        yield broker
    finally:
        broker.close()


def _ok(result: RunResult) -> dict[tuple[str, str], float | None]:
    assert result.error is None, result.error
    assert result.settings["group.consumer.heartbeat.interval.ms"] == "300"
    assert "consumer" in result.settings["group.coordinator.rebalance.protocols"]
    unexpected = [k for k in result.errors if not k.startswith("setup")]
    assert not unexpected, result.errors
    return {m.key: m.value for m in result.metrics}


def test_formation(regroup_broker: BenchTarget) -> None:
    metrics = _ok(run_scenario("formation", regroup_broker, _params(members=6, groups=2)))
    assert metrics[("formation", "first heartbeat → group stable")] is not None
    assert metrics[("formation", "first heartbeat → last member's first partitions")] is not None
    epoch = metrics[("formation", "member epoch at the end (max)")]
    assert epoch is not None
    assert epoch >= 1
    assert metrics[("formation", "partitions per group")] == 3
    assert metrics[("formation", "heartbeat interval (from the broker)")] == 300


def test_heartbeat(regroup_broker: BenchTarget) -> None:
    metrics = _ok(run_scenario("heartbeat", regroup_broker, _params(members=6, groups=2)))
    assert metrics[("saturation", "achieved")]
    assert metrics[("saturation", "broker CPU per request")] is not None
    assert ("20/s", "latency p99") in metrics


def test_join_latency(regroup_broker: BenchTarget) -> None:
    metrics = _ok(run_scenario("join-latency", regroup_broker, _params(members=4, rounds=2)))
    assert metrics[("join", "members added")] == 2
    for name in ("join → its partitions p50", "join → group stable max"):
        assert metrics[("join", name)] is not None
    epoch = metrics[("join", "member epoch at the end")]
    assert epoch is not None
    assert epoch >= 3  # formed, then at least one bump per newcomer


def test_classic_join_latency(regroup_broker: BenchTarget) -> None:
    result = run_scenario("join-latency", regroup_broker, tiny(members=4, rounds=2))
    assert result.error is None, result.error
    metrics = {m.key: m.value for m in result.metrics}
    assert metrics[("join", "members added")] == 2
    assert metrics[("join", "join → group stable p50")] is not None


def test_run_gives_started_brokers_the_members_settings(capsys: pytest.CaptureFixture[str]) -> None:
    code = run("formation", _params(members=3, groups=1), broker="regroup", json_output=True)
    doc = json.loads(capsys.readouterr().out)
    (run_doc,) = doc["runs"]
    assert code == 0, run_doc["error"]
    assert doc["params"]["protocol"] == "consumer"
    assert doc["broker_config"]["group.consumer.heartbeat.interval.ms"] == "300"
    assert run_doc["settings"]["group.consumer.heartbeat.interval.ms"] == "300"


def test_the_members_settings_become_the_brokers() -> None:
    config = consumer_broker_config(tiny(session_timeout_ms=90000, heartbeat_interval_ms=200))
    assert config["group.consumer.session.timeout.ms"] == "90000"
    assert int(config["group.consumer.max.session.timeout.ms"]) >= 90000
    assert config["group.consumer.heartbeat.interval.ms"] == "200"
    assert int(config["group.consumer.min.heartbeat.interval.ms"]) <= 200


@pytest.mark.parametrize("scenario", ["heartbeat", "commit"])
def test_the_fake_responder_and_classic_only_scenarios_refuse_it(
    scenario: str, fake_broker: BenchTarget
) -> None:
    assert run_scenario(scenario, fake_broker, _params()).error is not None


def test_the_command_line_offers_the_protocol_where_it_applies(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="regroup bench")
    add_scenarios(parser.add_subparsers(dest="scenario", required=True))
    for scenario in ("formation", "heartbeat", "join-latency"):
        assert parser.parse_args([scenario, "--protocol", "consumer"]).protocol == "consumer"
        assert parser.parse_args([scenario]).protocol == "classic"
    assert parser.parse_args(["join-latency"]).rounds == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["commit", "--protocol", "consumer"])
    capsys.readouterr()
