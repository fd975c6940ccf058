"""JoinGroup (docs/design/group-semantics.md §8.2, §4, §5, §14.4, §14.9): validation order, the
MEMBER_ID_REQUIRED round trip, known and new members in every state, protocol selection, and a full
lifecycle at every version."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    E,
    Ref,
    Scenario,
    describe,
    form_group,
    heartbeat,
    join,
    leave,
    list_groups,
    subscription,
    sync,
    wait,
)
from differential.harness import check_result, params

RANGE = ("range", subscription("t"))
RR = ("roundrobin", subscription("t"))
FOO = ("foo", subscription("t"))

# Request versions a client of each JoinGroup version uses for the other group APIs.
_ERA: dict[int, tuple[int, int, int, int]] = {
    # join: (sync, heartbeat, leave, describe)
    0: (0, 0, 0, 0),
    1: (0, 0, 0, 0),
    2: (1, 1, 1, 1),
    3: (2, 2, 2, 2),
    4: (2, 2, 2, 2),
    5: (3, 3, 3, 4),
    6: (4, 4, 4, 5),
    7: (5, 4, 4, 5),
    8: (5, 4, 5, 5),
    9: (5, 4, 5, 5),
}


def lifecycle(v: int) -> Scenario:
    sv, hv, lv, dv = _ERA[v]
    return Scenario(
        f"join-lifecycle-v{v}",
        [
            *form_group("a", "b", v=v, sync_v=sv),
            heartbeat("a", hv, expect=E.NONE),
            heartbeat("b", hv, expect=E.NONE),
            describe(dv, state="Stable"),
            join("b", v, reason="same protocols" if v >= 8 else None),  # follower, same protocols: at once
            leave("b", lv, expect=E.NONE),
            heartbeat("a", hv, expect=E.REBALANCE_IN_PROGRESS),
            describe(dv, state="PreparingRebalance"),
            join("a", v),  # everybody left has joined: completes at once
            sync("a", sv, assign={"a": {"t": [0, 1, 2]}}),
            describe(dv, state="Stable"),
            leave("a", lv, expect=E.NONE),
            describe(dv, state="Empty"),
            join("a", v, expect=E.UNKNOWN_MEMBER_ID),  # a known id on an Empty group
        ],
        covers=("8.2", "8.3", "8.4", "8.5", "8.10", "14.2"),
    )


SCENARIOS = [
    *[lifecycle(v) for v in range(10)],
    Scenario(
        "join-invalid-group-id",
        [
            join("a", 9, group="", expect=E.INVALID_GROUP_ID),
            join("a", 0, group="", expect=E.INVALID_GROUP_ID),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-session-timeout-bounds",
        [
            join("a", session=999, expect=E.INVALID_SESSION_TIMEOUT),
            join("a", session=1800001, expect=E.INVALID_SESSION_TIMEOUT),
            describe(state="Dead"),  # the group was not created
            join("a", session=1000, rebalance=1, expect=E.MEMBER_ID_REQUIRED),  # no bound on rebalance
            join("a", session=1800000, expect=E.NONE),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-unknown-group-with-member-id",
        [join("a", member="a-0", expect=E.UNKNOWN_MEMBER_ID), describe(state="Dead"), list_groups()],
        covers=("8.2", "8.10"),
    ),
    Scenario(
        "join-member-id-required-v4",
        [
            join("a", 4, expect=E.MEMBER_ID_REQUIRED),
            describe(state="Empty"),
            list_groups(),
            join("b", 4, expect=E.MEMBER_ID_REQUIRED),
            join("a", 4, expect=E.NONE),  # completes with a; b is still pending
        ],
        covers=("8.2", "14.4"),
    ),
    Scenario(
        "join-v3-adds-members-immediately",
        [
            join("a", 3, expect=E.NONE),
            sync("a", 2, assign={"a": {"t": [0, 1, 2]}}),
            join("b", 3, park=True),
            join("a", 3, park=True),
            wait("b"),
            wait("a"),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-inconsistent-protocols",
        [
            join("a", protocols=[], expect=E.INCONSISTENT_GROUP_PROTOCOL),
            join("x", protocol_type="", expect=E.INCONSISTENT_GROUP_PROTOCOL),
            *form_group("b"),
            join("c", protocol_type="connect", expect=E.INCONSISTENT_GROUP_PROTOCOL),
            join("c", protocols=[RR], expect=E.INCONSISTENT_GROUP_PROTOCOL),
            join(
                "c", member="c-unknown", protocols=[RR], expect=E.INCONSISTENT_GROUP_PROTOCOL
            ),  # 23 before 25
            join("c", member="c-unknown", expect=E.UNKNOWN_MEMBER_ID),
            join("b", protocols=[RR], expect=E.INCONSISTENT_GROUP_PROTOCOL),  # its own old protocol counts
            describe(state="Stable"),
        ],
        covers=("8.2", "4", "14.9"),
    ),
    Scenario(
        "join-protocol-selection-majority",
        [
            join("a", protocols=[RANGE, RR]),
            join("a", protocols=[RANGE, RR]),
            sync("a", assign={"a": {"t": [0, 1, 2]}}),
            join("b", protocols=[RR, RANGE]),
            join("b", protocols=[RR, RANGE], park=True),
            join("c", protocols=[RR, RANGE]),
            join("c", protocols=[RR, RANGE], park=True),
            join("a", protocols=[RANGE, RR], park=True),
            wait("a"),
            wait("b"),
            wait("c"),
        ],
        covers=("4",),
    ),
    Scenario(
        "join-protocol-selection-common-only",
        [
            join("a", protocols=[RANGE, RR]),
            join("a", protocols=[RANGE, RR]),
            sync("a", assign={"a": {"t": [0, 1, 2]}}),
            join("b", protocols=[RR, FOO]),
            join("b", protocols=[RR, FOO], park=True),
            join("a", protocols=[RANGE, RR], park=True),
            wait("a"),
            wait("b"),
            sync("b", park=True),
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("b"),
            describe(state="Stable"),
        ],
        covers=("4",),
    ),
    Scenario(
        "join-known-member-preparing-rebalance-updates-metadata",
        [
            *form_group("a", "b"),
            join("a", park=True),
            describe(state="PreparingRebalance"),
            join("b", protocols=[("range", subscription("t", "u"))], park=True),
            wait("a"),
            wait("b"),
            describe(state="CompletingRebalance"),
        ],
        covers=("8.2", "8.10", "14.15"),
    ),
    Scenario(
        "join-known-member-completing-rebalance-same-protocols",
        [
            *form_group("a", "b"),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            join("b", expect=E.NONE),  # same generation at once, no member list
            join("a", expect=E.NONE),  # the leader gets the member list again
            describe(state="CompletingRebalance"),
            heartbeat("a", expect=E.NONE),  # §14.1
            sync("b", park=True),
            sync("a", assign={"a": {"t": [0, 1]}, "b": {"t": [2]}}),
            wait("b"),
        ],
        covers=("8.2", "14.1"),
    ),
    Scenario(
        "join-known-member-completing-rebalance-changed-protocols",
        [
            *form_group("a", "b"),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            join("b", protocols=[("range", subscription("t", "u"))], park=True),
            describe(state="PreparingRebalance"),
            join("a", park=True),
            wait("b"),
            wait("a"),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-stable-leader-rejoin-rebalances",
        [
            *form_group("a", "b"),
            join("a", park=True),
            describe(state="PreparingRebalance"),
            heartbeat("b", expect=E.REBALANCE_IN_PROGRESS),
            join("b", park=True),
            wait("a"),
            wait("b"),
        ],
        covers=("8.2", "5"),
    ),
    Scenario(
        "join-stable-follower-same-protocols-immediate",
        [
            *form_group("a", "b"),
            join("b", expect=E.NONE),
            describe(state="Stable"),
            heartbeat("a", expect=E.NONE),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-stable-follower-changed-protocols-rebalances",
        [
            *form_group("a", "b"),
            join("b", protocols=[("range", subscription("u"))], park=True),
            describe(state="PreparingRebalance"),
            join("a", park=True),
            wait("b"),
            wait("a"),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-new-member-preparing-rebalance",
        [
            *form_group("a", "b"),
            join("a", park=True),
            join("c", expect=E.MEMBER_ID_REQUIRED),
            join("c", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            wait("c"),
        ],
        covers=("8.2",),
    ),
    Scenario(
        "join-new-member-completing-rebalance",
        [
            *form_group("a", "b"),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("b", park=True),
            join("c", expect=E.MEMBER_ID_REQUIRED),
            join("c", park=True),  # rebalance: b's parked SyncGroup gets REBALANCE_IN_PROGRESS
            wait("b"),
            describe(state="PreparingRebalance"),
            join("a", park=True),
            join("b", park=True),
            wait("c"),
            wait("a"),
            wait("b"),
        ],
        covers=("8.2", "8.3"),
    ),
    Scenario(
        "join-pending-member-rejoin-with-other-id",
        [
            join("a", expect=E.MEMBER_ID_REQUIRED),
            join("a", member=Ref("a"), expect=E.NONE),
            join("b", expect=E.MEMBER_ID_REQUIRED),
            join("c", member=Ref("b"), park=True),  # any connection may use a pending id
            join("a", park=True),
            wait("c"),
            wait("a"),
        ],
        covers=("8.2",),
    ),
]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_join(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
