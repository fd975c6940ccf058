"""JoinGroup (§8.2), protocol selection (§4), leaders (§5), static membership (§6) and group.max.size (§7)
of docs/design/group-semantics.md."""

from __future__ import annotations

import pytest

from regroup.group.config import GroupConfig
from regroup.group.effects import TimerKey, TimerKind
from regroup.group.history import LeaderRejoined, LoadedOverCapacity, MemberJoined, MemberRejected
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import Harness, assignment, subscription

S = GroupState
SUB = subscription("t")


def snap(h: Harness, group: str = "g"):  # type: ignore[no-untyped-def]
    s = h.shard.group(group)
    assert s is not None
    return s


def initial_join(h: Harness, *protocol_lists: list[str]) -> list[str]:
    """Members join with the given protocol lists during one initial rebalance; returns the chosen protocol
    as seen by every member."""
    calls = [h.join("g", version=3, protocols=tuple((p, SUB) for p in ps)) for ps in protocol_lists]
    h.advance(60_000)
    assert all(c.done and c.error is ErrorCode.NONE for c in calls), [c.response for c in calls]
    return [c.response.protocol_name for c in calls]  # type: ignore[misc]


# ------------------------------------------------------------------------------------- §4 protocols


def test_vote_tie_picks_one_of_the_candidates(h: Harness) -> None:
    chosen = initial_join(h, ["range", "roundrobin"], ["roundrobin", "range"])
    assert len(set(chosen)) == 1
    assert chosen[0] in {"range", "roundrobin"}


def test_vote_majority_wins(h: Harness) -> None:
    chosen = initial_join(h, ["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin", "range"])
    assert set(chosen) == {"roundrobin"}


def test_vote_only_common_protocols_are_candidates(h: Harness) -> None:
    chosen = initial_join(h, ["range", "roundrobin"], ["roundrobin", "foo"])
    assert set(chosen) == {"roundrobin"}


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("", (("range", SUB),)), ("consumer", ())],
    ids=["no-type", "no-protocols"],
)
def test_empty_group_needs_a_type_and_a_protocol(
    h: Harness, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
) -> None:
    call = h.join("g", protocol_type=protocol_type, protocols=protocols)
    assert call.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert call.response.member_id == ""


def test_empty_group_adopts_any_protocol_type(h: Harness) -> None:
    h.join("g", version=3, protocol_type="connect")
    assert snap(h).protocol_type == "connect"


def test_type_mismatch_and_no_common_protocol_are_inconsistent(h: Harness) -> None:
    h.form_group("g", 1)
    assert h.join("g", protocol_type="connect").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join("g", protocols=(("roundrobin", SUB),)).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_inconsistent_protocol_before_member_identity(h: Harness) -> None:
    h.form_group("g", 1)
    call = h.join("g", "unknown-member", protocols=(("roundrobin", SUB),))
    assert call.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # not UNKNOWN_MEMBER_ID
    assert call.response.member_id == "unknown-member"


def test_same_metadata_means_same_ordered_list(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, protocols=(("range", SUB), ("roundrobin", SUB)))
    reordered = h.join("g", ids[1], protocols=(("roundrobin", SUB), ("range", SUB)))
    assert not reordered.done  # a different order is a change → rebalance
    assert snap(h).state is S.PREPARING_REBALANCE
    del gen


# --------------------------------------------------------------------------------------- §5 leaders


def test_first_member_leads_and_only_the_leader_gets_members(h: Harness) -> None:
    a = h.join("g", version=3)
    b = h.join("g", version=3)
    h.advance(10_000)
    assert a.response.leader == b.response.leader == a.response.member_id
    assert [m.member_id for m in a.response.members] == [a.response.member_id, b.response.member_id]
    assert b.response.members == []


def test_leader_leaving_moves_leadership_to_first_remaining(h: Harness) -> None:
    ids, _ = h.form_group("g", 3)
    h.leave("g", ids[0])
    assert snap(h).leader_id == ids[1]


def test_leader_rejoin_always_rebalances_with_cause(h: Harness) -> None:
    ids, gen = h.form_group("g", 1)
    call = h.join("g", ids[0], reason="new topic metadata")
    assert call.response.generation_id == gen + 1
    assert h.shard.group_history("g")[-1].cause == LeaderRejoined(ids[0], False, "new topic metadata")


def test_join_response_members_carry_instance_ids_from_v5(h: Harness) -> None:
    a = h.join("g", instance_id="a", version=5)
    b = h.join("g", version=3)
    h.advance(10_000)
    assert [(m.member_id, m.group_instance_id) for m in a.response.members] == [
        (a.response.member_id, "a"),
        (b.response.member_id, None),
    ]
    h2 = Harness()
    old_leader = h2.join("g", version=4 - 1)
    h2.join("g", instance_id="s", version=5)
    h2.advance(10_000)
    assert [m.group_instance_id for m in old_leader.response.members] == [None, None]  # v3 cannot carry it


# ---------------------------------------------------------------------------------------- §6 static


def test_static_member_never_gets_member_id_required(h: Harness) -> None:
    call = h.join("g", instance_id="i0", version=9)
    assert not call.done  # parked at once, in the initial rebalance
    h.advance(3000)
    assert call.response.member_id.startswith("i0-")


def test_static_id_uses_instance_prefix_and_dynamic_client_prefix(h: Harness) -> None:
    s = h.join("g", instance_id="inst", version=5)
    d = h.join("g", version=5, client_id="app")
    assert d.error is ErrorCode.MEMBER_ID_REQUIRED
    assert d.response.member_id.startswith("app-")
    h.advance(3000)
    assert s.response.member_id.startswith("inst-")


def stable_static(h: Harness, version: int = 9) -> tuple[list[str], int]:
    return h.form_group("g", 2, static=True, version=version, session_timeout_ms=20_000)


@pytest.mark.parametrize("version", [5, 7, 8])
def test_static_leader_replacement_pre_v9_returns_old_leader_id(h: Harness, version: int) -> None:
    ids, gen = stable_static(h)
    log_len = len(h.log)
    call = h.join("g", instance_id="i0", version=version, session_timeout_ms=20_000)
    assert call.error is ErrorCode.NONE
    new_id = call.response.member_id
    assert new_id != ids[0]
    assert new_id.startswith("i0-")
    assert call.response.generation_id == gen
    assert call.response.leader == ids[0]  # the captured, old id: the client does not think it leads
    assert call.response.members == []
    assert snap(h).state is S.STABLE
    assert snap(h).leader_id == new_id
    assert len(h.log) == log_len + 1  # persisted, no rebalance
    sync = h.sync("g", new_id, gen, instance_id="i0", version=min(version, 5))
    assert sync.response.assignment == assignment({"t": [0]})


def test_static_leader_replacement_v9_skips_assignment(h: Harness) -> None:
    ids, _gen = stable_static(h)
    call = h.join("g", instance_id="i0", version=9, session_timeout_ms=20_000)
    new_id = call.response.member_id
    assert call.response.leader == new_id
    assert call.response.skip_assignment is True
    assert [(m.member_id, m.group_instance_id) for m in call.response.members] == [
        (new_id, "i0"),
        (ids[1], "i1"),
    ]


def test_static_follower_replacement_v9(h: Harness) -> None:
    ids, gen = stable_static(h)
    call = h.join("g", instance_id="i1", version=9, session_timeout_ms=20_000)
    assert call.response.leader == ids[0]
    assert call.response.skip_assignment is False
    assert call.response.members == []
    sync = h.sync("g", call.response.member_id, gen, instance_id="i1")
    assert sync.response.assignment == assignment({"t": [1]})


def test_old_static_id_is_fenced(h: Harness) -> None:
    ids, gen = stable_static(h)
    new_id = h.join("g", instance_id="i1", session_timeout_ms=20_000).response.member_id
    old = ids[1]
    assert h.join("g", old, instance_id="i1").error is ErrorCode.FENCED_INSTANCE_ID
    assert h.join("g", old).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync("g", old, gen, instance_id="i1").error is ErrorCode.FENCED_INSTANCE_ID
    assert h.sync("g", old, gen).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", old, gen, instance_id="i1").error is ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat("g", old, gen).error is ErrorCode.UNKNOWN_MEMBER_ID
    fenced = h.commit("g", {("t", 1): 1}, generation_id=gen, member_id=old, instance_id="i1")
    assert fenced.response.topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    unknown = h.commit("g", {("t", 1): 1}, generation_id=gen, member_id=old)
    assert unknown.response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", new_id, gen, instance_id="i1").error is ErrorCode.NONE
    # an unknown instance id is UNKNOWN_MEMBER_ID whatever the member id
    assert h.heartbeat("g", new_id, gen, instance_id="nope").error is ErrorCode.UNKNOWN_MEMBER_ID


def test_static_rejoin_with_unknown_member_id(h: Harness) -> None:
    stable_static(h)
    assert h.join("g", "bogus", instance_id="i1").error is ErrorCode.FENCED_INSTANCE_ID
    assert h.join("g", "bogus", instance_id="zz").error is ErrorCode.UNKNOWN_MEMBER_ID


def test_static_rejoin_with_current_id_behaves_like_known_member(h: Harness) -> None:
    ids, gen = stable_static(h)
    call = h.join("g", ids[1], instance_id="i1")
    assert call.error is ErrorCode.NONE
    assert call.response.generation_id == gen
    assert snap(h).state is S.STABLE


def test_static_replacement_in_stable_keeps_generation_unless_protocol_changes(h: Harness) -> None:
    h.form_group("g", 1, static=True, protocols=(("range", SUB), ("rr", SUB)))
    same = h.join("g", instance_id="i0", protocols=(("range", subscription("x")), ("rr", SUB)))
    assert same.done
    assert snap(h).state is S.STABLE
    changed = h.join("g", instance_id="i0", protocols=(("rr", SUB), ("range", SUB)))
    assert snap(h).state is not S.STABLE  # the vote now picks rr: rebalance
    assert changed.done
    assert changed.response.protocol_name == "rr"


def test_static_replacement_in_completing_always_rebalances_and_fences_parked_sync(h: Harness) -> None:
    ids, gen = stable_static(h)
    a = h.join("g", ids[0], instance_id="i0", session_timeout_ms=20_000)
    b = h.join("g", ids[1], instance_id="i1", session_timeout_ms=20_000)
    assert a.done
    assert b.done
    assert snap(h).state is S.COMPLETING_REBALANCE
    parked = h.sync("g", ids[1], gen + 1, instance_id="i1")
    assert not parked.done
    replacement = h.join("g", instance_id="i1", session_timeout_ms=20_000)
    assert parked.error is ErrorCode.FENCED_INSTANCE_ID
    assert parked.response.assignment == b""
    assert not replacement.done
    assert snap(h).state is S.PREPARING_REBALANCE


def test_static_replacement_in_preparing_fences_parked_join(h: Harness) -> None:
    ids, gen = h.form_group("g", 3, static=True, session_timeout_ms=20_000)
    h.join("g", ids[0], instance_id="i0", session_timeout_ms=20_000)  # leader rejoins: PreparingRebalance
    old = h.join("g", ids[1], instance_id="i1", session_timeout_ms=20_000)
    assert not old.done
    new = h.join("g", instance_id="i1", session_timeout_ms=20_000)
    assert old.error is ErrorCode.FENCED_INSTANCE_ID
    assert old.response.member_id == ids[1]
    assert old.response.generation_id == -1
    assert old.response.leader == ""
    assert old.response.protocol_type is None
    assert old.response.protocol_name is None
    assert not new.done
    h.join("g", ids[2], instance_id="i2", session_timeout_ms=20_000)
    assert new.done
    assert new.response.generation_id == gen + 1
    assert new.response.member_id != ids[1]


def test_kafka_13581_failed_static_replacement_restores_old_member(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, static=True, session_timeout_ms=20_000, rebalance_timeout_ms=40_000)
    before = snap(h).member(ids[1])
    assert before is not None
    h.fail_next_append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    call = h.join(
        "g",
        instance_id="i1",
        protocols=(("range", subscription("t", "new")), ("rr", SUB)),
        session_timeout_ms=30_000,
        rebalance_timeout_ms=50_000,
    )
    assert call.error is ErrorCode.NOT_LEADER_OR_FOLLOWER  # the runtime passes the already-mapped error
    assert call.response.member_id == ""
    assert call.response.generation_id == gen
    assert call.response.leader == ids[0]
    assert call.response.protocol_name == "range"
    assert call.response.protocol_type == "consumer"
    after = snap(h).member(ids[1])
    assert after is not None
    assert after.protocols == before.protocols
    assert after.session_timeout_ms == before.session_timeout_ms == 20_000
    assert after.rebalance_timeout_ms == before.rebalance_timeout_ms == 40_000
    assert after.assignment == before.assignment
    assert [m.member_id for m in snap(h).members] == ids
    assert TimerKey(TimerKind.HEARTBEAT, "g", ids[1]) in h.timers
    assert all(k.member_id in ("", *ids) for k in h.timers)
    # the old id keeps working
    assert h.heartbeat("g", ids[1], gen, instance_id="i1").error is ErrorCode.NONE
    assert h.sync("g", ids[1], gen, instance_id="i1").response.assignment == assignment({"t": [1]})
    ok = h.commit("g", {("t", 1): 3}, generation_id=gen, member_id=ids[1], instance_id="i1")
    assert ok.response.topics[0].partitions[0].error_code == 0
    snap(h)  # bookkeeping intact
    h.shard.check_invariants()


def test_pending_member_rejoining_with_instance_id_is_an_internal_error(h: Harness) -> None:
    pending = h.join("g", version=5).response.member_id
    call = h.join("g", pending, instance_id="x", version=5)
    assert call.error is ErrorCode.UNKNOWN_SERVER_ERROR


# -------------------------------------------------------------------------------------- §7 max size


def test_max_size_empty_group_hands_out_pending_ids() -> None:
    h = Harness(GroupConfig(group_max_size=1))
    a = h.join("g")
    b = h.join("g")
    assert a.error is b.error is ErrorCode.MEMBER_ID_REQUIRED


def test_max_size_stable_rejects_new_accepts_existing() -> None:
    h = Harness(GroupConfig(group_max_size=2))
    ids, _gen = h.form_group("g", 2)
    new = h.join("g", version=3, protocols=(("range", b"x"), ("zzz", b"")))
    assert new.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert new.response.member_id == ""
    assert h.join("g", ids[1]).error is ErrorCode.NONE
    # group.max.size comes first: even an incompatible join is answered 81
    assert h.join("g", protocol_type="other").error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_max_size_rejects_pending_member_and_forgets_it() -> None:
    h = Harness(GroupConfig(group_max_size=1))
    a = h.join("g")
    b = h.join("g")
    h.join("g", a.response.member_id)  # a becomes a member: PreparingRebalance with 1 parked join
    rejected = h.join("g", b.response.member_id)
    assert rejected.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert rejected.response.member_id == ""
    assert snap(h).pending_members == ()
    assert TimerKey(TimerKind.HEARTBEAT, "g", b.response.member_id) not in h.timers


def test_max_size_lowered_after_load_kicks_out_last_rejoiners() -> None:
    h = Harness(GroupConfig(group_max_size=3))
    ids, gen = h.form_group("g", 3, session_timeout_ms=60_000)
    h.reload(GroupConfig(group_max_size=2))
    assert snap(h).state is S.PREPARING_REBALANCE
    first = h.join("g", ids[0], session_timeout_ms=60_000)
    second = h.join("g", ids[1], session_timeout_ms=60_000)
    third = h.join("g", ids[2], session_timeout_ms=60_000)
    assert third.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert third.response.member_id == ""
    # the rejection does not complete the join phase by itself; the deadline does
    h.advance(30_000)
    assert first.done
    assert second.done
    assert first.response.generation_id == gen + 1
    assert [m.member_id for m in first.response.members] == ids[:2]
    record = h.shard.group_history("g")[-1]
    assert record.cause == LoadedOverCapacity(3, 2)
    assert MemberRejected(ids[2], 2) in record.events


def test_max_size_preparing_counts_parked_joins_not_members() -> None:
    h = Harness(GroupConfig(group_max_size=2))
    ids, gen = h.form_group("g", 2)
    h.leave("g", ids[1])  # 1 member, rebalance; the leader had not rejoined yet
    assert snap(h).state is S.PREPARING_REBALANCE
    a = h.join("g", version=3)
    b = h.join("g", version=3)  # parked joins: a=1, b=2? — a (1 parked) accepted, b sees 1 < 2
    c = h.join("g", version=3)
    assert not a.done
    assert not b.done
    assert c.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    # the existing member that has not rejoined yet is turned away too: two joins are parked
    assert h.join("g", ids[0]).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    del gen


# ----------------------------------------------------------------------------------- §8.2 checklist


def test_invalid_group_id(h: Harness) -> None:
    call = h.join("", "m")
    assert call.error is ErrorCode.INVALID_GROUP_ID
    assert call.response.member_id == "m"


@pytest.mark.parametrize("session", [5999, 1_800_001])
def test_invalid_session_timeout(h: Harness, session: int) -> None:
    assert h.join("g", session_timeout_ms=session).error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.shard.group("g") is None


def test_session_timeout_bounds_inclusive(h: Harness) -> None:
    assert h.join("g", session_timeout_ms=6000).error is ErrorCode.MEMBER_ID_REQUIRED
    assert h.join("g", session_timeout_ms=1_800_000).error is ErrorCode.MEMBER_ID_REQUIRED


def test_rebalance_timeout_is_not_bounded(h: Harness) -> None:
    call = h.join("g", version=3, rebalance_timeout_ms=1)
    h.advance(3000)
    assert call.error is ErrorCode.NONE


def test_unknown_group_with_member_id_is_unknown_member_and_not_created(h: Harness) -> None:
    call = h.join("g", "m")
    assert call.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert call.response.member_id == "m"
    assert h.shard.group("g") is None
    assert h.log == []


def test_member_id_required_from_v4_only(h: Harness) -> None:
    v3 = h.join("g", version=3)
    assert not v3.done
    v4 = h.join("g", version=4)
    assert v4.error is ErrorCode.MEMBER_ID_REQUIRED
    assert v4.response.member_id in snap(h).pending_members


def test_v0_uses_session_timeout_as_rebalance_timeout(h: Harness) -> None:
    h.join("g", version=0, session_timeout_ms=12_000)
    (member,) = snap(h).members
    assert member.rebalance_timeout_ms == 12_000


@pytest.mark.parametrize("version", range(10))
def test_error_responses_per_version(h: Harness, version: int) -> None:
    call = h.join("", version=version)
    response = call.response
    assert response.protocol_name == ("" if version < 7 else None)
    assert response.protocol_type is None
    assert response.generation_id == -1


@pytest.mark.parametrize("version", range(10))
def test_success_response_per_version(h: Harness, version: int) -> None:
    call = h.join("g", version=version, instance_id="s" if version >= 5 else None)
    if call.done:
        assert call.error is ErrorCode.MEMBER_ID_REQUIRED
        call = h.join("g", call.response.member_id, version=version)
    h.advance(3000)
    response = call.response
    assert response.protocol_name == "range"
    assert response.protocol_type == ("consumer" if version >= 7 else None)
    assert response.skip_assignment is False


def test_reason_is_recorded_from_v8(h: Harness) -> None:
    h.join("g", version=8, reason="because", instance_id="s")
    h.advance(3000)
    cause = h.shard.group_history("g")[-1].cause
    assert isinstance(cause, MemberJoined)
    assert cause.reason == "because"


def test_creating_join_failure_rolls_back_group(h: Harness) -> None:
    h.fail_next_append(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    call = h.join("g", version=3)
    assert call.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert call.response.member_id == ""
    assert h.shard.group("g") is None
    assert h.timers == {}
    h.fail_next_append(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert h.join("g").error is ErrorCode.COORDINATOR_NOT_AVAILABLE  # MEMBER_ID_REQUIRED not sent
    assert h.shard.group("g") is None


def test_inconsistent_join_still_creates_the_group(h: Harness) -> None:
    """Kafka commits the newly created (empty) group even when the join itself is refused."""
    call = h.join("g", protocols=())
    assert call.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert snap(h).state is S.EMPTY
    assert len(h.log) == 1


def test_superseded_parked_join_is_answered(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    first = h.join("g", ids[0])
    second = h.join("g", ids[0])
    assert first.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert not second.done
    h.join("g", ids[1])
    assert second.done
    assert second.response.generation_id == gen + 1
