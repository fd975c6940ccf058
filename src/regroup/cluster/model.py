"""The cluster's metadata as values: registered nodes, the controller, topics with their replica assignment,
and per-partition leadership state — how each is keyed and encoded in the metadata store, and the immutable
:class:`ClusterImage` a node answers clients from.

Pure: no I/O, no clock. Keys live under a prefix ``P`` (``/regroup`` by default); values are JSON:

==================================  ===========================================================  ==========
key                                 value                                                        written by
==================================  ===========================================================  ==========
``P/cluster``                       ``{"cluster_id"}``                                           first node
``P/nodes/<id>`` (node's lease)     ``{"listeners": {name: [host, port]}, "rack", "incarnation",  the node
                                    "state"}``
``P/controller`` (holder's lease)   ``{"node_id", "broker_epoch"}``                              campaigner
``P/topics/<name>``                 ``{"topic_id", "internal", "replicas": [[1, 2, 3], ...],     controller
                                    "configs": {...}}``
``P/partitions/<topic_id>/<p>``     ``{"leader", "leader_epoch", "isr", "partition_epoch",       controller
                                    "leader_recovery_state"}``
``P/producer_ids``                  ``{"next_block_start"}``                                     any node
==================================  ===========================================================  ==========

A node's **broker epoch** is the ``create_revision`` of its registration (new at every registration, as
KIP-380 used ZooKeeper's czxid); the **controller epoch** is the ``create_revision`` of ``P/controller``.
Both come from the store, not from the values.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

__all__ = [
    "NO_LEADER",
    "ClusterImage",
    "ControllerRecord",
    "Keys",
    "LeaderRecoveryState",
    "NodeRegistration",
    "NodeState",
    "PartitionRecord",
    "TopicRecord",
    "decode_cluster_id",
    "encode_cluster_id",
]

NO_LEADER: Final = -1


class NodeState(enum.Enum):
    RUNNING = "running"
    SHUTTING_DOWN = "shutting_down"  # controlled shutdown: leaderships move away first (KIP-841)
    STORAGE_FAILED = "storage_failed"


class LeaderRecoveryState(enum.IntEnum):
    """KIP-704: a leader elected uncleanly is RECOVERING until it has a clean log for its ISR."""

    RECOVERED = 0
    RECOVERING = 1


@dataclass(frozen=True, slots=True)
class NodeRegistration:
    node_id: int
    listeners: Mapping[str, tuple[str, int]]
    rack: str | None = None
    incarnation: str = ""
    state: NodeState = NodeState.RUNNING
    broker_epoch: int = -1
    """The registration key's create revision (not stored in the value)."""

    @property
    def running(self) -> bool:
        return self.state is NodeState.RUNNING

    def encode(self) -> bytes:
        return _dump(
            {
                "listeners": {name: [host, port] for name, (host, port) in self.listeners.items()},
                "rack": self.rack,
                "incarnation": self.incarnation,
                "state": self.state.value,
            }
        )

    @classmethod
    def decode(cls, node_id: int, data: bytes, broker_epoch: int) -> NodeRegistration:
        value = _load(data)
        listeners = {str(k): (str(v[0]), int(v[1])) for k, v in dict(value.get("listeners", {})).items()}
        return cls(
            node_id=node_id,
            listeners=listeners,
            rack=value.get("rack"),
            incarnation=str(value.get("incarnation", "")),
            state=NodeState(value.get("state", NodeState.RUNNING.value)),
            broker_epoch=broker_epoch,
        )


@dataclass(frozen=True, slots=True)
class ControllerRecord:
    node_id: int
    broker_epoch: int
    controller_epoch: int = -1
    """The controller key's create revision (not stored in the value)."""

    def encode(self) -> bytes:
        return _dump({"node_id": self.node_id, "broker_epoch": self.broker_epoch})

    @classmethod
    def decode(cls, data: bytes, controller_epoch: int) -> ControllerRecord:
        value = _load(data)
        return cls(int(value["node_id"]), int(value["broker_epoch"]), controller_epoch)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    replicas: tuple[tuple[int, ...], ...]
    """Per partition, its replicas in preference order (the first is the preferred leader)."""
    internal: bool = False
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas[0]) if self.replicas else 0

    def encode(self) -> bytes:
        return _dump(
            {
                "topic_id": str(self.topic_id),
                "internal": self.internal,
                "replicas": [list(r) for r in self.replicas],
                "configs": dict(self.configs),
            }
        )

    @classmethod
    def decode(cls, name: str, data: bytes) -> TopicRecord:
        value = _load(data)
        return cls(
            name=name,
            topic_id=uuid.UUID(str(value["topic_id"])),
            replicas=tuple(tuple(int(n) for n in r) for r in value["replicas"]),
            internal=bool(value.get("internal", False)),
            configs={str(k): str(v) for k, v in dict(value.get("configs", {})).items()},
        )


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """Leadership state of one partition (Kafka's ``PartitionRegistration``, less the replicas, which the
    topic record holds)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def encode(self) -> bytes:
        return _dump(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "partition_epoch": self.partition_epoch,
                "leader_recovery_state": int(self.leader_recovery_state),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> PartitionRecord:
        value = _load(data)
        return cls(
            leader=int(value["leader"]),
            leader_epoch=int(value["leader_epoch"]),
            isr=tuple(int(n) for n in value["isr"]),
            partition_epoch=int(value.get("partition_epoch", 0)),
            leader_recovery_state=LeaderRecoveryState(int(value.get("leader_recovery_state", 0))),
        )


@dataclass(frozen=True, slots=True)
class Keys:
    """Where each fact lives in the store, under ``prefix``."""

    prefix: str = "/regroup"

    def _key(self, *parts: str) -> bytes:
        return "/".join((self.prefix, *parts)).encode()

    @property
    def root(self) -> bytes:
        return self._key("")

    @property
    def cluster(self) -> bytes:
        return self._key("cluster")

    @property
    def controller(self) -> bytes:
        return self._key("controller")

    @property
    def producer_ids(self) -> bytes:
        return self._key("producer_ids")

    def node(self, node_id: int) -> bytes:
        return self._key("nodes", str(node_id))

    def topic(self, name: str) -> bytes:
        return self._key("topics", name)

    def partition(self, topic_id: uuid.UUID, partition: int) -> bytes:
        return self._key("partitions", str(topic_id), str(partition))

    def partitions_of(self, topic_id: uuid.UUID) -> bytes:
        """The prefix of every partition key of a topic."""
        return self._key("partitions", str(topic_id), "")


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """The cluster as one node knows it, at one store revision. Immutable: a change is a new image."""

    revision: int = 0
    cluster_id: str | None = None
    nodes: Mapping[int, NodeRegistration] = field(default_factory=dict)
    controller: ControllerRecord | None = None
    topics: Mapping[str, TopicRecord] = field(default_factory=dict)
    partitions: Mapping[tuple[uuid.UUID, int], PartitionRecord] = field(default_factory=dict)

    def topic(self, name: str) -> TopicRecord | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicRecord | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def partition(self, topic: str, partition: int) -> PartitionRecord | None:
        record = self.topics.get(topic)
        return None if record is None else self.partitions.get((record.topic_id, partition))

    def leader_of(self, topic: str, partition: int) -> int:
        state = self.partition(topic, partition)
        return NO_LEADER if state is None else state.leader

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        record = self.topics.get(topic)
        if record is None or not 0 <= partition < record.partitions:
            return ()
        return record.replicas[partition]

    def live_nodes(self) -> list[int]:
        return sorted(self.nodes)

    def running_nodes(self) -> list[int]:
        return sorted(n for n, reg in self.nodes.items() if reg.running)

    def all_partitions(self) -> Iterator[tuple[TopicRecord, int, PartitionRecord | None]]:
        for topic in self.topics.values():
            for p in range(topic.partitions):
                yield topic, p, self.partitions.get((topic.topic_id, p))

    def led_by(self, node_id: int) -> list[tuple[str, int]]:
        return sorted(
            (t.name, p) for t, p, s in self.all_partitions() if s is not None and s.leader == node_id
        )

    def replicated_by(self, node_id: int) -> list[tuple[str, int]]:
        return sorted(
            (t.name, p) for t in self.topics.values() for p, r in enumerate(t.replicas) if node_id in r
        )

    def with_changes(self, **changes: Any) -> ClusterImage:
        return replace(self, **changes)


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"cluster_id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["cluster_id"])


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _load(data: bytes) -> dict[str, Any]:
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def sorted_unique(nodes: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(nodes)))
