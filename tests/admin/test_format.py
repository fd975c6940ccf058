"""Table and CSV layouts against golden output captured from Kafka 4.3.1's kafka-consumer-groups.sh.

Each ``golden/*`` file is the tool's stdout for a real group; the rows here carry the same data.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from regroup.admin.format import (
    GroupInformation,
    MemberRow,
    OffsetRow,
    assignment_string,
    format_delete_groups,
    format_delete_offsets,
    format_list_table,
    format_members,
    format_offsets,
    format_reset_csv,
    format_reset_plan,
    format_state,
    parse_reset_csv_line,
)
from regroup.client.types import TopicPartition

GOLDEN = Path(__file__).parent / "golden"

STATIC = "inst-0-41dcf614-a3b2-4306-92e5-081749572b42"
DYNAMIC = "client-1-23b2ab55-88e0-405a-9317-58579a2c312b"
HOST = "/127.0.0.1"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def stable_offset_rows() -> list[OffsetRow]:
    dynamic = [("t1", 0, 10), ("t1", 1, 10), ("t2", 0, 5)]
    rows = [OffsetRow("g-stable", t, p, None, None, end, DYNAMIC, HOST, "client-1") for t, p, end in dynamic]
    rows.append(OffsetRow("g-stable", "t1", 2, None, 1, 10, STATIC, HOST, "client-0"))
    return rows


@pytest.mark.parametrize(
    ("verbose", "name"), [(False, "describe_offsets.txt"), (True, "describe_offsets_verbose.txt")]
)
def test_offsets_table(verbose: bool, name: str) -> None:
    assert format_offsets(stable_offset_rows(), verbose) == golden(name)


def test_lag_needs_both_offsets() -> None:
    row = OffsetRow("g", "t", 0, None, 3, 10, "-", "-", "-")
    assert row.lag == 7
    assert OffsetRow("g", "t", 0, None, None, 10, "-", "-", "-").lag is None
    assert OffsetRow("g", "t", 0, None, 3, None, "-", "-", "-").lag is None
    assert OffsetRow("g", "t", 0, None, -1, 10, "-", "-", "-").lag is None


def stable_members() -> list[MemberRow]:
    return [
        MemberRow("g-stable", STATIC, HOST, "client-0", "inst-0", (tp("t1", 2),)),
        MemberRow("g-stable", DYNAMIC, HOST, "client-1", "", (tp("t2", 0), tp("t1", 1), tp("t1", 0))),
    ]


@pytest.mark.parametrize(
    ("verbose", "name"), [(False, "describe_members.txt"), (True, "describe_members_verbose.txt")]
)
def test_members_table_with_a_static_member(verbose: bool, name: str) -> None:
    assert format_members(stable_members(), verbose) == golden(name)


def test_members_table_of_a_consumer_protocol_group() -> None:
    partitions = (tp("t1", 0), tp("t1", 1), tp("t1", 2))
    member = MemberRow("g-848", "uvD2RAUUROC2qXT/wDP55A", HOST, "c848", "", partitions, partitions, 6, 6)
    assert format_members([member], verbose=True) == golden("describe_members_verbose_consumer.txt")


def test_members_header_of_an_empty_group() -> None:
    assert format_members([], verbose=True, widths_from_rows=False) == golden(
        "describe_members_empty_verbose.txt"
    )


def test_state_tables() -> None:
    stable = GroupInformation("g-stable", "127.0.0.1", 59773, 1, "range", "Stable", 2)
    assert format_state(stable, verbose=True) == golden("describe_state_verbose.txt")
    empty = GroupInformation("g-empty", "127.0.0.1", 59773, 1, "", "Empty", 0)
    assert format_state(empty, verbose=False) == golden("describe_state_empty.txt")
    consumer = GroupInformation("g-848", "127.0.0.1", 59773, 1, "uniform", "Stable", 1, 6, 6)
    assert format_state(consumer, verbose=True) == golden("describe_state_verbose_consumer.txt")


def test_list_table_pads_to_the_longest_group_plus_ten() -> None:
    rows = [
        (g, "Consumer" if g == "g-848" else "Classic", "Stable" if g in ("g-848", "g-stable") else "Empty")
        for g in (
            "g-time",
            "a-group",
            "my group",
            "g-848",
            "g-empty",
            "e1",
            "d1",
            "e2",
            "d2",
            "g-stable",
            "d3",
        )
    ]
    assert format_list_table(rows, include_type=True, include_state=True) == golden("list_state_type.txt")
    assert format_list_table([("a-very-long-group-name-here", "Classic", "Empty")], False, True) == (
        f"{'GROUP':<37} {'STATE':<20}\n{'a-very-long-group-name-here':<37} {'Empty':<20}\n"
    )


def test_assignment_string_sorts_topics_and_partitions() -> None:
    assert assignment_string([tp("b", 3), tp("a", 1), tp("b", 0), tp("a", 0)]) == "a:0,1;b:0,3"
    assert assignment_string([]) == "-"


def test_reset_plan_in_hashmap_order() -> None:
    # Insertion order is irrelevant unless two keys share a bucket: the layout follows the hashes.
    plan = {
        "d1": {tp("t1", 0): 10},
        "d2": {tp("t2", 0): 5, tp("t1", 1): 10},
        "d3": {tp("t2", 0): 5},
        "e1": {tp("t2", 0): 5, tp("t1", 0): 10, tp("t1", 1): 10},
        "e2": {tp("t2", 0): 5},
        "a-group": {tp("t1", 2): 10},
        "g-empty": {tp("t1", 0): 10, tp("t2", 0): 5, tp("t1", 1): 10},
        "g-time": {tp("tt", 0): 7},
        "my group": {tp("t2", 0): 5},
    }
    expected = golden("reset_plan_all_groups.txt")
    table = expected[expected.index("\nGROUP ") :]
    refused = {"g-848": {}, "g-stable": {}}
    assert format_reset_plan({**plan, **refused}) == table


def test_reset_plan_header_only_when_a_group_was_considered() -> None:
    assert format_reset_plan({}) == "\n"
    assert format_reset_plan({"g": {}}) == f"\n{'GROUP':<15} {'TOPIC':<15} {'PARTITION':<10} NEW-OFFSET\n"


def test_reset_export_csv() -> None:
    plan = {
        "g-empty": {tp("t1", 0): 10, tp("t1", 1): 10, tp("t2", 0): 5},
        "my group": {tp("t2", 0): 5},
        "a-group": {tp("t1", 2): 10},
    }
    assert format_reset_csv(plan, with_group=True) == golden("reset_export_groups.csv")
    single = {"g-empty": {tp("t1", 0): 3, tp("t1", 1): 10, tp("t2", 0): 2}}
    assert format_reset_csv(single, with_group=False) == golden("reset_export_single.csv")


def test_reset_csv_quotes_like_jackson() -> None:
    # As Kafka 4.3.1 exported groups 'q"q', 'x,y', 'a-b' and 'a+b'.
    plan = {g: {tp("t2", 0): 5} for g in ("x,y", "a+b", "a-b", 'q"q')}
    assert (
        format_reset_csv(plan, with_group=True) == '"q""q",t2,0,5\n"x,y",t2,0,5\na-b,t2,0,5\n"a+b",t2,0,5\n\n'
    )


@pytest.mark.parametrize(
    ("line", "with_group", "parsed"),
    [
        ("t1,0,5", False, ("", "t1", 0, 5)),
        ("g,t1,0,5", True, ("g", "t1", 0, 5)),
        ('"my group",t2,0,4', True, ("my group", "t2", 0, 4)),
        # Jackson fills missing trailing columns with defaults.
        ("t1,0,1", True, ("t1", "0", 1, 0)),
        ("garbage", False, ("", "garbage", 0, 0)),
    ],
)
def test_reset_csv_lines(line: str, with_group: bool, parsed: tuple[str, str, int, int]) -> None:
    assert parse_reset_csv_line(line, with_group) == parsed


@pytest.mark.parametrize(
    ("line", "with_group"), [("g,t1,0,5", False), ("t1,x,5", False), ("g,t,0,5,9", True)]
)
def test_reset_csv_rejects(line: str, with_group: bool) -> None:
    with pytest.raises(ValueError, match=r"too many|not a number"):
        parse_reset_csv_line(line, with_group)


def test_delete_offsets_table() -> None:
    rows: list[tuple[str, int | None, str | None]] = [
        (
            "t1",
            0,
            "org.apache.kafka.common.errors.GroupSubscribedToTopicException: Deleting offsets of a topic is "
            "forbidden while the consumer group is actively subscribed to it.",
        ),
        (
            "nope-topic",
            None,
            "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host this "
            "topic-partition.",
        ),
    ]
    expected = golden("delete_offsets_subscribed.txt")
    assert (
        "\nError: Encountered some partition-level error, see the follow-up details.\n"
        + format_delete_offsets(rows)
        == expected
    )
    assert format_delete_offsets([("t2", 0, None)]) == (
        f"\n{'TOPIC':<15} {'PARTITION':<10} {'STATUS':<15}\n{'t2':<15} {'0':<10} {'Successful':<15}\n"
    )


def test_delete_groups_messages() -> None:
    assert (
        format_delete_groups(["g1", "g2"], [])
        == "Deletion of requested consumer groups ('g1', 'g2') was successful.\n"
    )
    error = "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty."
    assert format_delete_groups(["a-group", "g-empty"], [("g-stable", error)]) == (
        "\nError: Deletion of some consumer groups failed:\n"
        f"* Group 'g-stable' could not be deleted due to: {error}\n"
        "\nThese consumer groups were deleted successfully: 'a-group', 'g-empty'\n"
    )
    assert format_delete_groups([], [("g", error)]) == (
        "\nError: Deletion of some consumer groups failed:\n"
        f"* Group 'g' could not be deleted due to: {error}\n"
    )
