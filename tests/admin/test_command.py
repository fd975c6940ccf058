"""The actions of ``regroup groups`` against an in-memory cluster: what goes to stdout and stderr, exit
codes, reset strategies, and the JSON documents."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from admin.fakes import FakeAdmin, consumer_member, member, run
from regroup.client.types import TopicPartition
from regroup.protocol.errors import ErrorCode

FAILED = "\nError: Executing consumer group command failed due to "
ERRORS = "org.apache.kafka.common.errors."


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


@pytest.fixture
def admin() -> FakeAdmin:
    a = FakeAdmin()
    a.topic("orders", (0, 100), (10, 50), (0, 0))
    a.topic("audit", (5, 20))
    a.group(
        "active",
        state="Stable",
        assignor="range",
        members=[
            member("c1-aaa", ("orders", 1)),
            member("c2-bbb", ("orders", 0), ("orders", 2), instance="i2"),
        ],
        offsets={tp("orders", 0): 40, tp("audit", 0): 7},
    )
    a.group("idle", offsets={tp("orders", 0): 90, tp("orders", 1): 30})
    return a


# ---------------------------------------------------------------------------------------- list


def test_list_plain_and_with_state(admin: FakeAdmin) -> None:
    admin.group("connect-cluster", protocol_type="connect")
    r = run(admin, "--list")
    assert (r.code, r.err) == (0, "")
    assert sorted(r.out.splitlines()) == ["active", "idle"]
    r = run(admin, "--list", "--state", "stable")
    assert r.out.splitlines()[1].split() == ["active", "Stable"]
    assert len(r.out.splitlines()) == 2


def test_list_rejects_unknown_states_and_types(admin: FakeAdmin) -> None:
    r = run(admin, "--list", "--state", "stable,bogus")
    assert r.code == 1
    assert r.err.startswith("Invalid state list 'stable,bogus'. Valid states are: Empty, Assigning, Stable, ")
    r = run(admin, "--list", "--type", "share")
    assert r.code == 1
    assert r.err.startswith("Invalid types list 'share'. Valid types are: Consumer, Classic")


# ---------------------------------------------------------------------------------------- describe


def test_describe_offsets_orders_members_by_partition_count(admin: FakeAdmin) -> None:
    r = run(admin, "--describe", "--group", "active")
    assert (r.code, r.err) == (0, "")
    rows = [line.split() for line in r.out.splitlines()[2:]]
    assert rows == [
        ["active", "orders", "0", "40", "100", "60", "c2-bbb", "/10.0.0.1", "c2"],
        ["active", "orders", "2", "-", "0", "-", "c2-bbb", "/10.0.0.1", "c2"],
        ["active", "orders", "1", "-", "50", "-", "c1-aaa", "/10.0.0.1", "c1"],
        ["active", "audit", "0", "7", "20", "13", "-", "-", "-"],
    ]


def test_describe_state_notices_go_to_stderr_and_errors_to_stdout(admin: FakeAdmin) -> None:
    admin.group("moving", state="PreparingRebalance", offsets={tp("audit", 0): 1})
    r = run(admin, "--describe", "--group", "idle", "--group", "moving", "--group", "nope")
    assert r.code == 0
    assert r.err == (
        "\nConsumer group 'idle' has no active members.\n\nWarning: Consumer group 'moving' is rebalancing.\n"
    )
    # Groups print in sorted order: idle, moving, nope.
    assert (
        r.out.index("idle ")
        < r.out.index("moving ")
        < r.out.index("\nError: Consumer group 'nope' does not exist.\n")
    )


def test_describe_empty_group_without_offsets_prints_only_the_notice(admin: FakeAdmin) -> None:
    admin.group("blank")
    r = run(admin, "--describe", "--group", "blank")
    assert (r.out, r.err) == ("", "\nConsumer group 'blank' has no active members.\n")
    r = run(admin, "--describe", "--group", "blank", "--members")
    assert r.out.startswith(
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"
    )


def test_describe_committed_offsets_of_a_deleted_topic_show_dashes(admin: FakeAdmin) -> None:
    admin.groups["idle"].offsets[tp("gone", 0)] = 5
    rows = [line.split() for line in run(admin, "--describe", "--group", "idle").out.splitlines()[2:]]
    assert ["idle", "gone", "0", "5", "-", "-", "-", "-", "-"] in rows


def test_describe_all_groups_members_and_state(admin: FakeAdmin) -> None:
    r = run(admin, "--describe", "--all-groups", "--members", "--verbose")
    assert "GROUP-INSTANCE-ID" in r.out
    assert "orders:0,2" in r.out
    r = run(admin, "--describe", "--group", "active", "--state")
    assert r.out.splitlines()[2].split() == ["active", "127.0.0.1:9092", "(1)", "range", "Stable", "2"]


def test_describe_rejects_other_protocols(admin: FakeAdmin) -> None:
    admin.group("workers", protocol_type="connect", state="Stable")
    r = run(admin, "--describe", "--group", "workers")
    assert r.out == "\nError: Group 'workers' is not a consumer group (protocol type 'connect').\n"


def test_describe_json(admin: FakeAdmin) -> None:
    doc = json.loads(run(admin, "--describe", "--group", "active", "--group", "nope", "--output", "json").out)
    assert doc["version"] == 1
    assert (doc["action"], doc["view"]) == ("describe", "offsets")
    active, nope = doc["groups"]
    assert nope == {
        "group": "nope",
        "state": "Dead",
        "error": "Consumer group 'nope' does not exist.",
        "partitions": [],
    }
    assert active["partitions"][0] == {
        "topic": "orders",
        "partition": 0,
        "leader_epoch": None,
        "current_offset": 40,
        "log_end_offset": 100,
        "lag": 60,
        "consumer_id": "c2-bbb",
        "host": "/10.0.0.1",
        "client_id": "c2",
    }
    assert active["partitions"][-1]["consumer_id"] is None
    members = json.loads(run(admin, "--describe", "--group", "active", "--members", "--output", "json").out)
    assert members["groups"][0]["members"][1]["assignment"] == [{"topic": "orders", "partitions": [0, 2]}]
    assert members["groups"][0]["members"][1]["group_instance_id"] == "i2"
    state = json.loads(run(admin, "--describe", "--group", "active", "--state", "--output", "json").out)
    assert state["groups"][0]["coordinator"] == {"id": 1, "host": "127.0.0.1", "port": 9092}
    assert state["groups"][0]["members"] == 2


def test_describe_group_not_found_fails_the_command_as_kafka_does(admin: FakeAdmin) -> None:
    # DescribeGroups v6 (Kafka 4.3): an unknown group is GROUP_ID_NOT_FOUND; Kafka's tool reads every
    # description before printing, so the whole command fails on it and nothing else is printed.
    admin.missing_not_found = True
    r = run(admin, "--describe", "--group", "idle", "--group", "nope", "--members")
    assert (r.code, r.err) == (0, "")
    assert r.out == (
        "\nError: Executing consumer group command failed due to "
        "org.apache.kafka.common.errors.GroupIdNotFoundException: Group nope not found.\n"
    )


@pytest.mark.parametrize("view", ["offsets", "members", "state"])
def test_describe_json_group_not_found_is_a_dead_group(admin: FakeAdmin, view: str) -> None:
    flags = {"offsets": [], "members": ["--members"], "state": ["--state"]}[view]
    dead = json.loads(run(admin, "--describe", "--group", "nope", *flags, "--output", "json").out)
    admin.missing_not_found = True
    doc = json.loads(run(admin, "--describe", "--group", "nope", *flags, "--output", "json").out)
    (nope,) = doc["groups"]
    assert (nope["state"], nope["error"]) == ("Dead", "Consumer group 'nope' does not exist.")
    if view == "state":
        assert nope["coordinator"] is None
        del nope["coordinator"], dead["groups"][0]["coordinator"]
    assert doc == dead


def _consumer_protocol_group(admin: FakeAdmin, state: str = "Reconciling") -> None:
    """A KIP-848 group at group epoch 5 whose member c1 still owns orders-1 (epoch 4) that its target
    assignment (epoch 5) gives to c2."""
    admin.group(
        "kip848",
        type="consumer",
        state=state,
        assignor="uniform",
        group_epoch=5,
        target_assignment_epoch=5,
        members=[
            consumer_member("c1-aaa", 4, [("orders", 0), ("orders", 1)], [("orders", 0)]),
            consumer_member("c2-bbb", 5, [("audit", 0)], [("audit", 0), ("orders", 2)], instance="i2"),
        ],
        offsets={tp("orders", 0): 40},
    )


def test_consumer_protocol_group_list_with_types(admin: FakeAdmin) -> None:
    _consumer_protocol_group(admin)
    r = run(admin, "--list", "--type", "consumer", "--state")
    assert [line.split() for line in r.out.splitlines()] == [
        ["GROUP", "TYPE", "STATE"],
        ["kip848", "Consumer", "Reconciling"],
    ]
    r = run(admin, "--list", "--type")
    assert sorted(line.split()[1] for line in r.out.splitlines()[1:]) == ["Classic", "Classic", "Consumer"]
    doc = json.loads(run(admin, "--list", "--output", "json").out)
    assert {
        "group": "kip848",
        "protocol_type": "consumer",
        "type": "Consumer",
        "state": "Reconciling",
    } in doc["groups"]


def test_consumer_protocol_group_members_and_state(admin: FakeAdmin) -> None:
    _consumer_protocol_group(admin)
    r = run(admin, "--describe", "--group", "kip848", "--members", "--verbose")
    assert r.err == "\nWarning: Consumer group 'kip848' is rebalancing.\n"
    lines = r.out.splitlines()
    assert lines[1].split() == [
        "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
        "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
    ]  # fmt: skip
    assert [line.split() for line in lines[2:]] == [
        ["kip848", "c1-aaa", "/10.0.0.1", "c1", "2", "4", "orders:0,1", "5", "orders:0"],
        ["kip848", "c2-bbb", "i2", "/10.0.0.1", "c2", "1", "5", "audit:0", "5", "audit:0;orders:2"],
    ]
    # Every line of the table is as wide as its header: the blank instance id of c1 is padded.
    assert len({len(line) for line in lines[1:]}) == 1
    r = run(admin, "--describe", "--group", "kip848", "--state", "--verbose")
    assert r.out.splitlines()[1:] == [
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                GROUP-EPOCH     "
        "TARGET-ASSIGNMENT-EPOCH   #MEMBERS",
        "kip848          127.0.0.1:9092  (1)       uniform              Reconciling          5               "
        "5                         2",
    ]
    r = run(admin, "--describe", "--group", "kip848", "--state")
    assert r.out.splitlines()[2].split() == ["kip848", "127.0.0.1:9092", "(1)", "uniform", "Reconciling", "2"]


def test_consumer_protocol_group_json(admin: FakeAdmin) -> None:
    _consumer_protocol_group(admin, state="Stable")
    doc = json.loads(run(admin, "--describe", "--group", "kip848", "--members", "--output", "json").out)
    (group,) = doc["groups"]
    assert (group["group"], group["state"], group["error"]) == ("kip848", "Stable", None)
    assert group["members"][1] == {
        "consumer_id": "c2-bbb",
        "group_instance_id": "i2",
        "host": "/10.0.0.1",
        "client_id": "c2",
        "partitions": 1,
        "current_epoch": 5,
        "assignment": [{"topic": "audit", "partitions": [0]}],
        "target_epoch": 5,
        "target_assignment": [{"topic": "audit", "partitions": [0]}, {"topic": "orders", "partitions": [2]}],
    }
    state = json.loads(run(admin, "--describe", "--group", "kip848", "--state", "--output", "json").out)
    assert state["groups"][0] == {
        "group": "kip848",
        "state": "Stable",
        "error": None,
        "coordinator": {"id": 1, "host": "127.0.0.1", "port": 9092},
        "assignment_strategy": "uniform",
        "members": 2,
        "group_epoch": 5,
        "target_assignment_epoch": 5,
    }
    offsets = json.loads(run(admin, "--describe", "--group", "kip848", "--output", "json").out)
    rows = {
        (p["topic"], p["partition"]): (p["current_offset"], p["consumer_id"])
        for p in offsets["groups"][0]["partitions"]
    }
    assert rows == {
        ("orders", 0): (40, "c1-aaa"),
        ("orders", 1): (None, "c1-aaa"),
        ("audit", 0): (None, "c2-bbb"),
    }


# ---------------------------------------------------------------------------------------- reset


def plan_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GROUP "))
    return sorted(line.split() for line in lines[start + 1 :] if line)


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (["--to-earliest"], {"0": "0", "1": "10", "2": "0"}),
        (["--to-latest"], {"0": "100", "1": "50", "2": "0"}),
        (["--to-current"], {"0": "90", "1": "30", "2": "0"}),
        (["--to-offset", "20"], {"0": "20", "1": "20", "2": "0"}),
    ],
)
def test_reset_scenarios(admin: FakeAdmin, scenario: list[str], expected: dict[str, str]) -> None:
    r = run(admin, "--reset-offsets", "--group", "idle", "--topic", "orders", *scenario, "--dry-run")
    assert r.code == 0
    assert {row[2]: row[3] for row in plan_rows(r.out)} == expected
    assert admin.commits == []


def test_reset_clamps_with_warnings(admin: FakeAdmin) -> None:
    r = run(
        admin, "--reset-offsets", "--group", "idle", "--topic", "orders:0,1", "--to-offset", "5", "--dry-run"
    )
    assert (
        r.err == "WARN New offset (5) is lower than earliest offset for topic partition orders-1. "
        "Value will be set to 10\n"
    )
    r = run(
        admin, "--reset-offsets", "--group", "idle", "--topic", "orders:0,1", "--shift-by", "25", "--dry-run"
    )
    assert {row[2]: row[3] for row in plan_rows(r.out)} == {"0": "100", "1": "50"}
    assert (
        "New offset (115) is higher than latest offset for topic partition orders-0. Value will be set to 100"
        in r.err
    )
    assert (
        "New offset (55) is higher than latest offset for topic partition orders-1. Value will be set to 50"
        in r.err
    )


def test_shift_by_needs_a_committed_offset(admin: FakeAdmin) -> None:
    r = run(admin, "--reset-offsets", "--group", "idle", "--topic", "orders", "--shift-by", "-1", "--dry-run")
    assert r.code == 1
    assert r.err.startswith(
        "Cannot shift offset for partition orders-2 since there is no current committed offset\nusage:"
    )


def test_reset_to_datetime_falls_back_to_the_end_of_empty_partitions(admin: FakeAdmin) -> None:
    # orders-0 offset o has timestamp 1_000_000 + 1000·o; 1970-01-01T00:16:50Z is offset 10.
    r = run(
        admin,
        "--reset-offsets",
        "--group",
        "idle",
        "--topic",
        "orders",
        "--to-datetime",
        "1970-01-01T00:16:50.000",
    )
    rows = {row[2]: row[3] for row in plan_rows(r.out)}
    assert rows == {"0": "10", "1": "10", "2": "0"}
    assert r.out.startswith(
        "\nWarn: Partition 2 from topic orders is empty. Falling back to latest known offset.\n"
    )
    later = run(
        admin,
        "--reset-offsets",
        "--group",
        "idle",
        "--topic",
        "orders:0",
        "--to-datetime",
        "1970-01-01T01:16:50.000+01:00",
    )
    assert plan_rows(later.out) == [["idle", "orders", "0", "10"]]


def test_reset_by_duration(admin: FakeAdmin) -> None:
    now = int(time.time() * 1000)
    admin.topic("recent", (0, 10), base_ts=now - 10 * 60_000)  # one record per second, ten minutes ago
    r = run(
        admin, "--reset-offsets", "--group", "idle", "--topic", "recent", "--by-duration", "PT1H", "--dry-run"
    )
    assert plan_rows(r.out) == [["idle", "recent", "0", "0"]]
    r = run(
        admin, "--reset-offsets", "--group", "idle", "--topic", "recent", "--by-duration", "PT1M", "--dry-run"
    )
    assert plan_rows(r.out) == [["idle", "recent", "0", "10"]]
    assert "Falling back to latest known offset" in r.out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "--to-datetime",
            "2024-01-31",
            "Error parsing timestamp. It does not contain a 'T' according to ISO8601 format",
        ),
        (
            "--to-datetime",
            "2024-01-31T09:30:00",
            'Unparseable date: "2024-01-31T09:30:00Z" (--to-datetime expects',
        ),
        ("--by-duration", "1h", "Text cannot be parsed to a Duration (--by-duration expects"),
    ],
)
def test_bad_time_values_fail_before_contacting_the_cluster(option: str, value: str, message: str) -> None:
    admin = FakeAdmin()
    admin.unreachable = True
    r = run(admin, "--reset-offsets", "--group", "g", "--all-topics", option, value, "--dry-run")
    assert r.code == 0
    assert r.out.startswith(f"\nError: Executing consumer group command failed due to {message}")


def test_reset_refuses_active_groups_and_plans_the_others(admin: FakeAdmin) -> None:
    r = run(
        admin,
        "--reset-offsets",
        "--group",
        "active",
        "--group",
        "idle",
        "--all-topics",
        "--to-latest",
        "--execute",
    )
    assert r.code == 0
    assert (
        "\nError: Assignments can only be reset if the group 'active' is inactive, but the current state is "
        "Stable.\n" in r.out
    )
    assert plan_rows(r.out) == [["idle", "orders", "0", "100"], ["idle", "orders", "1", "50"]]
    assert admin.commits == [("idle", {tp("orders", 0): 100, tp("orders", 1): 50})]


def test_reset_of_an_unknown_group_seeds_it(admin: FakeAdmin) -> None:
    r = run(admin, "--reset-offsets", "--group", "fresh", "--topic", "audit", "--to-earliest", "--execute")
    assert plan_rows(r.out) == [["fresh", "audit", "0", "5"]]
    assert admin.commits == [("fresh", {tp("audit", 0): 5})]


def test_reset_commit_rejected_because_members_came_back(admin: FakeAdmin) -> None:
    admin.commit_error = ErrorCode.UNKNOWN_MEMBER_ID
    r = run(admin, "--reset-offsets", "--group", "idle", "--all-topics", "--to-latest", "--execute")
    assert r.code == 0
    assert r.out == (
        f"{FAILED}The coordinator is not aware of this member. The group 'idle' has active members again, "
        "so its offsets cannot be reset; stop its consumers and retry.\n"
    )


def test_reset_of_missing_partitions_and_topics(admin: FakeAdmin) -> None:
    r = run(
        admin, "--reset-offsets", "--group", "idle", "--topic", "orders:7,1,8", "--to-latest", "--dry-run"
    )
    assert r.out == f'{FAILED}The partitions "orders-7,orders-8" do not exist\n'
    r = run(admin, "--reset-offsets", "--group", "idle", "--topic", "nope", "--to-latest", "--dry-run")
    assert r.out == (f"{FAILED}This server does not host this topic-partition. (topic: nope)\n")
    r = run(admin, "--reset-offsets", "--group", "idle", "--topic", "orders:x", "--to-latest", "--dry-run")
    assert (r.code, r.err.splitlines()[0]) == (1, "Invalid partition 'x' specified in topic arg 'orders:x''")


def test_reset_needs_a_scope(admin: FakeAdmin) -> None:
    r = run(admin, "--reset-offsets", "--group", "idle", "--to-latest", "--dry-run")
    assert (r.code, r.err.splitlines()[0]) == (
        1,
        "One of the reset scopes should be defined: --all-topics, --topic.",
    )


def test_reset_export_and_from_file_round_trip(admin: FakeAdmin, tmp_path: Path) -> None:
    exported = run(
        admin,
        "--reset-offsets",
        "--group",
        "idle",
        "--all-topics",
        "--shift-by",
        "-5",
        "--export",
        "--dry-run",
    )
    assert sorted(exported.out.split()) == ["orders,0,85", "orders,1,25"]
    plan = tmp_path / "plan.csv"
    plan.write_text(exported.out)
    r = run(admin, "--reset-offsets", "--group", "idle", "--from-file", str(plan), "--execute")
    assert plan_rows(r.out) == [["idle", "orders", "0", "85"], ["idle", "orders", "1", "25"]]
    assert admin.groups["idle"].offsets == {tp("orders", 0): 85, tp("orders", 1): 25}


def test_reset_from_file_for_several_groups(admin: FakeAdmin, tmp_path: Path) -> None:
    admin.group("other", offsets={tp("audit", 0): 6})
    plan = tmp_path / "plan.csv"
    plan.write_text("idle,orders,0,1\nother,audit,0,99\n")
    r = run(
        admin,
        "--reset-offsets",
        "--group",
        "idle",
        "--group",
        "other",
        "--group",
        "lost",
        "--from-file",
        str(plan),
    )
    assert plan_rows(r.out) == [["idle", "orders", "0", "1"], ["other", "audit", "0", "20"]]
    assert "\nError: No reset plan for group lost found\n" in r.out
    assert "Value will be set to 20" in r.err
    assert r.err.startswith("WARN: No action will be performed as the --execute option is missing.")
    bad = tmp_path / "bad.csv"
    bad.write_text("idle,orders,zero,1\n")
    r = run(admin, "--reset-offsets", "--group", "idle", "--from-file", str(bad), "--dry-run")
    assert "line 1 of" in r.out
    assert "is not group,topic,partition,offset: 'zero' is not a number" in r.out


def test_reset_json(admin: FakeAdmin) -> None:
    r = run(
        admin,
        "--reset-offsets",
        "--all-groups",
        "--all-topics",
        "--to-earliest",
        "--dry-run",
        "--output",
        "json",
    )
    doc = json.loads(r.out)
    assert doc["action"] == "reset-offsets"
    assert doc["executed"] is False
    by_group = {g["group"]: g for g in doc["groups"]}
    assert by_group["active"]["error"].startswith(
        "Assignments can only be reset if the group 'active' is inactive"
    )
    assert by_group["active"]["partitions"] == []
    assert sorted((p["partition"], p["new_offset"]) for p in by_group["idle"]["partitions"]) == [
        (0, 0),
        (1, 10),
    ]


# ---------------------------------------------------------------------------------------- delete


def test_delete_reports_each_group(admin: FakeAdmin) -> None:
    admin.group("old")
    r = run(admin, "--delete", "--group", "idle", "--group", "active", "--group", "nope", "--group", "old")
    assert r.code == 0
    assert r.out == (
        "\nError: Deletion of some consumer groups failed:\n"
        f"* Group 'nope' could not be deleted due to: {ERRORS}GroupIdNotFoundException: "
        "The group id does not exist.\n"
        f"* Group 'active' could not be deleted due to: {ERRORS}GroupNotEmptyException: "
        "The group is not empty.\n"
        "\nThese consumer groups were deleted successfully: 'idle', 'old'\n"
    )
    admin.group("idle")
    assert (
        run(admin, "--delete", "--group", "idle").out
        == "Deletion of requested consumer groups ('idle') was successful.\n"
    )


def test_delete_json(admin: FakeAdmin) -> None:
    doc = json.loads(run(admin, "--delete", "--group", "idle", "--group", "active", "--output", "json").out)
    assert doc["deleted"] == ["idle"]
    assert doc["failed"] == [
        {
            "group": "active",
            "error": "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.",
        }
    ]


# ---------------------------------------------------------------------------------------- delete-offsets


def test_delete_offsets_success(admin: FakeAdmin) -> None:
    r = run(admin, "--delete-offsets", "--group", "idle", "--topic", "orders")
    assert r.out.startswith("Request succeeded for deleting offsets from group idle.\n\nTOPIC ")
    assert [line.split() for line in r.out.splitlines()[3:]] == [
        ["orders", "0", "Successful"],
        ["orders", "1", "Successful"],
        ["orders", "2", "Successful"],
    ]
    assert admin.groups["idle"].offsets == {}


def test_delete_offsets_partition_errors(admin: FakeAdmin) -> None:
    r = run(
        admin,
        "--delete-offsets",
        "--group",
        "active",
        "--topic",
        "orders:0",
        "--topic",
        "audit",
        "--topic",
        "nope",
    )
    assert r.out.startswith("\nError: Encountered some partition-level error, see the follow-up details.\n")
    rows = [line.split(None, 2) for line in r.out.splitlines()[4:]]
    assert rows == [
        ["audit", "0", "Successful     "],
        [
            "nope",
            "-",
            f"Error: {ERRORS}UnknownTopicOrPartitionException: This server does not host this "
            "topic-partition.",
        ],
        [
            "orders",
            "0",
            f"Error: {ERRORS}GroupSubscribedToTopicException: Deleting offsets of a topic is "
            "forbidden while the consumer group is actively subscribed to it.",
        ],
    ]


def test_delete_offsets_of_an_unknown_group(admin: FakeAdmin) -> None:
    r = run(admin, "--delete-offsets", "--group", "nope", "--topic", "audit")
    assert r.out.startswith("\nError: The group id does not exist.\n")
    assert (
        "audit           0          Error: org.apache.kafka.common.errors.GroupIdNotFoundException" in r.out
    )
    doc = json.loads(
        run(admin, "--delete-offsets", "--group", "nope", "--topic", "audit", "--output", "json").out
    )
    assert doc["error"] == "The group id does not exist."
    assert doc["partitions"][0]["error"].endswith("GroupIdNotFoundException: The group id does not exist.")


def test_delete_offsets_takes_one_group(admin: FakeAdmin) -> None:
    r = run(admin, "--delete-offsets", "--group", "a", "--group", "b", "--topic", "audit")
    assert r.out == (f"{FAILED}Found multiple arguments for option group, but you asked for only one\n")


# ---------------------------------------------------------------------------------------- connectivity


def test_unreachable_broker_is_one_line_and_exit_code_1() -> None:
    admin = FakeAdmin()
    admin.unreachable = True
    r = run(admin, "--list")
    assert (r.code, r.out, r.err) == (
        1,
        "",
        "Error: cannot connect to the broker at 127.0.0.1:9092 (connection refused)\n",
    )
