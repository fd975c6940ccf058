"""``/metrics`` of a real ``regroup serve`` during a churn scenario (kafka-python members joining and
leaving, commits, a group going Empty) agrees with what Kafka clients see: ListGroups states,
DescribeGroups member counts, and lag computed from ListOffsets − OffsetFetch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from support.admin_port import (
    ConsumerThread,
    Samples,
    client_lag,
    describe_groups,
    get_json,
    list_groups,
    scrape,
    serve_with_admin_port,
    wait_until,
)
from support.brokers import RegroupServer
from support.kafka_wire import create_topics, produce

pytestmark = pytest.mark.interop

TOPIC_A, TOPIC_B = "churn-a", "churn-b"
STATE_METRICS = {
    "PreparingRebalance": "preparing_rebalance",
    "CompletingRebalance": "completing_rebalance",
    "Stable": "stable",
    "Dead": "dead",
    "Empty": "empty",
}
PREFIX = "kafka_coordinator_group_groupmetadatamanager"


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def mismatches(server: RegroupServer, admin: str) -> str | None:
    """Every disagreement between one scrape and the client-side view, or None."""
    address = server.address
    states = list_groups(address)
    described = describe_groups(address, sorted(states))
    lags = {g: client_lag(address, g) for g in states}
    samples = scrape(admin)
    problems: list[str] = []

    def expect(what: str, got: float | None, want: float) -> None:
        if got != want:
            problems.append(f"{what}: /metrics says {got}, the Kafka APIs say {want}")

    expect("num_groups", value(samples, f"{PREFIX}_num_groups"), len(states))
    per_state = Counter(states.values())
    for state, suffix in STATE_METRICS.items():
        expect(f"groups {state}", value(samples, f"{PREFIX}_num_groups_{suffix}"), per_state[state])
    expect("num_offsets", value(samples, f"{PREFIX}_num_offsets"), sum(len(v) for v in lags.values()))
    for group, desc in described.items():
        expect(
            f"members of {group}",
            value(samples, "kafka_consumergroup_members", consumergroup=group),
            len(desc.members),
        )
        sums: Counter[str] = Counter()
        for (topic, partition), (committed, lag) in lags[group].items():
            labels = {"consumergroup": group, "topic": topic, "partition": str(partition)}
            expect(
                f"current offset {labels}",
                value(samples, "kafka_consumergroup_current_offset", **labels),
                committed,
            )
            expect(f"lag {labels}", value(samples, "kafka_consumergroup_lag", **labels), lag)
            sums[topic] += lag
        for topic, total in sums.items():
            expect(
                f"lag sum {group}/{topic}",
                value(samples, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic),
                total,
            )
    # Lag series only for what OffsetFetch returns: nothing stale survives a group's changes.
    lag_series = {k for k in samples if k[0] == "kafka_consumergroup_lag"}
    expect("lag series", len(lag_series), sum(len(v) for v in lags.values()))
    return "; ".join(problems) or None


def stable_with(server: RegroupServer, group: str, members: int) -> str | None:
    desc = describe_groups(server.address, [group])[group]
    if desc.group_state != "Stable" or len(desc.members) != members:
        return f"{group} is {desc.group_state} with {len(desc.members)} members, want Stable with {members}"
    return None


@pytest.fixture
def broker() -> Iterator[tuple[RegroupServer, str]]:
    with serve_with_admin_port() as pair:
        yield pair


def test_metrics_match_the_kafka_apis_through_churn(broker: tuple[RegroupServer, str]) -> None:
    server, admin = broker
    create_topics(server.address, {TOPIC_A: 4, TOPIC_B: 2})
    produce(server.address, TOPIC_A, {0: 10, 1: 20, 2: 30, 3: 40})
    produce(server.address, TOPIC_B, {0: 5, 1: 7})
    bootstrap = f"{server.host}:{server.port}"
    topics = [TOPIC_A, TOPIC_B]
    commits = 0
    members: list[ConsumerThread] = []
    try:
        # One member, commits on both topics.
        members.append(ConsumerThread(bootstrap, "churn-live", topics, "c1"))
        wait_until(lambda: stable_with(server, "churn-live", 1), 30)
        members[0].commit({(TOPIC_A, 0): 3, (TOPIC_A, 1): 5, (TOPIC_B, 0): 2})
        commits += 3
        wait_until(lambda: mismatches(server, admin), 15)

        # A second and a third member join; commits in between.
        members.append(ConsumerThread(bootstrap, "churn-live", topics, "c2"))
        wait_until(lambda: stable_with(server, "churn-live", 2), 30)
        members[1].commit({(TOPIC_A, 2): 7})
        commits += 1
        wait_until(lambda: mismatches(server, admin), 15)
        members.append(ConsumerThread(bootstrap, "churn-live", topics, "c3"))
        wait_until(lambda: stable_with(server, "churn-live", 3), 30)
        wait_until(lambda: mismatches(server, admin), 15)

        # Another group commits and leaves: Empty with offsets, its lag still reported.
        lone = ConsumerThread(bootstrap, "churn-empty", [TOPIC_A], "e1")
        members.append(lone)  # closed below; also on failure, so that its thread does not outlive the test
        wait_until(lambda: stable_with(server, "churn-empty", 1), 30)
        lone.commit({(TOPIC_A, 3): 11, (TOPIC_A, 0): 10})
        commits += 2
        members.remove(lone)
        lone.close()
        wait_until(lambda: mismatches(server, admin), 15)
        assert list_groups(server.address)["churn-empty"] == "Empty"

        # The first member leaves; a survivor moves offsets forward (lag shrinks).
        members.pop(0).close()
        wait_until(lambda: stable_with(server, "churn-live", 2), 30)
        members[-1].commit({(TOPIC_A, 1): 20, (TOPIC_B, 1): 1})
        commits += 2
        produce(server.address, TOPIC_B, {0: 3})  # lag grows without a commit
        wait_until(lambda: mismatches(server, admin), 15)
        # Stable consumer groups with a range assignment over existing topics are healthy.
        samples = scrape(admin)
        for name in ("unowned", "duplicated"):
            metric = f"regroup_group_assignment_{name}_partitions"
            assert value(samples, metric, consumergroup="churn-live") == 0, name
    finally:
        for member in members:
            member.close()

    samples = scrape(admin)
    prefix = "kafka_server_group_coordinator_metrics"
    assert value(samples, f"{prefix}_offset_commit_total") == commits
    # Every generation that reached Stable counted once: the coordinator's own timeline says how many.
    stable_generations = sum(
        1
        for group in ("churn-live", "churn-empty")
        for record in get_json(f"{admin}/api/groups/{group}/history")["generations"]
        if record["stable_ms"] is not None
    )
    assert stable_generations >= 5  # churn-live: 1, 2, 3 members, then 2 again; churn-empty: 1
    assert value(samples, f"{prefix}_group_completed_rebalance_total") == stable_generations
    requests = {
        dict(labels)["request"]: v
        for (name, labels), v in samples.items()
        if name == "kafka_network_request_metrics_requests_total"
    }
    for api in (
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "OffsetCommit",
        "OffsetFetch",
        "ListGroups",
        "LeaveGroup",
    ):
        assert requests.get(api, 0) > 0, (api, requests)
    latency_count = value(
        samples, "kafka_network_request_metrics_total_time_seconds_count", request="OffsetCommit"
    )
    assert latency_count == sum(
        v
        for (name, labels), v in samples.items()
        if name == "kafka_network_request_metrics_requests_total"
        and dict(labels)["request"] == "OffsetCommit"
    )
    connections = value(samples, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT")
    assert connections is not None
    assert connections >= 1
