"""The topic metadata the consumer-group core assigns from, injected by the runtime on every call that needs
it (the core never reads the broker's topic registry itself).

A :class:`TopicsImage` is an immutable snapshot: topic name ↔ topic id, partition count and, optionally, the
racks of each partition's replicas. :meth:`TopicsImage.group_hash` is the deterministic metadata hash of a
set of subscribed topic names that a consumer group stores (ConsumerGroupMetadata.MetadataHash) to notice
that a subscribed topic was created, deleted, grew partitions or moved replicas (Kafka's
``Utils.computeTopicHash`` / ``computeGroupHash``; 0 when none of the topics exists). The hash is not
Kafka's XXH3 one: it only has to be stable across regroup processes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from regroup.protocol.primitives import Uuid

__all__ = ["TopicImage", "TopicsImage"]

_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class TopicImage:
    """One topic: id, name, partition count, and per partition the racks of its replicas (may be empty)."""

    topic_id: Uuid
    name: str
    num_partitions: int
    racks: tuple[tuple[str, ...], ...] = ()

    def partition_racks(self, partition: int) -> tuple[str, ...]:
        return self.racks[partition] if partition < len(self.racks) else ()

    def digest(self) -> bytes:
        return _topic_digest(self)


# Every heartbeat hashes the group's subscribed topics; a topic's digest only changes with the topic.
@lru_cache(maxsize=4096)
def _topic_digest(topic: TopicImage) -> bytes:
    """Id, name, partition count and the sorted racks of every partition (Kafka's ``computeTopicHash``
    inputs)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(topic.topic_id.bytes)
    name = topic.name.encode()
    h.update(_I64.pack(len(name)))
    h.update(name)
    h.update(_I64.pack(topic.num_partitions))
    for p in range(topic.num_partitions):
        for rack in sorted(topic.partition_racks(p)):
            encoded = rack.encode()
            h.update(_I64.pack(len(encoded)))
            h.update(encoded)
        h.update(b"\x00")
    return h.digest()


class TopicsImage:
    """An immutable view of the cluster's topics."""

    __slots__ = ("_by_id", "_by_name", "_names")

    def __init__(self, topics: Iterable[TopicImage] = ()) -> None:
        by_name: dict[str, TopicImage] = {}
        by_id: dict[Uuid, TopicImage] = {}
        for topic in topics:
            if topic.name in by_name or topic.topic_id in by_id:
                raise ValueError(f"duplicate topic {topic.name} / {topic.topic_id}")
            by_name[topic.name] = topic
            by_id[topic.topic_id] = topic
        self._by_name = by_name
        self._by_id = by_id
        self._names = frozenset(by_name)

    @classmethod
    def of(cls, topics: Mapping[str, tuple[Uuid, int]]) -> TopicsImage:
        """Shorthand: name → (id, partition count)."""
        return cls(TopicImage(tid, name, n) for name, (tid, n) in topics.items())

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def by_name(self, name: str) -> TopicImage | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: Uuid) -> TopicImage | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicImage]:
        return list(self._by_name.values())

    def group_hash(self, names: Iterable[str]) -> int:
        """A signed 64-bit hash over the existing topics among ``names`` (sorted by name); 0 if none
        exists."""
        existing = sorted(t for t in set(names) if t in self._by_name)
        if not existing:
            return 0
        h = hashlib.blake2b(digest_size=8)
        for name in existing:
            h.update(self._by_name[name].digest())
        value: int = _I64.unpack(h.digest())[0]
        return value or 1  # 0 is reserved for "no subscribed topic exists"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicsImage) and self._by_name == other._by_name

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"TopicsImage({sorted(self._names)})"
