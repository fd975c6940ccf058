"""The cluster benchmarks on real clusters, with a handful of members: the load generator follows each
group to its coordinator across nodes, a coordinator failover is timed end to end, and the Kafka
reference cluster starts, loses a broker and takes it back. No assertion looks at a measured time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bench.support import tiny
from regroup import refkafka
from regroup.bench.cluster_failover import run_rounds
from regroup.bench.groups.brokers import ClusterTarget, start_broker
from regroup.bench.groups.load import Progress
from regroup.bench.groups.members import open_fleet
from regroup.bench.groups.report import RunResult
from regroup.bench.groups.scenarios import Ctx, run_scenario
from regroup.bench.produce_fetch import measure
from regroup.cluster.local import etcd_binary
from regroup.protocol.javahash import group_partition

# Short sessions so a killed node is noticed in seconds.
_FAST_FAILURE = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def regroup_cluster() -> Iterator[ClusterTarget]:
    if etcd_binary() is None:
        pytest.skip("etcd is not installed (scripts/test installs Debian's etcd-server)")
    target = start_broker("regroup", _FAST_FAILURE, nodes=2)
    assert isinstance(target, ClusterTarget)
    try:
        yield target
    finally:
        target.close()


@pytest.mark.parametrize("scenario", ["heartbeat", "commit"])
def test_members_talk_to_their_coordinator_on_every_node(
    regroup_cluster: ClusterTarget, scenario: str
) -> None:
    # Eight groups over 50 __consumer_offsets partitions led by two nodes: requests sent to the node that
    # does not coordinate a group would come back NOT_COORDINATOR and be counted as errors.
    result = run_scenario(scenario, regroup_cluster, tiny(members=8, groups=8, partitions=2))
    assert result.error is None, result.error
    metrics = {m.key: m.value for m in result.metrics}
    assert metrics[("saturation", "achieved")]
    assert not any(k.startswith("measured") for k in result.errors), result.errors
    # Broker CPU covers both nodes and etcd; the event-loop lag, both nodes' loops.
    assert len(regroup_cluster.pids) == 3
    assert metrics[("saturation", "broker CPU")] is not None
    assert metrics[("saturation", "broker event-loop lag p99 (bucket bound)")] is not None


def test_the_groups_of_a_run_are_spread_evenly_over_the_nodes_and_their_partitions(
    regroup_cluster: ClusterTarget,
) -> None:
    async def spread(count: int) -> tuple[list[str], dict[str, int]]:
        result = RunResult(regroup_cluster.kind, regroup_cluster.version, regroup_cluster.bootstrap)
        ctx = Ctx(regroup_cluster, tiny(), result, Progress("spread", False))
        fleet = await open_fleet(regroup_cluster.bootstrap, 1, 0)
        try:
            ids = await ctx.spread_group_ids(fleet, count, "spread")
            return ids, {g: answer.node_id for g, answer in (await fleet.coordinators(ids)).items()}
        finally:
            fleet.close()

    ids, node_of = asyncio.run(spread(10))
    assert len(set(ids)) == 10
    assert len({group_partition(g, 50) for g in ids}) == 10  # no two groups share a partition
    per_node = sorted(list(node_of.values()).count(n) for n in set(node_of.values()))
    assert per_node == [5, 5]
    # More groups than partitions: every partition takes a second group before any takes a third.
    ids, _ = asyncio.run(spread(120))
    per_partition = [[group_partition(g, 50) for g in ids].count(p) for p in range(50)]
    assert sorted(set(per_partition)) == [2, 3]


def test_one_busy_partition_of_a_wide_replicated_topic(regroup_cluster: ClusterTarget) -> None:
    result = measure(
        regroup_cluster.bootstrap,
        records=300,
        partitions=40,
        busy_partitions=1,
        sequential=True,
        replication_factor=2,
    )
    assert (result.partitions, result.busy_partitions, result.sequential) == (40, 1, True)
    assert result.produce_records_per_s > 0


def test_coordinator_failover_is_timed_without_a_rebalance(regroup_cluster: ClusterTarget) -> None:
    (round_,) = run_rounds(regroup_cluster, members=2, partitions=2, rounds=1, timeout=90.0, progress=False)
    assert round_.new_coordinator not in (None, round_.killed)
    assert round_.coordinator_named_s is not None
    assert round_.stable_s is not None
    assert round_.first_commit_s is not None
    # The members' sessions (45 s) outlive the failover: the new coordinator loads them, nobody rejoins.
    assert round_.rebalances == 0


@pytest.mark.kafka
def test_kafka_reference_cluster_replicates_and_takes_a_broker_back() -> None:
    reason = refkafka.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    target = start_broker("kafka", _FAST_FAILURE, nodes=2)
    assert isinstance(target, ClusterTarget)
    try:
        assert target.node_ids == [1, 2]
        assert len(target.pids) == 3  # two brokers and the KRaft controller
        result = measure(target.bootstrap, records=2000, partitions=2, replication_factor=2)
        assert result.replication_factor == 2
        assert result.produce_records_per_s > 0
        (round_,) = run_rounds(target, members=2, partitions=2, rounds=1, timeout=120.0, progress=False)
        assert round_.new_coordinator not in (None, round_.killed)
        assert round_.first_commit_s is not None
    finally:
        target.close()
