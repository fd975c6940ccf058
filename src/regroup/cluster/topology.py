"""Who leads what, as the broker's APIs answer it: the nodes and their endpoints, the controller, the
topics, each partition's leader, leader epoch, replicas and ISR, and whether this node may serve a
partition's reads and writes now (Kafka's ``Partition.checkCurrentLeaderEpoch`` and
``ReplicaManager.getPartitionOrError``).

Two implementations of :class:`Topology`: :class:`LocalTopology` for a single node (every partition of the
local logs is led here at leader epoch 0, as a one-broker Kafka reports it) and :class:`ClusterTopology`,
answered from the node's metadata image.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from regroup.cluster.model import NO_LEADER, ClusterImage, TopicRecord
from regroup.log import LogManager, TopicInfo
from regroup.protocol.errors import ErrorCode

__all__ = [
    "ClusterTopology",
    "LocalTopology",
    "NodeEndpoint",
    "PartitionLeadership",
    "TopicDescription",
    "Topology",
    "check_leader_epoch",
]

NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool = False


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


def check_leader_epoch(current: int, requested: int) -> ErrorCode:
    """KIP-320: a request naming an older leader epoch is FENCED_LEADER_EPOCH, a newer one (this node has
    not seen it yet) UNKNOWN_LEADER_EPOCH; -1 names none."""
    if requested in (NO_EPOCH, current):
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


class Topology(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def clustered(self) -> bool:
        """False for a single node."""
        ...

    def controller_id(self) -> int: ...

    def brokers(self, listener: str, advertised: tuple[str, int]) -> list[NodeEndpoint]:
        """The live nodes reachable on ``listener`` (``advertised``: this node's endpoint for the client)."""
        ...

    def node(self, node_id: int, listener: str, advertised: tuple[str, int]) -> NodeEndpoint | None: ...

    def topics(self) -> list[TopicDescription]: ...

    def topic(self, name: str) -> TopicDescription | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicDescription | None: ...

    def partition(self, topic: str, partition: int) -> PartitionLeadership | None: ...

    def leader_error(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> ErrorCode:
        """Whether this node may serve the partition as its leader now: NONE, UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, or a leader-epoch error (:func:`check_leader_epoch`)."""
        ...

    def leadership_token(self) -> object:
        """A value equal to an earlier one only while no answer of :meth:`leader_error` for an existing
        partition can have changed; None when answers may not be reused at all (a fenced node)."""
        ...


def _describe_info(info: TopicInfo) -> TopicDescription:
    return TopicDescription(info.name, info.topic_id, info.partitions, info.internal)


class LocalTopology:
    """A single node: it is every partition's leader, the only replica and the controller."""

    clustered = False

    def __init__(self, node_id: int, logs: LogManager) -> None:
        self._node_id = node_id
        self._logs = logs

    @property
    def node_id(self) -> int:
        return self._node_id

    def controller_id(self) -> int:
        return self._node_id

    def brokers(self, listener: str, advertised: tuple[str, int]) -> list[NodeEndpoint]:
        return [NodeEndpoint(self._node_id, *advertised)]

    def node(self, node_id: int, listener: str, advertised: tuple[str, int]) -> NodeEndpoint | None:
        return NodeEndpoint(self._node_id, *advertised) if node_id == self._node_id else None

    def topics(self) -> list[TopicDescription]:
        return [_describe_info(info) for info in self._logs.topics()]

    def topic(self, name: str) -> TopicDescription | None:
        info = self._logs.topic(name)
        return None if info is None else _describe_info(info)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicDescription | None:
        info = self._logs.topic_by_id(topic_id)
        return None if info is None else _describe_info(info)

    def partition(self, topic: str, partition: int) -> PartitionLeadership | None:
        info = self._logs.topic(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        me = (self._node_id,)
        return PartitionLeadership(self._node_id, 0, me, me)

    def leader_error(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> ErrorCode:
        if self._logs.partition(topic, partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return check_leader_epoch(0, current_leader_epoch)

    def leadership_token(self) -> object:
        return 0  # every partition that exists is led here, at epoch 0, for good


def _describe_record(topic: TopicRecord) -> TopicDescription:
    return TopicDescription(topic.name, topic.topic_id, topic.partitions, topic.internal)


class ClusterTopology:
    """Answers from the metadata image a cluster node keeps (``image()`` gives the current one)."""

    clustered = True

    def __init__(
        self,
        node_id: int,
        image: Callable[[], ClusterImage],
        fenced: Callable[[], bool],
        leading: Callable[[str, int], int | None],
        leadership_changes: Callable[[], int] | None = None,
    ) -> None:
        """``leading(topic, p)`` is the leader epoch this node has taken the partition's leadership at
        (its log ready to serve), None when it does not lead it; ``leadership_changes()`` a count that
        moves whenever an answer of ``leading`` does (without it no answer is reused)."""
        self._node_id = node_id
        self._image = image
        self._fenced = fenced
        self._leading = leading
        self._leadership_changes = leadership_changes

    @property
    def node_id(self) -> int:
        return self._node_id

    def controller_id(self) -> int:
        controller = self._image().controller
        return -1 if controller is None else controller.node_id

    def _endpoint(self, node_id: int, listener: str, advertised: tuple[str, int]) -> NodeEndpoint | None:
        registration = self._image().nodes.get(node_id)
        if registration is None:
            return None
        address = registration.listeners.get(listener)
        if address is None:
            return None
        if node_id == self._node_id:
            address = advertised
        return NodeEndpoint(node_id, address[0], address[1], registration.rack)

    def brokers(self, listener: str, advertised: tuple[str, int]) -> list[NodeEndpoint]:
        found = (self._endpoint(n, listener, advertised) for n in sorted(self._image().nodes))
        return [e for e in found if e is not None]

    def node(self, node_id: int, listener: str, advertised: tuple[str, int]) -> NodeEndpoint | None:
        return self._endpoint(node_id, listener, advertised)

    def topics(self) -> list[TopicDescription]:
        return [_describe_record(t) for t in self._image().topics.values()]

    def topic(self, name: str) -> TopicDescription | None:
        record = self._image().topics.get(name)
        return None if record is None else _describe_record(record)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicDescription | None:
        record = self._image().topic_by_id(topic_id)
        return None if record is None else _describe_record(record)

    def partition(self, topic: str, partition: int) -> PartitionLeadership | None:
        image = self._image()
        record = image.topics.get(topic)
        if record is None or not 0 <= partition < record.partitions:
            return None
        replicas = record.replicas[partition]
        state = image.partitions.get((record.topic_id, partition))
        if state is None:
            return PartitionLeadership(NO_LEADER, -1, replicas, (), replicas)
        alive: Mapping[int, object] = image.nodes
        return PartitionLeadership(
            state.leader,
            state.leader_epoch,
            replicas,
            state.isr,
            tuple(n for n in replicas if n not in alive),
        )

    def leader_error(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> ErrorCode:
        image = self._image()
        record = image.topics.get(topic)
        if record is None or not 0 <= partition < record.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        state = image.partitions.get((record.topic_id, partition))
        if state is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch > state.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if 0 <= current_leader_epoch < state.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if state.leader != self._node_id or self._leading(topic, partition) != state.leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._fenced():
            # Out of touch with the metadata store for most of a session: another leader may be elected any
            # moment, so this one acknowledges nothing more (no two leaders acknowledge at once).
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def leadership_token(self) -> object:
        # Images are replaced, never changed, one per metadata revision.
        if self._leadership_changes is None or self._fenced():
            return None
        return (self._image().revision, self._leadership_changes())
