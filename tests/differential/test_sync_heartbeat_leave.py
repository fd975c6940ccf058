"""SyncGroup, Heartbeat and LeaveGroup (docs/design/group-semantics.md §8.3, §8.4, §8.5, §14.1, §14.2,
§14.9)."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    AUTO,
    E,
    Ref,
    Scenario,
    describe,
    form_group,
    heartbeat,
    join,
    leave,
    sync,
    wait,
)
from differential.harness import check_result, params

SYNC = [
    Scenario(
        "sync-invalid-group-id",
        [
            sync("a", group="", gen=1, member="a-1", protocol_name="range", expect=E.INVALID_GROUP_ID),
            sync("a", 0, group="", gen=1, member="a-1", expect=E.INVALID_GROUP_ID),
            sync(
                "a", group="", gen=1, member="a-1", expect=E.INCONSISTENT_GROUP_PROTOCOL
            ),  # v5: null name first
        ],
        covers=("8.3",),
    ),
    Scenario(
        "sync-unknown-group",
        [
            sync("a", gen=1, member="a-1", protocol_name="range", expect=E.UNKNOWN_MEMBER_ID),
            describe(state="Dead"),
        ],
        covers=("8.3",),
    ),
    Scenario(
        "sync-empty-group-before-identity",
        [
            join("a", expect=E.MEMBER_ID_REQUIRED),  # creates the Empty group
            sync("a", gen=0, protocol_name="range", expect=E.UNKNOWN_MEMBER_ID),
            sync("x", gen=5, member="x-1", instance="x", protocol_name="nope", expect=E.UNKNOWN_MEMBER_ID),
            sync("x", 2, gen=5, member="x-1", expect=E.UNKNOWN_MEMBER_ID),
        ],
        covers=("8.3", "14.9"),
    ),
    Scenario(
        "sync-identity-generation-protocol-order",
        [
            *form_group("a", "b", static=True),
            sync("b", member="b-unknown", instance=None, expect=E.UNKNOWN_MEMBER_ID),
            sync("b", member="b-unknown", expect=E.FENCED_INSTANCE_ID),
            sync("b", member=Ref("a"), instance="zz", expect=E.UNKNOWN_MEMBER_ID),
            sync("b", gen=9, protocol_name="nope", expect=E.ILLEGAL_GENERATION),  # generation before protocol
            sync("b", protocol_type="connect", expect=E.INCONSISTENT_GROUP_PROTOCOL),
            sync("b", protocol_name="roundrobin", expect=E.INCONSISTENT_GROUP_PROTOCOL),
            sync("b", protocol_type=None, expect=E.INCONSISTENT_GROUP_PROTOCOL),  # mandatory in v5
            sync("b", protocol_name=None, expect=E.INCONSISTENT_GROUP_PROTOCOL),
            sync("b", 4, expect=E.NONE),  # v4 carries neither
            sync("b", 2, instance=AUTO, expect=E.NONE),  # v2 has no instance id: identity by member id
        ],
        covers=("8.3", "6"),
    ),
    Scenario(
        "sync-preparing-rebalance",
        [
            *form_group("a", "b"),
            join("a", park=True),
            sync("b", expect=E.REBALANCE_IN_PROGRESS),
            join("b", park=True),
            wait("a"),
            wait("b"),
        ],
        covers=("8.3",),
    ),
    Scenario(
        "sync-leader-assignment-missing-and-unknown-members",
        [
            *form_group("a", "b", "c"),
            join("a", park=True),
            join("b", park=True),
            join("c", park=True),
            wait("a"),
            wait("b"),
            wait("c"),
            sync("b", park=True, assign={"b": {"t": [0, 1, 2]}}),  # a follower's assignments are ignored
            sync("a", assign={"a": {"t": [0, 1]}}, raw_assign=[("zz-unknown", b"\x00\x00")]),
            wait("b"),
            sync("c", expect=E.NONE),  # Stable: the stored (empty) assignment at once
            describe(state="Stable"),
        ],
        covers=("8.3", "5"),
    ),
    Scenario(
        "sync-stable-returns-stored-assignment",
        [
            *form_group("a", "b"),
            sync("b", expect=E.NONE),
            sync("a", assign={"a": {"t": [2]}}, expect=E.NONE),
            describe(),
        ],
        covers=("8.3",),
    ),
]

HEARTBEAT = [
    Scenario(
        "heartbeat-validation-order",
        [
            heartbeat("a", group="", gen=1, member="a-1", expect=E.INVALID_GROUP_ID),
            heartbeat("a", gen=1, member="a-1", expect=E.UNKNOWN_MEMBER_ID),  # unknown group
            *form_group("a", "b", static=True),
            heartbeat("b", member="b-unknown", expect=E.FENCED_INSTANCE_ID),
            heartbeat("b", member="b-unknown", instance=None, expect=E.UNKNOWN_MEMBER_ID),
            heartbeat("b", instance="zz", expect=E.UNKNOWN_MEMBER_ID),
            heartbeat("b", gen=7, expect=E.ILLEGAL_GENERATION),
            heartbeat("b", 0, gen=7, expect=E.ILLEGAL_GENERATION),
            heartbeat("b", 2, expect=E.NONE),
        ],
        covers=("8.4", "6"),
    ),
    Scenario(
        "heartbeat-by-state",
        [
            join("a", group="p", expect=E.MEMBER_ID_REQUIRED),
            heartbeat("a", group="p", gen=0, expect=E.UNKNOWN_MEMBER_ID),  # Empty; pending is no member
            heartbeat("a", group="p", gen=-1, member="", expect=E.UNKNOWN_MEMBER_ID),
            *form_group("b", "c"),
            heartbeat("b", expect=E.NONE),  # Stable
            join("b", park=True),
            heartbeat("c", expect=E.REBALANCE_IN_PROGRESS),  # PreparingRebalance, old generation valid
            heartbeat("c", gen=3, expect=E.ILLEGAL_GENERATION),  # the next generation does not exist yet
            join("c", park=True),
            wait("b"),
            wait("c"),
            heartbeat("c", expect=E.NONE),  # CompletingRebalance: NONE (§14.1)
            heartbeat("c", gen=2, expect=E.ILLEGAL_GENERATION),
            leave("b", expect=E.NONE),
            leave("c", expect=E.NONE),
            heartbeat("c", expect=E.UNKNOWN_MEMBER_ID),  # Empty
            describe(state="Empty"),
        ],
        covers=("8.4", "14.1", "14.2"),
    ),
]

LEAVE = [
    Scenario(
        "leave-invalid-and-unknown-group",
        [
            leave("a", 0, members=[("a-1", None)], group="", expect=E.INVALID_GROUP_ID),
            leave("a", 5, members=[("a-1", None)], group="", expect=E.INVALID_GROUP_ID),
            leave("a", 0, members=[("a-1", None)], expect=E.UNKNOWN_MEMBER_ID),
            leave("a", 2, members=[("a-1", None)], expect=E.UNKNOWN_MEMBER_ID),
            leave("a", 3, members=[("a-1", None), ("", "i")], expect=E.UNKNOWN_MEMBER_ID),
            leave("a", 5, members=[("a-1", None)], reason="bye", expect=E.UNKNOWN_MEMBER_ID),
        ],
        covers=("8.5",),
    ),
    Scenario(
        "leave-batch-static-and-dynamic",
        [
            *form_group("a", "b", "c", static=True),
            join("d", expect=E.MEMBER_ID_REQUIRED),  # d stays pending
            leave(
                "x",
                3,
                members=[
                    ("", "a"),  # static member by instance id alone
                    (Ref("c"), "b"),  # instance b belongs to another member: fenced
                    ("bogus", None),
                    ("", "nobody"),
                    (Ref("d"), None),  # a pending member is removable
                    (Ref("b"), "b"),
                ],
            ),
            describe(state="PreparingRebalance"),
            heartbeat("c", expect=E.REBALANCE_IN_PROGRESS),
            join("c", park=True),
            wait("c"),
        ],
        covers=("8.5", "6", "5"),
    ),
    Scenario(
        "leave-pending-member-only",
        [
            *form_group("a"),
            join("b", expect=E.MEMBER_ID_REQUIRED),
            leave("b", expect=E.NONE),
            describe(),
            heartbeat("a"),
        ],
        covers=("8.5",),
    ),
    Scenario(
        "leave-parked-join-answered-unknown-member",
        [
            *form_group("a", "b", "c"),
            join("a", park=True),
            join("b", park=True),
            leave("x", members=[(Ref("b"), None)], expect=E.NONE),
            wait("b"),
            join("c", park=True),
            wait("a"),
            wait("c"),
        ],
        covers=("8.5", "3"),
    ),
    Scenario(
        "leave-leader-moves-and-last-leave-empties",
        [
            *form_group("a", "b"),
            leave("a", expect=E.NONE),
            join("b", park=True),
            wait("b"),
            sync("b", assign={"b": {"t": [0, 1, 2]}}),
            leave("b", 1, expect=E.NONE),
            describe(state="Empty"),
            join("c", expect=E.MEMBER_ID_REQUIRED),
            join("c", expect=E.NONE),  # generation continues after the Empty bump
        ],
        covers=("8.5", "5", "2"),
    ),
    Scenario(
        "sync-leader-completes-before-follower",
        [
            *form_group("a", "b"),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("a", park=True, assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("a"),
            sync("b", park=False, expect=E.NONE),
        ],
        covers=("8.3",),
    ),
    Scenario(
        "leave-completing-rebalance-parked-sync",
        [
            *form_group("a", "b"),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("b", park=True),
            leave("a", expect=E.NONE),  # rebalance: b's parked SyncGroup gets REBALANCE_IN_PROGRESS
            wait("b"),
            join("b", park=True),
            wait("b"),
        ],
        covers=("8.5", "8.3"),
    ),
]

SCENARIOS = [*SYNC, *HEARTBEAT, *LEAVE]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_sync_heartbeat_leave(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
