"""``/metrics`` of a real ``regroup serve`` during a churn scenario (kafka-python members joining and
leaving, commits, a group going Empty) agrees with what Kafka clients see: ListGroups states,
DescribeGroups member counts, and lag computed from ListOffsets − OffsetFetch. A KIP-848 consumer group
(wire-level members) is reported beside them: its lag and members, group and target assignment epochs and
members by reconciliation state, as ConsumerGroupDescribe gives them, in ``/metrics`` and the JSON API."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)
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
from support.kip848 import WireMember

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


def consumer_group_mismatches(server: RegroupServer, admin: str, group: str) -> str | None:
    """Disagreements between /metrics + /api/groups and ConsumerGroupDescribe + OffsetFetch for a consumer
    group, or None."""
    with BlockingConnection(server.address) as conn:
        described: DescribedGroup = conn.request(
            ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse, version=0
        ).groups[0]
    lag = client_lag(server.address, group)
    samples = scrape(admin)
    summary = next(g for g in get_json(f"{admin}/api/groups")["groups"] if g["group"] == group)
    got = {
        "members": value(samples, "kafka_consumergroup_members", consumergroup=group),
        "epoch": value(samples, "regroup_consumer_group_epoch", consumergroup=group),
        "target": value(samples, "regroup_consumer_group_assignment_epoch", consumergroup=group),
        "lag": {
            tp: value(
                samples, "kafka_consumergroup_lag", consumergroup=group, topic=tp[0], partition=str(tp[1])
            )
            for tp in lag
        },
        "json": (summary["type"], summary["state"], summary["group_epoch"], summary["assignment_epoch"]),
    }
    want = {
        "members": len(described.members),
        "epoch": described.group_epoch,
        "target": described.assignment_epoch,
        "lag": {tp: float(v) for tp, (_, v) in lag.items()},
        "json": ("consumer", described.group_state, described.group_epoch, described.assignment_epoch),
    }
    return None if got == want else f"/metrics and /api/groups say {got}, the Kafka APIs {want}"


def test_metrics_show_consumer_protocol_groups() -> None:
    topic, group = "kip848-metrics", "kip848-metrics"
    # The target assignment follows each epoch bump at once (Kafka 4.3 recomputes it at most every 1 s).
    with serve_with_admin_port(**{"group.consumer.assignment.interval.ms": "0"}) as (server, admin):
        create_topics(server.address, {topic: 4})
        produce(server.address, topic, {0: 10, 1: 20, 2: 30, 3: 40})
        a = WireMember(server.address, group, [topic], client_id="metrics-a")
        c = WireMember(server.address, group, [topic], client_id="metrics-c")
        try:
            assert a.heartbeat().error_code == ErrorCode.NONE
            a.commit(topic, {0: 1, 1: 2, 2: 3, 3: 4})
            wait_until(lambda: consumer_group_mismatches(server, admin, group), 15)
            # c joins and a holds on to the partitions it is asked to revoke: Reconciling.
            a.stubborn = True
            for member in (c, a, c):
                assert member.heartbeat().error_code == ErrorCode.NONE
            wait_until(lambda: consumer_group_mismatches(server, admin, group), 15)
            samples = scrape(admin)
            by_state = {
                state: value(samples, "regroup_consumer_group_members", consumergroup=group, state=state)
                for state in ("stable", "unrevoked_partitions", "unreleased_partitions")
            }
            assert by_state == {"stable": 0, "unrevoked_partitions": 1, "unreleased_partitions": 1}
            coordinator = "kafka_server_group_coordinator_metrics"
            assert value(samples, f"{coordinator}_group_count", protocol="consumer") == 1
            assert value(samples, f"{coordinator}_group_count", protocol="classic") == 0
            assert value(samples, f"{PREFIX}_num_groups") == 0  # classic groups only, as Kafka counts them
            assert value(samples, f"{coordinator}_consumer_group_count", state="Reconciling") == 1

            # a revokes: Stable, every member at the group epoch, the assignment healthy.
            a.stubborn = False
            a.owned = {}
            assert a.heartbeat().error_code == ErrorCode.NONE

            def stable() -> str | None:
                assert c.heartbeat().error_code == ErrorCode.NONE
                samples = scrape(admin)
                stable = value(samples, "regroup_consumer_group_members", consumergroup=group, state="stable")
                return None if stable == 2 else f"{stable} stable members"

            wait_until(stable, 15)
            wait_until(lambda: consumer_group_mismatches(server, admin, group), 15)
            samples = scrape(admin)
            for name in ("unowned", "duplicated"):
                metric = f"regroup_group_assignment_{name}_partitions"
                assert value(samples, metric, consumergroup=group) == 0, name
        finally:
            a.close()
            c.close()
