"""Edge cases around the §8 checklists of docs/design/group-semantics.md: unusual but legal inputs that real
clients or tools send."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    E,
    Ref,
    Scenario,
    commit,
    describe,
    fetch_offsets,
    find_coordinator,
    form_group,
    heartbeat,
    join,
    leave,
    list_groups,
    offset_delete,
    sync,
    wait,
)
from differential.harness import check_result, params

SCENARIOS = [
    Scenario(
        "edge-static-join-with-pending-member-id",
        [
            join("a", expect=E.MEMBER_ID_REQUIRED),
            join("a", instance="a"),  # a pending id together with an instance id
            describe(),
        ],
        covers=("6",),
    ),
    Scenario(
        "edge-pending-member-heartbeat-sync-commit",
        [
            *form_group("a"),
            join("b", expect=E.MEMBER_ID_REQUIRED),
            heartbeat("b", gen=1),
            sync("b", gen=1),
            commit("b", offsets={("t", 0): 1}, gen=1),
            leave("b", 1),
            describe(),
        ],
        covers=("8.2", "8.4", "8.3", "8.6", "8.5"),
    ),
    Scenario(
        "edge-commit-odd-offsets",
        [
            commit(offsets={("t", 0): -1, ("t", 1): -5, ("t", 2): 1 << 62}),
            fetch_offsets(topics={"t": [0, 1, 2]}),
            commit(offsets={("u", 0): (1, "a"), ("u", 1): (2, "b")}),
            fetch_offsets(topics={"u": [1, 0, 1]}),
        ],
        covers=("8.6", "8.8"),
    ),
    Scenario(
        "edge-leave-v3-empty-member-list",
        [*form_group("a"), leave("a", 3, members=[]), describe(state="Stable")],
        covers=("8.5",),
    ),
    Scenario(
        "edge-list-groups-unknown-state",
        [*form_group("a"), list_groups(4, states=["Bogus"]), list_groups(4, states=["STABLE", "bogus"])],
        covers=("8.11",),
    ),
    Scenario(
        "edge-sync-duplicate-assignments",
        [
            *form_group("a"),
            join("a", park=True),
            wait("a"),
            sync("a", raw_assign=[(Ref("a"), b"first"), (Ref("a"), b"second"), ("", b"nobody")]),
            describe(),
        ],
        covers=("8.3",),
    ),
    Scenario(
        "edge-offset-delete-preparing-rebalance",
        [
            *form_group("a", "b"),
            commit("a", offsets={("u", 0): 1}),
            join("a", park=True),
            offset_delete(topics={"u": [0], "t": [1]}),
            join("b", park=True),
            wait("a"),
            wait("b"),
            offset_delete(topics={"u": [0], "t": [1]}),
        ],
        covers=("8.9",),
    ),
    Scenario(
        "edge-join-rebalance-timeout-below-session",
        # The group's rebalance timeout is the members' largest, even -1: b's join waits a's 1.5 s.
        [*form_group("a", rebalance=1500, session=6000), join("b", rebalance=-1), describe()],
        covers=("8.2",),
    ),
    Scenario(
        "edge-unicode-group-id",
        [
            join("a", group="grüppe-€-😀", expect=E.MEMBER_ID_REQUIRED),
            join("a", group="grüppe-€-😀", expect=E.NONE),
            commit("a", offsets={("t", 0): (3, "ünïcode ✓")}, group="grüppe-€-😀"),
            fetch_offsets(topics={"t": [0]}, groups=["grüppe-€-😀"]),
            find_coordinator(keys=["grüppe-€-😀"]),
        ],
        covers=("8.1",),
    ),
]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_edges(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
