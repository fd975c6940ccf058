"""Every rebalance has a recorded cause; generation records and their Notify events."""

from __future__ import annotations

from regroup.group.config import GroupConfig
from regroup.group.effects import TimerKey, TimerKind
from regroup.group.history import (
    AwaitedMember,
    GenerationCompleted,
    GenerationStable,
    JoinDeadlineEvicted,
    LeaderRejoined,
    LeftMember,
    MemberJoined,
    MemberLeft,
    MemberMetadataChanged,
    PendingSyncExpired,
    RebalanceStarted,
    SessionExpired,
    StaticMemberReplaced,
    StaticMemberSwapped,
    membership_reasons,
)
from regroup.protocol.errors import ErrorCode

from .harness import Harness, subscription
from .states import completing


def test_generation_record_contents_and_events(h: Harness) -> None:
    a = h.join("g", version=3)
    h.advance(1000)
    b = h.join("g", version=3)
    h.advance(5000)
    gen = a.response.generation_id
    h.advance(250)
    h.sync("g", b.response.member_id, gen)
    h.sync("g", a.response.member_id, gen, {})
    (record,) = h.shard.group_history("g")
    assert record.generation_id == gen == 1
    assert record.cause == MemberJoined(a.response.member_id)
    assert record.events == (MemberJoined(b.response.member_id),)
    assert record.members == ((a.response.member_id, None), (b.response.member_id, None))
    assert (record.protocol_type, record.protocol_name, record.leader_id) == (
        "consumer",
        "range",
        a.response.member_id,
    )
    assert record.join_phase_ms == 6000
    assert record.sync_phase_ms == 250
    assert record.joined == (a.response.member_id, b.response.member_id)
    assert record.left == ()
    completed = [n for n in h.notifications if isinstance(n, GenerationCompleted)]
    stable = [n for n in h.notifications if isinstance(n, GenerationStable)]
    assert len(completed) == len(stable) == 1
    assert completed[0].record.stable_ms is None
    assert stable[0].record == record
    assert "cause: new member client-1 joined" in stable[0].message()
    assert "sync phase 250 ms" in stable[0].message()


def test_causes(h: Harness) -> None:
    ids, gen = h.form_group("g", 3, static=True, session_timeout_ms=10_000)
    h.join("g", ids[1], instance_id="i1", protocols=(("range", subscription("t", "new")),), reason="r")
    h.join("g", ids[0], instance_id="i0")
    h.join("g", ids[2], instance_id="i2")
    assert h.shard.group_history("g")[-1].cause == MemberMetadataChanged(ids[1], "r")
    gen += 1
    # replacement during CompletingRebalance: always a rebalance
    replaced = h.join("g", instance_id="i2")
    h.join("g", ids[0], instance_id="i0")
    h.join("g", ids[1], instance_id="i1", protocols=(("range", subscription("t", "new")),))
    record = h.shard.group_history("g")[-1]
    assert record.cause == StaticMemberReplaced("i2", ids[2], replaced.response.member_id)
    assert record.joined == (replaced.response.member_id,)
    assert record.left == (ids[2],)
    members = [m for m, _ in record.members]
    gen = record.generation_id
    # leave
    h.leave("g", ("", "i1"), version=5, reason="bye")
    for m in members:
        h.join("g", m, instance_id={ids[0]: "i0", replaced.response.member_id: "i2"}.get(m))
    assert h.shard.group_history("g")[-1].cause == MemberLeft((LeftMember(ids[1], "i1", "bye"),))


def test_session_expiry_and_pending_sync_causes(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    h.advance(10_000)
    h.join("g", ids[0])
    assert h.shard.group_history("g")[-1].cause == SessionExpired(ids[0], 10_000) or h.shard.group_history(
        "g"
    )[-1].cause == SessionExpired(ids[1], 10_000)
    h2 = Harness()
    c = completing(h2, n=2)
    h2.sync("g", c.members[0], c.generation, {})
    for _ in range(7):  # both stay alive, the follower never syncs
        h2.advance(4500)
        for m in c.members:
            h2.heartbeat("g", m, c.generation)
    h2.join("g", c.members[0])
    assert h2.shard.group_history("g")[-1].cause == PendingSyncExpired((c.members[1],), 30_000)
    del gen


def test_history_is_bounded() -> None:
    h = Harness(GroupConfig(rebalance_history_size=3))
    ids, _ = h.form_group("g", 1)
    for _ in range(5):
        call = h.join("g", ids[0])
        assert call.error is ErrorCode.NONE
        h.sync("g", ids[0], call.response.generation_id, {})
    history = h.shard.group_history("g")
    assert [r.generation_id for r in history] == [4, 5, 6]
    assert h.shard.group_history("unknown") == ()


def test_history_forgotten_with_the_group(h: Harness) -> None:
    ids, _ = h.form_group("g", 1)
    h.leave("g", ids[0])
    assert h.shard.group_history("g")
    h.delete_groups("g")
    assert h.shard.group_history("g") == ()


def test_a_rebalance_that_waits_names_whom_and_until_when(h: Harness) -> None:
    ids, gen = h.form_group("g", 3, session_timeout_ms=10_000, rebalance_timeout_ms=30_000)
    h.advance(4000)
    h.heartbeat("g", ids[1], gen)  # ids[1]'s session now ends at now + 10 s
    h.notifications.clear()
    start = h.now
    third_deadline = h.deadline(TimerKey(TimerKind.HEARTBEAT, "g", ids[2]))
    assert third_deadline is not None
    assert third_deadline < start + 10_000
    h.join("g", ids[0])  # the leader rejoins: a rebalance waiting for ids[1] and ids[2]
    (started,) = [n for n in h.notifications if isinstance(n, RebalanceStarted)]
    assert started.cause == LeaderRejoined(ids[0])
    assert started.rebalance_started_ms == start
    assert started.join_deadline_ms == start + 30_000
    assert started.awaiting == (
        AwaitedMember(ids[1], None, start + 10_000, "session timeout"),
        AwaitedMember(ids[2], None, third_deadline, "session timeout"),
    )
    assert h.shard.rebalance_progress("g") == started
    assert f"waiting for {ids[1]}" in started.message()
    h.join("g", ids[1])
    progress = h.shard.rebalance_progress("g")
    assert progress is not None
    assert [m.member_id for m in progress.awaiting] == [ids[2]]


def test_a_dynamic_member_is_awaited_until_the_rebalance_timeout_when_that_comes_first(h: Harness) -> None:
    ids, _ = h.form_group("r", 2, session_timeout_ms=30_000, rebalance_timeout_ms=5_000)
    static_ids, _ = h.form_group("s", 2, static=True, session_timeout_ms=30_000, rebalance_timeout_ms=5_000)
    assert h.shard.rebalance_progress("r") is None  # Stable
    start = h.now
    h.join("r", ids[0], session_timeout_ms=30_000, rebalance_timeout_ms=5_000)
    h.join("s", static_ids[0], instance_id="i0", session_timeout_ms=30_000, rebalance_timeout_ms=5_000)
    progress = h.shard.rebalance_progress("r")
    assert progress is not None
    assert progress.awaiting == (AwaitedMember(ids[1], None, start + 5_000, "rebalance timeout"),)
    # a static member is not evicted when the join phase ends: only its session counts
    static = h.shard.rebalance_progress("s")
    assert static is not None
    (awaited,) = static.awaiting
    assert (awaited.member_id, awaited.group_instance_id, awaited.evicted_by) == (
        static_ids[1],
        "i1",
        "session timeout",
    )
    assert awaited.deadline_ms is not None
    assert awaited.deadline_ms > start + 5_000


def test_a_static_member_swapped_without_a_rebalance_is_reported_and_not_counted_as_joined(
    h: Harness,
) -> None:
    ids, gen = h.form_group("g", 2, static=True)
    h.notifications.clear()
    new = h.join("g", instance_id="i1")
    new_id = new.response.member_id
    (swapped,) = [n for n in h.notifications if isinstance(n, StaticMemberSwapped)]
    assert (swapped.generation_id, swapped.replaced) == (gen, StaticMemberReplaced("i1", ids[1], new_id))
    assert "without a rebalance" in swapped.message()
    h.leave("g", ("", "i0"), version=5)
    h.join("g", new_id, instance_id="i1")
    record = h.shard.group_history("g")[-1]
    assert record.left == (ids[0],)
    assert record.joined == ()


def test_membership_reasons() -> None:
    joined, left = membership_reasons(
        (
            MemberJoined("n", None, "hello"),
            MemberLeft((LeftMember("l", "i", "bye"),)),
            SessionExpired("e", 6000),
            StaticMemberReplaced("s", "old", "new"),
            JoinDeadlineEvicted(("j",), 30_000),
        )
    )
    assert joined == {"n": "new member (reason: hello)", "new": "replaced old (static member s)"}
    assert left == {
        "l": "left the group (LeaveGroup) (reason: bye)",
        "e": "session expired (6000 ms without a heartbeat)",
        "old": "replaced by new (static member s)",
        "j": "did not rejoin within the rebalance timeout (30000 ms)",
    }
