"""Running a scenario on Apache Kafka and on regroup, normalising both transcripts and comparing them field
by field, with the documented allowlist applied."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pytest

from differential.allowlist import ALLOWLIST, Allowed
from differential.dsl import TOPICS, Observation, Scenario, primary_error, run, topic_name
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from support import compat_report
from support.brokers import BrokerPair, shared_pair
from support.kafka_wire import Address, create_topics
from support.normalize import Difference, IdNormaliser, diff, render, sort_list

__all__ = [
    "PairResult",
    "RegroupDifference",
    "ScenarioError",
    "check_result",
    "member_ids",
    "normalise",
    "params",
    "run_pair",
    "start_pair",
]

# The consumer-group APIs (classic and KIP-848) compared in ApiVersions answers.
GROUP_API_KEYS: Final = frozenset(
    k.value
    for k in (
        ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
        ApiKey.TXN_OFFSET_COMMIT, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE,
        ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE,
    )
)  # fmt: skip

# Lists whose order Kafka does not define, sorted before comparing: member lists come from hash maps;
# multi-group answers are assembled per ``__consumer_offsets`` partition; per-partition answers put the
# broker-level rejections (unknown topic/partition) before the coordinator's. Clients match entries by
# key, never by position.
_UNORDERED: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("JoinGroup", ("members",), "member_id"),
    ("DescribeGroups", ("groups", "*", "members"), "member_id"),
    ("ConsumerGroupDescribe", ("groups", "*", "members"), "member_id"),
    ("DescribeGroups", ("groups",), "group_id"),
    ("ConsumerGroupDescribe", ("groups",), "group_id"),
    ("DeleteGroups", ("results",), "group_id"),
    ("ListGroups", ("groups",), "group_id"),
    ("OffsetFetch", ("topics",), "name"),
    ("OffsetFetch", ("groups",), "group_id"),
    ("OffsetFetch", ("groups", "*", "topics"), "name"),
    ("OffsetFetch", ("topics", "*", "partitions"), "partition_index"),
    ("OffsetFetch", ("groups", "*", "topics", "*", "partitions"), "partition_index"),
    ("OffsetCommit", ("topics",), "name"),
    ("OffsetCommit", ("topics", "*", "partitions"), "partition_index"),
    ("TxnOffsetCommit", ("topics",), "name"),
    ("TxnOffsetCommit", ("topics", "*", "partitions"), "partition_index"),
    ("OffsetDelete", ("topics",), "name"),
    ("OffsetDelete", ("topics", "*", "partitions"), "partition_index"),
)


def _sort_key(item: Any, key: str) -> tuple[str, Any]:
    value = item.get(key) if isinstance(item, dict) else item
    return (type(value).__name__, value if isinstance(value, int | str) else str(value))


def _drop_throttle(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _drop_throttle(v) for k, v in data.items() if k != "throttle_time_ms"}
    if isinstance(data, list):
        return [_drop_throttle(v) for v in data]
    return data


def _endpoint(entry: dict[str, Any]) -> dict[str, Any]:
    """Coordinator node id/host/port: placeholders when the lookup succeeded (the brokers differ there)."""
    if entry.get("error_code") == 0:
        return {**entry, "node_id": "<node>", "host": "<host>", "port": "<port>"}
    return entry


def member_ids(observations: Sequence[Observation]) -> IdNormaliser:
    """Placeholders for member-id UUIDs, numbered by the JoinGroup answer that hands each id out, in
    script order (so the order in which a leader's member list happens to mention them does not matter)."""
    ids = IdNormaliser()
    for obs in observations:
        if obs.api == "JoinGroup" and isinstance(obs.response, dict):
            ids.register(obs.response.get("member_id"))
    return ids


def normalise(observations: Sequence[Observation], group: str) -> list[Any]:
    """Plain responses with throttle times dropped, coordinator endpoints and member-id UUIDs replaced by
    placeholders, unordered lists sorted and ListGroups reduced to this scenario's groups."""
    ids = member_ids(observations)
    out: list[Any] = []
    for obs in observations:
        data = _drop_throttle(obs.response)
        if obs.api == "FindCoordinator" and isinstance(data, dict):
            if obs.version < 4 and "error_code" in data:
                data = _endpoint(data)
            if data.get("coordinators"):
                data = {**data, "coordinators": [_endpoint(c) for c in data["coordinators"]]}
        if obs.api == "ListGroups" and "groups" in data:
            data = {**data, "groups": [g for g in data["groups"] if g["group_id"].startswith(group)]}
        if obs.api == "ApiVersions" and "api_keys" in data:
            # Only the consumer-group APIs: the rest of the API surface and the cluster's feature levels are
            # outside what regroup claims to match.
            data = {
                "error_code": data["error_code"],
                "api_keys": {
                    k["api_key"]: [k["min_version"], k["max_version"]]
                    for k in data["api_keys"]
                    if k["api_key"] in GROUP_API_KEYS
                },
            }
        data = ids(data)
        for api, path, key in _UNORDERED:
            if obs.api == api:
                data = sort_list(data, path, functools.partial(_sort_key, key=key))
        out.append(data)
    return out


@dataclass
class Found:
    """A difference at one step, and the allowlist entry that covers it (if any)."""

    obs: Observation
    difference: Difference
    allowed: Allowed | None


@dataclass
class PairResult:
    scenario: Scenario
    kafka: list[Observation]
    regroup: list[Observation]
    kafka_plain: list[Any] = field(default_factory=list)
    regroup_plain: list[Any] = field(default_factory=list)
    found: list[Found] = field(default_factory=list)
    scenario_errors: list[str] = field(default_factory=list)
    crashed: dict[str, BaseException] = field(default_factory=dict)

    @property
    def differences(self) -> list[Found]:
        return [f for f in self.found if f.allowed is None]

    @property
    def allowed(self) -> list[Found]:
        return [f for f in self.found if f.allowed is not None]

    def report(self) -> str:
        lines = [f"scenario {self.scenario.name}:"]
        for name, exc in self.crashed.items():
            lines.append(f"  the script failed on {name}: {type(exc).__name__}: {exc}")
        lines += [f"  scenario check against Kafka failed: {e}" for e in self.scenario_errors]
        for f in self.differences:
            lines.append(
                f"  step {f.obs.index} [{f.obs.label}] {f.difference.path}: "
                f"kafka={render(f.difference.expected)} regroup={render(f.difference.actual)}"
            )
        return "\n".join(lines)

    def transcript(self) -> str:
        out = []
        for k, kp, rp in zip(self.kafka, self.kafka_plain, self.regroup_plain, strict=False):
            out.append(
                f"  [{k.index}] {k.label}\n      kafka:   {render(kp, 400)}\n      regroup: {render(rp, 400)}"
            )
        return "\n".join(out)


def start_pair(settings: dict[str, str] | None = None) -> BrokerPair:
    """The shared Kafka/regroup pair with ``settings``, with the scenarios' topics created on both."""
    pair = shared_pair(settings)
    topics = {topic_name(t): n for t, n in TOPICS.items()}
    for address in pair.addresses.values():
        create_topics(address, topics)
    return pair


def _run_one(scenario: Scenario, address: Address, group: str, out: dict[str, Any], name: str) -> None:
    try:
        out[name] = run(scenario, address, group)
    except BaseException as exc:  # reported by the caller, on the test's thread
        out[name] = exc


def run_pair(scenario: Scenario, kafka: Address, regroup: Address, group: str) -> PairResult:
    """Run the scenario on both brokers at the same time (same script, same real-time pauses)."""
    results: dict[str, Any] = {}
    threads = [
        threading.Thread(
            target=_run_one, args=(scenario, addr, group, results, name), name=f"{scenario.name}@{name}"
        )
        for name, addr in (("kafka", kafka), ("regroup", regroup))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    crashed = {n: r for n, r in results.items() if isinstance(r, BaseException)}
    kobs: list[Observation] = [] if "kafka" in crashed else results["kafka"]
    robs: list[Observation] = [] if "regroup" in crashed else results["regroup"]
    result = PairResult(scenario, kobs, robs, crashed=crashed)
    result.kafka_plain = normalise(kobs, group)
    result.regroup_plain = normalise(robs, group)
    for obs, data in zip(kobs, result.kafka_plain, strict=True):
        if obs.expect is not None:
            got = primary_error(obs.api, data)
            if got != obs.expect:
                name = ErrorCode(got).name if got is not None and got in ErrorCode._value2member_map_ else got
                result.scenario_errors.append(
                    f"step {obs.index} [{obs.label}]: Kafka answered {name}, expected {obs.expect.name}"
                )
        if obs.check is not None and isinstance(data, dict) and "<no response>" not in data:
            problem = obs.check(data)
            if problem:
                result.scenario_errors.append(f"step {obs.index} [{obs.label}]: {problem}")
    if len(kobs) != len(robs):
        result.found.append(
            Found(
                (kobs or robs)[-1] if (kobs or robs) else Observation(0, "-", "-", 0, None),
                Difference("<number of answers>", len(kobs), len(robs)),
                None,
            )
        )
    for k, kp, rp in zip(kobs, result.kafka_plain, result.regroup_plain, strict=False):
        for d in diff(kp, rp):
            result.found.append(Found(k, d, _allowed(scenario.name, k, d)))
    return result


def _allowed(scenario: str, obs: Observation, d: Difference) -> Allowed | None:
    for entry in ALLOWLIST:
        if entry.matches(scenario, obs.api, obs.version, d):
            return entry
    return None


class RegroupDifference(AssertionError):
    """regroup answered differently from Kafka (not covered by the allowlist)."""


class ScenarioError(AssertionError):
    """Kafka itself did not answer as the scenario states: the scenario is wrong, not regroup."""


def check_result(result: PairResult, known_bug: str | None = None) -> None:
    """The verdict of one differential scenario; records it for the compatibility report."""
    scenario = result.scenario
    if result.crashed.get("kafka") or result.scenario_errors:
        compat_report.record_differential(scenario.name, scenario.covers, "scenario error")
        raise ScenarioError(result.report() + "\ntranscript:\n" + result.transcript())
    if result.crashed or result.differences:
        outcome = f"differs — known regroup bug: {known_bug}" if known_bug else "DIFFERS"
        compat_report.record_differential(scenario.name, scenario.covers, outcome)
        raise RegroupDifference(result.report() + "\ntranscript:\n" + result.transcript())
    outcome = "identical"
    if result.allowed:
        outcome += " (allowlisted: " + ", ".join(sorted({f.difference.path for f in result.allowed})) + ")"
    compat_report.record_differential(scenario.name, scenario.covers, outcome)


def params(scenarios: Iterable[Scenario]) -> list[Any]:
    """pytest parameters for scenarios; those demonstrating a known regroup bug are strict xfails that
    only a regroup difference satisfies (a broken scenario still fails)."""
    out: list[Any] = []
    names: set[str] = set()
    for s in scenarios:
        if s.name in names:
            raise ValueError(f"duplicate scenario name {s.name}")
        names.add(s.name)
        marks = [pytest.mark.xfail(strict=True, raises=RegroupDifference, reason=s.bug)] if s.bug else []
        out.append(pytest.param(s, id=s.name, marks=marks))
    return out
