"""The pitfalls of docs/design/group-semantics.md §14, one test each."""

from __future__ import annotations

from regroup.group.config import GroupConfig
from regroup.group.records import DecodedGroupMetadata, DecodedOffsetCommit, decode_record
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import Harness, assignment
from .states import completing, empty, preparing

S = GroupState


def test_1_heartbeat_none_and_commit_rejected_in_completing_commit_accepted_in_preparing(h: Harness) -> None:
    c = completing(h)
    assert h.heartbeat("g", c.members[1], c.generation).error is ErrorCode.NONE
    commit = h.commit("g", {("t", 0): 1}, generation_id=c.generation, member_id=c.members[1])
    assert commit.response.topics[0].partitions[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    h2 = Harness()
    p = preparing(h2)
    commit = h2.commit("g", {("t", 0): 1}, generation_id=p.generation, member_id=p.members[1])
    assert commit.response.topics[0].partitions[0].error_code == 0


def test_2_generation_bumps_only_at_join_completion(h: Harness) -> None:
    p = preparing(h)
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.generation_id == p.generation
    assert h.heartbeat("g", p.members[1], p.generation).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.sync("g", p.members[1], p.generation).error is ErrorCode.REBALANCE_IN_PROGRESS
    h.leave("g", p.members[1])  # completes: the leader was the only one left and had rejoined
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.generation_id == p.generation + 1
    # completing with zero members bumps too
    h3 = Harness()
    ids, gen = h3.form_group("x", 1)
    h3.leave("x", ids[0])
    assert h3.shard.group("x").generation_id == gen + 1  # type: ignore[union-attr]


def test_3_initial_rebalance_budget_subtracts_previous_delay() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    calls = [h.join("g", version=3, rebalance_timeout_ms=10_000)]
    # a newcomer in every window: 3000 (budget 7000) → 6000 (budget 4000) → 9000 (budget 1000) → 10000
    for t in (1000, 4000, 7000, 9500):
        h.advance_to(t)
        calls.append(h.join("g", version=3, rebalance_timeout_ms=10_000))
    h.advance_to(9999)
    assert not any(c.done for c in calls)
    h.advance_to(10_000)
    assert all(c.done for c in calls)


def test_4_member_id_required_and_pending_ids_block_completion(h: Harness) -> None:
    ids, gen = h.form_group("g", 1, session_timeout_ms=60_000)
    first = h.join("g", version=4, session_timeout_ms=10_000)
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    rejoin = h.join("g", ids[0], session_timeout_ms=60_000)
    assert not rejoin.done  # the pending id blocks completion
    second = h.join("g", first.response.member_id, session_timeout_ms=10_000)
    assert rejoin.done
    assert second.done
    static = h.join("g", instance_id="s", version=9)
    assert not static.done  # static members never get MEMBER_ID_REQUIRED
    del gen


def test_5_parked_members_exempt_from_expiry_but_new_members_have_join_timeout() -> None:
    h = Harness(GroupConfig(new_member_join_timeout_ms=300_000))
    ids, gen = h.form_group("g", 2, rebalance_timeout_ms=900_000, session_timeout_ms=10_000)
    leader = h.join("g", ids[0], rebalance_timeout_ms=900_000)
    newcomer = h.join("g", version=3, rebalance_timeout_ms=900_000)
    while h.now < 400_000:
        h.advance(5000)
        h.heartbeat("g", ids[1], gen)
    assert newcomer.error is ErrorCode.UNKNOWN_MEMBER_ID  # removed after 5 minutes
    assert not leader.done  # still parked, still a member
    assert h.shard.group("g").member(ids[0]) is not None  # type: ignore[union-attr]


def test_6_join_deadline_keeps_static_members_and_may_loop(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, static=True, session_timeout_ms=100_000, rebalance_timeout_ms=10_000)
    pending = h.join("g").response.member_id
    h.leave("g", pending)  # Stable → PreparingRebalance; nobody rejoins
    h.advance(10_000)
    snap = h.shard.group("g")
    assert snap is not None
    assert snap.state is S.PREPARING_REBALANCE
    assert len(snap.members) == 2
    h.advance(10_000)
    assert h.shard.group("g").state is S.PREPARING_REBALANCE  # type: ignore[union-attr]
    del ids, gen


def test_7_pending_sync_timeout_removes_members_even_after_stable(h: Harness) -> None:
    c = completing(h)
    h.sync("g", c.members[0], c.generation, {})
    assert h.shard.group("g").state is S.STABLE  # type: ignore[union-attr]
    for _ in range(7):
        h.advance(4500)
        h.heartbeat("g", c.members[0], c.generation)
    snap = h.shard.group("g")
    assert snap is not None
    assert [m.member_id for m in snap.members] == [c.members[0]]


def test_8_static_rejoin_in_stable(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, static=True)
    log = len(h.log)
    h.fail_next_append()
    failed = h.join("g", instance_id="i0", version=8)
    assert failed.error is ErrorCode.NOT_COORDINATOR
    assert len(h.log) == log  # nothing persisted, old id restored
    ok = h.join("g", instance_id="i0", version=8)
    assert ok.response.leader == ids[0] != ok.response.member_id
    assert h.heartbeat("g", ids[0], gen, instance_id="i0").error is ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat("g", ids[0], gen).error is ErrorCode.UNKNOWN_MEMBER_ID
    v9 = h.join("g", instance_id="i0", version=9)
    assert v9.response.skip_assignment
    assert v9.response.leader == v9.response.member_id


def test_9_validation_order() -> None:
    h = Harness(GroupConfig(group_max_size=1))
    h.form_group("g", 1)
    assert h.join("g", protocol_type="other").error is ErrorCode.GROUP_MAX_SIZE_REACHED
    h2 = Harness()
    h2.form_group("g", 1)
    assert h2.join("g", "ghost", protocols=(("zz", b""),)).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    h3 = Harness()
    empty(h3)
    assert h3.sync("g", "ghost", 12345, instance_id="x").error is ErrorCode.UNKNOWN_MEMBER_ID


def test_10_generation_minus_one_commits(h: Harness) -> None:
    assert h.commit("s", {("t", 0): 1}).response.topics[0].partitions[0].error_code == 0
    assert h.shard.group("s").protocol_type is None  # type: ignore[union-attr]
    empty(h)
    assert h.commit("g", {("t", 0): 1}).response.topics[0].partitions[0].error_code == 0
    v8 = h.commit("nope", {("t", 0): 1}, generation_id=0, member_id="m", version=8)
    v9 = h.commit("nope", {("t", 0): 1}, generation_id=0, member_id="m", version=9)
    assert v8.response.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    assert v9.response.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_11_unknown_groups_are_not_errors_for_fetch_and_describe(h: Harness) -> None:
    fetched = h.fetch("nope", {"t": [0]})
    assert fetched.error_code == 0
    assert fetched.topics[0].partitions[0].committed_offset == -1
    described = h.describe("nope")
    assert described.error_code == 0
    assert described.group_state == "Dead"


def test_12_retention_runs_from_becoming_empty() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=50_000, offsets_retention_check_interval_ms=5000))
    h.apply(h.shard.on_loaded(0))
    ids, gen = h.form_group("g", 1, session_timeout_ms=600_000)
    h.commit("g", {("t", 0): 1, ("gone", 0): 2}, generation_id=gen, member_id=ids[0])
    committed = h.now
    while h.now < committed + 80_000:
        h.advance(5000)
        h.heartbeat("g", ids[0], gen)
    assert h.fetched("g", "t", 0)[0] == 1  # subscribed: kept while Stable
    assert h.fetched("g", "gone", 0)[0] == -1  # unsubscribed: expired by commit time
    h.leave("g", ids[0])
    left = h.now
    h.advance_to(left + 45_000)
    assert h.fetched("g", "t", 0)[0] == 1  # 125s after the commit, but only 45s after becoming Empty
    h.advance_to(left + 55_000)
    assert h.fetched("g", "t", 0)[0] == -1
    assert h.shard.group("g") is None
    h2 = Harness(GroupConfig(offsets_retention_check_interval_ms=5000))
    h2.apply(h2.shard.on_loaded(0))
    empty(h2)  # no offsets at all: deleted at the next check, whatever the retention
    h2.advance(5000)
    assert h2.shard.group("g") is None


def test_13_records_written_at_the_right_moments(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, static=True)  # its first join creates the group
    h.join("g", instance_id="i1")  # static replacement
    h.leave("g", ("", "i0"), ("", "i1"))  # group becomes Empty
    kinds = []
    for record in h.log:
        decoded = decode_record(record)
        if isinstance(decoded, DecodedGroupMetadata):
            assert decoded.value is not None
            assert decoded.value_version == 3
            kinds.append((decoded.value.generation, len(decoded.value.members)))
        else:
            assert isinstance(decoded, DecodedOffsetCommit)
    # empty group, leader's sync (generation 1), static replacement (generation 1), Empty (generation 2)
    assert kinds == [(0, 0), (1, 2), (1, 2), (2, 0)]
    h.commit("g", {("t", 0): 1}, version=3, retention_time_ms=1000)
    h.commit("g", {("t", 0): 1}, version=9)
    # Kafka 4.3: OffsetCommitValue v1 with an expire timestamp, v4 otherwise
    assert [(rec.value or b"")[:2] for rec in h.log[-2:]] == [b"\x00\x01", b"\x00\x04"]
    del ids, gen


def test_14_commit_shard_answers_exactly_the_partitions_it_is_given(h: Harness) -> None:
    call = h.commit("g", {("known", 0): 1, ("known", 1): 2})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in call.response.topics] == [
        ("known", [0, 1])
    ]
    # OffsetFetch does no topic check
    assert h.fetch("g", {"never-existed": [3]}).topics[0].partitions[0].committed_offset == -1


def test_15_describe_outside_stable(h: Harness) -> None:
    p = preparing(h)
    described = h.describe("g")
    assert described.protocol_data == ""
    assert [(m.member_metadata, m.member_assignment) for m in described.members] == [
        (b"", assignment({"t": [0]})),
        (b"", assignment({"t": [1]})),
    ]
    assert all(m.client_host.startswith("/") for m in described.members)
    del p
