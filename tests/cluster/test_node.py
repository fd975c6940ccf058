"""Nodes joining a cluster over a metadata store: registration and broker epochs, the image, the controller
campaign and its reconciliation after a node's session ends, topic creation and ISR changes by a leader.

Runs on the in-process MemoryStore (same semantics as etcd, contract-tested in test_store.py) with short
sessions; every wait is for an observable state with a generous bound.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from regroup.cluster.controller import Controller
from regroup.cluster.memory import MemoryStore
from regroup.cluster.model import ClusterImage, Keys, NodeState
from regroup.cluster.node import ClusterNode, NodeSettings
from regroup.protocol.errors import ErrorCode, KafkaError

WAIT_S = 30.0


class Cluster:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.nodes: dict[int, ClusterNode] = {}
        self.controllers: dict[int, Controller] = {}

    async def add(self, node_id: int, *, session_ms: int = 2000) -> ClusterNode:
        node = ClusterNode(
            self.store,
            Keys("/test"),
            NodeSettings(
                node_id,
                {"PLAINTEXT": ("127.0.0.1", 9090 + node_id)},
                session_timeout_ms=session_ms,
                heartbeat_interval_ms=200,
            ),
            rng=random.Random(node_id),
        )
        await node.start("cluster-a")
        controller = Controller(node, lambda _topic: False)
        controller.start()
        self.nodes[node_id] = node
        self.controllers[node_id] = controller
        return node

    async def crash(self, node_id: int) -> None:
        """Stop a node without ending its session: its lease expires on its own."""
        await self.controllers.pop(node_id).stop()
        await self.nodes.pop(node_id).stop(revoke=False)

    async def close(self) -> None:
        for node_id in list(self.nodes):
            await self.controllers.pop(node_id).stop()
            await self.nodes.pop(node_id).stop()
        await self.store.close()


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_nodes_register_and_one_becomes_controller() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            a = await c.add(1)
            b = await c.add(2)
            image = await a.wait_for(lambda i: set(i.nodes) == {1, 2} and i.controller is not None, WAIT_S)
            assert image.cluster_id == "cluster-a"
            assert image.nodes[1].broker_epoch == a.broker_epoch
            assert image.nodes[2].listeners["PLAINTEXT"] == ("127.0.0.1", 9092)
            assert a.broker_epoch != b.broker_epoch
            assert image.controller is not None
            assert [n.is_controller for n in (a, b)].count(True) == 1
            await b.wait_for(lambda i: i.controller is not None, WAIT_S)
        finally:
            await c.close()

    run(scenario())


def test_a_second_start_of_the_same_cluster_keeps_the_first_cluster_id() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        first = ClusterNode(store, Keys("/t"), NodeSettings(1, {}, heartbeat_interval_ms=200))
        second = ClusterNode(store, Keys("/t"), NodeSettings(2, {}, heartbeat_interval_ms=200))
        assert await first.start("one") == "one"
        assert await second.start("two") == "one"
        await first.stop()
        await second.stop()
        await store.close()

    run(scenario())


def test_topic_creation_places_replicas_and_leaders_on_live_nodes() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            nodes = [await c.add(i) for i in (1, 2, 3)]
            await nodes[0].wait_for(lambda i: len(i.nodes) == 3, WAIT_S)
            topic = await nodes[1].create_topic("orders", 6, 3)
            image = await nodes[2].wait_for(lambda i: "orders" in i.topics, WAIT_S)
            assert image.topics["orders"].topic_id == topic.topic_id
            for p in range(6):
                state = image.partition("orders", p)
                assert state is not None
                assert state.leader == topic.replicas[p][0]
                assert set(state.isr) == set(topic.replicas[p]) == {1, 2, 3}
            leaders = [topic.replicas[p][0] for p in range(6)]
            assert sorted(leaders.count(n) for n in (1, 2, 3)) == [2, 2, 2]
            with pytest.raises(KafkaError) as info:
                await nodes[0].create_topic("orders", 1, 1)
            assert info.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
            with pytest.raises(KafkaError) as info:
                await nodes[0].create_topic("big", 1, 4)
            assert info.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
        finally:
            await c.close()

    run(scenario())


def test_a_dead_nodes_leaderships_move_to_the_isr_and_it_leaves_every_isr() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            nodes = {i: await c.add(i) for i in (1, 2, 3)}
            await nodes[1].wait_for(lambda i: len(i.nodes) == 3 and i.controller is not None, WAIT_S)
            await nodes[1].create_topic("t", 3, 3)
            image = await nodes[1].wait_for(lambda i: "t" in i.topics, WAIT_S)
            led = {p: image.leader_of("t", p) for p in range(3)}
            victim = led[0]
            before = image.partition("t", 0)
            assert before is not None
            await c.crash(victim)
            survivor = next(n for i, n in c.nodes.items() if i != victim)

            def moved(i: ClusterImage) -> bool:
                return victim not in i.nodes and all(
                    (s := i.partition("t", p)) is not None and s.leader != victim and victim not in s.isr
                    for p in range(3)
                )

            image = await survivor.wait_for(moved, WAIT_S)
            after = image.partition("t", 0)
            assert after is not None
            assert after.leader == image.replicas_of("t", 0)[1]
            assert after.leader_epoch == before.leader_epoch + 1
            assert after.partition_epoch > before.partition_epoch
            for p in range(3):
                if led[p] != victim:
                    state = image.partition("t", p)
                    assert state is not None
                    assert state.leader == led[p]  # untouched leaders keep leading
            # The node comes back: it registers again under a new broker epoch.
            back = await c.add(victim)
            image = await back.wait_for(lambda i: victim in i.nodes, WAIT_S)
            assert image.nodes[victim].broker_epoch == back.broker_epoch
        finally:
            await c.close()

    run(scenario())


def test_the_last_isr_member_stays_and_the_partition_goes_offline_until_it_returns() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            nodes = {i: await c.add(i) for i in (1, 2)}
            await nodes[1].wait_for(lambda i: len(i.nodes) == 2 and i.controller is not None, WAIT_S)
            await nodes[1].create_topic("one", 1, 1, assignment=[[2]])
            await c.crash(2)
            image = await nodes[1].wait_for(
                lambda i: 2 not in i.nodes and i.leader_of("one", 0) == -1, WAIT_S
            )
            state = image.partition("one", 0)
            assert state is not None
            assert state.isr == (2,)
            await c.add(2)
            await nodes[1].wait_for(lambda i: i.leader_of("one", 0) == 2, WAIT_S)
        finally:
            await c.close()

    run(scenario())


def test_a_new_controller_takes_over_when_the_controller_dies() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            nodes = {i: await c.add(i) for i in (1, 2, 3)}
            image = await nodes[1].wait_for(lambda i: len(i.nodes) == 3 and i.controller is not None, WAIT_S)
            assert image.controller is not None
            old = image.controller
            await nodes[1].create_topic("t", 3, 2)
            await c.crash(old.node_id)
            survivor = next(iter(c.nodes.values()))
            image = await survivor.wait_for(
                lambda i: i.controller is not None and i.controller.node_id != old.node_id, WAIT_S
            )
            assert image.controller is not None
            assert image.controller.controller_epoch > old.controller_epoch
            # The new controller also moved the dead controller's leaderships.
            await survivor.wait_for(
                lambda i: all(i.leader_of("t", p) not in (old.node_id,) for p in range(3)), WAIT_S
            )
        finally:
            await c.close()

    run(scenario())


def test_controlled_shutdown_moves_leaderships_away_before_the_node_leaves() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            nodes = {i: await c.add(i) for i in (1, 2, 3)}
            await nodes[1].wait_for(lambda i: len(i.nodes) == 3 and i.controller is not None, WAIT_S)
            await nodes[1].create_topic("t", 6, 3)
            await nodes[3].wait_for(lambda i: "t" in i.topics, WAIT_S)
            await nodes[3].set_state(NodeState.SHUTTING_DOWN)
            image = await nodes[3].wait_for(lambda i: not i.led_by(3), WAIT_S)
            assert 3 in image.nodes  # still registered: only its leaderships moved
            for p in range(6):
                state = image.partition("t", p)
                assert state is not None
                assert 3 not in state.isr
        finally:
            await c.close()

    run(scenario())


def test_a_leader_changes_the_isr_only_while_it_leads_and_nothing_changed() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            nodes = {i: await c.add(i) for i in (1, 2, 3)}
            await nodes[1].wait_for(lambda i: len(i.nodes) == 3, WAIT_S)
            topic = await nodes[1].create_topic("t", 1, 3, assignment=[[2, 1, 3]])
            image = await nodes[2].wait_for(lambda i: "t" in i.topics, WAIT_S)
            seen = image.partition("t", 0)
            assert seen is not None
            assert not await nodes[1].change_isr(topic, 0, seen, [1, 2])  # not the leader
            assert await nodes[2].change_isr(topic, 0, seen, [2, 1])
            image = await nodes[2].wait_for(
                lambda i: (s := i.partition("t", 0)) is not None and s.isr == (2, 1), WAIT_S
            )
            now = image.partition("t", 0)
            assert now is not None
            assert now.partition_epoch == seen.partition_epoch + 1
            assert now.leader_epoch == seen.leader_epoch
            assert not await nodes[2].change_isr(topic, 0, seen, [2])  # stale: the partition changed
        finally:
            await c.close()

    run(scenario())


def test_producer_ids_come_in_blocks_unique_across_nodes() -> None:
    async def scenario() -> None:
        c = Cluster(MemoryStore())
        try:
            a = await c.add(1)
            b = await c.add(2)
            ids = [await a.allocate_producer_id() for _ in range(3)] + [await b.allocate_producer_id()]
            ids += [await a.allocate_producer_id() for _ in range(1000)]
            assert len(set(ids)) == len(ids)
        finally:
            await c.close()

    run(scenario())
