"""FindCoordinator, DescribeGroups, ListGroups, DeleteGroups and ApiVersions
(docs/design/group-semantics.md §8.1, §8.10-§8.12, §14.11, §14.15)."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    E,
    Scenario,
    api_versions,
    commit,
    delete_groups,
    describe,
    described_as,
    fetch_offsets,
    find_coordinator,
    form_group,
    join,
    leave,
    list_groups,
    sync,
    wait,
)
from differential.harness import check_result, params

FIND = [
    Scenario(
        "find-coordinator-versions",
        [
            *[find_coordinator(v, expect=E.NONE) for v in range(4)],
            *[find_coordinator(v, keys=[None, "x", "=", "=other-group"], expect=E.NONE) for v in range(4, 7)],
        ],
        covers=("8.1",),
    ),
    Scenario(
        "find-coordinator-key-types",
        [
            find_coordinator(3, key_type=7, expect=E.INVALID_REQUEST),
            find_coordinator(5, key_type=7, expect=E.INVALID_REQUEST),
            find_coordinator(4, key_type=2, keys=["=share-key"], expect=E.INVALID_REQUEST),
            find_coordinator(5, key_type=2, keys=["=share-key"], expect=E.INVALID_REQUEST),
        ],
        covers=("8.1",),
    ),
]

DESCRIBE = [
    Scenario(
        "describe-by-state-and-version",
        [
            describe(groups=[None, "nope", ""], state="Dead"),
            describe(6, groups=[None, "nope", ""], state="Dead"),  # v6: GROUP_ID_NOT_FOUND + message
            join("p", expect=E.MEMBER_ID_REQUIRED),
            described_as("Empty"),
            describe(state="Empty"),
            describe(6, state="Empty"),
            *form_group("a", "b", static=True),
            *[describe(v, state="Stable") for v in range(7)],
            join("a", park=True),
            *[describe(v, state="PreparingRebalance") for v in (0, 5, 6)],
            join("b", park=True),
            wait("a"),
            wait("b"),
            *[describe(v, state="CompletingRebalance") for v in (0, 5, 6)],
            leave("x", members=[("", "a"), ("", "b")]),
            *[describe(v, state="Empty") for v in (0, 5, 6)],
        ],
        covers=("8.10", "14.15"),
    ),
    Scenario(
        "describe-authorized-operations",
        [
            *form_group("a"),
            describe(3, include_ops=True),
            describe(5, include_ops=True),
            describe(5, groups=["nope"], include_ops=True),
            describe(6, include_ops=True),
            describe(6, groups=["nope"], include_ops=True),
        ],
        covers=("8.10",),
    ),
    Scenario(
        "describe-simple-group",
        [commit(offsets={("t", 0): 1}), describe(state="Empty"), describe(0, state="Empty")],
        covers=("8.10",),
    ),
]

LIST = [
    Scenario(
        "list-groups-filters",
        [
            *form_group("a", "b"),
            join("c", group="empty", expect=E.MEMBER_ID_REQUIRED),
            commit(offsets={("t", 0): 1}, group="simple"),
            join(
                "d",
                group="connect",
                protocol_type="connect",
                protocols=[("v1", b"")],
                expect=E.MEMBER_ID_REQUIRED,
            ),
            join("d", group="connect", protocol_type="connect", protocols=[("v1", b"")], expect=E.NONE),
            *[list_groups(v) for v in range(6)],
            list_groups(4, states=["stable"]),
            list_groups(4, states=["Empty", "CompletingRebalance"]),
            list_groups(4, states=["PreparingRebalance"]),
            list_groups(5, types=["classic"]),
            list_groups(5, types=["CLASSIC"], states=["empty"]),
            list_groups(5, types=["consumer"]),
            list_groups(5, types=["foo"]),
        ],
        covers=("8.11",),
    ),
]

DELETE = [
    Scenario(
        "delete-groups-by-state",
        [
            *form_group("a"),
            commit("a", offsets={("t", 0): 5, ("u", 1): 6}),
            delete_groups(groups=[None, "nope", None, ""]),  # duplicates collapsed; "" unknown here
            leave("a"),
            *[delete_groups(v, groups=[None]) for v in range(3)],
            describe(state="Dead"),
            fetch_offsets(topics=None),
            fetch_offsets(topics={"t": [0]}),
            list_groups(),
            join("b", expect=E.MEMBER_ID_REQUIRED),
            join("b", expect=E.NONE),  # a fresh group: generation 1 again
        ],
        covers=("8.12", "2"),
    ),
    Scenario(
        "delete-groups-preparing-and-completing",
        [
            *form_group("a", "b"),
            join("a", park=True),
            delete_groups(),
            join("b", park=True),
            wait("a"),
            wait("b"),
            delete_groups(),
            sync("b", park=True),
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("b"),
            delete_groups(),
        ],
        covers=("8.12",),
    ),
    Scenario(
        "delete-simple-group",
        [
            commit(offsets={("t", 0): 5}),
            delete_groups(),
            describe(state="Dead"),
            describe(6, state="Dead"),
            fetch_offsets(topics=None),
        ],
        covers=("8.12",),
    ),
]

# Every §8 API's advertised versions; KIP-848's ConsumerGroupHeartbeat (§8.13) only exists on Kafka.
VERSIONS = [Scenario("api-versions", [api_versions(v) for v in range(4)], covers=("8.1", "8.13"))]

SCENARIOS = [*FIND, *DESCRIBE, *LIST, *DELETE, *VERSIONS]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_admin(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
