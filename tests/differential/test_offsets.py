"""OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete (docs/design/group-semantics.md §8.6-§8.9, §10,
§14.1, §14.10, §14.11, §14.14)."""

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
    form_group,
    join,
    leave,
    list_groups,
    offset_delete,
    subscription,
    sync,
    txn_commit,
    wait,
)
from differential.harness import check_result, params

ALL_T = {"t": [0, 1, 2]}

COMMIT = [
    Scenario(
        "commit-unknown-topic-before-group-validation",
        [
            commit(offsets={("missing", 0): 1}, gen=5, member="zz", expect=E.UNKNOWN_TOPIC_OR_PARTITION),
            commit(offsets={("t", 9): 1}, gen=5, member="zz", expect=E.UNKNOWN_TOPIC_OR_PARTITION),
            describe(state="Dead"),  # nothing reached the coordinator
            commit(offsets={("t", 0): 3, ("t", 9): 4, ("missing", 1): 5}),  # merged per partition
            fetch_offsets(topics={"t": [0, 9], "missing": [1]}),
        ],
        covers=("8.6", "14.14", "8.8"),
    ),
    Scenario(
        "commit-simple-group",
        [
            commit(
                offsets={("t", 0): (7, "meta"), ("t", 1): (8, None), ("u", 0): (9, "x", 4)}, expect=E.NONE
            ),
            describe(state="Empty"),
            list_groups(),
            fetch_offsets(topics=None),
            fetch_offsets(topics={"t": [0, 1, 2], "u": [0], "missing": [0]}),
            commit(offsets={("t", 0): 10}, member="anything", expect=E.NONE),  # Empty: member id ignored
        ],
        covers=("8.6", "8.8", "8.10", "8.11", "14.10"),
    ),
    Scenario(
        "commit-unknown-group-with-generation",
        [
            commit(v=8, offsets={("t", 0): 1}, gen=1, member="m", expect=E.ILLEGAL_GENERATION),
            commit(v=2, offsets={("t", 0): 1}, gen=1, member="m", expect=E.ILLEGAL_GENERATION),
            commit(v=9, offsets={("t", 0): 1}, gen=1, member="m", expect=E.GROUP_ID_NOT_FOUND),
            commit(v=9, offsets={("t", 0): 1}, gen=0, member="", expect=E.GROUP_ID_NOT_FOUND),
            describe(state="Dead"),
        ],
        covers=("8.6", "14.10"),
    ),
    Scenario(
        "commit-member-validation",
        [
            *form_group("a", "b", static=True),
            commit(offsets={("t", 0): 1}, expect=E.UNKNOWN_MEMBER_ID),  # admin form on a non-empty group
            commit("b", offsets={("t", 0): 1}, gen=-1, member="", instance=None, expect=E.UNKNOWN_MEMBER_ID),
            commit("b", offsets={("t", 0): 1}, member="b-unknown", expect=E.FENCED_INSTANCE_ID),
            commit("b", offsets={("t", 0): 1}, member="b-unknown", instance=None, expect=E.UNKNOWN_MEMBER_ID),
            commit(
                "b", 6, offsets={("t", 0): 1}, member="b-unknown", expect=E.UNKNOWN_MEMBER_ID
            ),  # no instance in v6
            commit("b", offsets={("t", 0): 1}, gen=9, expect=E.ILLEGAL_GENERATION),
            commit("b", offsets={("t", 0): 1}, gen=-1, expect=E.ILLEGAL_GENERATION),
            commit("b", offsets={("t", 0): (11, "b", 3)}, expect=E.NONE),
            fetch_offsets(topics=ALL_T),
        ],
        covers=("8.6", "6"),
    ),
    Scenario(
        "commit-by-state",
        [
            *form_group("a", "b"),
            join("a", park=True),
            commit("b", offsets={("t", 1): 21}, expect=E.NONE),  # PreparingRebalance, current generation
            join("b", park=True),
            wait("a"),
            wait("b"),
            commit("b", offsets={("t", 1): 22}, expect=E.REBALANCE_IN_PROGRESS),  # CompletingRebalance
            commit("b", offsets={("t", 1): 23}, gen=2, expect=E.ILLEGAL_GENERATION),
            sync("b", park=True),
            sync("a", assign={"a": {"t": [0]}, "b": {"t": [1, 2]}}),
            wait("b"),
            commit("b", offsets={("t", 1): 24}, expect=E.NONE),
            leave("a"),
            leave("b"),
            commit("b", offsets={("t", 1): 25}, expect=E.UNKNOWN_MEMBER_ID),  # Empty, member form
            commit(offsets={("t", 1): 26}, expect=E.NONE),  # Empty, admin form
            fetch_offsets(topics=ALL_T),
        ],
        covers=("8.6", "14.1", "14.2"),
    ),
    Scenario(
        "commit-metadata-size",
        [
            commit(offsets={("t", 0): (1, "x" * 4097), ("t", 1): (2, "y" * 4096), ("t", 2): (3, "é" * 4096)}),
            fetch_offsets(topics=ALL_T),
        ],
        covers=("8.6",),
    ),
    Scenario(
        "commit-and-fetch-every-version",
        [
            *[commit(v=v, offsets={("t", 0): (100 + v, f"v{v}")}, expect=E.NONE) for v in range(2, 10)],
            commit(v=3, offsets={("t", 1): 5}, retention=60000, expect=E.NONE),
            commit(v=6, offsets={("t", 2): (6, "e", 17)}, expect=E.NONE),
            *[fetch_offsets(v, topics=ALL_T) for v in range(1, 10)],
            *[fetch_offsets(v, topics=None) for v in range(2, 10)],
            fetch_offsets(7, topics=ALL_T, require_stable=True),
        ],
        covers=("8.6", "8.8"),
    ),
    Scenario(
        "fetch-unknown-and-batched-groups",
        [
            commit(offsets={("t", 0): 1}),
            fetch_offsets(1, topics={"t": [0]}, groups=["nope"]),
            fetch_offsets(5, topics={"t": [0]}, groups=["nope"]),
            fetch_offsets(5, topics=None, groups=["nope"]),
            fetch_offsets(8, topics={"t": [0, 1], "missing": [3]}, groups=[None, "nope", "other"]),
            fetch_offsets(8, topics=None, groups=[None, "nope"]),
            fetch_offsets(9, topics=None, groups=[None]),
        ],
        covers=("8.8", "14.11"),
    ),
    Scenario(
        "commit-and-fetch-empty-group-id",
        [
            commit(offsets={("u", 1): (42, "empty id")}, group="", expect=E.NONE),
            fetch_offsets(topics={"u": [1]}, groups=[""]),
            fetch_offsets(3, topics={"u": [1]}, groups=[""]),
            describe(groups=[""]),
        ],
        covers=("8.6", "8.8", "8.10"),
    ),
]

TXN = [
    Scenario(
        "txn-commit-validation",
        [
            txn_commit(offsets={("t", 0): 1}, group="", expect=E.INVALID_GROUP_ID),
            txn_commit(offsets={("missing", 0): 1}, expect=E.UNKNOWN_TOPIC_OR_PARTITION),
        ],
        covers=("8.7",),
    ),
]

DELETE = [
    Scenario(
        "offset-delete-validation",
        [
            offset_delete(topics={"t": [0]}, group="", expect=E.INVALID_GROUP_ID),
            offset_delete(topics={"t": [0]}, expect=E.GROUP_ID_NOT_FOUND),
            offset_delete(topics={"missing": [0]}, expect=E.GROUP_ID_NOT_FOUND),
        ],
        covers=("8.9",),
    ),
    Scenario(
        "offset-delete-subscribed-consumer-group",
        [
            *form_group("a"),
            commit("a", offsets={("t", 0): 1, ("t", 1): 2, ("u", 0): 3}),
            offset_delete(topics={"t": [0, 1, 2], "u": [0, 1], "missing": [0]}),
            fetch_offsets(topics=None),
            leave("a"),
            offset_delete(topics={"t": [0, 2]}),  # Empty: never subscribed
            fetch_offsets(topics=None),
        ],
        covers=("8.9", "10"),
    ),
    Scenario(
        "offset-delete-non-consumer-protocol",
        [
            join("a", protocol_type="connect", protocols=[("v1", b"cfg")]),
            join("a", protocol_type="connect", protocols=[("v1", b"cfg")]),
            offset_delete(topics={"t": [0]}, expect=E.NON_EMPTY_GROUP),  # CompletingRebalance
            sync("a", raw_assign=[(Ref("a"), b"assignment")]),
            offset_delete(topics={"t": [0]}, expect=E.NON_EMPTY_GROUP),  # Stable
            describe(),
            leave("a"),
            commit(offsets={("t", 0): 4}),
            offset_delete(topics={"t": [0]}, expect=E.NONE),
            describe(state="Empty"),
        ],
        covers=("8.9", "8.10"),
    ),
    Scenario(
        "offset-delete-simple-group",
        [
            commit(offsets={("t", 0): 1, ("u", 1): 2}),
            offset_delete(topics={"t": [0, 1]}),
            fetch_offsets(topics=None),
        ],
        covers=("8.9",),
    ),
    Scenario(
        "commit-subscription-in-other-protocol",
        [
            join("a", protocols=[("range", subscription("u"))]),
            join("a", protocols=[("range", subscription("u"))]),
            sync("a", assign={"a": {"u": [0, 1]}}),
            commit("a", offsets={("t", 0): 5, ("u", 0): 6}),
            offset_delete(topics={"t": [0], "u": [0]}),
            fetch_offsets(topics=None),
        ],
        covers=("8.9", "10"),
    ),
]

SCENARIOS = [*COMMIT, *TXN, *DELETE]


@pytest.mark.kafka
@pytest.mark.parametrize("scenario", params(SCENARIOS))
def test_offsets(differential: DifferentialRunner, scenario: Scenario) -> None:
    check_result(differential.result(scenario), scenario.bug)
