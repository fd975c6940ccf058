"""Forcing entry points of the shard (used by ``regroup.testing``): expire a member now, force a rebalance."""

from __future__ import annotations

from regroup.group.history import RebalanceForced, SessionExpired
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import Harness


def _state(h: Harness, group_id: str) -> GroupState:
    snapshot = h.shard.group(group_id)
    assert snapshot is not None
    return snapshot.state


def test_expire_member_rebalances_a_stable_group_with_a_session_expired_cause(h: Harness) -> None:
    ids, gen = h.form_group("g", 2, session_timeout_ms=10_000)
    assert h.apply(h.shard.expire_member("g", ids[1], h.now)) is True
    assert _state(h, "g") is GroupState.PREPARING_REBALANCE
    snapshot = h.shard.group("g")
    assert snapshot is not None
    assert [m.member_id for m in snapshot.members] == [ids[0]]
    hb = h.heartbeat("g", ids[1], gen)
    assert hb.error is ErrorCode.UNKNOWN_MEMBER_ID
    rejoin = h.join("g", ids[0])
    assert rejoin.error is ErrorCode.NONE
    record = h.shard.group_history("g")[-1]
    assert record.generation_id == gen + 1
    assert record.cause == SessionExpired(ids[1], 10_000)
    assert record.left == (ids[1],)


def test_expire_member_of_a_parked_member_answers_its_join_unknown_member(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    h.apply(h.shard.force_rebalance("g", "test", h.now))
    parked = h.join("g", ids[1])  # parked: waiting for ids[0]
    assert not parked.done
    assert h.apply(h.shard.expire_member("g", ids[1], h.now)) is True
    assert parked.done
    assert parked.error is ErrorCode.UNKNOWN_MEMBER_ID
    # ids[1] gone, nothing else left to wait for but ids[0]
    rejoin = h.join("g", ids[0])
    assert rejoin.error is ErrorCode.NONE
    assert rejoin.response.generation_id == gen + 1


def test_expire_unknown_member_or_group_changes_nothing(h: Harness) -> None:
    ids, _ = h.form_group("g", 1)
    timers = dict(h.timers)
    assert h.apply(h.shard.expire_member("g", "nobody", h.now)) is False
    assert h.apply(h.shard.expire_member("other", ids[0], h.now)) is False
    assert _state(h, "g") is GroupState.STABLE
    assert h.timers == timers


def test_expire_pending_member(h: Harness) -> None:
    first = h.join("g", version=9)
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    pending = first.response.member_id
    assert h.apply(h.shard.expire_member("g", pending, h.now)) is True
    again = h.join("g", pending, version=9)
    assert again.done
    # The pending id is forgotten: Kafka treats a known-looking id of a group without it as unknown.
    assert again.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_force_rebalance_records_its_cause_and_keeps_commits_of_the_generation(h: Harness) -> None:
    ids, gen = h.form_group("g", 2)
    assert h.apply(h.shard.force_rebalance("g", "moving partitions", h.now)) is True
    assert _state(h, "g") is GroupState.PREPARING_REBALANCE
    hb = h.heartbeat("g", ids[0], gen)
    assert hb.error is ErrorCode.REBALANCE_IN_PROGRESS
    commit = h.commit("g", {("t", 0): 5}, generation_id=gen, member_id=ids[0])
    assert commit.response.topics[0].partitions[0].error_code == ErrorCode.NONE
    a = h.join("g", ids[0])
    b = h.join("g", ids[1])
    assert a.error is b.error is ErrorCode.NONE
    record = h.shard.group_history("g")[-1]
    assert record.generation_id == gen + 1
    assert record.cause == RebalanceForced("moving partitions")
    assert "rebalance forced: moving partitions" in record.describe()


def test_force_rebalance_while_rebalancing_is_an_event(h: Harness) -> None:
    ids, _ = h.form_group("g", 2)
    h.apply(h.shard.force_rebalance("g", "first", h.now))
    assert h.apply(h.shard.force_rebalance("g", "second", h.now)) is True
    h.join("g", ids[0])
    h.join("g", ids[1])
    record = h.shard.group_history("g")[-1]
    assert record.cause == RebalanceForced("first")
    assert record.events == (RebalanceForced("second"),)


def test_force_rebalance_of_missing_or_empty_group_is_refused(h: Harness) -> None:
    assert h.apply(h.shard.force_rebalance("nope", "x", h.now)) is False
    ids, _ = h.form_group("g", 1)
    h.leave("g", ids[0])
    assert _state(h, "g") is GroupState.EMPTY
    assert h.apply(h.shard.force_rebalance("g", "x", h.now)) is False
    assert _state(h, "g") is GroupState.EMPTY
