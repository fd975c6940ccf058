"""Coordinator settings the core needs (Kafka's names and defaults) and the group → partition mapping."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from regroup.protocol.javahash import group_partition

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "GroupConfig",
    "partition_for",
]

NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000
"""Kafka's fixed (not configurable) join timeout of a brand-new member with a parked JoinGroup."""


@dataclass(slots=True, unsafe_hash=True)
class GroupConfig:
    """The ``group.*`` / ``offsets.*`` settings of one coordinator (defaults are Kafka's)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes = 7 days
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_topic_num_partitions: int = 50
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    offsets_commit_value_version: int = 4
    """OffsetCommitValue version written for commits without an expire timestamp (regroup-only: 4 as
    Kafka 4.3, or 3 as Kafka up to 4.2)."""
    rebalance_history_size: int = 32
    """How many generation records :meth:`GroupShard.group_history` keeps per group (regroup-only)."""
    # KIP-848 consumer groups (``group.consumer.*``)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    """Server-side assignors; the first is the default. regroup knows ``uniform`` and ``range``."""
    consumer_assignment_interval_ms: int = 1_000
    """Kafka 4.3 (KIP-1263): a group's target assignment is recomputed at most this often (0: every bump)."""
    consumer_migration_policy: str = "bidirectional"

    def __post_init__(self) -> None:
        if self.group_max_size < 1:
            raise ValueError("group.max.size must be at least 1")
        if self.offsets_topic_num_partitions < 1:
            raise ValueError("offsets.topic.num.partitions must be at least 1")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms exceeds group.max.session.timeout.ms")
        if self.offsets_commit_value_version not in (3, 4):
            raise ValueError("offsets.commit.value.version must be 3 or 4")
        if self.rebalance_history_size < 1:
            raise ValueError("rebalance_history_size must be at least 1")
        if self.consumer_max_size < 1:
            raise ValueError("group.consumer.max.size must be at least 1")
        if not self.consumer_assignors or len(set(self.consumer_assignors)) != len(self.consumer_assignors):
            raise ValueError("group.consumer.assignors must be a non-empty list without duplicates")
        unknown = set(self.consumer_assignors) - {"uniform", "range"}
        if unknown:
            raise ValueError(f"group.consumer.assignors: unknown assignors {sorted(unknown)}")
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms"
            )
        if self.consumer_assignment_interval_ms < 0:
            raise ValueError("group.consumer.assignment.interval.ms must be at least 0")
        if self.consumer_migration_policy.lower() not in (
            "bidirectional",
            "upgrade",
            "downgrade",
            "disabled",
        ):
            raise ValueError(
                "group.consumer.migration.policy must be bidirectional, upgrade, downgrade or disabled"
            )

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.offsets_topic_num_partitions)


# Every group request routes through this; hashing the id in Python costs more than the cache lookup.
@lru_cache(maxsize=65536)
def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition owning ``group_id`` (Kafka's ``Utils.abs(hash) % n``, where
    ``abs(Integer.MIN_VALUE)`` is 0)."""
    return group_partition(group_id, num_partitions)
