"""Java's ``String.hashCode`` and Kafka's group partitioning (``Utils.abs(groupId.hashCode()) % n``).

Kafka places a group's records in ``__consumer_offsets`` (and regroup its events in ``__group_events``) by
the Java hash of the group id; admin tools also order their output by it (``java.util.HashMap``).
"""

from __future__ import annotations

__all__ = ["group_partition", "java_string_hash"]

_INT32_MIN = -(1 << 31)


def java_string_hash(value: str) -> int:
    """``String.hashCode()``: Σ s[i]·31^(n−1−i) over UTF-16 code units, in int32 arithmetic."""
    units = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def group_partition(group_id: str, partitions: int) -> int:
    """The partition holding ``group_id`` among ``partitions`` (Kafka's ``partitionFor``, where
    ``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
