"""Value types shared by the group member and the assignors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["OffsetAndMetadata", "TopicPartition", "java_order", "sorted_partitions"]


def java_order(s: str) -> bytes:
    """Sort key ordering strings as Java's ``String.compareTo`` does (by UTF-16 code unit).

    Python compares code points, which differs from Java for characters outside the BMP; assignors use
    this key wherever Kafka's Java code sorts names, so every leader picks the same order.
    """
    return s.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """A partition of a topic."""

    topic: str
    partition: int

    def sort_key(self) -> tuple[bytes, int]:
        """(topic, partition) in Java's ``TopicPartitionComparator`` order."""
        return java_order(self.topic), self.partition

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def sorted_partitions(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """Partitions sorted by topic, then partition number."""
    return sorted(partitions, key=TopicPartition.sort_key)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: the next offset to consume, with optional leader epoch and metadata."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None
