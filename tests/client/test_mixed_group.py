"""regroup members and librdkafka (confluent-kafka) consumers in one cooperative-sticky group.

Ownership is tracked as the members' own callbacks report it, in real time: a partition must never be
assigned to one member while another still owns it, and after every membership change the group must
converge to a complete, balanced assignment — whichever client happens to lead.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

import pytest

from regroup.client import GroupMember, GroupMemberConfig, TopicPartition

from .helpers import all_partitions, create_topics, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.interop


class Ownership:
    """Who owns which partition, according to the members' rebalance callbacks (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []

    def assigned(self, member: str, partitions: set[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                current = self.owner.get(tp)
                if current is not None and current != member:
                    self.violations.append(f"{tp} assigned to {member} while owned by {current}")
                self.owner[tp] = member

    def released(self, member: str, partitions: set[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                if self.owner.get(tp) == member:
                    del self.owner[tp]

    def counts(self, members: list[str]) -> dict[str, int]:
        with self._lock:
            return {m: sum(1 for o in self.owner.values() if o == m) for m in members}

    def snapshot(self) -> dict[TopicPartition, str]:
        with self._lock:
            return dict(self.owner)


class LibrdkafkaMember:
    """A confluent-kafka consumer polled by its own thread, reporting ownership changes."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topics: list[str], ownership: Ownership
    ) -> None:
        self.name = name
        self.ownership = ownership
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=f"rdkafka-{name}", daemon=True)
        self._thread.start()

    @staticmethod
    def _tps(partitions: list[object]) -> set[TopicPartition]:
        return {TopicPartition(p.topic, p.partition) for p in partitions}  # type: ignore[attr-defined]

    def _on_assign(self, consumer: object, partitions: list[object]) -> None:
        self.ownership.assigned(self.name, self._tps(partitions))

    def _on_revoke(self, consumer: object, partitions: list[object]) -> None:
        self.ownership.released(self.name, self._tps(partitions))

    def _on_lost(self, consumer: object, partitions: list[object]) -> None:
        self.ownership.released(self.name, self._tps(partitions))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(0.05)
            self.consumer.close()
        except BaseException as exc:
            self.errors.append(exc)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.name} did not close"
        assert not self.errors, self.errors


def _regroup_member(
    name: str, bootstrap: str, group: str, topics: list[str], ownership: Ownership
) -> GroupMember:
    def on_assigned(partitions: frozenset[TopicPartition]) -> None:
        ownership.assigned(name, set(partitions))

    def on_released(partitions: frozenset[TopicPartition]) -> None:
        ownership.released(name, set(partitions))

    config = GroupMemberConfig(
        bootstrap_servers=bootstrap,
        group_id=group,
        topics=topics,
        client_id=name,
        assignors=["cooperative-sticky"],
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        retry_backoff_ms=50,
        metadata_max_age_ms=1000,
    )
    return GroupMember(config, on_partitions_assigned=on_assigned, on_partitions_revoked=on_released)


def test_mixed_cooperative_group_converges_without_double_ownership(
    bootstrap: str, run: asyncio.Runner
) -> None:
    suffix = uuid.uuid4().hex[:8]
    group = f"mixed-{suffix}"
    topics = {f"events-{suffix}": 8, f"audit-{suffix}": 4}
    expected = all_partitions(topics)
    ownership = Ownership()
    rdkafka: dict[str, LibrdkafkaMember] = {}
    ours: dict[str, GroupMember] = {}
    leaders: set[str] = set()

    def add_rdkafka(name: str) -> None:
        rdkafka[name] = LibrdkafkaMember(name, bootstrap, group, list(topics), ownership)

    def add_ours(name: str) -> None:
        ours[name] = _regroup_member(name, bootstrap, group, list(topics), ownership)

    async def converge(timeout: float = 60.0) -> None:
        async def step() -> None:
            await asyncio.gather(*(m.poll(100) for m in ours.values()))
            leaders.update(name for name, m in ours.items() if m.is_leader)
            await asyncio.sleep(0.05)

        def balanced() -> bool:
            names = [*rdkafka, *ours]
            counts = ownership.counts(names)
            return set(ownership.snapshot()) == expected and max(counts.values()) - min(counts.values()) <= 1

        await wait_for(balanced, timeout, step=step)
        # Stay converged for a moment: cooperative groups follow up with a second rebalance.
        for _ in range(20):
            await step()
        assert balanced()
        assert not ownership.violations, ownership.violations

    async def scenario() -> None:
        await create_topics(bootstrap, topics)
        try:
            add_rdkafka("rd-0")  # first in, so librdkafka leads the first generations
            await converge()
            add_ours("rg-0")
            add_ours("rg-1")
            add_rdkafka("rd-1")
            await converge()
            # The librdkafka leader leaves: leadership moves and the group rebalances again.
            await asyncio.to_thread(rdkafka.pop("rd-0").close)
            await converge()
            add_ours("rg-2")
            await converge()
            await ours.pop("rg-0").close()
            await converge()
            # A regroup member dies without leaving; the rest converge after its session expires.
            dead = ours.pop("rg-1")
            await dead.abort()
            ownership.released("rg-1", set(dead.assignment))
            await converge()
            assert not ownership.violations, ownership.violations
        finally:
            for m in ours.values():
                await m.close()
            for r in rdkafka.values():
                await asyncio.to_thread(r.close)

    run.run(scenario())
    assert not ownership.violations, ownership.violations
    logging.getLogger(__name__).info("regroup members that led a generation: %s", sorted(leaders))
