"""regroup.client members with ``group.protocol=consumer`` (KIP-848) against a real regroup broker.

Ownership is tracked through the members' own rebalance callbacks: a partition must never be assigned to
one member while another still owns it, and the group must converge to every partition owned exactly once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest

from regroup.client import (
    CommitFailedError,
    ConsumerMemberState,
    GroupMember,
    GroupMemberConfig,
    TopicPartition,
)
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.testing import TestBroker

from .helpers import all_partitions, disjoint_and_complete

BROKER_CONFIG = {
    "group.consumer.heartbeat.interval.ms": 200,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.assignment.interval.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def broker() -> Iterator[TestBroker]:
    with TestBroker(config=BROKER_CONFIG, virtual_clock=False) as b:
        yield b


@pytest.fixture
def names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"group-{suffix}", f"topic-{suffix}"


class Ownership:
    """Who owns which partition, according to the members' callbacks (one event loop: no locking)."""

    def __init__(self) -> None:
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []
        self.lost: dict[str, set[TopicPartition]] = {}

    def listeners(self, name: str) -> dict[str, Callable[[frozenset[TopicPartition]], None]]:
        def assigned(partitions: frozenset[TopicPartition]) -> None:
            for tp in partitions:
                current = self.owner.get(tp)
                if current is not None and current != name:
                    self.violations.append(f"{tp} assigned to {name} while owned by {current}")
                self.owner[tp] = name

        def released(partitions: frozenset[TopicPartition]) -> None:
            for tp in partitions:
                if self.owner.get(tp) == name:
                    del self.owner[tp]

        def lost(partitions: frozenset[TopicPartition]) -> None:
            self.lost.setdefault(name, set()).update(partitions)
            released(partitions)

        return {
            "on_partitions_assigned": assigned,
            "on_partitions_revoked": released,
            "on_partitions_lost": lost,
        }


def config(bootstrap: str, group: str, topic: str, **overrides: object) -> GroupMemberConfig:
    settings: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "topics": [topic],
        "group_protocol": "consumer",
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 200,
        "retry_backoff_ms": 50,
    }
    settings.update(overrides)
    return GroupMemberConfig(**settings)  # type: ignore[arg-type]


async def converge(members: Sequence[GroupMember], condition: Callable[[], bool]) -> None:
    """Poll every member until ``condition`` holds (generous bound: the machine may be loaded)."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, {m.member_id: sorted(map(str, m.assignment)) for m in members}
        await asyncio.gather(*(m.poll(100) for m in members))
        await asyncio.sleep(0.02)


def settled(members: Sequence[GroupMember], ownership: Ownership, expected: set[TopicPartition]) -> bool:
    """Every member stable and holding partitions, the assignment complete and disjoint, and the
    callbacks agreeing with it."""
    assignments = [m.assignment for m in members]
    return (
        all(m.consumer_state is ConsumerMemberState.STABLE and m.assignment for m in members)
        and disjoint_and_complete(assignments, expected)
        and set(ownership.owner) == expected
    )


def test_three_members_share_six_partitions_and_hand_over_on_leave(
    broker: TestBroker, names: tuple[str, str]
) -> None:
    group, topic = names
    broker.create_topic(topic, 6)
    expected = all_partitions({topic: 6})
    ownership = Ownership()

    async def scenario() -> None:
        members = [
            GroupMember(config(broker.bootstrap_servers, group, topic), **ownership.listeners(f"m{i}"))
            for i in range(3)
        ]
        try:
            await converge(members, lambda: settled(members, ownership, expected))
            assert all(len(m.assignment) == 2 for m in members)
            assert len({m.member_id for m in members}) == 3
            assert all(m.member_epoch > 0 for m in members)
            view = broker.group(group)
            assert view is not None
            assert len(view.members) == 3

            leaving = members.pop(0)
            handed_over = leaving.assignment
            await leaving.close()
            assert leaving.assignment == frozenset()
            await converge(members, lambda: settled(members, ownership, expected))
            assert handed_over <= members[0].assignment | members[1].assignment
        finally:
            for m in members:
                await m.close()
        assert ownership.violations == []
        assert ownership.lost == {}

    asyncio.run(scenario())


def test_mixed_group_with_a_classic_member(broker: TestBroker, names: tuple[str, str]) -> None:
    group, topic = names
    broker.create_topic(topic, 6)
    expected = all_partitions({topic: 6})
    ownership = Ownership()

    async def scenario() -> None:
        consumers = [
            GroupMember(config(broker.bootstrap_servers, group, topic), **ownership.listeners(f"c{i}"))
            for i in range(2)
        ]
        classic = GroupMember(
            config(broker.bootstrap_servers, group, topic, group_protocol="classic"),
            **ownership.listeners("classic"),
        )
        members = [*consumers, classic]
        try:
            await converge(consumers, lambda: settled(consumers, ownership, expected))
            await converge(
                members,
                lambda: (
                    disjoint_and_complete([m.assignment for m in members], expected)
                    and all(m.assignment for m in members)
                    and set(ownership.owner) == expected
                ),
            )
            # The classic member leaves; the consumer-protocol members take its partitions back.
            members.remove(classic)
            await classic.close()
            await converge(members, lambda: settled(members, ownership, expected))
        finally:
            for m in members:
                await m.close()
        assert ownership.violations == []

    asyncio.run(scenario())


def test_fenced_member_reports_lost_and_rejoins(broker: TestBroker, names: tuple[str, str]) -> None:
    group, topic = names
    broker.create_topic(topic, 2)
    expected = all_partitions({topic: 2})
    ownership = Ownership()

    async def scenario() -> None:
        member = GroupMember(config(broker.bootstrap_servers, group, topic), **ownership.listeners("m"))
        try:
            await converge([member], lambda: settled([member], ownership, expected))
            member_id = member.member_id
            await asyncio.to_thread(broker.fence_member, group, member_id)
            await converge([member], lambda: ownership.lost.get("m") == expected)
            await converge([member], lambda: settled([member], ownership, expected))
            assert member.member_id == member_id, "the client-generated member id survives fencing"
        finally:
            await member.close()

    asyncio.run(scenario())


def test_commit_carries_member_epoch_and_retries_stale_epoch(
    broker: TestBroker, names: tuple[str, str]
) -> None:
    group, topic = names
    broker.create_topic(topic, 2)
    expected = all_partitions({topic: 2})
    ownership = Ownership()
    committed_on_revoke: list[frozenset[TopicPartition]] = []

    def offsets_on_revoke(partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        committed_on_revoke.append(partitions)
        return dict.fromkeys(partitions, 7)

    async def scenario() -> None:
        member = GroupMember(
            config(broker.bootstrap_servers, group, topic),
            commit_on_revoke=offsets_on_revoke,
            **ownership.listeners("m"),
        )
        try:
            await converge([member], lambda: settled([member], ownership, expected))
            await member.commit({TopicPartition(topic, 0): 5})
            fault = await asyncio.to_thread(
                broker.fail_next, "OffsetCommit", "STALE_MEMBER_EPOCH", group=group
            )
            await member.commit({TopicPartition(topic, 1): 6})
            assert fault.fired == 1
        finally:
            await member.close()
        assert committed_on_revoke == [expected]
        with pytest.raises(RuntimeError):
            await member.commit({TopicPartition(topic, 0): 1})

    asyncio.run(scenario())
    assert broker.committed(group) == {(topic, 0): 7, (topic, 1): 7}


def test_commit_outside_the_group_fails(broker: TestBroker, names: tuple[str, str]) -> None:
    group, topic = names

    async def scenario() -> None:
        member = GroupMember(config(broker.bootstrap_servers, group, topic))
        try:
            with pytest.raises(CommitFailedError):
                await member.commit({TopicPartition(topic, 0): 1})
        finally:
            await member.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"group_remote_assignor": "no-such-assignor"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"topics": [], "topic_regex": "(unclosed"}, ErrorCode.INVALID_REGULAR_EXPRESSION),
    ],
)
def test_fatal_errors_surface_from_poll(
    broker: TestBroker, names: tuple[str, str], overrides: dict[str, object], error: ErrorCode
) -> None:
    group, topic = names

    async def scenario() -> None:
        member = GroupMember(config(broker.bootstrap_servers, group, topic, **overrides))
        try:
            with pytest.raises(KafkaError) as raised:
                await converge([member], lambda: False)
            assert raised.value.code is error
            assert member.consumer_state is ConsumerMemberState.FATAL
        finally:
            await member.close()

    asyncio.run(scenario())


def test_coordinator_errors_are_retried(broker: TestBroker, names: tuple[str, str]) -> None:
    group, topic = names
    broker.create_topic(topic, 2)
    expected = all_partitions({topic: 2})
    ownership = Ownership()

    async def scenario() -> None:
        member = GroupMember(config(broker.bootstrap_servers, group, topic), **ownership.listeners("m"))
        try:
            faults = [
                await asyncio.to_thread(broker.fail_next, "ConsumerGroupHeartbeat", code, group=group)
                for code in ("COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS")
            ]
            await converge([member], lambda: settled([member], ownership, expected))
            assert sum(f.fired for f in faults) == 3
            assert ownership.lost == {}
        finally:
            await member.close()

    asyncio.run(scenario())
