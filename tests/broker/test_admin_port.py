"""The admin HTTP port in process: ``admin.listener`` handling, the JSON/HTML/metrics endpoints, and the
assignment-health warning (log line, metric, ``regroup groups --describe --state --health``) for a group
whose leader hands one partition to two members and leaves another unowned."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.support import BrokerThread
from broker.test_data_apis import create
from broker.test_fetch_sessions import fetch
from regroup.broker.config import BrokerConfig, ConfigError
from regroup.broker.state import Broker
from regroup.client.blocking import BlockingConnection
from regroup.client.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from regroup.client.types import TopicPartition
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from regroup.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from support.admin_port import get_json, scrape
from support.kafka_wire import create_topics

FAST = {"offsets_topic_num_partitions": 1, "group_initial_rebalance_delay_ms": 0}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path / "data", admin_listener="127.0.0.1:0", **FAST).start()
    try:
        yield b
    finally:
        b.stop()


def base_url(b: BrokerThread) -> str:
    address = b.broker.admin_address
    assert address is not None
    return f"http://{address[0]}:{address[1]}"


def http_get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers["Content-Type"], exc.read()


def test_admin_listener_values_are_validated() -> None:
    for bad in ("9644", "localhost:port", "127.0.0.1:70000"):
        with pytest.raises(ConfigError, match=r"admin\.listener"):
            BrokerConfig.load([], {}, [("admin.listener", bad)])
    assert BrokerConfig.load([], {}, []).get("admin.listener") == "127.0.0.1:9644"


def test_an_empty_admin_listener_disables_the_port(tmp_path: Path) -> None:
    b = BrokerThread(tmp_path / "data", admin_listener="", **FAST).start()
    try:
        assert b.broker.admin_address is None
    finally:
        b.stop()


def test_a_taken_admin_port_fails_the_start_when_configured(tmp_path: Path) -> None:
    async def start(port: int) -> None:
        settings = {"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"}
        settings |= {"offsets.topic.num.partitions": "1", "admin.listener": f"127.0.0.1:{port}"}
        broker = Broker(BrokerConfig.load([], {}, list(settings.items())), shutdown_grace_seconds=1)
        try:
            with pytest.raises(OSError, match=r"admin\.listener"):
                await broker.start()
        finally:
            await broker.stop()  # what ``regroup serve`` does before exiting with 1

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        asyncio.run(start(taken.getsockname()[1]))


def test_a_taken_default_admin_port_is_only_a_warning(tmp_path: Path) -> None:
    # Hold the default port if it is free; if something else holds it, the case is the same.
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):
            holder.bind(("127.0.0.1", 9644))
            holder.listen()
        b = BrokerThread(tmp_path / "data", **FAST).start()
        try:
            assert b.broker.admin_address is None
            assert b.broker.bound_addresses()
        finally:
            b.stop()


def test_endpoints_of_a_broker_without_groups(broker: BrokerThread) -> None:
    base = base_url(broker)
    status, ctype, body = http_get(base + "/")
    assert status == 200
    assert ctype.startswith("text/html")
    page = body.decode()
    assert 'id="timeline"' in page
    # Self-contained: nothing is loaded from elsewhere.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page
    assert get_json(base + "/api/groups") == {"groups": []}
    assert get_json(base + "/api/groups/nope") is None
    assert get_json(base + "/api/groups/nope/history") is None
    info = get_json(base + "/api/broker")
    assert info["node_id"] == broker.broker.node_id
    assert info["cluster_id"] == broker.broker.cluster_id
    status, ctype, _ = http_get(base + "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    samples = scrape(base)
    assert samples[("kafka_coordinator_group_groupmetadatamanager_num_groups", ())] == 0
    assert samples[("kafka_server_group_coordinator_metrics_partition_load_time_max", ())] >= 0


def test_metrics_select_families_by_name(broker: BrokerThread) -> None:
    """``name[]`` (Prometheus' federation parameter) selects whole families or single sample series."""
    base = base_url(broker)

    def series(query: str) -> set[str]:
        status, _, body = http_get(f"{base}/metrics?{query}")
        assert status == 200
        return {
            line.split("{")[0].split(" ")[0]
            for line in body.decode().splitlines()
            if not line.startswith("#")
        }

    lag = "regroup_event_loop_lag_seconds"
    assert series(f"name[]={lag}") == {f"{lag}_bucket", f"{lag}_count", f"{lag}_sum"}
    assert series(f"name[]={lag}_sum") == {f"{lag}_sum"}
    groups = "kafka_coordinator_group_groupmetadatamanager_num_groups"
    assert series(f"name[]={groups}&name[]={lag}_count") == {groups, f"{lag}_count"}
    assert series("name[]=no_such_metric") == set()


def _join(conn: BlockingConnection, member_id: str, topics: list[str]) -> None:
    conn.send(
        JoinGroupRequest(
            group_id="skewed",
            session_timeout_ms=30000,
            rebalance_timeout_ms=30000,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol("range", encode_subscription(Subscription(tuple(topics))))],
        ),
        3,
    )


def _sync(conn: BlockingConnection, generation: int, member_id: str, plan: dict[str, list[int]]) -> None:
    conn.send(
        SyncGroupRequest(
            group_id="skewed",
            generation_id=generation,
            member_id=member_id,
            assignments=[
                SyncGroupRequestAssignment(
                    m, encode_assignment(Assignment(tuple(TopicPartition("t", p) for p in ps)))
                )
                for m, ps in plan.items()
            ],
        ),
        2,
    )


def _response(conn: BlockingConnection, kind: type[JoinGroupResponse] | type[SyncGroupResponse]) -> object:
    response = conn.receive()
    assert isinstance(response, kind), response
    assert response.error_code == 0, response
    return response


def test_an_unhealthy_assignment_is_logged_measured_and_shown(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    base = base_url(broker)
    create_topics(broker.address, {"t": 2})
    with BlockingConnection(broker.address) as a, BlockingConnection(broker.address) as b:
        _join(a, "", ["t"])
        first = _response(a, JoinGroupResponse)
        assert isinstance(first, JoinGroupResponse)
        leader = first.member_id
        _sync(a, first.generation_id, leader, {leader: [0, 1]})
        _response(a, SyncGroupResponse)
        assert get_json(base + "/api/groups/skewed")["health"] == "OK"

        with caplog.at_level(logging.WARNING, logger="regroup.broker.ops"):
            _join(b, "", ["t"])  # parks until the leader rejoins
            _join(a, leader, ["t"])
            second = _response(a, JoinGroupResponse)
            joined = _response(b, JoinGroupResponse)
            assert isinstance(second, JoinGroupResponse)
            assert isinstance(joined, JoinGroupResponse)
            follower = joined.member_id
            # The leader gives partition 0 to both members and partition 1 to nobody.
            _sync(a, second.generation_id, leader, {leader: [0], follower: [0]})
            _sync(b, second.generation_id, follower, {})
            _response(a, SyncGroupResponse)
            _response(b, SyncGroupResponse)

        group = get_json(base + "/api/groups/skewed")
        assert group["state"] == "Stable"
        assert group["health"] == "UNOWNED=1,DUPLICATED=1"
        assert group["health_detail"]["unowned"] == [{"topic": "t", "partition": 1}]
        [duplicated] = group["health_detail"]["duplicated"]
        assert (duplicated["topic"], duplicated["partition"]) == ("t", 0)
        assert sorted(duplicated["members"]) == sorted([leader, follower])
        warnings = [r.getMessage() for r in caplog.records if "unhealthy assignment" in r.getMessage()]
        assert len(warnings) == 1, warnings
        assert "skewed generation 2" in warnings[0]
        assert "t-1" in warnings[0]

        samples = scrape(base)
        labels = (("consumergroup", "skewed"),)
        assert samples[("regroup_group_assignment_unowned_partitions", labels)] == 1
        assert samples[("regroup_group_assignment_duplicated_partitions", labels)] == 1
        assert samples[("regroup_group_unhealthy_assignments_total", ())] == 1
        assert samples[("kafka_server_group_coordinator_metrics_group_completed_rebalance_total", ())] == 2

        history = get_json(base + "/api/groups/skewed/history")
        assert [g["generation_id"] for g in history["generations"]] == [1, 2]
        assert history["in_progress"] is None

        # The admin tool judges the same thing client-side, only when asked to.
        def groups_tool(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "regroup.cli",
                    "groups",
                    "--bootstrap-server",
                    broker.bootstrap,
                    *args,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        plain = groups_tool("--describe", "--group", "skewed", "--state")
        assert plain.returncode == 0, plain.stderr
        assert "ASSIGNMENT-HEALTH" not in plain.stdout
        assert plain.stdout.split("\n")[1].split() == [
            "GROUP",
            "COORDINATOR",
            "(ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "#MEMBERS",
        ]
        checked = groups_tool("--describe", "--group", "skewed", "--state", "--health")
        assert checked.returncode == 0, checked.stderr
        header, row = checked.stdout.strip("\n").split("\n")
        assert header.split()[-2:] == ["#MEMBERS", "ASSIGNMENT-HEALTH"]
        assert row.split()[-2:] == ["2", "UNOWNED=1,DUPLICATED=1"]
        as_json = groups_tool("--describe", "--group", "skewed", "--state", "--health", "--output", "json")
        assert as_json.returncode == 0, as_json.stderr
        assert json.loads(as_json.stdout)["groups"][0]["assignment_health"] == "UNOWNED=1,DUPLICATED=1"
        refused = groups_tool("--list", "--state", "--health")
        assert refused.returncode != 0


def test_consumer_groups_are_counted_and_their_epoch_bumps_shown(broker: BrokerThread) -> None:
    from broker.test_consumer_group_apis import cgh, create

    base = base_url(broker)
    with BlockingConnection(broker.address) as conn:
        create(conn, "t", 2)
        a = cgh(conn, "a", 0, names=["t"])
        cgh(conn, "b", 0, names=["t"])
        cgh(conn, "b", -1)
        samples = scrape(base)
        prefix = "kafka_server_group_coordinator_metrics"
        assert samples[(f"{prefix}_group_count", (("protocol", "consumer"),))] == 1
        states = {
            labels[0][1]: v
            for (name, labels), v in samples.items()
            if name == f"{prefix}_consumer_group_count"
        }
        assert sum(states.values()) == 1
        assert set(states) == {"Empty", "Assigning", "Reconciling", "Stable", "Dead"}
        assert samples[(f"{prefix}_consumer_group_rebalance_total", ())] == 3
        assert samples[(f"{prefix}_consumer_group_rebalance_rate", ())] > 0

        history = get_json(base + "/api/groups/g/history")
        generations = history["generations"]
        assert [g["cause"]["kind"] for g in generations] == ["member_joined", "member_joined", "member_left"]
        assert generations[0]["members"][0]["member_id"] == "a"
        assert generations[-1]["group_epoch"] > a.member_epoch


def test_fetch_sessions_are_counted(broker: BrokerThread) -> None:
    with BlockingConnection(broker.address) as conn:
        topic_id = create(conn, "sessions", 3)
        first = fetch(conn, topic_id, {0: 0, 1: 0}, session_id=0, epoch=0).session_id
        fetch(conn, topic_id, {2: 0}, session_id=0, epoch=0)
        assert first != 0
    samples = scrape(base_url(broker))
    prefix = "kafka_server_fetchsessioncache"
    assert samples[(f"{prefix}_numincrementalfetchsessions", ())] == 2
    assert samples[(f"{prefix}_numincrementalfetchpartitionscached", ())] == 3
    assert samples[(f"{prefix}_incrementalfetchsessionevictions_total", ())] == 0
