"""Timer rules (docs/design/group-semantics.md §3): member session / new-member join timeout / pending member;
join phase (initial delay and its budget); pending sync; the expiration job; stale fires."""

from __future__ import annotations

from regroup.build import compiled
from regroup.group.config import GroupConfig
from regroup.group.effects import Result, TimerKey, TimerKind
from regroup.group.history import JoinDeadlineEvicted, PendingMemberExpired, SessionExpired
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import Harness, assignment, subscription
from .states import completing, stable

S = GroupState


def hb(group: str, member: str) -> TimerKey:
    return TimerKey(TimerKind.HEARTBEAT, group, member)


JOIN = TimerKey(TimerKind.JOIN, "g")
SYNC = TimerKey(TimerKind.SYNC, "g")


def state(h: Harness) -> GroupState:
    snap = h.shard.group("g")
    assert snap is not None
    return snap.state


# ------------------------------------------------------------------------------------ initial delay


def test_initial_delay_example_one() -> None:
    """D=3000, R=9000, second member at 2999 → completion at 6000."""
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    a = h.join("g", version=3, rebalance_timeout_ms=9000)
    h.advance_to(2999)
    b = h.join("g", version=3, rebalance_timeout_ms=9000)
    h.advance_to(5999)
    assert not a.done
    assert not b.done
    h.advance_to(6000)
    assert a.done
    assert b.done
    assert a.response.generation_id == 1
    assert h.shard.group_history("g")[-1].join_completed_ms == 6000


def test_initial_delay_example_two() -> None:
    """D=3000, R=6000, joins at 0, 0 and 3001 → completion at 6000, not before."""
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    calls = [h.join("g", version=3, rebalance_timeout_ms=6000) for _ in range(2)]
    h.advance_to(3001)
    calls.append(h.join("g", version=3, rebalance_timeout_ms=6000))
    h.advance_to(5999)
    assert not any(c.done for c in calls)
    h.advance_to(6000)
    assert all(c.done and c.error is ErrorCode.NONE for c in calls)
    assert {c.response.generation_id for c in calls} == {1}


def test_initial_delay_single_member_completes_after_one_delay() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    a = h.join("g", version=3)
    h.advance_to(2999)
    assert not a.done
    h.advance_to(3000)
    assert a.done


def test_initial_rebalance_never_completes_early_even_if_all_joined() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    a = h.join("g", version=3)
    # a member that rejoins (everyone has joined) does not complete an initial rebalance
    again = h.join("g", a.response.member_id if a.done else "client-1", version=3)
    assert not again.done
    assert a.done
    assert a.error is ErrorCode.REBALANCE_IN_PROGRESS
    h.advance_to(3000)
    assert again.done
    assert again.error is ErrorCode.NONE


def test_initial_delay_budget_uses_first_members_rebalance_timeout() -> None:
    """The budget is taken from the group rebalance timeout when the rebalance is prepared."""
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    a = h.join("g", version=3, rebalance_timeout_ms=3000)  # budget max(3000-3000, 0) = 0
    h.advance_to(100)
    b = h.join("g", version=3, rebalance_timeout_ms=60_000)
    h.advance_to(3000)
    assert a.done
    assert b.done


def test_initial_delay_zero() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0))
    a = h.join("g", version=3)
    assert not a.done
    h.advance(0)
    assert a.done
    assert a.error is ErrorCode.NONE


# ------------------------------------------------------------------------------------ join deadline


def test_non_initial_rebalance_completes_at_once_when_everyone_joined(h: Harness) -> None:
    ids, gen = h.form_group("g", 1)
    call = h.join("g", ids[0])  # the leader rejoins: rebalance, and everyone has joined
    assert call.done
    assert call.response.generation_id == gen + 1


def test_join_deadline_evicts_dynamic_members_that_did_not_rejoin(h: Harness) -> None:
    ids, gen = h.form_group("g", 3, rebalance_timeout_ms=20_000)
    start = h.now
    leader = h.join("g", ids[0], rebalance_timeout_ms=20_000)
    # the others keep heartbeating but never rejoin
    for _ in range(4):
        h.advance(5000)
        for m in ids[1:]:
            if h.now - start < 20_000:
                assert h.heartbeat("g", m, gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    h.advance_to(start + 20_000)
    assert leader.done
    assert leader.response.generation_id == gen + 1
    assert [m.member_id for m in leader.response.members] == [ids[0]]
    record = h.shard.group_history("g")[-1]
    assert JoinDeadlineEvicted((ids[1], ids[2]), 20_000) in record.events
    assert set(record.left) == {ids[1], ids[2]}


def test_join_deadline_keeps_static_members_and_lists_them_to_the_leader(h: Harness) -> None:
    ids, _gen = h.form_group("g", 2, static=True, session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    leader = h.join("g", ids[0], instance_id="i0", session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    h.advance(20_000)
    assert leader.done
    assert [(m.member_id, m.group_instance_id) for m in leader.response.members] == [
        (ids[0], "i0"),
        (ids[1], "i1"),
    ]
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.COMPLETING_REBALANCE
    # the static member that did not rejoin has its session restarted at join completion
    assert h.deadline(hb("g", ids[1])) == h.now + 60_000


def test_join_deadline_nobody_rejoined_extends_and_stays_preparing(h: Harness) -> None:
    _ids, _ = h.form_group("g", 1, static=True, session_timeout_ms=60_000, rebalance_timeout_ms=20_000)
    # a LeaveGroup of a pending member makes a Stable group rebalance without anyone rejoining
    pending = h.join("g").response.member_id
    h.leave("g", pending)
    assert state(h) is S.PREPARING_REBALANCE
    h.advance(20_000)
    assert state(h) is S.PREPARING_REBALANCE
    assert h.deadline(JOIN) == h.now + 20_000
    # the session of the static member finally expires: the group empties
    h.advance(40_000)
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.EMPTY
    assert snap.members == ()


def test_leader_that_did_not_rejoin_is_replaced_by_first_rejoined(h: Harness) -> None:
    ids, _gen = h.form_group("g", 2, static=True, rebalance_timeout_ms=20_000, session_timeout_ms=60_000)
    # the follower changes its subscription; the (static) leader never rejoins
    follower = h.join(
        "g",
        ids[1],
        instance_id="i1",
        protocols=(("range", subscription("t", "u")),),
        rebalance_timeout_ms=20_000,
        session_timeout_ms=60_000,
    )
    assert not follower.done
    h.advance(20_000)
    assert follower.done
    assert follower.response.leader == ids[1]
    # the static ex-leader is kept and listed
    assert [m.member_id for m in follower.response.members] == ids
    assert h.shard.group("g").leader_id == ids[1]  # type: ignore[union-attr]


# ----------------------------------------------------------------------------------------- sessions


def test_session_expiry_in_stable_rebalances(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    for _ in range(3):
        h.advance(4000)
        h.heartbeat("g", ids[0], gen)
    assert state(h) is S.PREPARING_REBALANCE
    cause = h.shard.group_history("g")  # the rebalance is still in progress; check the cause later
    call = h.join("g", ids[0])
    assert call.done
    assert call.response.generation_id == gen + 1
    record = h.shard.group_history("g")[-1]
    assert record.cause == SessionExpired(ids[1], 10_000)
    assert cause[-1].generation_id == gen


def test_session_expiry_in_completing_rebalances(h: Harness) -> None:
    setup = completing(h)
    follower = h.sync("g", setup.members[1], setup.generation)
    h.advance(10_000)  # the leader never syncs nor heartbeats: its session expires
    assert follower.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert state(h) is S.PREPARING_REBALANCE
    assert h.shard.group("g").leader_id == setup.members[1]  # type: ignore[union-attr]


def test_parked_member_is_not_expired_and_timer_not_rearmed(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, rebalance_timeout_ms=60_000)
    leader = h.join("g", ids[0], rebalance_timeout_ms=60_000)
    h.advance(10_000)  # both sessions fire; only the follower (not parked) is removed
    assert leader.done
    assert leader.response.generation_id == gen + 1
    assert [m.member_id for m in leader.response.members] == [ids[0]]


def test_parked_member_session_fire_is_ignored_without_rearm(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, rebalance_timeout_ms=60_000, session_timeout_ms=10_000)
    leader = h.join("g", ids[0], rebalance_timeout_ms=60_000)
    for _ in range(3):  # the follower stays alive
        h.advance(4000)
        h.heartbeat("g", ids[1], gen)
    assert not leader.done
    assert hb("g", ids[0]) not in h.timers  # fired, ignored, not re-armed
    assert h.shard.group("g").member(ids[0]) is not None  # type: ignore[union-attr]


def test_new_member_join_timeout_removes_it(h: Harness) -> None:
    ids, gen = h.form_group("g", 1, rebalance_timeout_ms=600_000, session_timeout_ms=10_000)
    start = h.now
    new = h.join("g", version=3, rebalance_timeout_ms=600_000)
    while h.now - start < 300_000:
        h.advance(5000)
        if h.now - start < 300_000:
            assert h.heartbeat("g", ids[0], gen).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert new.done
    assert new.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert new.response.member_id == ""
    snap = h.shard.group("g")
    assert snap is not None
    assert [m.member_id for m in snap.members] == ids


def test_is_new_cleared_at_join_completion(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, rebalance_timeout_ms=600_000)
    # after completion the members are no longer new: a parked JoinGroup protects them from expiry
    leader = h.join("g", ids[0], rebalance_timeout_ms=600_000)
    follower = h.join("g", ids[1], rebalance_timeout_ms=600_000)
    assert leader.done
    assert follower.done
    a = h.join("g", ids[0], rebalance_timeout_ms=600_000, protocols=(("range", subscription("z")),))
    for _ in range(6):  # the follower keeps its session; the parked leader's session fires, is ignored
        h.advance(5000)
        h.heartbeat("g", ids[1], gen + 1)
    assert h.shard.group("g").member(ids[0]) is not None  # type: ignore[union-attr]
    assert not a.done


def test_pending_member_expiry_completes_join(h: Harness) -> None:
    ids, _gen = h.form_group("g", 1, session_timeout_ms=60_000)
    pending = h.join("g", session_timeout_ms=7000)
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED
    assert h.deadline(hb("g", pending.response.member_id)) == h.now + 7000
    start = h.now
    leader = h.join("g", ids[0], session_timeout_ms=60_000)
    assert not leader.done  # the pending id blocks completion
    h.advance(6999)
    assert not leader.done
    h.advance(1)
    assert leader.done
    assert h.now == start + 7000
    record = h.shard.group_history("g")[-1]
    assert PendingMemberExpired(pending.response.member_id, 7000) in record.events
    assert pending.response.member_id in record.waited_for


def test_commit_rearms_session_in_stable_and_preparing(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    h.advance(5000)
    h.commit("g", {("t", 0): 1}, generation_id=gen, member_id=ids[1])
    assert h.deadline(hb("g", ids[1])) == h.now + 10_000
    h.join("g", ids[0])
    h.advance(1000)
    h.commit("g", {("t", 0): 2}, generation_id=gen, member_id=ids[1])
    assert h.deadline(hb("g", ids[1])) == h.now + 10_000


def test_answering_parked_sync_rearms_session(h: Harness) -> None:
    setup = completing(h)
    follower = h.sync("g", setup.members[1], setup.generation)
    h.advance(5000)
    h.sync("g", setup.members[0], setup.generation, dict.fromkeys(setup.members, b""))
    assert follower.done
    assert h.deadline(hb("g", setup.members[1])) == h.now + 10_000


# ------------------------------------------------------------------------------------- pending sync


def test_pending_sync_timer_armed_and_cancelled_when_all_synced(h: Harness) -> None:
    setup = completing(h)
    assert h.deadline(SYNC) == h.now + 30_000
    h.sync("g", setup.members[0], setup.generation, {})
    assert SYNC in h.timers  # follower still pending, even though the group is Stable
    h.sync("g", setup.members[1], setup.generation)
    assert SYNC not in h.timers


def test_pending_sync_expiry_evicts_even_after_stable(h: Harness) -> None:
    setup = completing(h, n=3)
    h.sync("g", setup.members[0], setup.generation, {})
    h.sync("g", setup.members[1], setup.generation)
    for _ in range(7):
        h.advance(4500)
        for m in setup.members[:2]:
            h.heartbeat("g", m, setup.generation)
    snap = h.shard.group("g")
    assert snap is not None
    assert [m.member_id for m in snap.members] == setup.members[:2]
    assert snap.state is S.PREPARING_REBALANCE


def test_pending_sync_expiry_of_leader_fails_parked_followers(h: Harness) -> None:
    setup = completing(h, n=2)
    follower = h.sync("g", setup.members[1], setup.generation)
    for _ in range(7):
        h.advance(4500)
        h.heartbeat("g", setup.members[0], setup.generation)  # leader alive but never syncs
    assert follower.error is ErrorCode.REBALANCE_IN_PROGRESS
    snap = h.shard.group("g")
    assert snap is not None
    assert [m.member_id for m in snap.members] == [setup.members[1]]
    assert snap.leader_id == setup.members[1]


def test_pending_sync_expiry_emptying_the_group_writes_record(h: Harness) -> None:
    setup = completing(h, n=1)
    records_before = len(h.log)
    h.heartbeat("g", setup.members[0], setup.generation)
    h.advance(30_000)
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.EMPTY
    assert snap.generation_id == setup.generation + 1
    assert len(h.log) == records_before + 1


def test_new_rebalance_cancels_pending_sync(h: Harness) -> None:
    setup = completing(h)
    assert SYNC in h.timers
    h.join("g", version=3)
    assert SYNC not in h.timers
    assert h.shard.group("g").pending_sync_members == ()  # type: ignore[union-attr]
    del setup


# -------------------------------------------------------------------------------------- stale fires


def test_stale_fires_are_ignored(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    key = hb("g", ids[1])
    deadline = h.deadline(key)
    assert deadline is not None
    h.advance(2000)
    h.heartbeat("g", ids[1], gen)  # re-armed later
    # an old fire of the key arriving now is recognised as stale
    result = h.shard.on_timer(key, deadline)
    assert result == Result()
    assert h.shard.group("g").member(ids[1]) is not None  # type: ignore[union-attr]
    # a key that is not armed at all
    assert h.shard.on_timer(TimerKey(TimerKind.SYNC, "nope"), h.now) == Result()


def test_sync_timer_of_older_generation_is_ignored(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, rebalance_timeout_ms=30_000)
    # generation 1's pending-sync timer was cancelled when both synced; arm one for gen 2 and run gen 3
    a = h.join("g", ids[0])
    b = h.join("g", ids[1])
    assert a.done
    assert b.done
    assert h.shard.armed_timers()[SYNC] == h.now + 30_000
    h.sync("g", ids[0], gen + 1, {ids[0]: assignment({"t": [0]})})
    h.sync("g", ids[1], gen + 1)
    assert SYNC not in h.shard.armed_timers()


# ----------------------------------------------------------------------------------- expiration job


def test_expiration_job_scheduled_on_load_and_rescheduled(h: Harness) -> None:
    key = TimerKey(TimerKind.EXPIRATION)
    h.apply(h.shard.on_loaded(h.now))
    assert h.deadline(key) == 600_000
    h.advance(600_000)
    assert h.deadline(key) == 1_200_000


def test_armed_timers_mirror_the_runtime(h: Harness) -> None:
    stable(h)
    h.join("g", version=3)
    assert h.shard.armed_timers() == {k: d for k, (d, _) in h.timers.items()}


def test_members_of_one_application_share_their_protocols_timeouts_and_one_timer_key(h: Harness) -> None:
    """What an idle member holds is mostly its own: the protocols and timeouts its group's members all
    sent are kept once (the leader's objects), and its session timer has one key object, the one the
    timer table holds, from the pending id's first timer on (memory per idle member in benchmarks.md)."""
    calls = []
    for _ in range(3):
        # Equal values, distinct objects, as each member's request decodes them.
        metadata = bytes(bytearray(subscription("t")))
        session, rebalance = int("45000"), int("300000")
        first = h.join("g", protocols=(("range", metadata),), session_timeout_ms=session)
        assert first.error is ErrorCode.MEMBER_ID_REQUIRED
        calls.append(
            h.join(
                "g",
                first.response.member_id,
                protocols=(("range", metadata),),
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
            )
        )
    for _ in range(10):  # the initial delay, extended by the members that joined during it
        if not all(c.done for c in calls):
            h.advance(h.config.group_initial_rebalance_delay_ms)
    assert all(c.done for c in calls)
    group = h.shard._groups.group("g")  # type: ignore[attr-defined]
    leader, *others = group.members.values()
    for member in others:
        assert member.protocols is leader.protocols
        if not compiled():  # compiled, a member's ints are fields of its struct, not objects
            assert member.session_timeout_ms is leader.session_timeout_ms
            assert member.rebalance_timeout_ms is leader.rebalance_timeout_ms
    armed = {key: key for key in h.shard.armed_timers()}
    for member in (leader, *others):
        assert member.session_key is not None
        assert armed[member.session_key] is member.session_key
