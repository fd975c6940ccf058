"""The topic metadata the consumer-group core assigns from, injected by the runtime on every call that needs
it (the core never reads the broker's topic registry itself).

A :class:`TopicsImage` is an immutable snapshot: topic name ↔ topic id, partition count and, optionally, the
racks of each partition's replicas. :meth:`TopicsImage.group_hash` is the deterministic metadata hash of a
set of subscribed topic names that a consumer group stores (ConsumerGroupMetadata.MetadataHash) to notice
that a subscribed topic was created, deleted, grew partitions or moved replicas (Kafka's
``Utils.computeTopicHash`` / ``computeGroupHash``; 0 when none of the topics exists). It is Kafka's own
(KIP-1101): XXH3-64 (seed 0) over the bytes hash4j's ``HashStream64`` feeds it — little-endian integers,
strings as their UTF-16 code units followed by their length — so a group's hash equals the one Kafka 4.1+
writes for the same topics, and a log written by either broker loads without an epoch bump.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import xxhash

from regroup.protocol.primitives import Uuid

__all__ = ["TopicImage", "TopicsImage"]

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_UUID = struct.Struct("<qq")
_TOPIC_HASH_MAGIC_BYTE = b"\x00"  # Kafka's Utils.TOPIC_HASH_MAGIC_BYTE: the version of the hash


@dataclass(slots=True, unsafe_hash=True)
class TopicImage:
    """One topic: id, name, partition count, and per partition the racks of its replicas (may be empty)."""

    topic_id: Uuid
    name: str
    num_partitions: int
    racks: tuple[tuple[str, ...], ...] = ()

    def partition_racks(self, partition: int) -> tuple[str, ...]:
        return self.racks[partition] if partition < len(self.racks) else ()

    def topic_hash(self) -> int:
        """Kafka's ``Utils.computeTopicHash`` of this topic (a signed 64-bit integer)."""
        return _topic_hash(self)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _put_string(buf: bytearray, text: str) -> None:
    """hash4j ``putString``: the UTF-16 code units, little-endian, then their count as an int."""
    units = text.encode("utf-16-le")
    buf += units
    buf += _I32.pack(len(units) // 2)


def _java_order(text: str) -> bytes:
    """A sort key equal to Java's ``String.compareTo`` (UTF-16 code unit order)."""
    return text.encode("utf-16-be")


# Every heartbeat hashes the group's subscribed topics; a topic's hash only changes with the topic.
@lru_cache(maxsize=4096)
def _topic_hash(topic: TopicImage) -> int:
    """Utils ``computeTopicHash``: magic byte, id (most then least significant long), name, partition count,
    then per partition its index and its sorted racks, each as its length and the string."""
    buf = bytearray(_TOPIC_HASH_MAGIC_BYTE)
    tid = topic.topic_id.int
    buf += _UUID.pack(_signed(tid >> 64), _signed(tid & 0xFFFF_FFFF_FFFF_FFFF))
    _put_string(buf, topic.name)
    buf += _I32.pack(topic.num_partitions)
    for p in range(topic.num_partitions):
        buf += _I32.pack(p)
        for rack in sorted(topic.partition_racks(p), key=_java_order):
            buf += _I32.pack(len(rack.encode("utf-16-le")) // 2)
            _put_string(buf, rack)
    return _signed(xxhash.xxh3_64_intdigest(bytes(buf)))


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
        """Kafka's metadata hash (ModernGroup ``computeMetadataHash``) of the existing topics among ``names``;
        0 if none exists."""
        existing = sorted((t for t in set(names) if t in self._by_name), key=_java_order)
        if not existing:
            return 0
        # Utils ``computeGroupHash``: the topic hashes as longs, in topic name order
        data = b"".join(_I64.pack(self._by_name[name].topic_hash()) for name in existing)
        return _signed(xxhash.xxh3_64_intdigest(data))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicsImage) and self._by_name == other._by_name

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"TopicsImage({sorted(self._names)})"
