"""Static membership (docs/design/group-semantics.md §6, §14.8): joins without MEMBER_ID_REQUIRED,
replacement of a member by a new process with the same instance id in every state, fencing of the old
member id."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    E,
    Ref,
    Scenario,
    Step,
    commit,
    describe,
    form_group,
    heartbeat,
    join,
    leave,
    subscription,
    sync,
    wait,
)
from differential.harness import check_result, params

RANGE = ("range", subscription("t"))
RR = ("roundrobin", subscription("t"))


def fenced_old_member(actor: str) -> list[Step]:
    """Every request of a replaced member: FENCED_INSTANCE_ID with its instance id, else UNKNOWN_MEMBER_ID."""
    return [
        heartbeat(actor, expect=E.FENCED_INSTANCE_ID),
        heartbeat(actor, instance=None, expect=E.UNKNOWN_MEMBER_ID),
        heartbeat(actor, 2, expect=E.UNKNOWN_MEMBER_ID),  # v2 cannot carry the instance id
        sync(actor, expect=E.FENCED_INSTANCE_ID),
        commit(actor, offsets={("t", 0): 1}, expect=E.FENCED_INSTANCE_ID),
        commit(actor, 6, offsets={("t", 0): 1}, expect=E.UNKNOWN_MEMBER_ID),
        join(actor, expect=E.FENCED_INSTANCE_ID),
        leave("x", members=[(Ref(actor), actor)], expect=E.FENCED_INSTANCE_ID),
    ]


SCENARIOS = [
    Scenario(
        "static-join-never-member-id-required",
        [
            join("a", 4, expect=E.MEMBER_ID_REQUIRED),
            join("a", 4, expect=E.NONE),
            sync("a", 2, assign={"a": {"t": [0, 1, 2]}}),
            join("b", 5, instance="b", park=True),  # static: added at once, no MEMBER_ID_REQUIRED
            join("a", 4, park=True),
            wait("b"),
            wait("a"),
            describe(),
        ],
        covers=("6", "14.4"),
    ),
    Scenario(
        "static-replace-follower-stable",
        [
            *form_group("a", "b", static=True),
            join("b2", instance="b", member="", expect=E.NONE),  # no rebalance: same generation
            describe(state="Stable"),
            sync("b2", expect=E.NONE),  # the stored assignment of instance b
            *fenced_old_member("b"),
            heartbeat("b2", expect=E.NONE),
        ],
        covers=("6", "14.8", "8.2", "8.3", "8.4", "8.6"),
    ),
    Scenario(
        "static-replace-leader-stable-v9",
        [
            *form_group("a", "b", static=True),
            join("a2", 9, instance="a", member="", expect=E.NONE),  # leader: SkipAssignment + members
            sync("a2", expect=E.NONE),
            describe(state="Stable"),
            heartbeat("b", expect=E.NONE),
        ],
        covers=("6", "5", "14.8"),
    ),
    Scenario(
        "static-replace-leader-stable-v5",
        [
            *form_group("a", "b", static=True, v=5, sync_v=3),
            join("a2", 5, instance="a", member="", expect=E.NONE),  # pre-v9: the old leader id
            sync("a2", 3, expect=E.NONE),
            describe(state="Stable"),
        ],
        covers=("6", "14.8"),
    ),
    Scenario(
        "static-replace-changes-selected-protocol",
        [
            *form_group("a", "b", static=True, protocols=[RANGE, RR]),
            join("b2", instance="b", member="", protocols=[RR], park=True),
            describe(state="PreparingRebalance"),
            join("a", protocols=[RANGE, RR], park=True),
            wait("b2"),
            wait("a"),
        ],
        covers=("6",),
    ),
    Scenario(
        "static-replace-completing-rebalance",
        [
            *form_group("a", "b", static=True),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("b", park=True),
            join("b2", instance="b", member="", park=True),  # always a rebalance here
            wait("b"),  # the old member's parked SyncGroup: FENCED_INSTANCE_ID
            join("a", park=True),
            wait("b2"),
            wait("a"),
        ],
        covers=("6",),
    ),
    Scenario(
        "static-replace-preparing-rebalance",
        [
            *form_group("a", "b", static=True),
            join("a", park=True),
            join("c", instance="c", park=True),
            describe(state="PreparingRebalance"),
            join("b2", instance="b", member="", park=True),  # parked: completes the join phase
            wait("a"),
            wait("c"),
            wait("b2"),
        ],
        covers=("6",),
    ),
    Scenario(
        "static-replace-preparing-rebalance-parked-old-join",
        [
            *form_group("a", "b", static=True),
            join("a", park=True),
            join("b", park=True),  # completes at once: both joined
            wait("a"),
            wait("b"),
            sync("b", park=True),
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("b"),
            join("c", instance="c", park=True),  # PreparingRebalance
            join("b", park=True),  # b re-joins and is parked...
            join("b2", instance="b", member="", park=True),  # ...then replaced: b gets FENCED_INSTANCE_ID
            wait("b"),
            join("a", park=True),
            wait("c"),
            wait("b2"),
            wait("a"),
        ],
        covers=("6",),
    ),
    Scenario(
        "static-unknown-member-id",
        [
            *form_group("a", static=True),
            join("a", member="a-bogus", expect=E.FENCED_INSTANCE_ID),
            join("z", instance="z", member="z-bogus", expect=E.UNKNOWN_MEMBER_ID),
            join("a", expect=E.NONE),  # current id, Stable leader: a rebalance that completes at once
            sync("a", assign={"a": {"t": [1]}}),
            leave("x", members=[("", "a")], expect=E.NONE),  # removal by instance id alone
            describe(state="Empty"),
        ],
        covers=("6", "8.5"),
    ),
]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_static(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
