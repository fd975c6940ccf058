"""Timers on real time (docs/design/group-semantics.md §3, §7, §10, §14.3-§14.7, §14.12): session expiry,
pending members, the join-phase deadline, the pending-sync timeout, the initial rebalance delay,
group.max.size and offset/group expiration. Timeouts are short (1.5-2.5 s) and every probe keeps a margin
of at least half a second from the deadline it observes."""

from __future__ import annotations

import pytest

from differential.conftest import DifferentialRunner
from differential.dsl import (
    E,
    Scenario,
    commit,
    describe,
    fetch_offsets,
    form_group,
    heartbeat,
    join,
    leave,
    list_groups,
    sleep,
    sync,
    wait,
)
from differential.harness import check_result, params

ALL_T = {"t": [0, 1, 2]}

SCENARIOS = [
    Scenario(
        "timer-session-expiry-removes-member",
        [
            *form_group("a", "b", session={"b": 2000}),
            heartbeat("b", expect=E.NONE),
            sleep(3.0),
            heartbeat("a", expect=E.REBALANCE_IN_PROGRESS),
            describe(state="PreparingRebalance"),
            join("a", expect=E.NONE),  # b is gone: the join phase completes at once
            heartbeat("b", expect=E.UNKNOWN_MEMBER_ID),
        ],
        covers=("3", "8.4"),
    ),
    Scenario(
        "timer-leader-session-expiry-moves-leader",
        [
            *form_group("a", "b", session={"a": 2000}),
            sleep(3.0),
            heartbeat("b", expect=E.REBALANCE_IN_PROGRESS),
            join("b", expect=E.NONE),
        ],
        covers=("3", "5"),
    ),
    Scenario(
        "timer-last-member-expiry-empties-group",
        [
            *form_group("a", session=2000),
            sleep(3.0),
            describe(state="Empty"),
            heartbeat("a", expect=E.UNKNOWN_MEMBER_ID),
            join("a", expect=E.UNKNOWN_MEMBER_ID),
        ],
        covers=("3", "2"),
    ),
    Scenario(
        "timer-pending-member-blocks-join-until-expiry",
        [
            *form_group("a"),
            join("b", member="", session=2500, expect=E.MEMBER_ID_REQUIRED),
            join("a", park=True),  # the leader re-joins; pending b blocks completion
            sleep(1.0),
            describe(state="PreparingRebalance"),
            wait("a"),  # completes when b's pending id expires, with a alone
            join("b", expect=E.UNKNOWN_MEMBER_ID),  # the expired pending id
        ],
        covers=("3", "14.4"),
    ),
    Scenario(
        "timer-join-deadline-evicts-dynamic-members",
        [
            *form_group("a", "b", rebalance=2000),
            join("a", park=True),
            sleep(1.0),
            describe(state="PreparingRebalance"),
            wait("a"),  # at the rebalance timeout, without b
            heartbeat("b", expect=E.UNKNOWN_MEMBER_ID),
            sync("a", assign={"a": ALL_T}),
        ],
        covers=("3", "14.6"),
    ),
    Scenario(
        "timer-join-deadline-keeps-static-members",
        [
            *form_group("a", "b", rebalance=2000, static=True),
            join("a", park=True),
            wait("a"),  # at the rebalance timeout: b is kept and listed to the leader
            heartbeat("b", expect=E.ILLEGAL_GENERATION),
            join("b", expect=E.NONE),  # CompletingRebalance, same protocols: answered at once
            sync("b", park=True),
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("b"),
            describe(state="Stable"),
        ],
        covers=("3", "6", "14.6"),
    ),
    Scenario(
        "timer-parked-member-exempt-from-session-expiry",
        [
            *form_group("a", "b", session={"a": 1500}, rebalance=5000),
            join("a", park=True),
            sleep(2.5),  # past a's session timeout; a is parked, not new
            describe(state="PreparingRebalance"),
            join("b", park=True),
            wait("a"),
            wait("b"),
        ],
        covers=("3", "14.5"),
    ),
    Scenario(
        "timer-pending-sync-timeout-after-stable",
        [
            *form_group("a", "b", rebalance=2000),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),  # Stable; b never syncs
            describe(state="Stable"),
            sleep(3.0),
            heartbeat("a", expect=E.REBALANCE_IN_PROGRESS),
            heartbeat("b", expect=E.UNKNOWN_MEMBER_ID),
            join("a", expect=E.NONE),
        ],
        covers=("3", "14.7"),
    ),
    Scenario(
        "timer-pending-sync-timeout-removes-everybody",
        [
            *form_group("a", rebalance=2000),
            join("a", park=True),
            wait("a"),
            sleep(3.0),  # nobody syncs: removed, the group is left empty
            describe(state="Empty"),
        ],
        covers=("3",),
    ),
    Scenario(
        "timer-commit-rearms-session",
        [
            *form_group("a", "b", session={"b": 2000}),
            commit("b", offsets={("t", 1): 1}, expect=E.NONE),
            sleep(1.2),
            commit("b", offsets={("t", 1): 2}, expect=E.NONE),  # an accepted commit re-arms the session
            sleep(1.2),
            heartbeat("b", expect=E.NONE),
            heartbeat("a", expect=E.NONE),
        ],
        covers=("3", "8.6"),
    ),
    Scenario(
        "timer-leader-expires-during-completing-rebalance",
        [
            *form_group("a", "b", session={"a": 2000}),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("b", park=True),  # the leader never syncs and its session runs out
            sleep(1.0),
            describe(state="CompletingRebalance"),
            wait("b"),  # REBALANCE_IN_PROGRESS once a is removed
            join("b", expect=E.NONE),
        ],
        covers=("3", "8.3", "5"),
    ),
    Scenario(
        "timer-parked-sync-exempt-from-session-expiry",
        [
            *form_group("a", "b", session={"b": 1500}),
            join("a", park=True),
            join("b", park=True),
            wait("a"),
            wait("b"),
            sync("b", park=True),
            sleep(2.5),  # past b's session timeout; b is parked in SyncGroup
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("b"),
            heartbeat("b", expect=E.NONE),
        ],
        covers=("3", "14.5"),
    ),
    Scenario(
        "timer-static-member-session-expiry",
        [
            *form_group("a", "b", static=True, session={"b": 2000}),
            sleep(3.0),
            heartbeat("a", expect=E.REBALANCE_IN_PROGRESS),
            join("a", expect=E.NONE),
            join("b2", instance="b", member="", park=True),  # the instance id is free again: a new member
            join("a", park=True),
            wait("b2"),
            wait("a"),
        ],
        covers=("3", "6"),
    ),
    # --- the alternative pair: initial delay 1500 ms, group.max.size 2, expiration checks every second.
    # The check deletes an Empty group without offsets even while a member is pending (between
    # MEMBER_ID_REQUIRED and its second join) or has just left, on both brokers: the first member of a
    # group joins with v3 (no member-id round trip), and nothing probes an Empty group that may be gone.
    Scenario(
        "alt-initial-rebalance-delay-extends",
        [
            join("a", 3, park=True),
            sleep(0.3),
            join("b", expect=E.MEMBER_ID_REQUIRED),
            join("b", park=True),  # within the first window: extends it by one delay
            sleep(1.2),
            describe(state="PreparingRebalance"),  # everybody joined, but the delay never ends early
            wait("a"),
            wait("b"),
            describe(state="CompletingRebalance"),
        ],
        covers=("3", "14.3"),
        alt=True,
    ),
    Scenario(
        "alt-initial-rebalance-budget",
        [
            join("a", 3, rebalance=2000, park=True),  # budget: max(2000 - 1500, 0) = 500 ms
            sleep(0.5),
            join("b", rebalance=2000, expect=E.MEMBER_ID_REQUIRED),
            join("b", rebalance=2000, park=True),  # extends the window by min(1500, 500) only
            sleep(1.4),
            describe(state="CompletingRebalance"),
            wait("a"),
            wait("b"),
        ],
        covers=("3", "14.3"),
        alt=True,
    ),
    Scenario(
        "alt-group-max-size",
        [
            *form_group("a", "b", founder_v=3),
            join("c", expect=E.GROUP_MAX_SIZE_REACHED),  # Stable and full
            join("a", park=True),
            join("c", expect=E.MEMBER_ID_REQUIRED),  # PreparingRebalance: 1 parked join < 2
            join("c", park=True),
            join("b", expect=E.GROUP_MAX_SIZE_REACHED),  # 2 parked joins: the last re-joiner is out
            wait("a"),
            wait("c"),
            heartbeat("b", expect=E.UNKNOWN_MEMBER_ID),
        ],
        covers=("7", "8.2"),
        alt=True,
    ),
    Scenario(
        "alt-expiration-empty-group-without-offsets",
        [
            *form_group("a", founder_v=3),
            leave("a"),
            sleep(2.5),
            describe(state="Dead"),
            list_groups(),
        ],
        covers=("10", "14.12"),
        alt=True,
    ),
    Scenario(
        "alt-expiration-explicit-retention",
        [
            *form_group("a", founder_v=3),
            commit("a", 2, offsets={("t", 0): 1, ("u", 0): 2}, retention=1000),
            commit("a", 8, offsets={("u", 1): 3}),
            sleep(2.5),
            fetch_offsets(topics=None),  # u:0 expired (not subscribed); t:0 is subscribed; u:1 has 7 days
            commit(v=2, offsets={("t", 1): 4}, retention=1000, group="simple"),
            sleep(2.5),
            describe(groups=["simple"], state="Dead"),  # every offset expired: the group is deleted
            fetch_offsets(topics=None, groups=["simple"]),
        ],
        covers=("10", "14.12", "8.6"),
        alt=True,
    ),
    Scenario(
        "alt-expiration-empty-group-keeps-fresh-offsets",
        [
            *form_group("a", founder_v=3),
            commit("a", offsets={("t", 0): 7}),
            leave("a"),
            sleep(2.5),
            describe(state="Empty"),  # offsets younger than the retention: kept
            fetch_offsets(topics=ALL_T),
        ],
        covers=("10", "14.12"),
        alt=True,
    ),
]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_timers(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
