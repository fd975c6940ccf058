"""regroup members in one cooperative-sticky group with Java consumers (Kafka's ConsoleConsumer).

First a Java consumer leads, decoding our subscriptions and assigning to us; then, with one of ours
leading, a second Java consumer joins and gets its partitions from our assignor. Kafka's own
``kafka-consumer-groups --describe --members --verbose`` decodes the stored assignments each time.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest

from regroup import refkafka
from regroup.client import GroupMember, GroupMemberConfig, TopicPartition

from .helpers import create_topics, wait_for

pytestmark = pytest.mark.interop

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
COOPERATIVE_STICKY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
PARTITIONS = 6


def _java_consumer(
    bootstrap: str, topic: str, group: str, client_id: str
) -> subprocess.CompletedProcess[str]:
    """Runs until it has seen no record for 30 s, then closes (leaving the group)."""
    return refkafka.run_tool(
        CONSOLE_CONSUMER,
        "--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--timeout-ms", "30000",
        "--consumer-property", f"partition.assignment.strategy={COOPERATIVE_STICKY}",
        "--consumer-property", "session.timeout.ms=6000",
        "--consumer-property", "heartbeat.interval.ms=500",
        "--consumer-property", f"client.id={client_id}",
        timeout=120,
    )  # fmt: skip


def _describe(bootstrap: str, group: str) -> dict[str, set[TopicPartition]]:
    """client id → assigned partitions, as Kafka's ConsumerGroupCommand decodes them."""
    out = refkafka.run_tool(
        refkafka.CONSUMER_GROUPS_COMMAND,
        "--bootstrap-server", bootstrap, "--describe", "--group", group, "--members", "--verbose",
    ).stdout  # fmt: skip
    lines = [line.split() for line in out.splitlines() if line.strip()]
    header = next((line for line in lines if "CLIENT-ID" in line), None)
    if header is None:  # the group does not exist yet, or has no members
        return {}
    lines = lines[lines.index(header) :]
    client_col = header.index("CLIENT-ID")
    assignment_col = (
        header.index("CURRENT-ASSIGNMENT") if "CURRENT-ASSIGNMENT" in header else header.index("ASSIGNMENT")
    )
    result: dict[str, set[TopicPartition]] = {}
    for row in lines[1:]:
        parts: set[TopicPartition] = set()
        text = row[assignment_col]
        if text != "-":
            for chunk in text.split(";"):
                topic, _, numbers = chunk.rpartition(":")
                parts |= {TopicPartition(topic, int(n)) for n in numbers.split(",") if n}
        result[row[client_col]] = parts
    return result


def _member(bootstrap: str, group: str, topic: str, name: str) -> GroupMember:
    return GroupMember(
        GroupMemberConfig(
            bootstrap_servers=bootstrap,
            group_id=group,
            topics=[topic],
            client_id=name,
            assignors=["cooperative-sticky"],
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            retry_backoff_ms=50,
        )
    )


def test_group_with_java_consumers(bootstrap: str, run: asyncio.Runner) -> None:
    if refkafka.skip_reason() is not None:
        pytest.skip(refkafka.skip_reason() or "")
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"java-{suffix}", f"java-group-{suffix}"
    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}

    async def scenario() -> None:
        await create_topics(bootstrap, {topic: PARTITIONS})
        ours: list[GroupMember] = []

        async def step() -> None:
            await asyncio.gather(*(m.poll(100) for m in ours))
            await asyncio.sleep(0.05)

        def ours_hold(count: int) -> bool:
            owned = [tp for m in ours for tp in m.assignment]
            return len(owned) == len(set(owned)) and all(len(m.assignment) == count for m in ours)

        async def java_in_group(client_id: str, our_share: int) -> None:
            await wait_for(lambda: ours_hold(our_share), 90, step=step)
            described = await asyncio.to_thread(_describe, bootstrap, group)
            java = described.pop(client_id)
            assert len(java) == PARTITIONS - our_share * len(ours)
            assert described == {m.config.client_id: set(m.assignment) for m in ours}
            assert java | {tp for m in ours for tp in m.assignment} == everything

        try:
            # A Java consumer leads: it decodes our subscriptions and we decode its assignments.
            java_a = asyncio.create_task(asyncio.to_thread(_java_consumer, bootstrap, topic, group, "java-a"))
            await wait_for(lambda: "java-a" in _describe(bootstrap, group), 90)
            ours += [_member(bootstrap, group, topic, f"rg-{i}") for i in range(2)]
            await java_in_group("java-a", 2)
            assert not any(m.is_leader for m in ours)
            assert (await java_a).returncode == 0
            await wait_for(lambda: ours_hold(3), 90, step=step)
            assert any(m.is_leader for m in ours)

            # One of ours leads: a new Java consumer gets its partitions from our assignor.
            java_b = asyncio.create_task(asyncio.to_thread(_java_consumer, bootstrap, topic, group, "java-b"))
            await java_in_group("java-b", 2)
            assert any(m.is_leader for m in ours)
            assert (await java_b).returncode == 0
            await wait_for(lambda: ours_hold(3), 90, step=step)
        finally:
            for m in ours:
                await m.close()

    run.run(scenario())
