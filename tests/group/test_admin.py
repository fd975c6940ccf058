"""DescribeGroups (§8.10), ListGroups (§8.11) and DeleteGroups (§8.12) of docs/design/group-semantics.md."""

from __future__ import annotations

import pytest

from regroup.group.records import decode_record
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import HOST, Harness, assignment, subscription
from .states import completing, dead, empty, preparing, stable

S = GroupState


# ----------------------------------------------------------------------------------- DescribeGroups


def test_describe_unknown_group(h: Harness) -> None:
    described = h.describe("nope")
    assert (
        described.error_code,
        described.group_state,
        described.protocol_type,
        described.protocol_data,
    ) == (
        0,
        "Dead",
        "",
        "",
    )
    assert described.members == []
    assert described.authorized_operations == -(2**31)


def test_describe_stable(h: Harness) -> None:
    ids, _ = h.form_group("g", 2, static=True)
    described = h.describe("g", version=5)
    assert (described.group_state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert [
        (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
        for m in described.members
    ] == [
        (ids[0], "i0", "client", HOST, subscription("t"), assignment({"t": [0]})),
        (ids[1], "i1", "client", HOST, subscription("t"), assignment({"t": [1]})),
    ]
    assert all(m.group_instance_id is None for m in h.describe("g", version=3).members)


@pytest.mark.parametrize("setup", [preparing, completing], ids=["preparing", "completing"])
def test_describe_rebalancing_has_no_protocol_data_nor_metadata(h: Harness, setup) -> None:  # type: ignore[no-untyped-def]
    setup(h)
    described = h.describe("g")
    assert described.protocol_data == ""
    assert described.protocol_type == "consumer"
    assert all(m.member_metadata == b"" for m in described.members)
    assert [m.member_assignment for m in described.members] == [
        assignment({"t": [0]}),
        assignment({"t": [1]}),
    ]


def test_describe_empty_and_simple(h: Harness) -> None:
    empty(h)
    described = h.describe("g")
    assert (described.group_state, described.protocol_type, described.members) == ("Empty", "consumer", [])
    h.commit("simple", {("t", 0): 1})
    assert (h.describe("simple").group_state, h.describe("simple").protocol_type) == ("Empty", "")


def test_describe_dead(h: Harness) -> None:
    dead(h)
    assert h.describe("g").group_state == "Dead"


# --------------------------------------------------------------------------------------- ListGroups


def test_list_groups_filters(h: Harness) -> None:
    stable(h, "stable")
    h.commit("simple", {("t", 0): 1})
    h.join("rebalancing", version=3)
    listed = {(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in h.shard.list_groups()}
    assert listed == {
        ("stable", "consumer", "Stable", "classic"),
        ("simple", "", "Empty", "classic"),
        ("rebalancing", "consumer", "PreparingRebalance", "classic"),
    }
    assert [g.group_id for g in h.shard.list_groups([" STABLE ", "empty"])] == ["stable", "simple"]
    assert [g.group_id for g in h.shard.list_groups(["nope"])] == []
    assert len(h.shard.list_groups(types_filter=["Classic"])) == 3
    assert h.shard.list_groups(types_filter=["consumer"]) == []
    assert h.shard.list_groups(types_filter=["bogus"]) == []
    assert [g.group_id for g in h.shard.list_groups(["empty"], ["classic", "share"])] == ["simple"]


# ------------------------------------------------------------------------------------- DeleteGroups


def test_delete_groups(h: Harness) -> None:
    empty(h, "empty")
    h.commit("empty", {("t", 0): 1, ("u", 2): 3})
    stable(h, "busy")
    dead_free = len(h.log)
    results = h.delete_groups("empty", "busy", "nope", "empty")
    assert [(r.group_id, r.error_code) for r in results] == [
        ("empty", 0),
        ("busy", ErrorCode.NON_EMPTY_GROUP),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    written = [decode_record(rec) for rec in h.log[dead_free:]]
    assert [(type(d).__name__, getattr(d, "topic", None), d.value) for d in written] == [  # type: ignore[union-attr]
        ("DecodedOffsetCommit", "t", None),
        ("DecodedOffsetCommit", "u", None),
        ("DecodedGroupMetadata", None, None),
    ]
    assert h.shard.group("empty") is None
    assert h.fetched("empty", "t", 0) == (-1, -1, "")
    assert h.describe("empty").group_state == "Dead"


@pytest.mark.parametrize("setup", [preparing, completing], ids=["preparing", "completing"])
def test_delete_rebalancing_group_is_non_empty(h: Harness, setup) -> None:  # type: ignore[no-untyped-def]
    setup(h)
    assert h.delete_groups("g")[0].error_code == ErrorCode.NON_EMPTY_GROUP


def test_delete_dead_group_is_not_found(h: Harness) -> None:
    dead(h)
    assert h.delete_groups("g")[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_delete_failure_changes_nothing(h: Harness) -> None:
    h.commit("a", {("t", 0): 1})
    h.commit("b", {("t", 0): 1})
    h.fail_next_append(ErrorCode.NOT_COORDINATOR)
    results = h.delete_groups("a", "b", "nope")
    assert [(r.group_id, r.error_code) for r in results] == [
        ("a", ErrorCode.NOT_COORDINATOR),
        ("b", ErrorCode.NOT_COORDINATOR),
        ("nope", ErrorCode.NOT_COORDINATOR),
    ]
    assert h.fetched("a", "t", 0)[0] == 1
    assert h.shard.group("b") is not None


def test_delete_group_with_pending_member_cancels_its_timer(h: Harness) -> None:
    pending = h.join("g").response.member_id
    assert h.delete_groups("g")[0].error_code == 0
    assert h.timers == {}
    assert h.join("g", pending).error is ErrorCode.UNKNOWN_MEMBER_ID
