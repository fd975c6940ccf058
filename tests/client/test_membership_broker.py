"""GroupMember against a real broker (the ``bootstrap`` fixture): forming, leaving, dying, static members."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence

import pytest

from regroup.client import FencedInstanceIdError, GroupMember, GroupMemberConfig, MemberState, TopicPartition

from .helpers import all_partitions, create_topics, disjoint_and_complete, wait_for

TOPICS = {"orders": 6, "payments": 3}

_counter = itertools.count()


def _names(prefix: str) -> tuple[str, dict[str, int]]:
    n = next(_counter)
    suffix = uuid.uuid4().hex[:6]
    return f"{prefix}-{n}-{suffix}", {f"{t}-{n}-{suffix}": p for t, p in TOPICS.items()}


def _config(bootstrap: str, group: str, topics: Sequence[str], **overrides: object) -> GroupMemberConfig:
    settings: dict[str, object] = {
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 300,
        "retry_backoff_ms": 50,
        "max_poll_interval_ms": 30000,
    }
    settings.update(overrides)
    return GroupMemberConfig(bootstrap_servers=bootstrap, group_id=group, topics=list(topics), **settings)  # type: ignore[arg-type]


async def _converge(
    members: Sequence[GroupMember], expected: set[TopicPartition], timeout: float = 30.0
) -> None:
    """Poll every member until all are stable in one generation with disjoint, complete assignments."""

    async def step() -> None:
        await asyncio.gather(*(m.poll(100) for m in members))
        await asyncio.sleep(0.05)

    def done() -> bool:
        return (
            all(m.state is MemberState.STABLE and not m.membership.rejoin_needed for m in members)
            and len({m.generation_id for m in members}) == 1
            and disjoint_and_complete([m.assignment for m in members], expected)
        )

    await wait_for(done, timeout, step=step)


async def _close_all(members: Sequence[GroupMember]) -> None:
    for m in members:
        if not m.closed:
            await m.close()


def test_three_members_form_a_group(bootstrap: str, run: asyncio.Runner) -> None:
    group, topics = _names("form")
    expected = all_partitions(topics)

    async def scenario() -> None:
        await create_topics(bootstrap, topics)
        events: list[tuple[str, str, frozenset[TopicPartition]]] = []

        def listener(name: str, kind: str) -> object:
            def record(partitions: frozenset[TopicPartition]) -> None:
                events.append((name, kind, partitions))

            return record

        members = [
            GroupMember(
                _config(bootstrap, group, list(topics), client_id=f"c{i}"),
                on_partitions_assigned=listener(f"c{i}", "assigned"),  # type: ignore[arg-type]
                on_partitions_revoked=listener(f"c{i}", "revoked"),  # type: ignore[arg-type]
            )
            for i in range(3)
        ]
        try:
            await _converge(members, expected)
            assert sum(1 for m in members if m.is_leader) == 1
            # range: each member gets 2 of the 6 "orders" partitions and 1 of the 3 "payments" ones.
            assert sorted(len(m.assignment) for m in members) == [3, 3, 3]
            assigned_events = [e for e in events if e[1] == "assigned"]
            assert {e[0] for e in assigned_events} == {"c0", "c1", "c2"}
            # What each member was last told matches its assignment.
            for i, m in enumerate(members):
                owned: set[TopicPartition] = set()
                for name, kind, parts in events:
                    if name == f"c{i}":
                        owned = owned | parts if kind == "assigned" else owned - parts
                assert owned == set(m.assignment)
        finally:
            await _close_all(members)

    run.run(scenario())


@pytest.mark.parametrize(
    "assignors",
    [("range", "cooperative-sticky"), ("roundrobin",), ("sticky",), ("cooperative-sticky",)],
    ids="+".join,
)
def test_member_leaving_triggers_rebalance(
    bootstrap: str, run: asyncio.Runner, assignors: tuple[str, ...]
) -> None:
    group, topics = _names("leave")
    expected = all_partitions(topics)

    async def scenario() -> None:
        await create_topics(bootstrap, topics)
        members = [
            GroupMember(_config(bootstrap, group, list(topics), client_id=f"c{i}", assignors=list(assignors)))
            for i in range(3)
        ]
        try:
            await _converge(members, expected)
            assert members[0].generation.protocol_name == assignors[0]
            generation = members[0].generation_id
            before = {m.member_id: m.assignment for m in members}
            leaving = members.pop()
            await leaving.close()
            assert leaving.assignment == frozenset()
            await _converge(members, expected, timeout=20)
            assert members[0].generation_id > generation
            assert sorted(len(m.assignment) for m in members) == [4, 5]
            if "sticky" in assignors[0]:
                # Only the leaver's partitions moved.
                assert all(before[m.member_id] <= m.assignment for m in members)
        finally:
            await _close_all(members)

    run.run(scenario())


def test_dead_member_is_expired_after_session_timeout(bootstrap: str, run: asyncio.Runner) -> None:
    group, topics = _names("dead")
    expected = all_partitions(topics)

    async def scenario() -> None:
        await create_topics(bootstrap, topics)
        members = [GroupMember(_config(bootstrap, group, list(topics), client_id=f"c{i}")) for i in range(3)]
        try:
            await _converge(members, expected)
            generation = members[0].generation_id
            dead = members.pop()
            loop = asyncio.get_running_loop()
            died_at = loop.time()
            await dead.abort()  # no LeaveGroup: the coordinator must notice the missing heartbeats
            await _converge(members, expected, timeout=20)
            elapsed = loop.time() - died_at
            assert members[0].generation_id > generation
            # Expired by the session timeout (6 s), not earlier.
            assert 5.0 < elapsed < 15.0
        finally:
            await _close_all(members)

    run.run(scenario())


def test_static_member_restart_keeps_assignment_without_rebalance(
    bootstrap: str, run: asyncio.Runner
) -> None:
    group, topics = _names("static")
    expected = all_partitions(topics)

    async def scenario() -> None:
        await create_topics(bootstrap, topics)

        def static(i: int) -> GroupMember:
            return GroupMember(
                _config(bootstrap, group, list(topics), client_id=f"c{i}", group_instance_id=f"instance-{i}")
            )

        members = [static(i) for i in range(3)]
        try:
            await _converge(members, expected)
            generation = members[0].generation_id
            before = {m.group_instance_id: m.assignment for m in members}
            # Restart every member in turn, the leader included (KIP-814 SkipAssignment on JoinGroup v9).
            for i in range(3):
                old = members[i]
                await old.close()  # static: no LeaveGroup
                members[i] = static(i)
                await _converge(members, expected, timeout=20)
                assert {m.generation_id for m in members} == {generation}
                assert {m.group_instance_id: m.assignment for m in members} == before
                assert members[i].member_id != old.member_id
        finally:
            await _close_all(members)

    run.run(scenario())


def test_duplicate_static_instance_fences_the_old_one(bootstrap: str, run: asyncio.Runner) -> None:
    group, topics = _names("fence")
    expected = all_partitions(topics)

    async def scenario() -> None:
        await create_topics(bootstrap, topics)
        cfg = _config(bootstrap, group, list(topics), group_instance_id="the-instance")
        lost: list[frozenset[TopicPartition]] = []
        first = GroupMember(cfg, on_partitions_lost=lost.append)
        second = GroupMember(cfg)
        try:
            await _converge([first], expected)
            await _converge([second], expected)
            assert second.assignment == expected

            async def poll_first() -> None:
                await first.poll(100)
                await asyncio.sleep(0.05)

            with pytest.raises(FencedInstanceIdError):
                await wait_for(lambda: False, 10.0, step=poll_first)
            # The fence is final: the old member keeps failing and the new one is untouched.
            with pytest.raises(FencedInstanceIdError):
                await first.poll(0)
            await second.poll(0)
            assert second.assignment == expected
            await first.close()
            assert lost == [expected]  # its generation is gone: the partitions are lost, not revoked
        finally:
            await first.abort()
            await second.close()

    run.run(scenario())


def test_commit_and_fetch_offsets(bootstrap: str, run: asyncio.Runner) -> None:
    group, topics = _names("offsets")
    expected = all_partitions(topics)

    async def scenario() -> None:
        await create_topics(bootstrap, topics)
        members = [GroupMember(_config(bootstrap, group, list(topics), client_id=f"c{i}")) for i in range(2)]
        try:
            await _converge(members, expected)
            offsets = {tp: 10 + tp.partition for tp in members[0].assignment}
            await members[0].commit(offsets)
            fetched = await members[1].committed(sorted(expected, key=TopicPartition.sort_key))
            for tp in expected:
                got = fetched[tp]
                if tp in offsets:
                    assert got is not None
                    assert got.offset == offsets[tp]
                else:
                    assert got is None
        finally:
            await _close_all(members)

    run.run(scenario())
