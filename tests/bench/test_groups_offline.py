"""The group benchmarks without a real coordinator: wire encoding, report shapes, the command line, and
the throughput scenarios against the fake responder. No assertion looks at a measured time."""

from __future__ import annotations

import argparse
import json

import pytest

from bench.support import tiny
from regroup.bench.cli import add_scenarios
from regroup.bench.groups.brokers import BenchTarget
from regroup.bench.groups.report import RunResult, payload, render
from regroup.bench.groups.scenarios import SCENARIOS, run, run_scenario
from regroup.bench.groups.wire import Template, _api_codec
from regroup.protocol.framing import decode_response, encode_request, encode_response
from regroup.protocol.message import Message
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

RUN_KEYS = {"broker", "version", "bootstrap", "nodes", "settings", "error", "error_responses", "metrics"}
METRIC_KEYS = {"phase", "name", "value", "unit", "compare"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="regroup bench")
    add_scenarios(parser.add_subparsers(dest="scenario", required=True))
    return parser


# ------------------------------------------------------------------------------------------------- wire


@pytest.mark.parametrize(
    ("request_", "response", "version"),
    [
        (
            HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1", group_instance_id="i"),
            HeartbeatResponse(error_code=27),
            4,
        ),
        (HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1"), HeartbeatResponse(), 0),
        (
            JoinGroupRequest(
                group_id="g",
                session_timeout_ms=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\0\3")],
            ),
            JoinGroupResponse(
                generation_id=2,
                protocol_type="consumer",
                protocol_name="range",
                leader="m",
                member_id="m",
                members=[JoinGroupResponseMember(member_id="m", metadata=b"\0\3")],
            ),
            9,
        ),
        (
            OffsetCommitRequest(
                group_id="g",
                topics=[
                    OffsetCommitRequestTopic(
                        name="t",
                        partitions=[OffsetCommitRequestPartition(partition_index=1, committed_offset=5)],
                    )
                ],
            ),
            OffsetCommitResponse(
                topics=[
                    OffsetCommitResponseTopic(
                        name="t", partitions=[OffsetCommitResponsePartition(partition_index=1)]
                    )
                ]
            ),
            8,
        ),
    ],
)
def test_pre_encoded_headers_match_the_framing_codec(
    request_: Message, response: Message, version: int
) -> None:
    codec = _api_codec(request_.API_KEY, version, "bench-3")
    assert codec.encode(request_, 77) == encode_request(request_, version, 77, "bench-3")
    frame = encode_response(response, version, 77)[4:]
    assert codec.decode(frame) == decode_response(frame, response.API_KEY, version)[1]


def _commit(offsets: list[int]) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=4,
        member_id="m-1",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequestPartition(partition_index=i, committed_offset=o)
                    for i, o in enumerate(offsets)
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", [2, 8, 9])
def test_a_template_sends_what_the_codec_encodes_with_its_fields_patched(version: int) -> None:
    sentinels = [0x5E47_0000_0000_0000 + k for k in range(3)]
    template = Template(_commit(sentinels), version)
    positions = [template.find(s) for s in sentinels]
    codec = _api_codec(template.api_key, version, "bench-1")
    for value in (1, 2, 2**40):
        template.set(positions, value)
        assert template.frame(codec, 9) == codec.encode(_commit([value] * 3), 9)
    with pytest.raises(ValueError, match="exactly once"):
        template.find(7)


def test_a_template_decodes_an_answer_unless_its_bytes_are_the_last_ones() -> None:
    template = Template(_commit([1]), 8)
    codec = _api_codec(template.api_key, 8, "bench-1")

    def answer(error: int, correlation_id: int) -> bytes:
        part = OffsetCommitResponsePartition(partition_index=0, error_code=error)
        response = OffsetCommitResponse(topics=[OffsetCommitResponseTopic(name="t", partitions=[part])])
        return encode_response(response, 8, correlation_id)[4:]

    ok = template.answer(codec, answer(0, 1))
    assert template.answer(codec, answer(0, 2)) is ok  # the same bytes after the correlation id
    failed = template.answer(codec, answer(22, 3))
    assert isinstance(failed, OffsetCommitResponse)
    assert failed.topics[0].partitions[0].error_code == 22
    assert template.answer(codec, answer(0, 4)) is not ok
    assert template.answer(codec, answer(0, 4)) == ok


# ----------------------------------------------------------------------------------------------- report


def _run(broker: str, value: float) -> RunResult:
    r = RunResult(broker, "1.0", "127.0.0.1:1", settings={"offsets.topic.num.partitions": "50"})
    r.add("saturation", "achieved", value, "heartbeats/s")
    r.add("saturation", "generator CPU", 50.0, "% of a core", compare=False)
    return r


def test_payload_of_two_runs_has_one_ratio_per_compared_metric() -> None:
    doc = payload("heartbeat", {"members": 4}, [_run("regroup", 300.0), _run("kafka", 200.0)])
    json.dumps(doc)
    assert doc["schema"] == 1
    assert doc["scenario"] == "heartbeat"
    assert [r["broker"] for r in doc["runs"]] == ["regroup", "kafka"]
    for run_doc in doc["runs"]:
        assert set(run_doc) == RUN_KEYS
        assert all(set(m) == METRIC_KEYS for m in run_doc["metrics"])
    assert doc["ratios"] == [
        {
            "phase": "saturation",
            "name": "achieved",
            "numerator": "regroup",
            "denominator": "kafka",
            "ratio": pytest.approx(1.5),
        }
    ]


def test_table_has_a_ratio_column_only_for_two_brokers() -> None:
    two = render("t", {}, [_run("regroup", 300.0), _run("kafka", 200.0)])
    assert "regroup/kafka" in two
    assert "1.50" in two
    assert "regroup/kafka" not in render("t", {}, [_run("regroup", 300.0)])


def test_the_second_broker_runs_on_a_cluster_of_its_own_size(
    fake_broker: BenchTarget, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from regroup.bench.groups import scenarios

    asked: list[tuple[str, int]] = []

    class Kept:
        """The module's fake responder, not closed after each run."""

        def __getattr__(self, name: str) -> object:
            return getattr(fake_broker, name)

        def close(self) -> None:
            pass

    def start(kind: str, config: object, nodes: int) -> object:
        asked.append((kind, nodes))
        return Kept()

    monkeypatch.setattr(scenarios, "start_broker", start)
    code = run(
        "heartbeat", tiny(nodes=2), broker="regroup", against="kafka", against_nodes=1, json_output=True
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert asked == [("regroup", 2), ("kafka", 1)]
    assert [r["nodes"] for r in doc["runs"]] == [2, 1]


# ---------------------------------------------------------------------------------------------- command


def test_every_scenario_has_a_subcommand_with_the_common_options() -> None:
    parser = _parser()
    for name in SCENARIOS:
        args = parser.parse_args([name, "--json", "--against", "kafka", "--broker-config", "a=b"])
        assert args.json
        assert args.against == "kafka"
        assert args.broker_config == [("a", "b")]
        assert callable(args.handler)


def test_rates_parse_and_bad_rates_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    assert parser.parse_args(["heartbeat", "--rates", "100,2500.5"]).rates == [100.0, 2500.5]
    with pytest.raises(SystemExit):
        parser.parse_args(["heartbeat", "--rates", "fast"])
    with pytest.raises(SystemExit):
        parser.parse_args(["commit", "--rates", "0"])
    capsys.readouterr()


# ------------------------------------------------------------------------------------ the fake responder


@pytest.mark.parametrize("scenario", ["heartbeat", "commit"])
def test_throughput_scenarios_run_against_the_fake_responder(scenario: str, fake_broker: BenchTarget) -> None:
    result = run_scenario(scenario, fake_broker, tiny(partitions=2))
    assert result.error is None, result.error
    phases = {m.phase for m in result.metrics}
    assert phases == {"20/s", "saturation"}
    names = {m.name for m in result.metrics}
    assert {"achieved", "latency p50", "latency p99", "generator CPU", "broker CPU"} <= names
    assert not any(k.startswith("measured") for k in result.errors), result.errors


@pytest.mark.parametrize("scenario", ["formation", "churn", "static-roll", "failover", "memory"])
def test_group_scenarios_refuse_the_fake_responder(scenario: str, fake_broker: BenchTarget) -> None:
    result = run_scenario(scenario, fake_broker, tiny())
    assert result.error is not None


def test_json_output_of_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    code = run("heartbeat", tiny(), broker="fake", json_output=True)
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["scenario"] == "heartbeat"
    assert doc["params"]["members"] == 4
    assert doc["broker_config"]["group.initial.rebalance.delay.ms"] == "0"
    (run_doc,) = doc["runs"]
    assert set(run_doc) == RUN_KEYS
    assert run_doc["broker"] == "fake"
    assert run_doc["error"] is None
    for metric in run_doc["metrics"]:
        assert set(metric) == METRIC_KEYS
        assert metric["value"] is None or isinstance(metric["value"], int | float)
    assert doc["ratios"] == []
